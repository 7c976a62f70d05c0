public import FlareCore
public import FlareStore
import FlareSystem
import Synchronization

/// Flare's state in PostgreSQL, for several `flared` instances at once: the same tables and guarantees as the
/// SQLite store, with every write a single statement (or one transaction) that commits before it returns.
///
/// - Fixes go in by the batch, since per-row round trips cap near 9,000 rows/s on this kind of machine: those known
///   to be new (`NewestStoredFixes`) by a binary COPY into `fixes`, the others by a binary COPY into a staging table
///   and one `INSERT … SELECT … ON CONFLICT DO NOTHING`, which makes a fix stored twice, by a redelivery or by
///   another instance, a no-op; the row count (or, for a batch with repeats, `RETURNING`) says which were new.
/// - A small pool of connections: the fix writer, share changes and owner-key checks do not queue behind each
///   other, and concurrent share creations share the server's group commit.
/// - A broken connection (a server restart) is re-established on its next use; until then calls fail with a
///   `StoreError`, which the bridge answers with back-pressure and `/healthz` 503.
public final class PostgresShareStore: ShareStore {
    private let pool: PostgresPool
    private let url: String
    private let instance: String
    private let listener = Mutex<PostgresListener?>(nil)
    /// Which fixes of a batch are certainly new, so that they can skip `ON CONFLICT` (see `insertFixes`).
    private let newestStored = NewestStoredFixes()
    /// Fixes stored by the plain COPY, and batches that had to be stored again the other way: for tests.
    private let writerCounts = Mutex((copied: 0, retried: 0))
    var fixesCopied: Int { writerCounts.withLock { $0.copied } }
    var batchesRetried: Int { writerCounts.withLock { $0.retried } }
    func newestStoredFrontier(of row: Int64) -> NewestStoredFixes.Frontier? { newestStored.frontier(of: row) }
    /// For logs: the server and database, never the password.
    public let description: String
    public let upgradedFromSchema: Int?

