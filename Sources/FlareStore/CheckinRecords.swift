public import FlareCore
public import FlareSystem

/// Check-ins (`Checkin`): their deadlines live here, so that whichever instance holds the check-in lease fires them,
/// once, also after every instance was down when one passed.
public protocol CheckinRecords: Sendable {
    /// Stores a check-in for its (already stored) share.
    func insertCheckin(_ checkin: Checkin) throws(StoreError)
    func checkin(id: CheckinID) throws(StoreError) -> Checkin?
    /// The check-in a share was made for, if any.
    func checkin(shareRow: Int64) throws(StoreError) -> Checkin?
    /// Armed check-ins whose deadline and grace have passed by `now`, the longest overdue first. A store that several
    /// instances share (PostgreSQL) decides by its own clock: an instance whose clock runs fast must not fire a
    /// check-in early (its contacts would be told someone is missing who is not).
    func dueCheckins(now: UnixMillis, limit: Int) throws(StoreError) -> [Checkin]
    /// Armed check-ins with an arrival zone whose share's row is above `afterShareRow`, by that row: a caller pages
    /// through all of them, a batch at a time, from 0 again once a batch comes back short.
    func armedArrivals(afterShareRow: Int64, limit: Int) throws(StoreError) -> [Checkin]
    /// Ends an armed check-in as `done` or `arrived`, with `event`, in one transaction; true only for the call that
    /// ended it (false: it was not armed any more).
    func settleCheckin(_ id: CheckinID, as state: CheckinState, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool
    /// Fires an armed check-in: marks it `missed`, adds its personal links to its share and records `events`, in one
    /// transaction; true only for the call that fired it. Marks the share changed (every instance reads its links).
    func missCheckin(_ id: CheckinID, at: UnixMillis, links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool
    /// Moves an armed check-in's deadline; false if it is not armed.
    func moveCheckin(_ id: CheckinID, dueAt: UnixMillis) throws(StoreError) -> Bool
}
