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

    /// The WAL's length, in 4-KiB frames (about 41 MB), past which the checkpoint thread makes the next commit write
    /// it from its start again (`RESTART`). The file can grow past it by what a quarter of a second of writes adds:
    /// 106-123 MB in all under creations that never pause (`make bench`'s `wal_file_mb`).
    static let restartCheckpointFrames: Int64 = 10_000
    /// How long a `RESTART` waits for another process's reader before it gives up until its next turn: this
    /// process's commits wait for it meanwhile.
    static let restartBusyMillis: Int32 = 20
    /// PASSIVE passes at most before a RESTART (`checkpointStep`).
    static let passesBeforeRestart = 3

    /// `checkpointEvery`: how often the checkpoint thread runs `checkpointStep`; nil runs no thread (tests that
    /// checkpoint by hand).
    public init(path: String, checkpointEvery: Duration? = .milliseconds(250)) throws(StoreError) {
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
        // four times a second: each page is copied once however many commits rewrote it meanwhile. The writer's
        // connection never checkpoints: SQLite's own checkpoint runs in the commit that crosses its threshold, under
        // the store's lock and through two fsyncs, and every request behind that commit waited for it. At the
        // default 1,000 pages that was a third of the cost of storing a fix; as a backstop at 10,000 pages it was
        // the p99 of a burst of creations (20-30 ms for 5,000, against 4-11 ms without it). The checkpoint thread
        // bounds the WAL instead (`restartCheckpointFrames`). After a failed write the writer checkpoints again
        // at 1,000 pages (`recoverAfterFailedWrite`).
        try db.execute("PRAGMA wal_autocheckpoint=0")
        database = Mutex(db)
        if let checkpointEvery {
            Self.startCheckpointing(try SQLiteDatabase(path: path), every: checkpointEvery, for: self)
        }
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

    /// A checkpoint step (`checkpointStep`) every `interval`. Stops when the store is gone.
    private static func startCheckpointing(_ connection: SQLiteDatabase, every interval: Duration, for store: SQLiteShareStore) {
        let pause = useconds_t(interval / .microseconds(1))
        final class Connection: @unchecked Sendable {
            // @unchecked: used only by the checkpoint thread after this hand-over.
            let database: SQLiteDatabase
            init(_ database: SQLiteDatabase) { self.database = database }
        }
        let handOver = Connection(connection)
        NamedThread.start(name: "flare-checkpt") { [weak store] in
            while true {
                usleep(pause)
                guard let store else { break }
                store.checkpointStep(handOver.database)
            }
        }
    }

    /// A PASSIVE checkpoint on `connection`, which never waits for the writer nor makes it wait. If the WAL has then
    /// grown past `restartFrames` (commits without a pause long enough for the checkpoint to catch up, so none could
    /// start it over), more PASSIVE passes, then a RESTART under the store's lock: it copies the little the passes
    /// could not, syncs, and makes the next commit write the WAL from its start. Taken under the lock, it never waits
    /// for this process's commits (SQLite's own wait for the writer's lock sleeps in steps of milliseconds, and a
    /// steady stream of commits never let it in); another process's reader holds it back at most
    /// `restartBusyMillis`. Errors are left to the next step: a checkpoint that cannot run now changes nothing a
    /// write depends on.
    func checkpointStep(_ connection: SQLiteDatabase, restartFrames: Int64 = restartCheckpointFrames) {
        guard let walFrames = try? connection.checkpoint(.passive), walFrames >= restartFrames else { return }
        // Each pass copies what commits wrote during the one before, so the RESTART finds little left to copy while
        // it holds the lock: under creations without a pause it held it 7-9 ms (up to 13) after one pass, 2-3 ms (up
        // to 5) after these. A pass that took under 3 ms found little already.
        for _ in 0..<Self.passesBeforeRestart {
            let started = ContinuousClock.now
            guard (try? connection.checkpoint(.passive)) != nil, ContinuousClock.now - started >= .milliseconds(3) else { break }
        }
        database.withLock { _ in
            _ = try? connection.withBusyTimeout(milliseconds: Self.restartBusyMillis) { () throws(StoreError) in
                try connection.checkpoint(.restart)
            }
        }
    }
}
