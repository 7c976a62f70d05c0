public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: KeyRecords {
    public func keysWithWorkToStop() throws(StoreError) -> [Int64] {
        try pool.with(operation: "read revoked keys") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT id FROM owner_keys WHERE revoked_at IS NOT NULL AND work_stopped_at IS NULL ORDER BY revoked_at, id",
                                              operation: "read revoked keys")
            return (0..<rows.count).map { rows.int64($0, 0) }
        }
    }

    public func cancelQueuedWork(ofKey key: Int64, at: UnixMillis) throws(StoreError) -> (checkins: Int, mails: Int) {
        let operation = "stop a revoked key's work"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> (checkins: Int, mails: Int) in
                let checkins = try connection.execute("UPDATE checkins SET state = 'cancelled', state_at = $1 WHERE owner_key = $2 AND state = 'armed'",
                                                      [String(at), String(key)], operation: operation).affected
                let mails = try connection.execute("""
                    DELETE FROM event_deliveries WHERE (destination LIKE 'mail:%' OR destination LIKE 'contact:%')
                      AND event IN (SELECT e.id FROM events e JOIN shares s ON s.id = e.share WHERE s.owner_key = $1)
                    """, [String(key)], operation: operation).affected
                try connection.execute("DELETE FROM events e WHERE e.share IN (SELECT id FROM shares WHERE owner_key = $1) AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event = e.id)",
                                       [String(key)], operation: operation)
                return (checkins, mails)
            }
        }
    }

    public func noteKeyWorkStopped(_ key: Int64, at: UnixMillis) throws(StoreError) {
        _ = try changedRows("UPDATE owner_keys SET work_stopped_at = $1 WHERE id = $2 AND work_stopped_at IS NULL", [String(at), String(key)],
                        operation: "note a revoked key's work stopped")
    }

    public func takeMailBudget(key: Int64, count: Int, perHour: Int, now: UnixMillis) throws(StoreError) -> Int {
        guard count > 0 else { return 0 }
        let operation = "take mail budget"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Int in
                // The row made if missing (full), then locked: two instances taking from one key's budget at once take
                // in turn, the first time too.
                try connection.execute("INSERT INTO key_mail_budget (key, tokens, at) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING",
                                       [String(key), String(perHour), String(now)], operation: operation)
                let rows = try connection.execute("SELECT tokens, at FROM key_mail_budget WHERE key = $1 FOR UPDATE", [String(key)], operation: operation)
                let taken = MailBudget.take(count: count, from: (Double(rows.text(0, 0) ?? "") ?? 0, rows.int64(0, 1)), now: now, perHour: perHour)
                try connection.execute("UPDATE key_mail_budget SET tokens = $2, at = $3 WHERE key = $1",
                                       [String(key), String(taken.tokens), String(taken.at)], operation: operation)
                return taken.granted
            }
        }
    }

    @discardableResult
    public func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis, admin: Bool, limits: KeyLimits) throws(StoreError) -> Int64 {
        try pool.with(operation: "insert owner key") { connection throws(StoreError) in
            try connection.execute("""
                INSERT INTO owner_keys (key_hash, label, created_at, admin, max_live, max_duration_s, creates_per_hour)
                VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id
                """, [PostgresText.hex(hash.bytes), label, String(createdAt), admin ? "true" : "false", limits.maxLive.map { String($0) },
                      limits.maxDurationSeconds.map { String($0) }, limits.createsPerHour.map { String($0) }],
                operation: "insert owner key").int64(0, 0)
        }
    }

    private static let keyColumns = "id, label, admin, max_live, max_duration_s, creates_per_hour, created_at, last_used_at, revoked_at, key_hash, webhook_url"

    private static func keys(_ rows: PostgresRows) -> [OwnerKeyRecord] {
        (0..<rows.count).map { index in
            OwnerKeyRecord(id: rows.int64(index, 0), label: rows.text(index, 1) ?? "", isAdmin: rows.bool(index, 2),
                           limits: KeyLimits(maxLive: rows.optionalInt64(index, 3).map { Int($0) }, maxDurationSeconds: rows.optionalInt64(index, 4),
                                             createsPerHour: rows.optionalInt64(index, 5).map { Int($0) }),
                           createdAt: rows.int64(index, 6), lastUsedAt: rows.optionalInt64(index, 7), revokedAt: rows.optionalInt64(index, 8),
                           liveShares: rows.columns > 11 ? Int(rows.int64(index, 11)) : 0, webhookURL: rows.text(index, 10))
        }
    }

    public func ownerKey(hash: SecretHash) throws(StoreError) -> OwnerKeyRecord? {
        try pool.with(operation: "check owner key") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT \(Self.keyColumns) FROM owner_keys WHERE key_hash = $1", [PostgresText.hex(hash.bytes)],
                                              operation: "check owner key")
            guard rows.count == 1, SecretHash(bytes: rows.bytes(0, 9)).matches(hash) else { return nil }
            return Self.keys(rows).first
        }
    }

    public func ownerKey(id: Int64) throws(StoreError) -> OwnerKeyRecord? {
        try pool.with(operation: "read owner key") { connection throws(StoreError) in
            Self.keys(try connection.execute("SELECT \(Self.keyColumns) FROM owner_keys WHERE id = $1", [String(id)], operation: "read owner key")).first
        }
    }

    public func ownerKeys() throws(StoreError) -> [OwnerKeyRecord] {
        try pool.with(operation: "list owner keys") { connection throws(StoreError) in
            Self.keys(try connection.execute("""
                SELECT \(Self.keyColumns), (SELECT count(*) FROM shares WHERE owner_key = owner_keys.id AND ended_at IS NULL)
                FROM owner_keys ORDER BY id
                """, operation: "list owner keys"))
        }
    }

    @discardableResult
    public func revokeOwnerKey(id: Int64, at: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE owner_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL", [String(at), String(id)],
                        operation: "revoke owner key") == 1
    }

    public func noteOwnerKeyUsed(id: Int64, at: UnixMillis) throws(StoreError) {
        try changedRows("UPDATE owner_keys SET last_used_at = $1 WHERE id = $2", [String(at), String(id)], operation: "note key use")
    }

    public func ownerKeyCount() throws(StoreError) -> Int {
        try pool.with(operation: "count owner keys") { connection throws(StoreError) in
            Int(try connection.execute("SELECT count(*) FROM owner_keys", operation: "count owner keys").int64(0, 0))
        }
    }

    /// None: other instances' revocations reach this one through the change feed (`OwnerKeyService`).
    public var ownerKeysMark: UInt64? { nil }

    public func setKeyWebhook(id: Int64, url: String?, sealedSecret: [UInt8]?, at: UnixMillis) throws(StoreError) -> Bool {
        if let url, let sealedSecret {
            return try changedRows("""
                UPDATE owner_keys SET webhook_previous_secret = webhook_secret,
                    webhook_rotated_at = CASE WHEN webhook_secret IS NULL THEN NULL ELSE $4::bigint END, webhook_url = $2, webhook_secret = $3
                WHERE id = $1
                """, [String(id), url, PostgresText.hex(sealedSecret), String(at)], operation: "set webhook") == 1
        }
        return try changedRows("""
            UPDATE owner_keys SET webhook_url = NULL, webhook_secret = NULL, webhook_previous_secret = NULL, webhook_rotated_at = NULL WHERE id = $1
            """, [String(id)], operation: "remove webhook") == 1
    }

    public func resealWebhookSecrets(_ reseal: @Sendable (_ keyID: Int64, _ sealed: [UInt8]) -> [UInt8]?) throws(StoreError) -> Int {
        let operation = "reseal webhook secrets"
        return try pool.with(operation: operation, long: true) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Int in
                // FOR UPDATE: a webhook set meanwhile on an instance still running waits for this transaction.
                let rows = try connection.execute("""
                    SELECT id, webhook_secret, webhook_previous_secret FROM owner_keys
                    WHERE webhook_secret IS NOT NULL OR webhook_previous_secret IS NOT NULL FOR UPDATE
                    """, operation: operation)
                for index in 0..<rows.count {
                    let id = rows.int64(index, 0)
                    let secret = rows.text(index, 1) == nil ? nil : reseal(id, rows.bytes(index, 1))
                    let previous = rows.text(index, 2) == nil ? nil : reseal(id, rows.bytes(index, 2))
                    guard rows.text(index, 1) == nil || secret != nil, rows.text(index, 2) == nil || previous != nil else {
                        throw StoreError(operation: operation, postgres: "key \(id)'s secret does not open with the current token key")
                    }
                    try connection.execute("UPDATE owner_keys SET webhook_secret = $2, webhook_previous_secret = $3 WHERE id = $1",
                                           [String(id), secret.map(PostgresText.hex), previous.map(PostgresText.hex)], operation: operation)
                }
                return rows.count
            }
        }
    }

    public func keyWebhook(id: Int64) throws(StoreError) -> KeyWebhook? {
        try pool.with(operation: "read webhook") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT webhook_url, webhook_secret, webhook_previous_secret, webhook_rotated_at FROM owner_keys
                WHERE id = $1 AND webhook_url IS NOT NULL AND webhook_secret IS NOT NULL
                """, [String(id)], operation: "read webhook")
            guard rows.count == 1 else { return nil }
            return KeyWebhook(url: rows.text(0, 0) ?? "", sealedSecret: rows.bytes(0, 1),
                              previousSealedSecret: rows.text(0, 2) == nil ? nil : rows.bytes(0, 2), rotatedAt: rows.optionalInt64(0, 3))
        }
    }
}
