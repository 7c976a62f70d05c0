public import FlareCore

/// Fixes: written by the batch, read back newest first, counted.
public protocol FixRecords: Sendable {
    /// Writes a batch in one transaction. Returns, per fix, whether it was new (false: already stored).
    func insertFixes(_ fixes: [PendingFix]) throws(StoreError) -> [Bool]
    /// The newest `limit` fixes of a share, oldest first.
    func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix]
    func fixCount(row: Int64) throws(StoreError) -> Int
}

/// A validated fix waiting to be written.
public struct PendingFix: Sendable {
    public let shareRow: Int64
    public let fix: Fix
    public let receivedAt: UnixMillis

    public init(shareRow: Int64, fix: Fix, receivedAt: UnixMillis) {
        self.shareRow = shareRow
        self.fix = fix
        self.receivedAt = receivedAt
    }
}
