import FlareCore
public import FlareStore
import FlareSystem
import Synchronization
import Foundation

/// Flare's SQLite file, the embedded store: shares, their fixes and owner keys. WAL mode, one connection used under
/// a lock; fixes are written in batches inside one transaction, so a commit costs one fsync per batch, not per fix.
///
/// This file holds the type, its opening and the helpers every concern uses; each concern's SQL is in
/// `SQLiteShareStore+<Concern>.swift` (the conformance to that concern's protocol), the schema in `SQLiteSchema.swift`.
public final class SQLiteShareStore: ShareStore, Sendable {
    let database: Mutex<SQLiteDatabase>
    public let path: String
    public let upgradedFromSchema: Int?
    /// Share creations that wait for the lock together, committed together.
    let creations = GroupCommit<Result<Int64, QuotaRefusal>>()
    /// Touched after every change of an owner key, by whichever process made it (`ownerKeysMark`).
    let ownerKeysChanged: ChangeMarkerFile

    static let backstopCheckpointPages = 10_000

    public init(path: String) throws(StoreError) {
        self.path = path
        ownerKeysChanged = ChangeMarkerFile(path: path + "-keys-changed")
        let db = try SQLiteDatabase(path: path)
        try db.execute("PRAGMA journal_mode=WAL")
        // NORMAL in WAL mode: a commit survives a crash of the process; only a power loss can roll back the
        // last transactions. That is the durability the bridge needs at tens of thousands of fixes/s.
        try db.execute("PRAGMA synchronous=NORMAL")
        // Foreign keys off: shares are never deleted (only their history is) and a fix's share row comes from
        // this store, so the check could never fail, and it was a sixth of the cost of storing a fix.
        try db.execute("PRAGMA foreign_keys=OFF")
        // Fixes of many shares interleave, so each batch touches pages all over the fixes table: keep them in
        // memory (64 MiB) instead of re-reading them for every batch (SQLite's default is 2 MiB).
        try db.execute("PRAGMA cache_size=-65536")
        let found = try Self.migrate(db)
        upgradedFromSchema = found > 0 && found < Int(Self.schemaVersion) ? found : nil
        // Checkpoints (copying the WAL into the database file, with its fsyncs) run on a connection of their own,
        // four times a second: each page is copied once however many commits rewrote it meanwhile. SQLite's own
        // checkpoint, run by the commit that crosses its threshold, stays on as a backstop at 10,000 pages, not
        // 1,000: a batch over 1,000 shares dirties ~1,000 pages, so at the default nearly every commit
        // checkpointed on the writer's thread, a third of the cost of storing a fix. After a failed write the
        // store goes back to 1,000 (`recoverAfterFailedWrite`).
        try db.execute("PRAGMA wal_autocheckpoint=\(Self.backstopCheckpointPages)")
        database = Mutex(db)
        let checkpointer = try SQLiteDatabase(path: path)
        Self.startCheckpointing(checkpointer, for: self)
    }

    /// Runs one writing statement; returns how many rows it changed (the conditional updates say by this whether
    /// this call, of all instances', made the change). `busyMillis`: a shorter wait for another connection's lock than
    /// the usual `SQLiteDatabase.busyMillis` (see `leaseBusyMillis`).
    @discardableResult
    func changedRows(_ sql: String, busyMillis: Int32? = nil, _ bind: (SQLiteStatement) -> Void) throws(StoreError) -> Int {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement(sql)
            defer { statement.reset() }
            bind(statement)
            if let busyMillis {
                try db.withBusyTimeout(milliseconds: busyMillis) { () throws(StoreError) in try statement.run() }
            } else {
                try statement.run()
            }
            return db.changes
        }
    }

    /// Runs one writing statement and, if it changed a row and there is an event, records the event in the same
    /// transaction; returns how many rows it changed.
    @discardableResult
    func changedRows(_ sql: String, event: PendingEvent?, shareRow: Int64, _ bind: (SQLiteStatement) -> Void) throws(StoreError) -> Int {
        guard let event else { return try changedRows(sql, bind) }
        return try database.withLock { db throws(StoreError) in
            let statement = try db.statement(sql)
            defer { statement.reset() }
            bind(statement)
            return try db.transaction { () throws(StoreError) -> Int in
                try statement.run()
                let changed = db.changes
                if changed == 1 { try Self.record(event, shareRow: shareRow, in: db) }
                return changed
            }
        }
    }

    /// Puts an event in the outbox, for its destinations and the owning key's webhook, inside the caller's transaction.
    static func record(_ pending: PendingEvent, shareRow: Int64, in db: SQLiteDatabase) throws(StoreError) {
        let event = pending.event
        let insert = try db.statement("INSERT INTO events (event_id, share, type, at, body) VALUES (?1, ?2, ?3, ?4, ?5)")
        defer { insert.reset() }
        insert.bind(1, event.id)
        insert.bind(2, shareRow)
        insert.bind(3, event.type.rawValue)
        insert.bind(4, event.at)
        insert.bind(5, event.body)
        try insert.run()
        let row = db.lastInsertRowID
        // Every destination in one statement (the named ones, and the owning key's webhook if it has one).
        let deliver = try db.statement("""
            INSERT OR IGNORE INTO event_deliveries (event, destination, next_at)
            SELECT ?1, value, ?2 FROM json_each(?3)
            UNION ALL
            SELECT ?1, 'key:' || k.id, ?2 FROM shares s JOIN owner_keys k ON k.id = s.owner_key
            WHERE s.id = ?4 AND k.webhook_url IS NOT NULL AND k.revoked_at IS NULL
            """)
        defer { deliver.reset() }
        deliver.bind(1, row)
        deliver.bind(2, event.at)
        deliver.bind(3, "[" + pending.destinations.map { "\"\($0.name)\"" }.joined(separator: ",") + "]")
        deliver.bind(4, shareRow)
        try deliver.run()
    }

    /// Every 250 ms, a PASSIVE checkpoint: it never waits for the writer, and the writer never waits for it.
    /// Stops when the store is gone.
    private static func startCheckpointing(_ connection: SQLiteDatabase, for store: SQLiteShareStore) {
        final class Connection: @unchecked Sendable {
            // @unchecked: used only by the checkpoint thread after this hand-over.
            let database: SQLiteDatabase
            init(_ database: SQLiteDatabase) { self.database = database }
        }
        let handOver = Connection(connection)
        NamedThread.start(name: "flare-checkpt") { [weak store] in
            while store != nil {
                usleep(250_000)
                guard store != nil else { break }
                try? handOver.database.execute("PRAGMA wal_checkpoint(PASSIVE)")
            }
        }
    }
}
