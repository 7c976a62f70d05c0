import FlareCore
public import FlareSystem

/// Several instances: which process holds which MQTT client id (its persistent session on the broker), and the
/// sessions of instances that died.
public protocol InstanceRecords: Sendable {
    /// Records that `process` runs as the instance with MQTT client id `clientID` (its persistent session on the
    /// broker). False when another process holds that id and was seen less than `staleAfter` ms ago: two processes
    /// with one client id would take the session from each other.
    func registerInstance(_ clientID: String, process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> Bool
    /// The process that holds `clientID`, if any.
    func instanceProcess(_ clientID: String) throws(StoreError) -> String?
    /// Says the instance is still alive; false if another process has taken its client id over meanwhile.
    @discardableResult
    func heartbeat(_ clientID: String, process: String, now: UnixMillis) throws(StoreError) -> Bool
    /// Claims one instance, other than `process`'s own, not seen for `staleAfter` ms (its process died): its client
    /// id, now held by `process`, whose job is to drain and end that session. Nil when there is none. Two callers
    /// never get the same one.
    func claimStaleInstance(process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> String?
    /// Forgets the instance once its session is ended.
    func removeInstance(_ clientID: String, process: String) throws(StoreError)
}