    /// The schema, one numbered step at a time (recorded in `flare_schema`); steps are only ever appended. A database
    /// made by an older release is brought up to date at open, under a lock, so instances starting together do it once.
    static let migrations: [String] = [
        // 1: shares, fixes and owner keys, as in the SQLite store.
        """
        CREATE TABLE shares (
            id BIGSERIAL PRIMARY KEY,
            share_id TEXT NOT NULL UNIQUE,
            view_token_hash BYTEA NOT NULL UNIQUE,
            name TEXT NOT NULL DEFAULT '',
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            ended_at BIGINT,
            end_reason TEXT,
            history_purged BOOLEAN NOT NULL DEFAULT false
        );
        CREATE INDEX shares_open ON shares(id) WHERE NOT history_purged;
        CREATE INDEX shares_newest ON shares(created_at DESC, id DESC);
        CREATE TABLE fixes (
            share BIGINT NOT NULL,
            tst BIGINT NOT NULL,
            lat DOUBLE PRECISION NOT NULL,
            lon DOUBLE PRECISION NOT NULL,
            acc DOUBLE PRECISION, alt DOUBLE PRECISION, vel DOUBLE PRECISION, cog DOUBLE PRECISION, batt INTEGER, tid TEXT,
            received_at BIGINT NOT NULL,
            PRIMARY KEY (share, tst, lat, lon)
        );
        CREATE TABLE owner_keys (
            id BIGSERIAL PRIMARY KEY,
            key_hash BYTEA NOT NULL UNIQUE,
            label TEXT NOT NULL,
            created_at BIGINT NOT NULL
        );
        """,
        // 2: the change feed. Each committed change is announced with NOTIFY, in the same transaction, so every
        // instance hears of it exactly when it becomes visible, and in commit order. The payload starts with the
        // writer's application_name (its instance), so an instance skips what it did itself.
        // - Shares: by this trigger, on UPDATE only (extended, ended, purged). A transaction that notifies holds a
        //   database-wide lock until it has committed, so notifying each creation would give up group commit (1,800
        //   creations/s here instead of 3,000); another instance learns of a new share when it is first asked for
        //   it, and a sweep ends the expired ones nobody asked for.
        // - Fixes: by `insertFixes` itself, in its transaction, for the new ones only (see there).
        """
        CREATE FUNCTION flare_notify_share() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('flare_shares', current_setting('application_name') || ' ' || NEW.share_id);
            RETURN NULL;
        END $$;
        CREATE TRIGGER shares_changed AFTER UPDATE ON shares FOR EACH ROW EXECUTE FUNCTION flare_notify_share();
        """,
        // 3: the instances whose MQTT sessions the broker keeps (one client id per flared process), so that a live
        // one can take over the session of one that died for good.
        "CREATE TABLE instances (client_id TEXT PRIMARY KEY, process TEXT NOT NULL, last_seen BIGINT NOT NULL);",
        // 4: the tracker state (live, stale, offline) and "locate now" requests, per share; what the phone says of
        // its battery and connectivity, per fix (after `received_at`: the batch COPY writes the columns in order).
        """
        ALTER TABLE shares ADD COLUMN tracker_state TEXT, ADD COLUMN tracker_since BIGINT, ADD COLUMN tracker_reason TEXT,
            ADD COLUMN tracker_transport TEXT, ADD COLUMN locate_requested_at BIGINT, ADD COLUMN locate_answered_at BIGINT,
            ADD COLUMN locate_delivered_at BIGINT;
        ALTER TABLE fixes ADD COLUMN bs INTEGER, ADD COLUMN conn TEXT;
        """,
        // 5: leases, for jobs that one instance at a time does (keeping the broker's retained state), with the value
        // the job records (the last broker epoch the broker acknowledged).
        "CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until BIGINT NOT NULL, value BIGINT NOT NULL DEFAULT 0);",
        // 6: what is stored of confirming trackers' streams: per share, the newest stream and the number through which
        // every message is handled (by any instance); the handled numbers beyond it (after a gap) until it is filled.
        """
        CREATE TABLE tracker_marks (share BIGINT PRIMARY KEY, stream BIGINT NOT NULL, through BIGINT NOT NULL);
        CREATE TABLE tracker_handled (share BIGINT NOT NULL, stream BIGINT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (share, stream, seq));
        """,
        // 7: a share belongs to the key that created it; keys are admin (every share) or limited. Keys made before
        // this step were all-powerful and stay so (admin); shares made before it belong to the first key. A key's
        // revocation is announced like a share's change, so that every instance stops accepting it at once.
        """
        ALTER TABLE owner_keys ADD COLUMN admin BOOLEAN NOT NULL DEFAULT true, ADD COLUMN max_live INTEGER,
            ADD COLUMN max_duration_s BIGINT, ADD COLUMN creates_per_hour INTEGER, ADD COLUMN last_used_at BIGINT,
            ADD COLUMN revoked_at BIGINT;
        ALTER TABLE shares ADD COLUMN owner_key BIGINT;
        UPDATE shares SET owner_key = (SELECT min(id) FROM owner_keys);
        CREATE INDEX shares_owner ON shares(owner_key, created_at DESC, id DESC);
        CREATE TABLE key_creations (key BIGINT NOT NULL, at BIGINT NOT NULL);
        CREATE INDEX key_creations_key ON key_creations(key, at);
        CREATE FUNCTION flare_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
                PERFORM pg_notify('flare_shares', current_setting('application_name') || ' key:' || NEW.id);
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER owner_keys_changed AFTER UPDATE ON owner_keys FOR EACH ROW EXECUTE FUNCTION flare_notify_key();
        """,
        // 8: the family's answers, kept with the share and purged with its history. A new answer updates the share's
        // `last_answer_id`, so the share trigger tells every instance to show it.
        """
        CREATE TABLE answers (id BIGSERIAL PRIMARY KEY, share BIGINT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, at BIGINT NOT NULL);
        CREATE INDEX answers_share ON answers(share, id);
        ALTER TABLE shares ADD COLUMN last_answer_id BIGINT;
        """,
        // 9: who opened the link: a hash of (share, viewer id) per browser, never an address, and when it was last
        // seen (any instance's live streams' heartbeat), purged with the share's history.
        """
        CREATE TABLE viewers (share BIGINT NOT NULL, viewer BYTEA NOT NULL, first_seen BIGINT NOT NULL, last_seen BIGINT NOT NULL,
                              PRIMARY KEY (share, viewer));
        """,
        // 10: the events outbox (each event once, and per destination when to try it next), when the battery was
        // recorded low, and the keys' webhooks (their secrets sealed, never in clear).
        """
        CREATE TABLE events (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, share BIGINT NOT NULL, type TEXT NOT NULL,
                             at BIGINT NOT NULL, body TEXT NOT NULL);
        CREATE TABLE event_deliveries (event BIGINT NOT NULL, destination TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                                       next_at BIGINT NOT NULL, PRIMARY KEY (event, destination));
        CREATE INDEX event_deliveries_due ON event_deliveries(next_at);
        CREATE INDEX events_id ON events(event_id);
        ALTER TABLE shares ADD COLUMN battery_low_at BIGINT;
        ALTER TABLE owner_keys ADD COLUMN webhook_url TEXT, ADD COLUMN webhook_secret BYTEA, ADD COLUMN webhook_previous_secret BYTEA,
            ADD COLUMN webhook_rotated_at BIGINT;
        """,
    ]
    static var schemaVersion: Int { migrations.count }

    /// - Parameters:
    ///   - url: `postgresql://user[:password]@host:port/db` (any libpq connection URI or conninfo string).
    ///   - instance: this process's name in `pg_stat_activity` (and, for the change feed, whose changes are whose).
    ///   - callTimeout: how long a call may wait for a connection and the server before it fails (and a request is
    ///     answered 503): the server may be paused or cut off without closing its sockets.
    public init(url: String, instance: String, connections: Int = 4, callTimeout: Duration = .seconds(2)) throws(StoreError) {
        description = StoreLocation.redacted(url)
        self.url = url
        self.instance = instance
        pool = try PostgresPool(conninfo: url, applicationName: instance, size: max(2, connections), callTimeout: callTimeout)
        let found = try pool.with(operation: "migrate", long: true) { connection throws(StoreError) in try Self.migrate(connection) }
        upgradedFromSchema = found > 0 && found < Self.schemaVersion ? found : nil
    }

    /// Brings the database to today's schema; returns the version it had (0: a new database).
    private static func migrate(_ connection: PostgresConnection) throws(StoreError) -> Int {
        try connection.transaction(operation: "migrate") { () throws(StoreError) -> Int in
            // One instance migrates at a time; the others wait here and then find nothing to do.
            try connection.execute("SELECT pg_advisory_xact_lock(7418262035)", operation: "migrate")
            try connection.execute("CREATE TABLE IF NOT EXISTS flare_schema (version INTEGER NOT NULL)", operation: "migrate")
            let rows = try connection.execute("SELECT max(version) FROM flare_schema", operation: "migrate")
            let version = Int(rows.optionalInt64(0, 0) ?? 0)
            guard version <= schemaVersion else {
                throw StoreError(operation: "open", postgres: "the database has schema version \(version), newer than the \(schemaVersion) this flared knows; run the release that made it, or a newer one")
            }
            for step in version..<migrations.count {
                try connection.executeScript(migrations[step], operation: "migrate to schema \(step + 1)")
                try connection.execute("INSERT INTO flare_schema (version) VALUES ($1)", [String(step + 1)], operation: "migrate")
            }
            return version
        }
    }

