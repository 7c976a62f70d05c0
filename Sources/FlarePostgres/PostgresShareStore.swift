import FlareCore
public import FlareStore
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
///
/// This file holds the type, its opening and the helpers every concern uses; each concern's SQL is in
/// `PostgresShareStore+<Concern>.swift` (the conformance to that concern's protocol), the schema in
/// `PostgresSchema.swift`, the connections in `PostgresPool.swift`.
public final class PostgresShareStore: ShareStore, Sendable {
    let pool: PostgresPool
    let url: String
    let instance: String
    let listener = Mutex<PostgresListener?>(nil)
    /// Which fixes of a batch are certainly new, so that they can skip `ON CONFLICT` (see `insertFixes`).
    let newestStored = NewestStoredFixes()
    /// Fixes stored by the plain COPY, and batches that had to be stored again the other way: for tests.
    let writerCounts = Mutex((copied: 0, retried: 0))
    var fixesCopied: Int { writerCounts.withLock { $0.copied } }
    var batchesRetried: Int { writerCounts.withLock { $0.retried } }
    func newestStoredFrontier(of row: Int64) -> NewestStoredFixes.Frontier? { newestStored.frontier(of: row) }
    /// For logs: the server and database, never the password.
    public let description: String
    public let upgradedFromSchema: Int?

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

    /// The database server's clock in Unix milliseconds, as SQL: what every instance agrees on for leases and
    /// check-in deadlines, whatever each machine's own clock says (`clock_timestamp()`: the time of the statement, not
    /// of the transaction's start).
    static let databaseNowMillis = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

    /// Runs one writing statement; returns how many rows it changed (the conditional updates say by this whether
    /// this call, of all instances', made the change).
    @discardableResult
    func changedRows(_ sql: String, _ parameters: [String?], operation: String) throws(StoreError) -> Int {
        try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.execute(sql, parameters, operation: operation).affected
        }
    }

    /// Runs one writing statement and, if it changed a row and there is an event, records the event in the same
    /// transaction; returns how many rows it changed.
    @discardableResult
    func changedRows(_ sql: String, _ parameters: [String?], operation: String, event: PendingEvent?, shareRow: Int64) throws(StoreError) -> Int {
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
    static func record(_ pending: PendingEvent, shareRow: Int64, on connection: PostgresConnection) throws(StoreError) {
        let statement = withOutbox("SELECT id, owner_key FROM shares WHERE id = $1", [String(shareRow)], pending)
        try connection.execute(statement.sql, statement.parameters, operation: "record event")
    }

    /// One statement: `share` (a CTE giving the share's `id` and `owner_key`, from `shareParameters`), then the event
    /// and its deliveries (the named destinations, and the owning key's webhook if it has one and is not named among
    /// them); it answers the share's id. `UNION ALL` with that condition, not `UNION`: setting up the deduplicating
    /// aggregate for every creation was a tenth of the server's time for the statement.
    static func withOutbox(_ share: String, _ shareParameters: [String?], _ pending: PendingEvent) -> (sql: String, parameters: [String?]) {
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

    deinit { stopWatching() }
}
