import FlareSystem
/// How a share ended.
public enum EndReason: String, Sendable {
    case expired, stopped
}

/// A share as stored: who may see it (by view-token hash), until when, and whether it has ended. Its optional
/// instants and ids are `Packed`: every live share holds one in the registry.
public struct Share: Sendable, Equatable {
    public let id: ShareID
    public let viewTokenHash: SecretHash
    public var name: String
    public let createdAt: UnixMillis
    public var expiresAt: UnixMillis
    @Packed public var endedAt: UnixMillis?
    public var endReason: EndReason?
    /// Set once the share's history has been deleted after it ended.
    public var historyPurged: Bool
    /// The share goes on under duress: its device's duress PIN was entered, so the device was told it stopped while
    /// the viewers keep it, with a warning (`Devices.stopSOS`). Beside `historyPurged`, in what was padding: it costs
    /// a live share nothing. When it happened is in the store (`DeviceSOSState.duressAt`).
    public var underDuress: Bool
    /// The tracker state last recorded (nil until the first change: a new share's tracker counts as live).
    public var tracker: TrackerRecord?
    /// When a link holder last asked the phone for a fresh position ("locate now"), and when it answered that request.
    @Packed public var locateRequestedAt: UnixMillis?
    @Packed public var locateAnsweredAt: UnixMillis?
    /// The owner key that created it (its store id); shares made before keys owned shares belong to the first key.
    @Packed public var ownerKeyID: Int64?
    /// The newest answer from the family (its id), if any: a change of it is a change of the share.
    @Packed public var lastAnswerID: Int64?
    /// Since when the phone's battery is recorded as low (the `tracker.battery_low` event was sent then); nil: not low.
    @Packed public var batteryLowAt: UnixMillis?
    /// The deadline of the check-in this share was made for, once it was missed: the page says so first.
    @Packed public var missedCheckinDueAt: UnixMillis?
    /// End-to-end encrypted: the phone encrypts every position with a passphrase the server never receives (it is in
    /// the link's fragment), and the server keeps and relays only ciphertext (`Fix.sealed`). Set at creation.
    public let endToEnd: Bool

    public init(id: ShareID, viewTokenHash: SecretHash, name: String, createdAt: UnixMillis, expiresAt: UnixMillis,
                endedAt: UnixMillis? = nil, endReason: EndReason? = nil, historyPurged: Bool = false,
                tracker: TrackerRecord? = nil, locateRequestedAt: UnixMillis? = nil, locateAnsweredAt: UnixMillis? = nil,
                ownerKeyID: Int64? = nil, lastAnswerID: Int64? = nil, batteryLowAt: UnixMillis? = nil,
                missedCheckinDueAt: UnixMillis? = nil, endToEnd: Bool = false, underDuress: Bool = false) {
        self.id = id
        self.viewTokenHash = viewTokenHash
        self.name = name
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.endedAt = endedAt
        self.endReason = endReason
        self.historyPurged = historyPurged
        self.tracker = tracker
        self.locateRequestedAt = locateRequestedAt
        self.locateAnsweredAt = locateAnsweredAt
        self.ownerKeyID = ownerKeyID
        self.lastAnswerID = lastAnswerID
        self.batteryLowAt = batteryLowAt
        self.missedCheckinDueAt = missedCheckinDueAt
        self.endToEnd = endToEnd
        self.underDuress = underDuress
    }

    public var isActive: Bool { endedAt == nil }

    /// The tracker state as recorded; a share with none recorded yet counts as live since its creation: nothing is
    /// wrong before the first silence.
    public var trackerRecord: TrackerRecord { tracker ?? TrackerRecord(state: .live, since: createdAt) }
}

/// Durations a caller may ask for, and what an extension means.
public struct SharePolicy: Sendable {
    public var defaultDurationSeconds: Int64
    public var maximumDurationSeconds: Int64
    /// How long after a share ends its positions are kept (0 = deleted at once).
    public var historyRetentionSeconds: Int64
    /// The most fixes one share keeps: a bound against a device token filling the store, far above a real share.
    public var maximumFixesPerShare: Int

    public init(defaultDurationSeconds: Int64, maximumDurationSeconds: Int64, historyRetentionSeconds: Int64,
                maximumFixesPerShare: Int = 500_000) {
        self.defaultDurationSeconds = defaultDurationSeconds
        self.maximumDurationSeconds = maximumDurationSeconds
        self.historyRetentionSeconds = historyRetentionSeconds
        self.maximumFixesPerShare = maximumFixesPerShare
    }

    public enum Violation: Error, Equatable, CustomStringConvertible {
        case durationOutOfRange(maximum: Int64)
        case nameTooLong
        case nameHasHiddenCharacters
        public var description: String {
            switch self {
            case .durationOutOfRange(let maximum): "duration_s must be a whole number of seconds from 1 to \(maximum)"
            case .nameTooLong: "name must be \(NameBounds.shareName.description)"
            case .nameHasHiddenCharacters: "name must not hold control or format characters (such as bidirectional overrides)"
            }
        }
    }

    /// The duration to use for a request that may or may not name one.
    public func duration(requested: Double?) throws(Violation) -> Int64 {
        guard let requested else { return defaultDurationSeconds }
        guard requested.isFinite, requested == requested.rounded(), requested >= 1, requested <= Double(maximumDurationSeconds) else {
            throw .durationOutOfRange(maximum: maximumDurationSeconds)
        }
        return Int64(requested)
    }

    public func validName(_ name: String?) throws(Violation) -> String {
        let trimmed = (name ?? "").trimmingWhitespace
        guard NameBounds.shareName.admits(trimmed) else { throw .nameTooLong }
        // The name is the page's title and every contact's mail subject: refused, not cleaned, so that what the sharer
        // sees is what the family reads.
        guard !NameBounds.hasHiddenScalars(trimmed) else { throw .nameHasHiddenCharacters }
        return trimmed
    }
}

extension String {
    /// Without leading and trailing whitespace (names, messages, settings).
    public var trimmingWhitespace: String {
        var scalars = Substring(self)
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}