    /// Runs one writing statement; returns how many rows it changed (the conditional updates say by this whether
    /// this call, of all instances', made the change).
    @discardableResult
    private func changedRows(_ sql: String, _ parameters: [String?], operation: String) throws(StoreError) -> Int {
        try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.execute(sql, parameters, operation: operation).affected
        }
    }

    /// Runs one writing statement and, if it changed a row and there is an event, records the event in the same
    /// transaction; returns how many rows it changed.
    @discardableResult
    private func changedRows(_ sql: String, _ parameters: [String?], operation: String, event: PendingEvent?, shareRow: Int64) throws(StoreError) -> Int {
        guard let event else { return try changedRows(sql, parameters, operation: operation) }
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Int in
                let changed = try connection.execute(sql, parameters, operation: operation).affected
                if changed == 1 { try Self.record(event, shareRow: shareRow, on: connection) }
                return changed
            }
        }
    }

    /// Puts an event in the outbox, for its destinations and the owning key's webhook, inside the caller's transaction:
    /// one statement.
    private static func record(_ pending: PendingEvent, shareRow: Int64, on connection: PostgresConnection) throws(StoreError) {
        let statement = withOutbox("SELECT id, owner_key FROM shares WHERE id = $1", [String(shareRow)], pending)
        try connection.execute(statement.sql, statement.parameters, operation: "record event")
    }

    /// One statement: `share` (a CTE giving the share's `id` and `owner_key`, from `shareParameters`), then the event
    /// and its deliveries (the named destinations, and the owning key's webhook if it has one and is not named among
    /// them); it answers the share's id. `UNION ALL` with that condition, not `UNION`: setting up the deduplicating
    /// aggregate for every creation was a tenth of the server's time for the statement.
    private static func withOutbox(_ share: String, _ shareParameters: [String?], _ pending: PendingEvent) -> (sql: String, parameters: [String?]) {
        let event = pending.event
        let n = shareParameters.count + 1
        let sql = """
            WITH share AS (\(share)),
            event AS (INSERT INTO events (event_id, share, type, at, body) SELECT $\(n), share.id, $\(n + 1), $\(n + 2), $\(n + 3) FROM share RETURNING id),
            deliveries AS (
                INSERT INTO event_deliveries (event, destination, next_at)
                SELECT event.id, destination, $\(n + 2) FROM event, unnest($\(n + 4)::text[]) destination
                UNION ALL
                SELECT event.id, 'key:' || k.id, $\(n + 2) FROM event, share, owner_keys k
                WHERE k.id = share.owner_key AND k.webhook_url IS NOT NULL AND k.revoked_at IS NULL
                  AND 'key:' || k.id <> ALL ($\(n + 4)::text[]))
            SELECT id FROM share
            """
        return (sql, shareParameters + [event.id, event.type.rawValue, String(event.at), String(decoding: event.body, as: UTF8.self),
                                        PostgresText.textArray(pending.destinations.map(\.name))])
    }

    // MARK: Events

    public func dueEvents(now: UnixMillis, limit: Int) throws(StoreError) -> [OutboxDelivery] {
        try pool.with(operation: "read events") { connection throws(StoreError) in
            // The event and its share are looked up by primary key for each due delivery (`OFFSET 0` keeps the planner
            // from turning the lookups into a join): as a join, its plan hashed every row of `shares` at each read, 30
            // ms with 100,000 shares, several times a second while shares were being created.
            let rows = try connection.execute("""
                SELECT d.event, d.destination, d.attempts, e.event_id, e.type, (SELECT share_id FROM shares WHERE id = e.share), e.at, e.body
                FROM (SELECT event, destination, attempts, next_at,
                             row_number() OVER (PARTITION BY destination ORDER BY next_at, event) AS place
                      FROM event_deliveries WHERE next_at <= $1) d
                CROSS JOIN LATERAL (SELECT event_id, type, share, at, body FROM events WHERE id = d.event OFFSET 0) e
                WHERE d.place <= $2 ORDER BY d.next_at, d.event
                """, [String(now), String(max(0, limit))], operation: "read events")
            return (0..<rows.count).compactMap { index in
                guard let destination = rows.text(index, 1).flatMap(EventDestination.init(name:)),
                      let type = rows.text(index, 4).flatMap(ShareEventType.init(rawValue:)),
                      let share = rows.text(index, 5).flatMap(ShareID.init) else { return nil }
                return OutboxDelivery(row: rows.int64(index, 0), destination: destination, attempts: Int(rows.int64(index, 2)),
                                      event: ShareEvent(id: rows.text(index, 3) ?? "", type: type, shareID: share, at: rows.int64(index, 6),
                                                        body: Array((rows.text(index, 7) ?? "").utf8)))
            }
        }
    }

    public func eventsDelivered(_ deliveries: [(row: Int64, destination: EventDestination)]) throws(StoreError) {
        guard !deliveries.isEmpty else { return }
        let operation = "deliver events"
        let rows = PostgresText.textArray(deliveries.map { String($0.row) }), names = PostgresText.textArray(deliveries.map { $0.destination.name })
        try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) in
                try connection.execute("""
                    DELETE FROM event_deliveries d USING unnest($1::bigint[], $2::text[]) AS done(event, destination)
                    WHERE d.event = done.event AND d.destination = done.destination
                    """, [rows, names], operation: operation)
                try connection.execute("""
                    DELETE FROM events e WHERE e.id = ANY($1::bigint[]) AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event = e.id)
                    """, [rows], operation: operation)
            }
        }
    }

    public func eventDelivered(id: String, destination: EventDestination) throws(StoreError) {
        let rows = try pool.with(operation: "read event") { connection throws(StoreError) in
            try connection.execute("SELECT id FROM events WHERE event_id = $1", [id], operation: "read event")
        }
        if rows.count == 1 { try eventsDelivered([(rows.int64(0, 0), destination)]) }
    }

    public func eventFailed(row: Int64, destination: EventDestination, attempts: Int, retryAt: UnixMillis?) throws(StoreError) {
        guard let retryAt else { return try eventsDelivered([(row, destination)]) }
        try changedRows("UPDATE event_deliveries SET attempts = $1, next_at = $2 WHERE event = $3 AND destination = $4",
                        [String(attempts), String(retryAt), String(row), destination.name], operation: "retry event")
    }

    public func outboxBacklog() throws(StoreError) -> [OutboxBacklog] {
        try pool.with(operation: "read outbox") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT d.destination, count(*), min(e.at) FROM event_deliveries d JOIN events e ON e.id = d.event GROUP BY d.destination
                """, operation: "read outbox")
            return (0..<rows.count).compactMap { index in
                rows.text(index, 0).flatMap(EventDestination.init(name:)).map {
                    OutboxBacklog(destination: $0, waiting: Int(rows.int64(index, 1)), oldestAt: rows.int64(index, 2))
                }
            }
        }
    }

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

    // MARK: Shares

    @discardableResult
    public func insertShare(_ share: Share, event: PendingEvent?) throws(StoreError) -> Int64 {
        try pool.with(operation: "insert share") { connection throws(StoreError) in try Self.insert(share, event: event, on: connection) }
    }

    /// The share and its event in one statement: one round trip, as before events existed (creations share the
    /// server's group commit).
    private static func insert(_ share: Share, event pending: PendingEvent?, on connection: PostgresConnection) throws(StoreError) -> Int64 {
        let parameters = [share.id.rawValue, PostgresText.hex(share.viewTokenHash.bytes), share.name, String(share.createdAt), String(share.expiresAt),
                          share.ownerKeyID.map { String($0) }]
        guard let pending else {
            return try connection.execute("""
                INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at, owner_key) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id
                """, parameters, operation: "insert share").int64(0, 0)
        }
        let statement = withOutbox("""
            INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at, owner_key) VALUES ($1, $2, $3, $4, $5, $6)
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
                for table in ["fixes", "tracker_marks", "tracker_handled", "answers", "viewers"] {
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
        last_answer_id, battery_low_at
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
                batteryLowAt: rows.optionalInt64(index, 17))
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

    // MARK: Trackers and commands

    public func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition, event: PendingEvent?) throws(StoreError) -> Bool {
        // As in the SQLite store: the fixes looked at are bounded by `tst` too, so the primary key's range is read.
        try changedRows("""
            UPDATE shares SET tracker_state = $1, tracker_since = $2, tracker_reason = $3, tracker_transport = COALESCE($4, tracker_transport)
            WHERE id = $5 AND ended_at IS NULL
              AND (tracker_state IS DISTINCT FROM $1 OR tracker_transport IS DISTINCT FROM COALESCE($4, tracker_transport))
              AND ($6::text IS NULL OR tracker_state IS NULL OR tracker_state = $6)
              AND ($7::bigint IS NULL OR NOT EXISTS (SELECT 1 FROM fixes WHERE share = $5 AND tst >= $7::bigint / 1000 - 3600 AND received_at > $7::bigint))
            """, [record.state.rawValue, String(record.since), record.reason, record.transport?.rawValue, String(row),
                 condition.from?.rawValue, condition.noFixReceivedAfter.map { String($0) }], operation: "record tracker", event: event, shareRow: row) == 1
    }

    public func recordBatteryLow(row: Int64, lowSince: UnixMillis?, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET battery_low_at = $1::bigint WHERE id = $2 AND ended_at IS NULL AND (battery_low_at IS NULL) <> ($1::bigint IS NULL)
            """, [lowSince.map { String($0) }, String(row)], operation: "record battery", event: event, shareRow: row) == 1
    }

    public func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_requested_at = $1
            WHERE id = $2 AND ended_at IS NULL AND (locate_requested_at IS NULL OR locate_requested_at <= $3)
            """, [String(now), String(row), String(now - minimumIntervalMillis)], operation: "request location", event: event, shareRow: row) == 1
    }

    public func recordLocateAnswer(row: Int64, at: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_answered_at = $1
            WHERE id = $2 AND locate_requested_at IS NOT NULL AND (locate_answered_at IS NULL OR locate_answered_at < locate_requested_at)
            """, [String(at), String(row)], operation: "record answer") == 1
    }

    public func takeLocateCommand(row: Int64, now: UnixMillis, validForMillis: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_delivered_at = $1
            WHERE id = $2 AND ended_at IS NULL AND locate_requested_at > $3
              AND (locate_delivered_at IS NULL OR locate_delivered_at < locate_requested_at)
            """, [String(now), String(row), String(now - validForMillis)], operation: "take command") == 1
    }

    // MARK: Fixes

    public func insertFixes(_ fixes: [PendingFix]) throws(StoreError) -> [Bool] {
        guard !fixes.isEmpty else { return [] }
        return try pool.with(operation: "insert fixes", long: true) { connection throws(StoreError) in
            if !connection.hasFixStaging {  // outside the transaction, which may roll back
                try connection.execute("CREATE TEMPORARY TABLE IF NOT EXISTS fixes_staging (LIKE fixes) ON COMMIT DELETE ROWS",
                                       operation: "insert fixes")
                connection.hasFixStaging = true
            }
            let unknown = newestStored.unknown(among: fixes.lazy.map(\.shareRow))
            if !unknown.rows.isEmpty {
                newestStored.seed(unknown.rows, newest: try newestStoredFixes(unknown.rows, on: connection), generation: unknown.generation)
            }
            let isNew: [Bool]
            let direct = newestStored.claimNewFixes(in: fixes)
            do throws(StoreError) {
                isNew = try insert(fixes, copying: direct, on: connection)
                writerCounts.withLock { $0.copied += direct.count }
            } catch where error.isUniqueViolation {
                // A fix judged new was stored after all: by another instance, committed just before its announcement
                // reached this one. The whole batch goes the other way (PostgreSQL logs the duplicate key).
                writerCounts.withLock { $0.retried += 1 }
                isNew = try insert(fixes, copying: [], on: connection)
            }
            if direct.count < fixes.count { newestStored.stored(fixes.lazy.map { ($0.shareRow, $0.fix) }) }
            return isNew
        }
    }

    /// Stores `fixes` in one transaction and announces the new ones; `copying` (indexes into `fixes`) are certainly
    /// new and go into `fixes` by a plain binary COPY, the rest through a staging table and `INSERT … ON CONFLICT DO
    /// NOTHING`, which says which were new. The plain COPY costs the database half as much per row: no speculative
    /// insertion (a second index search and WAL record per row), no staging copy, rows written by the page.
    private func insert(_ fixes: [PendingFix], copying direct: [Int], on connection: PostgresConnection) throws(StoreError) -> [Bool] {
        try connection.transaction(operation: "insert fixes") { () throws(StoreError) in
            var isNew = Array(repeating: false, count: fixes.count)
            let all = direct.count == fixes.count
            if !direct.isEmpty {
                let copy = all ? Self.binaryCopy(fixes) : Self.binaryCopy(direct.map { fixes[$0] })
                try connection.copyIn("COPY fixes (\(Self.fixColumns)) FROM STDIN (FORMAT binary)", copy.bytes, operation: "insert fixes")
                for index in direct { isNew[index] = true }
            }
            let staged = fixes.indices.filter { !isNew[$0] }  // the fixes not copied
            if !staged.isEmpty {
                for (index, new) in zip(staged, try insertStaged(staged.map { fixes[$0] }, on: connection)) { isNew[index] = new }
            }
            try announce(all ? fixes : zip(fixes, isNew).filter(\.1).map(\.0), on: connection)
            return isNew
        }
    }

    /// The columns of `fixes` in the order `binaryCopy` writes them.
    private static let fixColumns = "share, tst, lat, lon, acc, alt, vel, cog, batt, tid, received_at, bs, conn"

    private static func binaryCopy(_ fixes: [PendingFix]) -> BinaryCopy {
        var copy = BinaryCopy(capacity: fixes.count)
        for pending in fixes {
            let fix = pending.fix
            copy.beginRow(fields: 13)
            copy.int64(pending.shareRow)
            copy.int64(fix.timestamp)
            copy.double(fix.latitude)
            copy.double(fix.longitude)
            copy.double(fix.accuracy)
            copy.double(fix.altitude)
            copy.double(fix.velocity)
            copy.double(fix.course)
            copy.int32(fix.battery.map { Int32(clamping: $0) })
            copy.text(fix.trackerID)
            copy.int64(pending.receivedAt)
            copy.int32(fix.batteryStatus.map { Int32(clamping: $0) })
            copy.text(fix.connection)
        }
        copy.finish()
        return copy
    }

    /// Fixes that may already be stored, inside the caller's transaction: a binary COPY into a temporary staging table
    /// (emptied at commit), then one `INSERT … SELECT … ON CONFLICT DO NOTHING` into `fixes`; says which were new.
    private func insertStaged(_ fixes: [PendingFix], on connection: PostgresConnection) throws(StoreError) -> [Bool] {
        let insert = "INSERT INTO fixes (\(Self.fixColumns)) SELECT \(Self.fixColumns) FROM fixes_staging ON CONFLICT DO NOTHING"
        try connection.copyIn("COPY fixes_staging (\(Self.fixColumns)) FROM STDIN (FORMAT binary)", Self.binaryCopy(fixes).bytes,
                              operation: "insert fixes")
        try connection.execute("SAVEPOINT staged", operation: "insert fixes")
        // Usually none was stored: then the row count says so, and the rows need not come back. Otherwise (a
        // redelivery after a crash, retained messages after a reconnect) they are inserted again from the same staged
        // rows, saying which were new.
        if try connection.execute(insert, operation: "insert fixes").affected == fixes.count {
            return Array(repeating: true, count: fixes.count)
        }
        try connection.execute("ROLLBACK TO SAVEPOINT staged", operation: "insert fixes")
        let inserted = try connection.execute(insert + " RETURNING share, tst, lat, lon", operation: "insert fixes")
        struct Key: Hashable { let share: Int64; let tst: Int64; let lat: Double; let lon: Double }
        var new = Set<Key>()
        for index in 0..<inserted.count {
            new.insert(Key(share: inserted.int64(index, 0), tst: inserted.int64(index, 1), lat: inserted.double(index, 2), lon: inserted.double(index, 3)))
        }
        // A fix twice in one batch is inserted once: the first is the new one.
        return fixes.map { new.remove(Key(share: $0.shareRow, tst: $0.fix.timestamp, lat: $0.fix.latitude, lon: $0.fix.longitude)) != nil }
    }

    /// Each share's fixes at its newest stored time (none for a share without fixes; one more than are kept, so that
    /// `NewestStoredFixes` can tell there were more): two searches of the primary key per share.
    private func newestStoredFixes(_ rows: [Int64], on connection: PostgresConnection) throws(StoreError) -> [(row: Int64, tst: Int64, position: NewestStoredFixes.Position)] {
        let found = try connection.execute("""
            SELECT s, f.tst, f.lat, f.lon FROM unnest($1::bigint[]) s CROSS JOIN LATERAL (
                SELECT tst, lat, lon FROM fixes WHERE share = s AND tst = (SELECT max(tst) FROM fixes WHERE share = s) LIMIT $2
            ) f
            """, [PostgresText.textArray(rows.map(String.init)), String(newestStored.positionsKept + 1)],
            operation: "read newest fixes")
        return (0..<found.count).map {
            (found.int64($0, 0), found.int64($0, 1), .init(latitude: found.double($0, 2), longitude: found.double($0, 3)))
        }
    }

    /// Tells the other instances of the new fixes, in this transaction (so they hear of them exactly when they are
    /// stored): `row,tst,lat,lon,acc,alt,vel,cog,batt,bs,conn` (empty when absent; `conn` is one letter) joined by `;`, 30 to a notification, under
    /// NOTIFY's 8,000-byte limit whatever the numbers; tracker ids (unbounded text) are left out. Written here rather
    /// than by a trigger, which cost the database half as much again as the insert itself (15 ms for 8,192 fixes).
    private func announce(_ fixes: [PendingFix], on connection: PostgresConnection) throws(StoreError) {
        guard !fixes.isEmpty else { return }
        try connection.execute("SELECT pg_notify('flare_fixes', $1 || ' ' || chunk) FROM unnest($2::text[]) chunk",
                               [instance, Self.announcement(fixes)], operation: "announce fixes")
    }

    /// The chunks as one text-array literal, `{"chunk","chunk",…}`, written byte by byte: nothing in a chunk needs
    /// quoting (digits, signs, `.`, `e`, `,`, `;` and a connection letter), and building Strings here, then escaping
    /// them character by character, was a quarter of the writer's time at 40,000 fixes/s.
    static func announcement(_ fixes: [PendingFix]) -> String {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(fixes.count * 96 + 8)
        func integer(_ value: Int64) {
            if value < 0 { bytes.append(UInt8(ascii: "-")) }
            var magnitude = value.magnitude
            let start = bytes.count
            repeat {
                bytes.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
                magnitude /= 10
            } while magnitude > 0
            bytes[start...].reverse()
        }
        func number(_ value: Double?) {
            if let value, let text = PostgresText.double(value) { bytes.append(contentsOf: text.utf8) }
        }
        let comma = UInt8(ascii: ","), quote = UInt8(ascii: "\"")
        for (index, pending) in fixes.enumerated() {
            let fix = pending.fix
            if index % 30 == 0 {
                if index > 0 { bytes += [quote, comma] }
                bytes.append(quote)
            } else {
                bytes.append(UInt8(ascii: ";"))
            }
            integer(pending.shareRow); bytes.append(comma)
            integer(fix.timestamp); bytes.append(comma)
            number(fix.latitude); bytes.append(comma)
            number(fix.longitude); bytes.append(comma)
            number(fix.accuracy); bytes.append(comma)
            number(fix.altitude); bytes.append(comma)
            number(fix.velocity); bytes.append(comma)
            number(fix.course); bytes.append(comma)
            if let battery = fix.battery { integer(Int64(battery)) }
            bytes.append(comma)
            if let status = fix.batteryStatus { integer(Int64(status)) }
            bytes.append(comma)
            if let connection = fix.connection, connection.utf8.allSatisfy({ $0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z") }) {
                bytes.append(contentsOf: connection.utf8)
            }
        }
        bytes += [quote, UInt8(ascii: "}")]
        return String(decoding: bytes, as: UTF8.self)
    }

    public func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] {
        try pool.with(operation: "read fixes") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn FROM fixes WHERE share = $1 ORDER BY tst DESC LIMIT $2
                """, [String(row), String(limit)], operation: "read fixes")
            return (0..<rows.count).reversed().map { index in
                Fix(latitude: rows.double(index, 1), longitude: rows.double(index, 2), timestamp: rows.int64(index, 0),
                    accuracy: rows.optionalDouble(index, 3), altitude: rows.optionalDouble(index, 4),
                    velocity: rows.optionalDouble(index, 5), course: rows.optionalDouble(index, 6),
                    battery: rows.optionalInt64(index, 7).map { Int($0) }, batteryStatus: rows.optionalInt64(index, 9).map { Int($0) },
                    connection: rows.text(index, 10), trackerID: rows.text(index, 8))
            }
        }
    }

    public func fixCount(row: Int64) throws(StoreError) -> Int {
        try pool.with(operation: "count fixes") { connection throws(StoreError) in
            Int(try connection.execute("SELECT count(*) FROM fixes WHERE share = $1", [String(row)], operation: "count fixes").int64(0, 0))
        }
    }

    // MARK: Owner keys

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

    // MARK: Several instances

    public var isShared: Bool { true }

    public func expiredActiveShares(now: UnixMillis, limit: Int) throws(StoreError) -> [StoredShare] {
        try selectShares("WHERE ended_at IS NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2", [String(now), String(limit)],
                         operation: "find expired shares")
    }

    public func registerInstance(_ clientID: String, process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            INSERT INTO instances (client_id, process, last_seen) VALUES ($1, $2, $3)
            ON CONFLICT (client_id) DO UPDATE SET process = $2, last_seen = $3
            WHERE instances.process = $2 OR instances.last_seen < $4
            """, [clientID, process, String(now), String(now - staleAfter)], operation: "register instance") == 1
    }

    public func instanceProcess(_ clientID: String) throws(StoreError) -> String? {
        try pool.with(operation: "read instance") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT process FROM instances WHERE client_id = $1", [clientID], operation: "read instance")
            return rows.count == 1 ? rows.text(0, 0) : nil
        }
    }

    @discardableResult
    public func heartbeat(_ clientID: String, process: String, now: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE instances SET last_seen = $1 WHERE client_id = $2 AND process = $3",
                        [String(now), clientID, process], operation: "heartbeat") == 1
    }

    public func claimStaleInstance(process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> String? {
        try pool.with(operation: "claim instance") { connection throws(StoreError) in
            // SKIP LOCKED: two instances looking at once claim different ones (or one claims and one finds none).
            let rows = try connection.execute("""
                UPDATE instances SET process = $1, last_seen = $2
                WHERE client_id = (SELECT client_id FROM instances WHERE last_seen < $3 AND process <> $1
                                   ORDER BY last_seen LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING client_id
                """, [process, String(now), String(now - staleAfter)], operation: "claim instance")
            return rows.count == 1 ? rows.text(0, 0) : nil
        }
    }

    public func removeInstance(_ clientID: String, process: String) throws(StoreError) {
        try changedRows("DELETE FROM instances WHERE client_id = $1 AND process = $2", [clientID, process], operation: "remove instance")
    }

    public func recordHandledSequences(_ handled: [(shareRow: Int64, sequence: TrackerSequence)]) throws(StoreError) -> [(shareRow: Int64, mark: TrackerSequence)] {
        guard !handled.isEmpty else { return [] }
        let byShare = Dictionary(grouping: handled, by: \.shareRow)
        let operation = "record handled sequences"
        return try pool.with(operation: operation, long: true) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) in
                var marks: [(shareRow: Int64, mark: TrackerSequence)] = []
                // In row order, so that two instances lock the same shares' marks in the same order.
                for (row, entries) in byShare.sorted(by: { $0.key < $1.key }) {
                    let stream = entries.map(\.sequence.stream).max() ?? 0
                    let share = String(row)
                    try connection.execute("INSERT INTO tracker_marks (share, stream, through) VALUES ($1, 0, 0) ON CONFLICT DO NOTHING",
                                           [share], operation: operation)
                    let mark = try connection.execute("SELECT stream, through FROM tracker_marks WHERE share = $1 FOR UPDATE", [share],
                                                      operation: operation)
                    var (markStream, through) = (mark.int64(0, 0), mark.int64(0, 1))
                    if stream < markStream {  // an older stream's messages: the tracker has moved on
                        if let mark = TrackerSequence(stream: markStream, number: max(1, through)), through > 0 { marks.append((row, mark)) }
                        continue
                    }
                    if stream > markStream {
                        try connection.execute("DELETE FROM tracker_handled WHERE share = $1", [share], operation: operation)
                        (markStream, through) = (stream, 0)
                    }
                    let numbers = entries.filter { $0.sequence.stream == stream && $0.sequence.number > through }.map { String($0.sequence.number) }
                    if !numbers.isEmpty {
                        try connection.execute("INSERT INTO tracker_handled (share, stream, seq) SELECT $1, $2, unnest($3::bigint[]) ON CONFLICT DO NOTHING",
                                               [share, String(stream), "{" + numbers.joined(separator: ",") + "}"], operation: operation)
                    }
                    let pending = try connection.execute("SELECT seq FROM tracker_handled WHERE share = $1 AND stream = $2 AND seq > $3 ORDER BY seq LIMIT 10000",
                                                         [share, String(stream), String(through)], operation: operation)
                    let end = contiguousEnd(from: through, over: (0..<pending.count).map { pending.int64($0, 0) })
                    try connection.execute("UPDATE tracker_marks SET stream = $2, through = $3 WHERE share = $1",
                                           [share, String(stream), String(end)], operation: operation)
                    try connection.execute("DELETE FROM tracker_handled WHERE share = $1 AND stream = $2 AND seq <= $3",
                                           [share, String(stream), String(end)], operation: operation)
                    if end > 0, let mark = TrackerSequence(stream: stream, number: end) { marks.append((row, mark)) }
                }
                return marks
            }
        }
    }

    public func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis, event: @Sendable (Answer) -> PendingEvent?) throws(StoreError) -> Answer? {
        let operation = "insert answer"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Answer? in
                let inserted = try connection.execute("""
                    INSERT INTO answers (share, kind, name, at) SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM shares WHERE id = $1 AND ended_at IS NULL)
                    RETURNING id
                    """, [String(row), kind.rawValue, name, String(at)], operation: operation)
                guard inserted.count == 1 else { return nil }
                let id = inserted.int64(0, 0)
                try connection.execute("UPDATE shares SET last_answer_id = $1 WHERE id = $2", [String(id), String(row)], operation: operation)
                let answer = Answer(id: id, kind: kind, name: name, at: at)
                if let pending = event(answer) { try Self.record(pending, shareRow: row, on: connection) }
                return answer
            }
        }
    }

    public func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool {
        let operation = "note viewer"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            // xmax = 0: the row was inserted by this statement, not updated.
            let note = """
                INSERT INTO viewers (share, viewer, first_seen, last_seen) VALUES ($1, $2, $3, $3)
                ON CONFLICT (share, viewer) DO UPDATE SET last_seen = GREATEST(viewers.last_seen, $3) RETURNING (xmax = 0)
                """
            let parameters = [String(row), PostgresText.hex(viewer.bytes), String(at)]
            guard let firstViewEvent else {
                let rows = try connection.execute(note, parameters, operation: operation)
                return rows.count == 1 && rows.bool(0, 0)
            }
            return try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                // The share's row locked first: two first viewers on two instances are counted one after the other.
                try connection.execute("SELECT id FROM shares WHERE id = $1 FOR UPDATE", [String(row)], operation: operation)
                let rows = try connection.execute(note, parameters, operation: operation)
                let isNew = rows.count == 1 && rows.bool(0, 0)
                if isNew, try connection.execute("SELECT count(*) FROM viewers WHERE share = $1", [String(row)], operation: operation).int64(0, 0) == 1 {
                    try Self.record(firstViewEvent, shareRow: row, on: connection)
                }
                return isNew
            }
        }
    }

    public func audience(row: Int64, watchingSince: UnixMillis) throws(StoreError) -> Audience {
        try pool.with(operation: "read audience") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT min(first_seen), count(*), count(*) FILTER (WHERE last_seen >= $2) FROM viewers WHERE share = $1",
                                              [String(row), String(watchingSince)], operation: "read audience")
            return Audience(firstOpenedAt: rows.optionalInt64(0, 0), opened: Int(rows.int64(0, 1)), watching: Int(rows.int64(0, 2)))
        }
    }

    public func answers(row: Int64, after: Int64, limit: Int) throws(StoreError) -> [Answer] {
        try pool.with(operation: "read answers") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT id, kind, name, at FROM answers WHERE share = $1 AND id > $2 ORDER BY id LIMIT $3",
                                              [String(row), String(after), String(max(0, limit))], operation: "read answers")
            return (0..<rows.count).compactMap { index in
                AnswerKind(rawValue: rows.text(index, 1) ?? "").map {
                    Answer(id: rows.int64(index, 0), kind: $0, name: rows.text(index, 2) ?? "", at: rows.int64(index, 3))
                }
            }
        }
    }

    public func holdLease(_ name: String, holder: String, now: UnixMillis, durationMillis: Int64) throws(StoreError) -> Int64? {
        try pool.with(operation: "hold lease") { connection throws(StoreError) in
            let rows = try connection.execute("""
                INSERT INTO leases (name, holder, until) VALUES ($1, $2, $3)
                ON CONFLICT (name) DO UPDATE SET holder = $2, until = $3 WHERE leases.holder = $2 OR leases.until <= $4
                RETURNING value
                """, [name, holder, String(now + durationMillis), String(now)], operation: "hold lease")
            return rows.count == 1 ? rows.int64(0, 0) : nil
        }
    }

    @discardableResult
    public func setLeaseValue(_ name: String, holder: String, value: Int64) throws(StoreError) -> Bool {
        try changedRows("UPDATE leases SET value = $3 WHERE name = $1 AND holder = $2", [name, holder, String(value)],
                        operation: "set lease value") == 1
    }

    public func releaseLease(_ name: String, holder: String) throws(StoreError) {
        try changedRows("UPDATE leases SET until = 0 WHERE name = $1 AND holder = $2", [name, holder], operation: "release lease")
    }

    public func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) {
        listener.withLock { listener in
            guard listener == nil else { return }
            let newestStored = newestStored
            listener = PostgresListener(conninfo: url, instance: instance, listening: { newestStored.listening($0) }) { change in
                if case .fixes(let fixes) = change { newestStored.stored(fixes) }
                handler(change)
            }
        }
    }

    public func stopWatching() {
        let running = listener.withLock { listener in
            defer { listener = nil }
            return listener
        }
        running?.stop()
    }

    deinit { stopWatching() }

    // MARK: After a failed write

    /// The server's own error says why (the connection pool reconnects on its own).
    public func writeProblem() -> String? { nil }
    public func recoverAfterFailedWrite() {}
}

