public import FlareCore
public import FlareSystem

/// A share whose escalation ladder has a step due.
public struct EscalationDue: Sendable, Equatable {
    public let shareRow: Int64
    public let shareID: ShareID
    /// The step to take: 1 after `escalate_after_s`, 2 after three times that.
    public let step: Int
    /// Somebody answered "on my way" or "called emergency services" since the ladder started, or the share ended:
    /// the ladder ends rather than climbs.
    public let over: Bool

    public init(shareRow: Int64, shareID: ShareID, step: Int, over: Bool) {
        self.shareRow = shareRow
        self.shareID = shareID
        self.step = step
        self.over = over
    }
}

/// Where a share's ladder stands, for the sharer's page and phone.
public struct EscalationState: Sendable, Equatable {
    /// The steps taken so far (0, 1 or 2).
    public let step: Int
    /// When the next step is due; nil when the ladder is over (answered, or both steps taken) or off.
    public let nextAt: UnixMillis?

    public init(step: Int, nextAt: UnixMillis?) {
        self.step = step
        self.nextAt = nextAt
    }
}

/// The escalation ladder of SOS shares and missed check-ins: when nobody answers, every contact is alerted again. A
/// device's SOS starts its ladder with the share (`DeviceRecords.startSOS` reads the device's `escalate_after_s`), a
/// check-in's when it is missed (`CheckinRecords.missCheckin` reads the check-in's).
public protocol EscalationRecords: Sendable {
    /// Ladders with a step due at `now`, oldest due first.
    func dueEscalations(now: UnixMillis, limit: Int) throws(StoreError) -> [EscalationDue]
    /// Takes step `step` of the share's ladder, with its event, once: false when it was taken already (by another
    /// instance, or before a restart). The next step is due at three times `escalate_after_s` after the ladder
    /// started; after step 2 there is none.
    func escalate(shareRow: Int64, step: Int, event: PendingEvent) throws(StoreError) -> Bool
    /// Ends the share's ladder (it was answered, or the share ended).
    func endEscalation(shareRow: Int64) throws(StoreError)
    /// The share's ladder; nil when it has none.
    func escalation(shareRow: Int64) throws(StoreError) -> EscalationState?
}
