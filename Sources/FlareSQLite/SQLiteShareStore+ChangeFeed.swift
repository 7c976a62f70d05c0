public import FlareStore

extension SQLiteShareStore: ChangeFeed {
    /// One SQLite file serves one instance: nobody else changes it behind our back.
    public var isShared: Bool { false }

    public func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) {}

    public func stopWatching() {}
}
