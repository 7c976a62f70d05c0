import FlareCore
public import FlareSystem

/// Several instances: leases, for jobs that one instance at a time does.
public protocol LeaseRecords: Sendable {
    /// Holds, or renews, the lease `name` for `holder` until `now + durationMillis`, unless another holder's lease
    /// runs past `now`: one instance at a time does a job (keeping the broker's retained state). Returns the value
    /// recorded with the lease (0 for a new one) when `holder` holds it, nil when another does. A store that several
    /// instances share (PostgreSQL) takes `now` from its own clock instead of the caller's: an instance whose clock
    /// runs an hour fast must not hold a lease for an hour after it dies.
    func holdLease(_ name: String, holder: String, now: UnixMillis, durationMillis: Int64) throws(StoreError) -> Int64?
    /// Records `value` with the lease if `holder` still holds it; false when it no longer does.
    @discardableResult
    func setLeaseValue(_ name: String, holder: String, value: Int64) throws(StoreError) -> Bool
    /// Lets the lease go (at shutdown), keeping its value, so another instance may take it at once.
    func releaseLease(_ name: String, holder: String) throws(StoreError)
}
