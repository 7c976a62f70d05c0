/// The store's own state: the schema upgrade it made at open, and what it can do about failing writes.
public protocol StoreHealth: Sendable {
    /// The schema version the store had when this process opened it, if it was older than today's (an upgrade ran).
    var upgradedFromSchema: Int? { get }

    // MARK: After a failed write
    /// What the store can say about why writes fail, beyond its own error (e.g. "Read-only file system"); nil if
    /// it knows nothing more.
    func writeProblem() -> String?
    /// Called once after a failed write, before the write is retried: the store may reset what a failure left
    /// behind (SQLite: checkpoint and truncate its WAL).
    func recoverAfterFailedWrite()
}
