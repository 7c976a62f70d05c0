public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: ShareRecords {
    /// Committed with the creations that arrive at the same time (`GroupCommit`).
    @discardableResult
    public func insertShare(_ share: Share, event: PendingEvent?) throws(StoreError) -> Int64 {
        let inserted = try creations.run(in: self) { db throws(StoreError) in
            let row = try Self.insert(share, into: db)
            if let event { try Self.record(event, shareRow: row, in: db) }
            return .success(row)
        }
        switch inserted {
        case .success(let row): return row
        case .failure: preconditionFailure("a creation without limits is never refused")
        }
    }

    static func insert(_ share: Share, into db: SQLiteDatabase) throws(StoreError) -> Int64 {
        let statement = try db.statement("""
            INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at, owner_key, e2e) VALUES (?, ?, ?, ?, ?, ?, ?)
            """)
        defer { statement.reset() }
        statement.bind(1, share.id.rawValue)
        statement.bind(2, share.viewTokenHash.bytes)
        statement.bind(3, share.name)
        statement.bind(4, share.createdAt)
        statement.bind(5, share.expiresAt)
        statement.bind(6, share.ownerKeyID)
        statement.bind(7, Int64(share.endToEnd ? 1 : 0))
        try statement.run()
        return db.lastInsertRowID
    }

    /// The limits are checked inside the creations' shared transaction, after the creations before it in the same
    /// transaction: a key at its bound is refused there as it would be alone.
    public func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis, event: PendingEvent?) throws(StoreError) -> Result<Int64, QuotaRefusal> {
        guard let key = share.ownerKeyID else { return .success(try insertShare(share, event: event)) }
        return try creations.run(in: self) { db throws(StoreError) -> Result<Int64, QuotaRefusal> in
            if let maxLive = limits.maxLive {
                let live = try db.statement("SELECT count(*), min(expires_at) FROM shares WHERE owner_key = ?1 AND ended_at IS NULL AND expires_at > ?2")
                defer { live.reset() }
                live.bind(1, key)
                live.bind(2, now)
                _ = try live.step()
                if live.int64(0) >= Int64(maxLive) {
                    let wait = live.optionalInt64(1).map { Int(max(1, ($0 - now + 999) / 1000)) }
                    return .failure(QuotaRefusal(limit: .maxLive, value: Int64(maxLive), retryAfterSeconds: wait))
                }
            }
            if let perHour = limits.createsPerHour {
                let recent = try db.statement("SELECT count(*), min(at) FROM key_creations WHERE key = ?1 AND at > ?2")
                defer { recent.reset() }
                recent.bind(1, key)
                recent.bind(2, now - 3_600_000)
                _ = try recent.step()
                if recent.int64(0) >= Int64(perHour) {
                    let wait = recent.optionalInt64(1).map { Int(max(1, ($0 + 3_600_000 - now + 999) / 1000)) }
                    return .failure(QuotaRefusal(limit: .createRate, value: Int64(perHour), retryAfterSeconds: wait))
                }
                let prune = try db.statement("DELETE FROM key_creations WHERE key = ?1 AND at <= ?2")
                defer { prune.reset() }
                prune.bind(1, key)
                prune.bind(2, now - 3_600_000)
                try prune.run()
                let note = try db.statement("INSERT INTO key_creations (key, at) VALUES (?1, ?2)")
                defer { note.reset() }
                note.bind(1, key)
                note.bind(2, now)
                try note.run()
            }
            let row = try Self.insert(share, into: db)
            if let event { try Self.record(event, shareRow: row, in: db) }
            return .success(row)
        }
    }

    public func updateExpiry(row: Int64, expiresAt: UnixMillis, event: PendingEvent?) throws(StoreError) {
        try changedRows("UPDATE shares SET expires_at = ? WHERE id = ? AND ended_at IS NULL", event: event, shareRow: row) { statement in
            statement.bind(1, expiresAt)
            statement.bind(2, row)
        }
    }

    @discardableResult
    public func markDuress(row: Int64, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("UPDATE shares SET duress_at = ? WHERE id = ? AND ended_at IS NULL AND duress_at IS NULL", event: event, shareRow: row) { statement in
            statement.bind(1, at)
            statement.bind(2, row)
        } == 1
    }

    @discardableResult
    public func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("UPDATE shares SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL", event: event, shareRow: row) { statement in
            statement.bind(1, endedAt)
            statement.bind(2, reason.rawValue)
            statement.bind(3, row)
        } == 1
    }

    /// Deletes an ended share's positions, its personal links and its name; the row keeps only that it existed and when.
    @discardableResult
    public func purgeHistory(row: Int64) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                for table in ["fixes", "sealed_fixes", "tracker_marks", "tracker_handled", "answers", "viewers", "share_links", "checkins", "push_subscriptions"] {
                    let delete = try db.statement("DELETE FROM \(table) WHERE share = ?")
                    defer { delete.reset() }
                    delete.bind(1, row)
                    try delete.run()
                }
                let update = try db.statement("UPDATE shares SET history_purged = 1, name = '' WHERE id = ? AND history_purged = 0")
                defer { update.reset() }
                update.bind(1, row)
                try update.run()
                return db.changes == 1
            }
        }
    }

    private static let shareColumns = """
        id, share_id, view_token_hash, name, created_at, expires_at, ended_at, end_reason, history_purged,
        tracker_state, tracker_since, tracker_reason, tracker_transport, locate_requested_at, locate_answered_at, owner_key,
        last_answer_id, battery_low_at, checkin_missed_due, e2e, duress_at
        """

    private static func readShare(_ statement: SQLiteStatement) -> StoredShare? {
        guard let id = ShareID(statement.string(1)) else { return nil }
        let share = Share(
            id: id,
            viewTokenHash: SecretHash(bytes: statement.blob(2)),
            name: statement.string(3),
            createdAt: statement.int64(4),
            expiresAt: statement.int64(5),
            endedAt: statement.optionalInt64(6),
            endReason: statement.optionalString(7).flatMap(EndReason.init(rawValue:)),
            historyPurged: statement.int64(8) != 0,
            tracker: statement.optionalString(9).flatMap(TrackerState.init(rawValue:)).map { state in
                TrackerRecord(state: state, since: statement.int64(10), reason: statement.optionalString(11),
                              transport: statement.optionalString(12).flatMap(TrackerTransport.init(rawValue:)))
            },
            locateRequestedAt: statement.optionalInt64(13),
            locateAnsweredAt: statement.optionalInt64(14),
            ownerKeyID: statement.optionalInt64(15),
            lastAnswerID: statement.optionalInt64(16),
            batteryLowAt: statement.optionalInt64(17),
            missedCheckinDueAt: statement.optionalInt64(18),
            endToEnd: statement.int64(19) != 0,
            underDuress: !statement.isNull(20))
        return StoredShare(row: statement.int64(0), share: share)
    }

    /// Every share whose history still exists: the active ones and those ended but not yet purged.
    public func loadOpenShares() throws(StoreError) -> [StoredShare] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.shareColumns) FROM shares WHERE history_purged = 0")
            defer { statement.reset() }
            var shares: [StoredShare] = []
            while try statement.step() {
                if let share = Self.readShare(statement) { shares.append(share) }
            }
            return shares
        }
    }

    public func share(id: ShareID) throws(StoreError) -> StoredShare? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.shareColumns) FROM shares WHERE share_id = ?")
            defer { statement.reset() }
            statement.bind(1, id.rawValue)
            guard try statement.step() else { return nil }
            return Self.readShare(statement)
        }
    }

    public func share(row: Int64) throws(StoreError) -> StoredShare? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.shareColumns) FROM shares WHERE id = ?")
            defer { statement.reset() }
            statement.bind(1, row)
            guard try statement.step() else { return nil }
            return Self.readShare(statement)
        }
    }

    public func share(viewTokenHash: SecretHash) throws(StoreError) -> StoredShare? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.shareColumns) FROM shares WHERE view_token_hash = ?")
            defer { statement.reset() }
            statement.bind(1, viewTokenHash.bytes)
            guard try statement.step() else { return nil }
            guard let found = Self.readShare(statement), found.share.viewTokenHash.matches(viewTokenHash) else { return nil }
            return found
        }
    }

    public func listShares(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64?) throws(StoreError) -> [StoredShare] {
        var conditions: [String] = []
        if owner != nil { conditions.append("owner_key = ?4") }
        switch state {
        case .active?: conditions.append("ended_at IS NULL")
        case .ended?: conditions.append("ended_at IS NOT NULL")
        case nil: break
        }
        if position != nil { conditions.append("(created_at < ?1 OR (created_at = ?1 AND id < ?2))") }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        return try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.shareColumns) FROM shares \(filter) ORDER BY created_at DESC, id DESC LIMIT ?3")
            defer { statement.reset() }
            if let position {
                statement.bind(1, position.createdAt)
                statement.bind(2, position.row)
            }
            statement.bind(3, Int64(max(0, limit)))
            if let owner { statement.bind(4, owner) }
            var shares: [StoredShare] = []
            while try statement.step() {
                if let share = Self.readShare(statement) { shares.append(share) }
            }
            return shares
        }
    }

    /// None: one SQLite file serves one instance, and that instance has every active share's expiry scheduled.
    public func expiredActiveShares(now: UnixMillis, limit: Int) throws(StoreError) -> [StoredShare] { [] }
}
