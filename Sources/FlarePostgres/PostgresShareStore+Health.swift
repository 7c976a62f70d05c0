public import FlareStore

extension PostgresShareStore: StoreHealth {
    /// The server's own error says why (the connection pool reconnects on its own).
    public func writeProblem() -> String? { nil }

    public func recoverAfterFailedWrite() {}
}
