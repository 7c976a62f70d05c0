public import FlareCore
public import FlareSystem

/// Shares: their creation (within a key's limits), extension, end and purge, and the ways to read them.
public protocol ShareRecords: Sendable {
    /// Inserts a share (owned by `share.ownerKeyID`) without looking at any limit.
    @discardableResult
    func insertShare(_ share: Share, event: PendingEvent?) throws(StoreError) -> Int64
    /// Inserts a share for a key with limits, in one transaction with the checks, so that the limits hold across
    /// instances: at most `maxLive` live shares and `createsPerHour` creations in any hour (the creation is recorded
    /// for the next check). The refusal says which limit and how long to wait.
    func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis, event: PendingEvent?) throws(StoreError) -> Result<Int64, QuotaRefusal>
    func updateExpiry(row: Int64, expiresAt: UnixMillis, event: PendingEvent?) throws(StoreError)
    /// Records the share's end. True only for the call that ended it: with several instances, exactly one of them
    /// announces the end (ended status, retained clear, revocation).
    @discardableResult
    func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason, event: PendingEvent?) throws(StoreError) -> Bool
    /// Records that an active share goes on under duress (`Share.underDuress`; the time kept beside it), with its event, once: true only for the
    /// call that marked it. Marks the share changed, so that every instance's viewers see the warning.
    @discardableResult
    func markDuress(row: Int64, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool
    /// Deletes an ended share's positions, its personal links and its name; the row keeps only that it existed and
    /// when. True only for the call that purged it.
    @discardableResult
    func purgeHistory(row: Int64) throws(StoreError) -> Bool
    /// Every share whose history still exists: the active ones and those ended but not yet purged.
    func loadOpenShares() throws(StoreError) -> [StoredShare]
    func share(id: ShareID) throws(StoreError) -> StoredShare?
    /// The share in this row (what a personal link names).
    func share(row: Int64) throws(StoreError) -> StoredShare?
    /// The share whose view token has this hash (compared in constant time).
    func share(viewTokenHash: SecretHash) throws(StoreError) -> StoredShare?
    /// Up to `limit` shares, newest first, starting after `position` (nil: from the newest).
    /// `owner`: only that key's shares (nil: everyone's).
    func listShares(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64?) throws(StoreError) -> [StoredShare]
    /// Active shares whose expiry has passed: with several instances, those that no instance ended (their creator
    /// died, and no other had been asked for them).
    func expiredActiveShares(now: UnixMillis, limit: Int) throws(StoreError) -> [StoredShare]
}

extension ShareRecords {
    public func listShares(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int) throws(StoreError) -> [StoredShare] {
        try listShares(state: state, after: position, limit: limit, owner: nil)
    }

    // Without an event: as tests and tools that record none call them.
    @discardableResult
    public func insertShare(_ share: Share) throws(StoreError) -> Int64 { try insertShare(share, event: nil) }
    public func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis) throws(StoreError) -> Result<Int64, QuotaRefusal> {
        try insertShare(share, limits: limits, now: now, event: nil)
    }
    public func updateExpiry(row: Int64, expiresAt: UnixMillis) throws(StoreError) { try updateExpiry(row: row, expiresAt: expiresAt, event: nil) }
    @discardableResult
    public func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason) throws(StoreError) -> Bool {
        try markEnded(row: row, at: endedAt, reason: reason, event: nil)
    }
}

/// A share row and its store key.
public struct StoredShare: Sendable, Equatable {
    public let row: Int64
    public var share: Share

    public init(row: Int64, share: Share) {
        self.row = row
        self.share = share
    }
}

/// Which shares a listing returns.
public enum ShareStateFilter: String, Sendable, CaseIterable {
    case active, ended
}

/// Where a listing continues: the last share of the previous page, newest first by (created_at, row).
public struct ShareListPosition: Sendable, Equatable {
    public let createdAt: UnixMillis
    public let row: Int64

    public init(createdAt: UnixMillis, row: Int64) {
        self.createdAt = createdAt
        self.row = row
    }
}
