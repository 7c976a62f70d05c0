public import FlareCore
public import FlareStore
import FlareSystem

extension SQLiteShareStore: KeyRecords {
    public func keysWithWorkToStop() throws(StoreError) -> [Int64] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT id FROM owner_keys WHERE revoked_at IS NOT NULL AND work_stopped_at IS NULL ORDER BY revoked_at, id")
            defer { statement.reset() }
            var keys: [Int64] = []
            while try statement.step() { keys.append(statement.int64(0)) }
            return keys
        }
    }

    public func cancelQueuedWork(ofKey key: Int64, at: UnixMillis) throws(StoreError) -> (checkins: Int, mails: Int) {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> (checkins: Int, mails: Int) in
                let cancel = try db.statement("UPDATE checkins SET state = 'cancelled', state_at = ?1 WHERE owner_key = ?2 AND state = 'armed'")
                defer { cancel.reset() }
                cancel.bind(1, at)
                cancel.bind(2, key)
                try cancel.run()
                let checkins = db.changes
                let drop = try db.statement("""
                    DELETE FROM event_deliveries WHERE (destination LIKE 'mail:%' OR destination LIKE 'contact:%')
                      AND event IN (SELECT e.id FROM events e JOIN shares s ON s.id = e.share WHERE s.owner_key = ?1)
                    """)
                defer { drop.reset() }
                drop.bind(1, key)
                try drop.run()
                let mails = db.changes
                // An event whose last destination was one of these mails leaves the outbox with it.
                let emptied = try db.statement("""
                    DELETE FROM events WHERE share IN (SELECT id FROM shares WHERE owner_key = ?1)
                      AND NOT EXISTS (SELECT 1 FROM event_deliveries WHERE event = events.id)
                    """)
                defer { emptied.reset() }
                emptied.bind(1, key)
                try emptied.run()
                return (checkins, mails)
            }
        }
    }

    public func noteKeyWorkStopped(_ key: Int64, at: UnixMillis) throws(StoreError) {
        _ = try changedRows("UPDATE owner_keys SET work_stopped_at = ?1 WHERE id = ?2 AND work_stopped_at IS NULL") { statement in
            statement.bind(1, at)
            statement.bind(2, key)
        }
    }

    public func takeMailBudget(key: Int64, count: Int, perHour: Int, now: UnixMillis) throws(StoreError) -> Int {
        guard count > 0 else { return 0 }
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Int in
                let read = try db.statement("SELECT tokens, at FROM key_mail_budget WHERE key = ?1")
                defer { read.reset() }
                read.bind(1, key)
                let held: (tokens: Double, at: UnixMillis)? = try read.step() ? (read.double(0), read.int64(1)) : nil
                read.reset()
                let taken = MailBudget.take(count: count, from: held, now: now, perHour: perHour)
                let write = try db.statement("INSERT INTO key_mail_budget (key, tokens, at) VALUES (?1, ?2, ?3) ON CONFLICT(key) DO UPDATE SET tokens = ?2, at = ?3")
                defer { write.reset() }
                write.bind(1, key)
                write.bind(2, taken.tokens)
                write.bind(3, taken.at)
                try write.run()
                return taken.granted
            }
        }
    }

    @discardableResult
    public func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis, admin: Bool, limits: KeyLimits) throws(StoreError) -> Int64 {
        let id = try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                INSERT INTO owner_keys (key_hash, label, created_at, admin, max_live, max_duration_s, creates_per_hour)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """)
            defer { statement.reset() }
            statement.bind(1, hash.bytes)
            statement.bind(2, label)
            statement.bind(3, createdAt)
            statement.bind(4, Int64(admin ? 1 : 0))
            statement.bind(5, limits.maxLive.map(Int64.init))
            statement.bind(6, limits.maxDurationSeconds)
            statement.bind(7, limits.createsPerHour.map(Int64.init))
            try statement.run()
            return db.lastInsertRowID
        }
        ownerKeysChanged.touch()
        return id
    }

    private static let keyColumns = "id, label, admin, max_live, max_duration_s, creates_per_hour, created_at, last_used_at, revoked_at, key_hash, webhook_url"

    private static func readKey(_ statement: SQLiteStatement) -> OwnerKeyRecord {
        OwnerKeyRecord(id: statement.int64(0), label: statement.string(1), isAdmin: statement.int64(2) != 0,
                       limits: KeyLimits(maxLive: statement.optionalInt64(3).map { Int($0) }, maxDurationSeconds: statement.optionalInt64(4),
                                         createsPerHour: statement.optionalInt64(5).map { Int($0) }),
                       createdAt: statement.int64(6), lastUsedAt: statement.optionalInt64(7), revokedAt: statement.optionalInt64(8),
                       webhookURL: statement.optionalString(10))
    }

    public func ownerKey(hash: SecretHash) throws(StoreError) -> OwnerKeyRecord? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.keyColumns) FROM owner_keys WHERE key_hash = ?")
            defer { statement.reset() }
            statement.bind(1, hash.bytes)
            guard try statement.step(), SecretHash(bytes: statement.blob(9)).matches(hash) else { return nil }
            return Self.readKey(statement)
        }
    }

    public func ownerKey(id: Int64) throws(StoreError) -> OwnerKeyRecord? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.keyColumns) FROM owner_keys WHERE id = ?")
            defer { statement.reset() }
            statement.bind(1, id)
            return try statement.step() ? Self.readKey(statement) : nil
        }
    }

    public func ownerKeys() throws(StoreError) -> [OwnerKeyRecord] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT \(Self.keyColumns), (SELECT count(*) FROM shares WHERE owner_key = owner_keys.id AND ended_at IS NULL)
                FROM owner_keys ORDER BY id
                """)
            defer { statement.reset() }
            var keys: [OwnerKeyRecord] = []
            while try statement.step() {
                var key = Self.readKey(statement)
                key.liveShares = Int(statement.int64(11))
                keys.append(key)
            }
            return keys
        }
    }

    @discardableResult
    public func revokeOwnerKey(id: Int64, at: UnixMillis) throws(StoreError) -> Bool {
        let revoked = try changedRows("UPDATE owner_keys SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL") { statement in
            statement.bind(1, at)
            statement.bind(2, id)
        } == 1
        if revoked { ownerKeysChanged.touch() }
        return revoked
    }

    /// Moves when any process changed an owner key (`ChangeMarkerFile`: the file next to the database that each
    /// change touches after its commit).
    public var ownerKeysMark: UInt64? { ownerKeysChanged.mark }

    public func noteOwnerKeyUsed(id: Int64, at: UnixMillis) throws(StoreError) {
        _ = try changedRows("UPDATE owner_keys SET last_used_at = ?1 WHERE id = ?2") { statement in
            statement.bind(1, at)
            statement.bind(2, id)
        }
    }

    public func ownerKeyCount() throws(StoreError) -> Int {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT count(*) FROM owner_keys")
            defer { statement.reset() }
            _ = try statement.step()
            return Int(statement.int64(0))
        }
    }

    public func setKeyWebhook(id: Int64, url: String?, sealedSecret: [UInt8]?, at: UnixMillis) throws(StoreError) -> Bool {
        defer { ownerKeysChanged.touch() }
        return try database.withLock { db throws(StoreError) in
            let statement = try db.statement(url == nil ? """
                UPDATE owner_keys SET webhook_url = NULL, webhook_secret = NULL, webhook_previous_secret = NULL, webhook_rotated_at = NULL WHERE id = ?1
                """ : """
                UPDATE owner_keys SET webhook_previous_secret = webhook_secret, webhook_rotated_at = CASE WHEN webhook_secret IS NULL THEN NULL ELSE ?4 END,
                                      webhook_url = ?2, webhook_secret = ?3 WHERE id = ?1
                """)
            defer { statement.reset() }
            statement.bind(1, id)
            if let url, let sealedSecret {
                statement.bind(2, url)
                statement.bind(3, sealedSecret)
                statement.bind(4, at)
            }
            try statement.run()
            return db.changes == 1
        }
    }

    public func resealWebhookSecrets(_ reseal: @Sendable (_ keyID: Int64, _ sealed: [UInt8]) -> [UInt8]?) throws(StoreError) -> Int {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Int in
                let select = try db.statement("""
                    SELECT id, webhook_secret, webhook_previous_secret FROM owner_keys
                    WHERE webhook_secret IS NOT NULL OR webhook_previous_secret IS NOT NULL
                    """)
                var rows: [(id: Int64, secret: [UInt8]?, previous: [UInt8]?)] = []
                while try select.step() {
                    rows.append((select.int64(0), select.isNull(1) ? nil : select.blob(1), select.isNull(2) ? nil : select.blob(2)))
                }
                select.reset()
                let update = try db.statement("UPDATE owner_keys SET webhook_secret = ?2, webhook_previous_secret = ?3 WHERE id = ?1")
                defer { update.reset() }
                for row in rows {
                    let secret = row.secret.map { reseal(row.id, $0) }, previous = row.previous.map { reseal(row.id, $0) }
                    guard secret != .some(nil), previous != .some(nil) else {
                        throw StoreError(operation: "reseal webhook secrets", code: 0, message: "key \(row.id)'s secret does not open with the current token key")
                    }
                    update.reset()
                    update.bind(1, row.id)
                    update.bind(2, secret ?? nil)
                    update.bind(3, previous ?? nil)
                    try update.run()
                }
                return rows.count
            }
        }
    }

    public func keyWebhook(id: Int64) throws(StoreError) -> KeyWebhook? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT webhook_url, webhook_secret, webhook_previous_secret, webhook_rotated_at FROM owner_keys
                WHERE id = ?1 AND webhook_url IS NOT NULL AND webhook_secret IS NOT NULL
                """)
            defer { statement.reset() }
            statement.bind(1, id)
            guard try statement.step() else { return nil }
            return KeyWebhook(url: statement.string(0), sealedSecret: statement.blob(1),
                              previousSealedSecret: statement.isNull(2) ? nil : statement.blob(2), rotatedAt: statement.optionalInt64(3))
        }
    }
}
