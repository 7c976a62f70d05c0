public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: ShareRecords {
    @discardableResult
    public func insertShare(_ share: Share, event: PendingEvent?) throws(StoreError) -> Int64 {
        try pool.with(operation: "insert share") { connection throws(StoreError) in try Self.insert(share, event: event, on: connection) }
    }

    /// The share and its event in one statement: one round trip, as before events existed (creations share the
    /// server's group commit).
    static func insert(_ share: Share, event pending: PendingEvent?, on connection: PostgresConnection) throws(StoreError) -> Int64 {
        let parameters = [share.id.rawValue, PostgresText.hex(share.viewTokenHash.bytes), share.name, String(share.createdAt), String(share.expiresAt),
                          share.ownerKeyID.map { String($0) }, share.endToEnd ? "t" : "f"]
        guard let pending else {
            return try connection.execute("""
                INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at, owner_key, e2e) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id
                """, parameters, operation: "insert share").int64(0, 0)
        }
        let statement = withOutbox("""
            INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at, owner_key, e2e) VALUES ($1, $2, $3, $4, $5, $6, $7)
            RETURNING id, owner_key
            """, parameters, pending)
        return try connection.execute(statement.sql, statement.parameters, operation: "insert share").int64(0, 0)
    }

    public func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis, event: PendingEvent?) throws(StoreError) -> Result<Int64, QuotaRefusal> {
        guard let key = share.ownerKeyID else { return .success(try insertShare(share, event: event)) }
        let operation = "insert share"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Result<Int64, QuotaRefusal> in
                // One creation per key at a time, across instances: the checks below see every earlier one.
                try connection.execute("SELECT id FROM owner_keys WHERE id = $1 FOR UPDATE", [String(key)], operation: operation)
                if let maxLive = limits.maxLive {
                    let live = try connection.execute("SELECT count(*), min(expires_at) FROM shares WHERE owner_key = $1 AND ended_at IS NULL AND expires_at > $2",
                                                      [String(key), String(now)], operation: operation)
                    if live.int64(0, 0) >= Int64(maxLive) {
                        let wait = live.optionalInt64(0, 1).map { Int(max(1, ($0 - now + 999) / 1000)) }
                        return .failure(QuotaRefusal(limit: .maxLive, value: Int64(maxLive), retryAfterSeconds: wait))
                    }
                }
                if let perHour = limits.createsPerHour {
                    let recent = try connection.execute("SELECT count(*), min(at) FROM key_creations WHERE key = $1 AND at > $2",
                                                        [String(key), String(now - 3_600_000)], operation: operation)
                    if recent.int64(0, 0) >= Int64(perHour) {
                        let wait = recent.optionalInt64(0, 1).map { Int(max(1, ($0 + 3_600_000 - now + 999) / 1000)) }
                        return .failure(QuotaRefusal(limit: .createRate, value: Int64(perHour), retryAfterSeconds: wait))
                    }
                    try connection.execute("DELETE FROM key_creations WHERE key = $1 AND at <= $2", [String(key), String(now - 3_600_000)], operation: operation)
                    try connection.execute("INSERT INTO key_creations (key, at) VALUES ($1, $2)", [String(key), String(now)], operation: operation)
                }
                return .success(try Self.insert(share, event: event, on: connection))
            }
        }
    }

    public func updateExpiry(row: Int64, expiresAt: UnixMillis, event: PendingEvent?) throws(StoreError) {
        try changedRows("UPDATE shares SET expires_at = $1 WHERE id = $2 AND ended_at IS NULL",
                        [String(expiresAt), String(row)], operation: "update expiry", event: event, shareRow: row)
    }

    @discardableResult
    public func markDuress(row: Int64, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("UPDATE shares SET duress_at = $1 WHERE id = $2 AND ended_at IS NULL AND duress_at IS NULL",
                        [String(at), String(row)], operation: "mark duress", event: event, shareRow: row) == 1
    }

    @discardableResult
    public func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason, event: PendingEvent?) throws(StoreError) -> Bool {
        let ended = try changedRows("UPDATE shares SET ended_at = $1, end_reason = $2 WHERE id = $3 AND ended_at IS NULL",
                                    [String(endedAt), reason.rawValue, String(row)], operation: "end share", event: event, shareRow: row) == 1
        if ended { newestStored.forget(row) }  // an ended share takes no more fixes
        return ended
    }

    @discardableResult
    public func purgeHistory(row: Int64) throws(StoreError) -> Bool {
        try pool.with(operation: "purge history", long: true) { connection throws(StoreError) in
            try connection.transaction(operation: "purge history") { () throws(StoreError) in
                for table in ["fixes", "sealed_fixes", "tracker_marks", "tracker_handled", "answers", "viewers", "share_links", "checkins", "push_subscriptions"] {
                    try connection.execute("DELETE FROM \(table) WHERE share = $1", [String(row)], operation: "purge history")
                }
                newestStored.forget(row)
                return try connection.execute("UPDATE shares SET history_purged = true, name = '' WHERE id = $1 AND NOT history_purged",
                                              [String(row)], operation: "purge history").affected == 1
            }
        }
    }

    private static let shareColumns = """
        id, share_id, view_token_hash, name, created_at, expires_at, ended_at, end_reason, history_purged,
        tracker_state, tracker_since, tracker_reason, tracker_transport, locate_requested_at, locate_answered_at, owner_key,
        last_answer_id, battery_low_at, checkin_missed_due, e2e, duress_at
        """

    private static func shares(_ rows: PostgresRows) -> [StoredShare] {
        (0..<rows.count).compactMap { index in
            guard let id = rows.text(index, 1).flatMap(ShareID.init) else { return nil }
            let share = Share(
                id: id, viewTokenHash: SecretHash(bytes: rows.bytes(index, 2)), name: rows.text(index, 3) ?? "",
                createdAt: rows.int64(index, 4), expiresAt: rows.int64(index, 5), endedAt: rows.optionalInt64(index, 6),
                endReason: rows.text(index, 7).flatMap(EndReason.init(rawValue:)), historyPurged: rows.bool(index, 8),
                tracker: rows.text(index, 9).flatMap(TrackerState.init(rawValue:)).map { state in
                    TrackerRecord(state: state, since: rows.int64(index, 10), reason: rows.text(index, 11),
                                  transport: rows.text(index, 12).flatMap(TrackerTransport.init(rawValue:)))
                },
                locateRequestedAt: rows.optionalInt64(index, 13), locateAnsweredAt: rows.optionalInt64(index, 14),
                ownerKeyID: rows.optionalInt64(index, 15), lastAnswerID: rows.optionalInt64(index, 16),
                batteryLowAt: rows.optionalInt64(index, 17), missedCheckinDueAt: rows.optionalInt64(index, 18),
                endToEnd: rows.bool(index, 19), underDuress: rows.optionalInt64(index, 20) != nil)
            return StoredShare(row: rows.int64(index, 0), share: share)
        }
    }

    private func selectShares(_ condition: String, _ parameters: [String?], operation: String, long: Bool = false) throws(StoreError) -> [StoredShare] {
        try pool.with(operation: operation, long: long) { connection throws(StoreError) in
            Self.shares(try connection.execute("SELECT \(Self.shareColumns) FROM shares \(condition)", parameters, operation: operation))
        }
    }

    public func loadOpenShares() throws(StoreError) -> [StoredShare] {
        try selectShares("WHERE NOT history_purged", [], operation: "load shares", long: true)
    }

    public func share(id: ShareID) throws(StoreError) -> StoredShare? {
        try selectShares("WHERE share_id = $1", [id.rawValue], operation: "read share").first
    }

    public func share(row: Int64) throws(StoreError) -> StoredShare? {
        try selectShares("WHERE id = $1", [String(row)], operation: "read share").first
    }

    public func share(viewTokenHash: SecretHash) throws(StoreError) -> StoredShare? {
        try selectShares("WHERE view_token_hash = $1", [PostgresText.hex(viewTokenHash.bytes)], operation: "read share")
            .first { $0.share.viewTokenHash.matches(viewTokenHash) }
    }

    public func listShares(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64?) throws(StoreError) -> [StoredShare] {
        var conditions: [String] = []
        var parameters: [String?] = [String(max(0, limit))]
        if let owner {
            parameters.append(String(owner))
            conditions.append("owner_key = $\(parameters.count)")
        }
        switch state {
        case .active?: conditions.append("ended_at IS NULL")
        case .ended?: conditions.append("ended_at IS NOT NULL")
        case nil: break
        }
        if let position {
            conditions.append("(created_at, id) < ($\(parameters.count + 1), $\(parameters.count + 2))")
            parameters += [String(position.createdAt), String(position.row)]
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        return try selectShares("\(filter) ORDER BY created_at DESC, id DESC LIMIT $1", parameters, operation: "list shares")
    }

    public func expiredActiveShares(now: UnixMillis, limit: Int) throws(StoreError) -> [StoredShare] {
        try selectShares("WHERE ended_at IS NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2", [String(now), String(limit)],
                         operation: "find expired shares")
    }
}
