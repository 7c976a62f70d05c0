public import FlareCore
public import FlareStore
import FlareSystem
import Synchronization
import Foundation

/// Flare's SQLite file, the embedded store: shares, their fixes and owner keys. WAL mode, one connection used under
/// a lock; fixes are written in batches inside one transaction, so a commit costs one fsync per batch, not per fix.
public final class SQLiteShareStore: ShareStore {
    private let database: Mutex<SQLiteDatabase>
    public let path: String
    public let upgradedFromSchema: Int?

    /// The schema, one numbered step at a time: step N (1-based) takes a database at `user_version` N-1 to N.
    /// A database made by an older release is brought up to date at open; steps are only ever appended.
    static let migrations: [String] = [
        // 1: the first release's schema.
        """
        CREATE TABLE IF NOT EXISTS shares (
            id INTEGER PRIMARY KEY,
            share_id TEXT NOT NULL UNIQUE,
            view_token_hash BLOB NOT NULL UNIQUE,
            name TEXT NOT NULL DEFAULT '',
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            ended_at INTEGER,
            end_reason TEXT,
            history_purged INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX IF NOT EXISTS shares_open ON shares(history_purged) WHERE history_purged = 0;
        CREATE TABLE IF NOT EXISTS fixes (
            share INTEGER NOT NULL REFERENCES shares(id),
            tst INTEGER NOT NULL,
            lat REAL NOT NULL,
            lon REAL NOT NULL,
            acc REAL, alt REAL, vel REAL, cog REAL, batt INTEGER, tid TEXT,
            received_at INTEGER NOT NULL,
            PRIMARY KEY (share, tst, lat, lon)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS owner_keys (
            id INTEGER PRIMARY KEY,
            key_hash BLOB NOT NULL UNIQUE,
            label TEXT NOT NULL,
            created_at INTEGER NOT NULL
        );
        """,
        // 2: `GET /api/v1/shares` lists newest first without sorting every share.
        "CREATE INDEX IF NOT EXISTS shares_newest ON shares(created_at DESC, id DESC);",
        // 3: the instances whose MQTT sessions the broker keeps (one client id per flared process).
        "CREATE TABLE IF NOT EXISTS instances (client_id TEXT PRIMARY KEY, process TEXT NOT NULL, last_seen INTEGER NOT NULL);",
        // 4: the tracker state (live, stale, offline) and "locate now" requests, per share; what the phone says of
        // its battery and connectivity, per fix.
        """
        ALTER TABLE shares ADD COLUMN tracker_state TEXT;
        ALTER TABLE shares ADD COLUMN tracker_since INTEGER;
        ALTER TABLE shares ADD COLUMN tracker_reason TEXT;
        ALTER TABLE shares ADD COLUMN tracker_transport TEXT;
        ALTER TABLE shares ADD COLUMN locate_requested_at INTEGER;
        ALTER TABLE shares ADD COLUMN locate_answered_at INTEGER;
        ALTER TABLE shares ADD COLUMN locate_delivered_at INTEGER;
        ALTER TABLE fixes ADD COLUMN bs INTEGER;
        ALTER TABLE fixes ADD COLUMN conn TEXT;
        """,
        // 5: leases, for jobs that one instance at a time does (keeping the broker's retained state), with the value
        // the job records (the last broker epoch the broker acknowledged).
        "CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until INTEGER NOT NULL, value INTEGER NOT NULL DEFAULT 0);",
        // 6: what is stored of confirming trackers' streams: per share, the newest stream and the number through which
        // every message is handled; the handled numbers beyond it (after a gap) until the gap is filled.
        """
        CREATE TABLE IF NOT EXISTS tracker_marks (share INTEGER PRIMARY KEY, stream INTEGER NOT NULL, through INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS tracker_handled (share INTEGER NOT NULL, stream INTEGER NOT NULL, seq INTEGER NOT NULL,
                                                    PRIMARY KEY (share, stream, seq)) WITHOUT ROWID;
        """,
        // 7: a share belongs to the key that created it; keys are admin (every share) or limited. Keys made before
        // this step were all-powerful and stay so (admin); shares made before it belong to the first key.
        """
        ALTER TABLE owner_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE owner_keys ADD COLUMN max_live INTEGER;
        ALTER TABLE owner_keys ADD COLUMN max_duration_s INTEGER;
        ALTER TABLE owner_keys ADD COLUMN creates_per_hour INTEGER;
        ALTER TABLE owner_keys ADD COLUMN last_used_at INTEGER;
        ALTER TABLE owner_keys ADD COLUMN revoked_at INTEGER;
        ALTER TABLE shares ADD COLUMN owner_key INTEGER;
        UPDATE shares SET owner_key = (SELECT min(id) FROM owner_keys);
        CREATE INDEX IF NOT EXISTS shares_owner ON shares(owner_key, created_at DESC, id DESC);
        CREATE TABLE IF NOT EXISTS key_creations (key INTEGER NOT NULL, at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS key_creations_key ON key_creations(key, at);
        """,
        // 8: the family's answers to the person who shared, kept with the share and purged with its history.
        """
        CREATE TABLE IF NOT EXISTS answers (id INTEGER PRIMARY KEY, share INTEGER NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS answers_share ON answers(share, id);
        ALTER TABLE shares ADD COLUMN last_answer_id INTEGER;
        """,
        // 9: who opened the link: a hash of (share, viewer id) per browser, never an address, and when it was last
        // seen (the live streams' heartbeat), purged with the share's history.
        """
        CREATE TABLE IF NOT EXISTS viewers (share INTEGER NOT NULL, viewer BLOB NOT NULL, first_seen INTEGER NOT NULL,
                                            last_seen INTEGER NOT NULL, PRIMARY KEY (share, viewer)) WITHOUT ROWID;
        """,
        // 10: the events outbox (each event once, and per destination when to try it next), when the battery was
        // recorded low, and the keys' webhooks (their secrets sealed, never in clear).
        """
        CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, share INTEGER NOT NULL, type TEXT NOT NULL,
                                           at INTEGER NOT NULL, body BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS event_deliveries (event INTEGER NOT NULL, destination TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                                                     next_at INTEGER NOT NULL, PRIMARY KEY (event, destination)) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS event_deliveries_due ON event_deliveries(next_at);
        CREATE INDEX IF NOT EXISTS events_id ON events(event_id);
        ALTER TABLE shares ADD COLUMN battery_low_at INTEGER;
        ALTER TABLE owner_keys ADD COLUMN webhook_url TEXT;
        ALTER TABLE owner_keys ADD COLUMN webhook_secret BLOB;
        ALTER TABLE owner_keys ADD COLUMN webhook_previous_secret BLOB;
        ALTER TABLE owner_keys ADD COLUMN webhook_rotated_at INTEGER;
        """,
    ]
    static var schemaVersion: Int64 { Int64(migrations.count) }
    static let backstopCheckpointPages = 10_000

