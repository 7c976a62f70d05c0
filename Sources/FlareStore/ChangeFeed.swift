public import FlareCore

/// Several instances: whether others may change the store, and what they changed, as the store reports it.
public protocol ChangeFeed: Sendable {
    /// Whether several instances may share this store (and so change it behind each other's back).
    var isShared: Bool { get }

    /// Starts reporting what other instances change (`StoreChange`), on a thread of the store's own, in commit
    /// order, until `stopWatching`. A store that only one instance uses (SQLite) never reports anything.
    func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void)
    func stopWatching()
}

/// What another instance changed in a shared store, as the store reports it after the change is committed.
public enum StoreChange: Sendable {
    /// A share was created, extended, ended or purged: read it again.
    case share(ShareID)
    /// An owner key was revoked: forget what is remembered of it.
    case ownerKey(Int64)
    /// Fixes another instance stored (by share row; tracker ids left out), in commit order.
    case fixes([(shareRow: Int64, fix: Fix)])
    /// The feed was interrupted (the database restarted, the connection dropped): changes may have been missed, so
    /// everything in memory is to be read again.
    case resync
}