/// A fixed set of connections, each used by one thread at a time. A connection that broke is reconnected when it is
/// next taken; if that fails, the call fails (and the connection is tried again next time).
/// The store's connections, each lent to one call at a time. A call waits for a connection and for the server within
/// one deadline: `callTimeout` (every call on a request path, answered 503 past it), or the longer `longCallTimeout`
/// for the work that is large by nature and off the request paths (migrations, loading every share, a batch of fixes,
/// deleting a share's history).
final class PostgresPool: Sendable {
    private final class Slots: @unchecked Sendable {
        // @unchecked: touched only with `lock` held.
        var idle: [PostgresConnection]
        init(_ idle: [PostgresConnection]) { self.idle = idle }
    }
    private let lock = ConditionLock()
    private let slots: Slots
    let callTimeout: Duration
    static let longCallTimeout: Duration = .seconds(60)

    init(conninfo: String, applicationName: String, size: Int, callTimeout: Duration) throws(StoreError) {
        var connections: [PostgresConnection] = []
        for _ in 0..<size { connections.append(try PostgresConnection(conninfo: conninfo, applicationName: applicationName)) }
        slots = Slots(connections)
        self.callTimeout = callTimeout
    }

    func with<T>(operation: String, long: Bool = false, _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        let deadline = ContinuousClock.now + (long ? Self.longCallTimeout : callTimeout)
        let connection = try lock.withLock { () throws(StoreError) -> PostgresConnection in
            while slots.idle.isEmpty {
                // Every connection is held by a call waiting for the server: this one gives up with them.
                let remaining = deadline - .now
                guard remaining > .zero else {
                    throw StoreError(operation: operation, postgres: "no database connection became free in time")
                }
                lock.wait(timeout: remaining)
            }
            return slots.idle.removeLast()
        }
        defer {
            lock.withLock {
                slots.idle.append(connection)
                lock.signal()
            }
        }
        connection.deadline = deadline
        if connection.isBroken { try connection.reset() }
        return try body(connection)
    }
}