    public init(path: String) throws(StoreError) {
        self.path = path
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
    private func changedRows(_ sql: String, busyMillis: Int32? = nil, _ bind: (SQLiteStatement) -> Void) throws(StoreError) -> Int {
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
    private func changedRows(_ sql: String, event: PendingEvent?, shareRow: Int64, _ bind: (SQLiteStatement) -> Void) throws(StoreError) -> Int {
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
    private static func record(_ pending: PendingEvent, shareRow: Int64, in db: SQLiteDatabase) throws(StoreError) {
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

    // MARK: Events

    public func dueEvents(now: UnixMillis, limit: Int) throws(StoreError) -> [OutboxDelivery] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT d.event, d.destination, d.attempts, e.event_id, e.type, s.share_id, e.at, e.body
                FROM (SELECT event, destination, attempts, next_at,
                             row_number() OVER (PARTITION BY destination ORDER BY next_at, event) AS place
                      FROM event_deliveries WHERE next_at <= ?1) d
                JOIN events e ON e.id = d.event JOIN shares s ON s.id = e.share
                WHERE d.place <= ?2 ORDER BY d.next_at, d.event
                """)
            defer { statement.reset() }
            statement.bind(1, now)
            statement.bind(2, Int64(max(0, limit)))
            var due: [OutboxDelivery] = []
            while try statement.step() {
                guard let destination = EventDestination(name: statement.string(1)),
                      let type = ShareEventType(rawValue: statement.string(4)), let share = ShareID(statement.string(5)) else { continue }
                due.append(OutboxDelivery(row: statement.int64(0), destination: destination, attempts: Int(statement.int64(2)),
                                          event: ShareEvent(id: statement.string(3), type: type, shareID: share, at: statement.int64(6), body: statement.blob(7))))
            }
            return due
        }
    }

    public func eventsDelivered(_ deliveries: [(row: Int64, destination: EventDestination)]) throws(StoreError) {
        guard !deliveries.isEmpty else { return }
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                let delete = try db.statement("DELETE FROM event_deliveries WHERE event = ?1 AND destination = ?2")
                defer { delete.reset() }
                let event = try db.statement("DELETE FROM events WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM event_deliveries WHERE event = ?1)")
                defer { event.reset() }
                for delivery in deliveries {
                    delete.reset()
                    delete.bind(1, delivery.row)
                    delete.bind(2, delivery.destination.name)
                    try delete.run()
                }
                for row in Set(deliveries.map(\.row)) {
                    event.reset()
                    event.bind(1, row)
                    try event.run()
                }
            }
        }
    }

    public func eventDelivered(id: String, destination: EventDestination) throws(StoreError) {
        let row: Int64? = try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT id FROM events WHERE event_id = ?1")
            defer { statement.reset() }
            statement.bind(1, id)
            return try statement.step() ? statement.int64(0) : nil
        }
        if let row { try eventsDelivered([(row, destination)]) }
    }

    public func eventFailed(row: Int64, destination: EventDestination, attempts: Int, retryAt: UnixMillis?) throws(StoreError) {
        guard let retryAt else { return try eventsDelivered([(row, destination)]) }
        _ = try changedRows("UPDATE event_deliveries SET attempts = ?1, next_at = ?2 WHERE event = ?3 AND destination = ?4") { statement in
            statement.bind(1, Int64(attempts))
            statement.bind(2, retryAt)
            statement.bind(3, row)
            statement.bind(4, destination.name)
        }
    }

    public func outboxBacklog() throws(StoreError) -> [OutboxBacklog] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT d.destination, count(*), min(e.at) FROM event_deliveries d JOIN events e ON e.id = d.event GROUP BY d.destination
                """)
            defer { statement.reset() }
            var backlog: [OutboxBacklog] = []
            while try statement.step() {
                guard let destination = EventDestination(name: statement.string(0)) else { continue }
                backlog.append(OutboxBacklog(destination: destination, waiting: Int(statement.int64(1)), oldestAt: statement.int64(2)))
            }
            return backlog
        }
    }

    public func setKeyWebhook(id: Int64, url: String?, sealedSecret: [UInt8]?, at: UnixMillis) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
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

    // MARK: Several instances

    public func registerInstance(_ clientID: String, process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            INSERT INTO instances (client_id, process, last_seen) VALUES (?1, ?2, ?3)
            ON CONFLICT (client_id) DO UPDATE SET process = ?2, last_seen = ?3 WHERE instances.process = ?2 OR instances.last_seen < ?4
            """) { statement in
            statement.bind(1, clientID)
            statement.bind(2, process)
            statement.bind(3, now)
            statement.bind(4, now - staleAfter)
        } == 1
    }

    public func instanceProcess(_ clientID: String) throws(StoreError) -> String? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT process FROM instances WHERE client_id = ?")
            defer { statement.reset() }
            statement.bind(1, clientID)
            return try statement.step() ? statement.string(0) : nil
        }
    }

    @discardableResult
    public func heartbeat(_ clientID: String, process: String, now: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE instances SET last_seen = ?1 WHERE client_id = ?2 AND process = ?3") { statement in
            statement.bind(1, now)
            statement.bind(2, clientID)
            statement.bind(3, process)
        } == 1
    }

    public func claimStaleInstance(process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> String? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                UPDATE instances SET process = ?1, last_seen = ?2
                WHERE client_id = (SELECT client_id FROM instances WHERE last_seen < ?3 AND process <> ?1 ORDER BY last_seen LIMIT 1)
                RETURNING client_id
                """)
            defer { statement.reset() }
            statement.bind(1, process)
            statement.bind(2, now)
            statement.bind(3, now - staleAfter)
            guard try statement.step() else { return nil }
            return statement.string(0)
        }
    }

    public func removeInstance(_ clientID: String, process: String) throws(StoreError) {
        _ = try changedRows("DELETE FROM instances WHERE client_id = ?1 AND process = ?2") { statement in
            statement.bind(1, clientID)
            statement.bind(2, process)
        }
    }

    public func recordHandledSequences(_ handled: [(shareRow: Int64, sequence: TrackerSequence)]) throws(StoreError) -> [(shareRow: Int64, mark: TrackerSequence)] {
        guard !handled.isEmpty else { return [] }
        let byShare = Dictionary(grouping: handled, by: \.shareRow)
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                var marks: [(shareRow: Int64, mark: TrackerSequence)] = []
                for (row, entries) in byShare {
                    let stream = entries.map(\.sequence.stream).max() ?? 0
                    let read = try db.statement("SELECT stream, through FROM tracker_marks WHERE share = ?")
                    defer { read.reset() }
                    read.bind(1, row)
                    var (markStream, through): (Int64, Int64) = try read.step() ? (read.int64(0), read.int64(1)) : (0, 0)
                    read.reset()
                    if stream < markStream {  // an older stream's messages: the tracker has moved on
                        if let mark = TrackerSequence(stream: markStream, number: max(1, through)), through > 0 { marks.append((row, mark)) }
                        continue
                    }
                    if stream > markStream {
                        let forget = try db.statement("DELETE FROM tracker_handled WHERE share = ?")
                        defer { forget.reset() }
                        forget.bind(1, row)
                        try forget.run()
                        (markStream, through) = (stream, 0)
                    }
                    let insert = try db.statement("INSERT OR IGNORE INTO tracker_handled (share, stream, seq) VALUES (?1, ?2, ?3)")
                    defer { insert.reset() }
                    for entry in entries where entry.sequence.stream == stream && entry.sequence.number > through {
                        insert.bind(1, row)
                        insert.bind(2, stream)
                        insert.bind(3, entry.sequence.number)
                        try insert.run()
                        insert.reset()
                    }
                    let pending = try db.statement("SELECT seq FROM tracker_handled WHERE share = ?1 AND stream = ?2 AND seq > ?3 ORDER BY seq LIMIT 10000")
                    defer { pending.reset() }
                    pending.bind(1, row)
                    pending.bind(2, stream)
                    pending.bind(3, through)
                    var numbers: [Int64] = []
                    while try pending.step() { numbers.append(pending.int64(0)) }
                    pending.reset()
                    let end = contiguousEnd(from: through, over: numbers)
                    let write = try db.statement("INSERT INTO tracker_marks (share, stream, through) VALUES (?1, ?2, ?3) ON CONFLICT (share) DO UPDATE SET stream = ?2, through = ?3")
                    defer { write.reset() }
                    write.bind(1, row)
                    write.bind(2, stream)
                    write.bind(3, end)
                    try write.run()
                    let prune = try db.statement("DELETE FROM tracker_handled WHERE share = ?1 AND stream = ?2 AND seq <= ?3")
                    defer { prune.reset() }
                    prune.bind(1, row)
                    prune.bind(2, stream)
                    prune.bind(3, end)
                    try prune.run()
                    if end > 0, let mark = TrackerSequence(stream: stream, number: end) { marks.append((row, mark)) }
                }
                return marks
            }
        }
    }

    public func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis, event: @Sendable (Answer) -> PendingEvent?) throws(StoreError) -> Answer? {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Answer? in
                let insert = try db.statement("""
                    INSERT INTO answers (share, kind, name, at) SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM shares WHERE id = ?1 AND ended_at IS NULL)
                    """)
                defer { insert.reset() }
                insert.bind(1, row)
                insert.bind(2, kind.rawValue)
                insert.bind(3, name)
                insert.bind(4, at)
                try insert.run()
                guard db.changes == 1 else { return nil }
                let id = db.lastInsertRowID
                let mark = try db.statement("UPDATE shares SET last_answer_id = ?1 WHERE id = ?2")
                defer { mark.reset() }
                mark.bind(1, id)
                mark.bind(2, row)
                try mark.run()
                let answer = Answer(id: id, kind: kind, name: name, at: at)
                if let pending = event(answer) { try Self.record(pending, shareRow: row, in: db) }
                return answer
            }
        }
    }

    public func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            guard let firstViewEvent else { return try Self.noteViewer(row: row, viewer: viewer, at: at, in: db) }
            return try db.transaction { () throws(StoreError) -> Bool in
                let isNew = try Self.noteViewer(row: row, viewer: viewer, at: at, in: db)
                if isNew {
                    let count = try db.statement("SELECT count(*) FROM viewers WHERE share = ?1")
                    defer { count.reset() }
                    count.bind(1, row)
                    if try count.step(), count.int64(0) == 1 { try Self.record(firstViewEvent, shareRow: row, in: db) }
                }
                return isNew
            }
        }
    }

    private static func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis, in db: SQLiteDatabase) throws(StoreError) -> Bool {
        let insert = try db.statement("INSERT INTO viewers (share, viewer, first_seen, last_seen) VALUES (?1, ?2, ?3, ?3) ON CONFLICT DO UPDATE SET last_seen = max(last_seen, ?3)")
        defer { insert.reset() }
        insert.bind(1, row)
        insert.bind(2, viewer.bytes)
        insert.bind(3, at)
        try insert.run()
        let first = try db.statement("SELECT first_seen FROM viewers WHERE share = ?1 AND viewer = ?2")
        defer { first.reset() }
        first.bind(1, row)
        first.bind(2, viewer.bytes)
        return try first.step() && first.int64(0) == at
    }

    public func audience(row: Int64, watchingSince: UnixMillis) throws(StoreError) -> Audience {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT min(first_seen), count(*), count(CASE WHEN last_seen >= ?2 THEN 1 END) FROM viewers WHERE share = ?1")
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, watchingSince)
            _ = try statement.step()
            return Audience(firstOpenedAt: statement.optionalInt64(0), opened: Int(statement.int64(1)), watching: Int(statement.int64(2)))
        }
    }

    public func answers(row: Int64, after: Int64, limit: Int) throws(StoreError) -> [Answer] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT id, kind, name, at FROM answers WHERE share = ?1 AND id > ?2 ORDER BY id LIMIT ?3")
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, after)
            statement.bind(3, Int64(max(0, limit)))
            var found: [Answer] = []
            while try statement.step() {
                guard let kind = AnswerKind(rawValue: statement.string(1)) else { continue }
                found.append(Answer(id: statement.int64(0), kind: kind, name: statement.string(2), at: statement.int64(3)))
            }
            return found
        }
    }

    /// Lease calls wait at most this long for another connection's lock: the holder renews every second, and a renewal
    /// stuck behind a locked file would hold this store's connection (and every caller behind it) for seconds.
    static let leaseBusyMillis: Int32 = 200

    public func holdLease(_ name: String, holder: String, now: UnixMillis, durationMillis: Int64) throws(StoreError) -> Int64? {
        try database.withLock { db throws(StoreError) in try db.withBusyTimeout(milliseconds: Self.leaseBusyMillis) { () throws(StoreError) -> Int64? in
            let statement = try db.statement("""
                INSERT INTO leases (name, holder, until) VALUES (?1, ?2, ?3)
                ON CONFLICT (name) DO UPDATE SET holder = ?2, until = ?3 WHERE leases.holder = ?2 OR leases.until <= ?4
                RETURNING value
                """)
            defer { statement.reset() }
            statement.bind(1, name)
            statement.bind(2, holder)
            statement.bind(3, now + durationMillis)
            statement.bind(4, now)
            guard try statement.step() else { return nil }
            return statement.int64(0)
        } }
    }

    @discardableResult
    public func setLeaseValue(_ name: String, holder: String, value: Int64) throws(StoreError) -> Bool {
        try changedRows("UPDATE leases SET value = ?3 WHERE name = ?1 AND holder = ?2", busyMillis: Self.leaseBusyMillis) { statement in
            statement.bind(1, name)
            statement.bind(2, holder)
            statement.bind(3, value)
        } == 1
    }

    public func releaseLease(_ name: String, holder: String) throws(StoreError) {
        _ = try changedRows("UPDATE leases SET until = 0 WHERE name = ?1 AND holder = ?2", busyMillis: Self.leaseBusyMillis) { statement in
            statement.bind(1, name)
            statement.bind(2, holder)
        }
    }

    /// One SQLite file serves one instance: nobody else changes it behind our back, and that instance has every
    /// active share's expiry scheduled.
    public var isShared: Bool { false }
    public func expiredActiveShares(now: UnixMillis, limit: Int) throws(StoreError) -> [StoredShare] { [] }

    public func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) {}
    public func stopWatching() {}

    /// After a failed write (a full or read-only disk): checkpoints on the writer's own connection, truncates the
    /// WAL, and from then on lets SQLite checkpoint at its default 1,000 pages. With the 10,000-page backstop,
    /// a disk with less room than that filled up with WAL as soon as space returned, and a checkpoint, which
    /// needs a little room in the database file, could then never run again (`make chaos`, disk full). Errors
    /// are ignored: the retried write reports the state.
    public func recoverAfterFailedWrite() {
        database.withLock { db in
            try? db.execute("PRAGMA wal_autocheckpoint=1000")
            try? db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    /// Why the store's directory cannot be written, as the OS says it (e.g. "Read-only file system"), found by
    /// writing a small file next to the database; nil if that works. SQLite reports such failures only as
    /// "disk I/O error".
    public func writeProblem() -> String? {
        let probe = path + ".write-probe"
        let descriptor = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { return String(cString: strerror(errno)) }
        defer {
            close(descriptor)
            unlink(probe)
        }
        let written = write(descriptor, "probe", 5)
        guard written == 5 else { return written < 0 ? String(cString: strerror(errno)) : "short write" }
        return fsync(descriptor) == 0 ? nil : String(cString: strerror(errno))
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

    /// Brings the file to today's schema; returns the version it had (0: a new file).
    private static func migrate(_ db: SQLiteDatabase) throws(StoreError) -> Int {
        let versionStatement = try db.statement("PRAGMA user_version")
        _ = try versionStatement.step()
        let version = versionStatement.int64(0)
        versionStatement.reset()
        guard version <= schemaVersion else {
            // A newer release wrote this file: its data may mean things this binary does not know. Refuse, rather
            // than write into it.
            throw StoreError(operation: "open", code: 0, message: "the database has schema version \(version), newer than the \(schemaVersion) this flared knows; run the release that made it, or a newer one")
        }
        for step in Int(version)..<migrations.count {
            try db.transaction { () throws(StoreError) in
                try db.execute(migrations[step])
                try db.execute("PRAGMA user_version = \(step + 1)")
            }
        }
        return Int(version)
    }

    // MARK: Shares

    @discardableResult
    public func insertShare(_ share: Share, event: PendingEvent?) throws(StoreError) -> Int64 {
        try database.withLock { db throws(StoreError) in
            guard let event else { return try Self.insert(share, into: db) }
            return try db.transaction { () throws(StoreError) -> Int64 in
                let row = try Self.insert(share, into: db)
                try Self.record(event, shareRow: row, in: db)
                return row
            }
        }
    }

    private static func insert(_ share: Share, into db: SQLiteDatabase) throws(StoreError) -> Int64 {
        let statement = try db.statement("""
            INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at, owner_key) VALUES (?, ?, ?, ?, ?, ?)
            """)
        defer { statement.reset() }
        statement.bind(1, share.id.rawValue)
        statement.bind(2, share.viewTokenHash.bytes)
        statement.bind(3, share.name)
        statement.bind(4, share.createdAt)
        statement.bind(5, share.expiresAt)
        statement.bind(6, share.ownerKeyID)
        try statement.run()
        return db.lastInsertRowID
    }

    public func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis, event: PendingEvent?) throws(StoreError) -> Result<Int64, QuotaRefusal> {
        guard let key = share.ownerKeyID else { return .success(try insertShare(share, event: event)) }
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Result<Int64, QuotaRefusal> in
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
    }

    public func updateExpiry(row: Int64, expiresAt: UnixMillis, event: PendingEvent?) throws(StoreError) {
        try changedRows("UPDATE shares SET expires_at = ? WHERE id = ? AND ended_at IS NULL", event: event, shareRow: row) { statement in
            statement.bind(1, expiresAt)
            statement.bind(2, row)
        }
    }

    @discardableResult
    public func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("UPDATE shares SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL", event: event, shareRow: row) { statement in
            statement.bind(1, endedAt)
            statement.bind(2, reason.rawValue)
            statement.bind(3, row)
        } == 1
    }

    /// Deletes an ended share's positions and its name; the row keeps only that it existed and when.
    @discardableResult
    public func purgeHistory(row: Int64) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                for table in ["fixes", "tracker_marks", "tracker_handled", "answers", "viewers"] {
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
        last_answer_id, battery_low_at
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
            batteryLowAt: statement.optionalInt64(17))
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

    // MARK: Trackers and commands

    public func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition, event: PendingEvent?) throws(StoreError) -> Bool {
        // The fixes looked at for `noFixReceivedAfter` are bounded by `tst` as well, so that the primary key's range
        // is read, not every fix of a long share: a fix stamped an hour before it arrived does not count.
        try changedRows("""
            UPDATE shares SET tracker_state = ?1, tracker_since = ?2, tracker_reason = ?3, tracker_transport = COALESCE(?4, tracker_transport)
            WHERE id = ?5 AND ended_at IS NULL
              AND (tracker_state IS NOT ?1 OR tracker_transport IS NOT COALESCE(?4, tracker_transport))
              AND (?6 IS NULL OR tracker_state IS NULL OR tracker_state = ?6)
              AND (?7 IS NULL OR NOT EXISTS (SELECT 1 FROM fixes WHERE share = ?5 AND tst >= ?7 / 1000 - 3600 AND received_at > ?7))
            """, event: event, shareRow: row) { statement in
            statement.bind(1, record.state.rawValue)
            statement.bind(2, record.since)
            statement.bind(3, record.reason)
            statement.bind(4, record.transport?.rawValue)
            statement.bind(5, row)
            statement.bind(6, condition.from?.rawValue)
            statement.bind(7, condition.noFixReceivedAfter)
        } == 1
    }

    public func recordBatteryLow(row: Int64, lowSince: UnixMillis?, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET battery_low_at = ?1 WHERE id = ?2 AND ended_at IS NULL AND (battery_low_at IS NULL) <> (?1 IS NULL)
            """, event: event, shareRow: row) { statement in
            statement.bind(1, lowSince)
            statement.bind(2, row)
        } == 1
    }

    public func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_requested_at = ?1
            WHERE id = ?2 AND ended_at IS NULL AND (locate_requested_at IS NULL OR locate_requested_at <= ?3)
            """, event: event, shareRow: row) { statement in
            statement.bind(1, now)
            statement.bind(2, row)
            statement.bind(3, now - minimumIntervalMillis)
        } == 1
    }

    public func recordLocateAnswer(row: Int64, at: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_answered_at = ?1
            WHERE id = ?2 AND locate_requested_at IS NOT NULL AND (locate_answered_at IS NULL OR locate_answered_at < locate_requested_at)
            """) { statement in
            statement.bind(1, at)
            statement.bind(2, row)
        } == 1
    }

    public func takeLocateCommand(row: Int64, now: UnixMillis, validForMillis: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_delivered_at = ?1
            WHERE id = ?2 AND ended_at IS NULL AND locate_requested_at > ?3
              AND (locate_delivered_at IS NULL OR locate_delivered_at < locate_requested_at)
            """) { statement in
            statement.bind(1, now)
            statement.bind(2, row)
            statement.bind(3, now - validForMillis)
        } == 1
    }

    // MARK: Fixes

    /// Writes a batch in one transaction. Returns, per fix, whether it was new (false: already stored, e.g. a
    /// QoS 1 redelivery or a retained message seen again).
    public func insertFixes(_ fixes: [PendingFix]) throws(StoreError) -> [Bool] {
        guard !fixes.isEmpty else { return [] }
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                let statement = try db.statement("""
                    INSERT OR IGNORE INTO fixes (share, tst, lat, lon, acc, alt, vel, cog, batt, tid, received_at, bs, conn)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """)
                defer { statement.reset() }
                var inserted: [Bool] = []
                inserted.reserveCapacity(fixes.count)
                for pending in fixes {
                    let fix = pending.fix
                    statement.resetKeepingBindings()
                    statement.bind(1, pending.shareRow)
                    statement.bind(2, fix.timestamp)
                    statement.bind(3, fix.latitude)
                    statement.bind(4, fix.longitude)
                    statement.bind(5, fix.accuracy)
                    statement.bind(6, fix.altitude)
                    statement.bind(7, fix.velocity)
                    statement.bind(8, fix.course)
                    statement.bind(9, fix.battery.map(Int64.init))
                    statement.bind(10, fix.trackerID)
                    statement.bind(11, pending.receivedAt)
                    statement.bind(12, fix.batteryStatus.map(Int64.init))
                    statement.bind(13, fix.connection)
                    try statement.run()
                    inserted.append(db.changes > 0)
                }
                return inserted
            }
        }
    }

    /// The newest `limit` fixes of a share, oldest first.
    public func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn FROM fixes WHERE share = ? ORDER BY tst DESC LIMIT ?
                """)
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, Int64(limit))
            var fixes: [Fix] = []
            while try statement.step() {
                fixes.append(Fix(
                    latitude: statement.double(1), longitude: statement.double(2), timestamp: statement.int64(0),
                    accuracy: statement.optionalDouble(3), altitude: statement.optionalDouble(4),
                    velocity: statement.optionalDouble(5), course: statement.optionalDouble(6),
                    battery: statement.optionalInt64(7).map { Int($0) }, batteryStatus: statement.optionalInt64(9).map { Int($0) },
                    connection: statement.optionalString(10), trackerID: statement.optionalString(8)))
            }
            return fixes.reversed()
        }
    }

    public func fixCount(row: Int64) throws(StoreError) -> Int {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT count(*) FROM fixes WHERE share = ?")
            defer { statement.reset() }
            statement.bind(1, row)
            _ = try statement.step()
            return Int(statement.int64(0))
        }
    }

    // MARK: Owner keys

    @discardableResult
    public func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis, admin: Bool, limits: KeyLimits) throws(StoreError) -> Int64 {
        try database.withLock { db throws(StoreError) in
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
        try changedRows("UPDATE owner_keys SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL") { statement in
            statement.bind(1, at)
            statement.bind(2, id)
        } == 1
    }

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

}
