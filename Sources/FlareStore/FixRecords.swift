public import FlareCore
public import FlareSystem

/// Fixes: written by the batch, read back newest first, counted.
public protocol FixRecords: Sendable {
    func insertFixes(_ fixes: [PendingFix]) throws(StoreError) -> [Bool]
    /// Writes a batch in one transaction. Returns, per fix, whether it was new (false: already stored). A sealed fix
    /// (`Fix.sealed`, an end-to-end encrypted share's) is kept apart, keyed by its ciphertext's digest.
    /// The newest `limit` fixes in clear of a share, oldest first.
    func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix]
    /// The newest `limit` sealed fixes of an end-to-end encrypted share, oldest first (by arrival).
    func recentSealedFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix]
    /// Both kinds.
    func fixCount(row: Int64) throws(StoreError) -> Int
    /// A share's fixes in clear in time order (then by place: the fixes' key), at most `limit`, after `position` (nil:
    /// from the first): a whole track read a page at a time, however long it is.
    func fixes(row: Int64, after position: FixPosition?, limit: Int) throws(StoreError) -> [Fix]
}

/// Where a page of a track ends: the key of its last fix.
public struct FixPosition: Sendable, Equatable {
    public let timestamp: Int64
    public let latitude: Double
    public let longitude: Double

    public init(of fix: Fix) {
        timestamp = fix.timestamp
        latitude = fix.latitude
        longitude = fix.longitude
    }
}

extension FixRecords {
    /// The newest `limit` fixes of `stored`, of the kind it takes.
    public func recentFixes(of stored: StoredShare, limit: Int) throws(StoreError) -> [Fix] {
        stored.share.endToEnd ? try recentSealedFixes(row: stored.row, limit: limit) : try recentFixes(row: stored.row, limit: limit)
    }
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
