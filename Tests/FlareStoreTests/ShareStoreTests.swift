import FlareCore
@testable import FlarePostgres
@testable import FlareSQLite
import FlareStore
import FlareStoreOpener
import FlareTestSupport
import Foundation
import Synchronization
import Testing
import FlareSystem
import FlareCodec

/// The engines every store test runs against.
enum Engine: String, CaseIterable, CustomTestStringConvertible {
    case sqlite, postgresql
    var testDescription: String { rawValue }
}

/// What every store promises (`FlareStore.ShareStore`), tested against each engine: a real SQLite file in a temp
/// directory, and a real PostgreSQL server the tests start themselves (`TestPostgres`), a database per test.
@Suite struct ShareStoreTests {
    let directory: URL
    let path: String

    init() throws {
        directory = try TempDirectory.make(prefix: "flare-store")
        path = directory.appendingPathComponent("flare.db").path
    }

    /// Where `engine`'s store keeps this test's data; opening it twice opens the same data.
    func location(_ engine: Engine) throws -> StoreLocation {
        switch engine {
        case .sqlite: return .sqlite(path: path)
        case .postgresql: return .postgresql(url: try Self.databaseURL(for: path))
        }
    }

    /// One PostgreSQL database per test (keyed by the test's temp path, so a reopen finds the same one).
    private static let databases = Mutex<[String: String]>([:])
    static func databaseURL(for key: String) throws -> String {
        if let url = databases.withLock({ $0[key] }) { return url }
        let url = try TestPostgres.shared.get().makeDatabase()
        databases.withLock { $0[key] = url }
        return url
    }

    func open(_ engine: Engine) throws -> any ShareStore {
        try StoreOpener.open(try location(engine), instance: "test")
    }

    func makeShare(now: UnixMillis = 1_000_000) -> Share {
        Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "Anna", createdAt: now, expiresAt: now + 3_600_000)
    }

    @Test(arguments: Engine.allCases) func sharesAndFixesSurviveReopening(engine: Engine) throws {
        let share = makeShare()
        let row: Int64
        do {
            let store = try open(engine)
            row = try store.insertShare(share)
            let fixes = (0..<5).map { PendingFix(shareRow: row, fix: Fix(latitude: 1, longitude: Double($0), timestamp: 100 + Int64($0), accuracy: 5, battery: 50), receivedAt: 9) }
            #expect(try store.insertFixes(fixes) == [true, true, true, true, true])
        }
        let reopened = try open(engine)
        #expect(try reopened.loadOpenShares() == [StoredShare(row: row, share: share)])
        #expect(try reopened.share(id: share.id)?.share == share)
        #expect(try reopened.share(viewTokenHash: share.viewTokenHash)?.row == row)
        let recent = try reopened.recentFixes(row: row, limit: 3)
        #expect(recent.map(\.timestamp) == [102, 103, 104])
        #expect(recent.last?.battery == 50 && recent.last?.accuracy == 5)
    }

    @Test(arguments: Engine.allCases) func fixesAreStoredOnceOnRedelivery(engine: Engine) throws {
        let store = try open(engine)
        let row = try store.insertShare(makeShare())
        let fix = PendingFix(shareRow: row, fix: Fix(latitude: 48.1, longitude: 11.5, timestamp: 100), receivedAt: 1)
        let other = PendingFix(shareRow: row, fix: Fix(latitude: 48.2, longitude: 11.5, timestamp: 100), receivedAt: 1)
        #expect(try store.insertFixes([fix, other, fix]) == [true, true, false])
        #expect(try store.insertFixes([fix]) == [false])
        #expect(try store.fixCount(row: row) == 2)
    }

    @Test(arguments: Engine.allCases) func endingAndPurging(engine: Engine) throws {
        let store = try open(engine)
        let share = makeShare()
        let row = try store.insertShare(share)
        _ = try store.insertFixes([PendingFix(shareRow: row, fix: Fix(latitude: 1, longitude: 2, timestamp: 3), receivedAt: 4)])
        try store.updateExpiry(row: row, expiresAt: 5_000_000)
        try store.markEnded(row: row, at: 2_000_000, reason: .stopped)
        try store.markEnded(row: row, at: 3_000_000, reason: .expired)  // the first end stands
        try store.updateExpiry(row: row, expiresAt: 9_000_000)          // an ended share is not extended
        var stored = try #require(try store.share(id: share.id))
        #expect(stored.share.endedAt == 2_000_000 && stored.share.endReason == .stopped && stored.share.expiresAt == 5_000_000)

        try store.purgeHistory(row: row)
        #expect(try store.fixCount(row: row) == 0)
        stored = try #require(try store.share(id: share.id))
        #expect(stored.share.historyPurged && stored.share.name.isEmpty)
        #expect(try store.loadOpenShares().isEmpty)
    }

    @Test(arguments: Engine.allCases) func ownerKeysAreKeptAsHashes(engine: Engine) throws {
        let store = try open(engine)
        let key = OwnerKey.generate()
        #expect(try store.ownerKeyCount() == 0)
        try store.insertOwnerKey(hash: SecretHash(of: key), label: "test", createdAt: 1)
        #expect(try store.ownerKeyExists(hash: SecretHash(of: key)))
        #expect(try !store.ownerKeyExists(hash: SecretHash(of: key + "x")))
        // Nowhere in the stored data is the key itself.
        switch engine {
        case .sqlite:
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)).range(of: Data(key.utf8)) == nil)
        case .postgresql:
            let url = try Self.databaseURL(for: path)
            let dump = try TestPostgres.shared.get().query(url, "SELECT string_agg(key_hash::text || label, ',') FROM owner_keys")
            #expect(!dump.isEmpty && !dump.contains(key))
        }
    }

    @Test(arguments: Engine.allCases) func seesKeysAnotherProcessAddsLater(engine: Engine) throws {
        let server = try open(engine)
        #expect(try server.ownerKeyCount() == 0)
        _ = try server.loadOpenShares()
        let cli = try open(engine)
        let key = OwnerKey.generate()
        try cli.insertOwnerKey(hash: SecretHash(of: key), label: "cli", createdAt: 1)
        #expect(try server.ownerKeyExists(hash: SecretHash(of: key)))
        #expect(try server.ownerKeyCount() == 1)
    }

    @Test func errorsCarryOperationAndCodeButNoValues() throws {
        #expect { try SQLiteShareStore(path: "/nonexistent-dir/x/flare.db") } throws: { error in
            guard let error = error as? StoreError else { return false }
            return error.operation.hasPrefix("open") && error.code != 0
        }
        let store = try SQLiteShareStore(path: path)
        let share = makeShare()
        try store.insertShare(share)
        #expect { try store.insertShare(share) } throws: { error in
            let text = "\(error)"
            return text.contains("UNIQUE") && !text.contains(share.id.rawValue)
        }
    }

    @Test func usesWAL() throws {
        let store = try SQLiteShareStore(path: path)
        try store.insertShare(makeShare())
        // The -wal file exists while a connection is open in WAL mode.
        withExtendedLifetime(store) { #expect(FileManager.default.fileExists(atPath: path + "-wal")) }
    }

    /// The writer's connection never checkpoints in a commit (one that did held every request behind it through two
    /// fsyncs): the WAL outgrows SQLite's default 1,000 pages and nothing reaches the database file. The checkpoint
    /// thread's step copies it there, and the next commit writes the WAL from its start, with new salts in its header.
    @Test func theWriterNeverCheckpointsAndTheCheckpointStepStartsTheWALOver() throws {
        func size(_ file: String) throws -> Int { try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int ?? 0 }
        func walSalts() throws -> Data {
            let wal = try #require(FileHandle(forReadingAtPath: path + "-wal"))
            defer { try? wal.close() }
            return try #require(try wal.read(upToCount: 24)).suffix(8)
        }
        let store = try SQLiteShareStore(path: path, checkpointEvery: nil)
        let databaseBefore = try size(path)
        for _ in 0..<300 { try store.insertShare(makeShare()) }
        #expect(try size(path + "-wal") > 1_000 * 4_096)
        #expect(try size(path) == databaseBefore)

        let salts = try walSalts()
        store.checkpointStep(try SQLiteDatabase(path: path), restartFrames: 1_000)
        #expect(try size(path) > databaseBefore)
        try store.insertShare(makeShare())
        #expect(try walSalts() != salts)
    }

    @Test(arguments: Engine.allCases) func listsNewestFirstInPagesAndByState(engine: Engine) throws {
        let store = try open(engine)
        // Two shares in the same millisecond: the row breaks the tie, so no page repeats or skips one.
        let times: [UnixMillis] = [1_000, 2_000, 2_000, 3_000, 4_000]
        var rows: [Int64] = []
        for time in times { rows.append(try store.insertShare(makeShare(now: time))) }
        try store.markEnded(row: rows[1], at: 5_000, reason: .stopped)

        var seen: [Int64] = []
        var position: ShareListPosition?
        repeat {
            let page = try store.listShares(state: nil, after: position, limit: 2)
            #expect(page.count <= 2)
            seen += page.map(\.row)
            position = page.last.map { ShareListPosition(createdAt: $0.share.createdAt, row: $0.row) }
            if page.count < 2 { break }
        } while true
        #expect(seen == [rows[4], rows[3], rows[2], rows[1], rows[0]])
        #expect(try store.listShares(state: .ended, after: nil, limit: 10).map(\.row) == [rows[1]])
        #expect(try store.listShares(state: .active, after: nil, limit: 10).map(\.row) == [rows[4], rows[3], rows[2], rows[0]])
        #expect(try store.listShares(state: nil, after: nil, limit: 0).isEmpty)
    }

    /// A file made by the first release (schema 1) opens, keeps its shares, and is brought to the current schema.
    @Test func upgradesADatabaseOfTheFirstRelease() throws {
        let share = makeShare()
        do {
            let old = try SQLiteDatabase(path: path)
            try old.execute(SQLiteShareStore.migrations[0])
            try old.execute("PRAGMA user_version = 1")
            let insert = try old.statement("INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?, ?)")
            insert.bind(1, share.id.rawValue)
            insert.bind(2, share.viewTokenHash.bytes)
            insert.bind(3, share.name)
            insert.bind(4, share.createdAt)
            insert.bind(5, share.expiresAt)
            try insert.run()
            insert.reset()
            try old.execute("INSERT INTO fixes (share, tst, lat, lon, acc, received_at) VALUES (1, 100, 48.1, 11.5, 5, 101)")
        }
        let store = try SQLiteShareStore(path: path)
        let upgraded = try #require(try store.share(id: share.id))
        #expect(upgraded.share == share)
        #expect(try store.recentFixes(row: upgraded.row, limit: 10) == [Fix(latitude: 48.1, longitude: 11.5, timestamp: 100, accuracy: 5)])
        let check = try SQLiteDatabase(path: path)
        let version = try check.statement("PRAGMA user_version")
        _ = try version.step()
        #expect(version.int64(0) == SQLiteShareStore.schemaVersion)
        version.reset()
        let index = try check.statement("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'shares_newest'")
        _ = try index.step()
        #expect(index.int64(0) == 1)
        index.reset()
    }

    /// A file made by the release before keys owned shares (schema 4): its keys become admin keys, as powerful as
    /// they were, its shares belong to the first key, and the store says it upgraded (flared logs it).
    @Test func upgradesKeysAndSharesOfTheReleaseBeforeAccounts() throws {
        let share = makeShare()
        do {
            let old = try SQLiteDatabase(path: path)
            for step in 0..<4 { try old.execute(SQLiteShareStore.migrations[step]) }
            try old.execute("PRAGMA user_version = 4")
            for (hash, label) in [(SecretHash(of: "first"), "owner"), (SecretHash(of: "second"), "phone")] {
                let key = try old.statement("INSERT INTO owner_keys (key_hash, label, created_at) VALUES (?, ?, 1)")
                key.bind(1, hash.bytes)
                key.bind(2, label)
                try key.run()
                key.reset()
            }
            let insert = try old.statement("INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?, ?)")
            insert.bind(1, share.id.rawValue)
            insert.bind(2, share.viewTokenHash.bytes)
            insert.bind(3, share.name)
            insert.bind(4, share.createdAt)
            insert.bind(5, share.expiresAt)
            try insert.run()
            insert.reset()
        }
        let store = try SQLiteShareStore(path: path)
        #expect(store.upgradedFromSchema == 4)
        let keys = try store.ownerKeys()
        #expect(keys.map(\.label) == ["owner", "phone"] && keys.allSatisfy { $0.isAdmin && $0.limits == .none })
        #expect(keys.first?.liveShares == 1)
        #expect(try store.share(id: share.id)?.share.ownerKeyID == keys.first?.id)
        #expect(try store.ownerKeyExists(hash: SecretHash(of: "second")))
        #expect(try SQLiteShareStore(path: path).upgradedFromSchema == nil)  // once
    }

    /// The same upgrade on PostgreSQL: a database left at schema 4 by the release before accounts.
    @Test func upgradesAPostgreSQLDatabaseOfTheReleaseBeforeAccounts() throws {
        let postgres = try TestPostgres.shared.get()
        let url = try postgres.makeDatabase()
        let share = makeShare()
        var script = "CREATE TABLE flare_schema (version INTEGER NOT NULL);"
        for step in 0..<4 { script += PostgresShareStore.migrations[step] + ";INSERT INTO flare_schema (version) VALUES (\(step + 1));" }
        script += """
            INSERT INTO owner_keys (key_hash, label, created_at) VALUES ('\(PostgresText.hex(SecretHash(of: "first").bytes))', 'owner', 1);
            INSERT INTO owner_keys (key_hash, label, created_at) VALUES ('\(PostgresText.hex(SecretHash(of: "second").bytes))', 'phone', 2);
            INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at)
                VALUES ('\(share.id.rawValue)', '\(PostgresText.hex(share.viewTokenHash.bytes))', '\(share.name)', \(share.createdAt), \(share.expiresAt));
            """
        _ = try postgres.query(url, script)
        let store = try PostgresShareStore(url: url, instance: "test")
        #expect(store.upgradedFromSchema == 4)
        let keys = try store.ownerKeys()
        #expect(keys.map(\.label) == ["owner", "phone"] && keys.allSatisfy { $0.isAdmin && $0.limits == .none })
        #expect(try store.share(id: share.id)?.share.ownerKeyID == keys.first?.id)
        #expect(try store.ownerKeyExists(hash: SecretHash(of: "second")))
        #expect(try PostgresShareStore(url: url, instance: "test").upgradedFromSchema == nil)
    }

    @Test func refusesADatabaseFromANewerRelease() throws {
        do {
            let newer = try SQLiteDatabase(path: path)
            try newer.execute("PRAGMA user_version = \(SQLiteShareStore.schemaVersion + 1)")
        }
        #expect { try SQLiteShareStore(path: path) } throws: { error in
            "\(error)".contains("schema version \(SQLiteShareStore.schemaVersion + 1), newer than")
        }
    }

    /// With several instances each may try to end or purge a share: exactly one call does it.
    @Test(arguments: Engine.allCases) func endingAndPurgingHappenOnce(engine: Engine) throws {
        let first = try open(engine), second = try open(engine)
        let row = try first.insertShare(makeShare())
        #expect(try first.markEnded(row: row, at: 2_000_000, reason: .expired))
        #expect(try !second.markEnded(row: row, at: 2_000_001, reason: .expired))
        #expect(try second.purgeHistory(row: row))
        #expect(try !first.purgeHistory(row: row))
    }

    /// Every field of a fix comes back as it went in: doubles exactly, text with quotes and backslashes.
    @Test(arguments: Engine.allCases) func fixFieldsRoundTripExactly(engine: Engine) throws {
        let store = try open(engine)
        let row = try store.insertShare(makeShare())
        let fixes = [
            Fix(latitude: 48.137154, longitude: 11.576124, timestamp: 100, accuracy: 4.5, altitude: -12.25, velocity: 0.1,
                course: 359.9, battery: 7, batteryStatus: 1, connection: "m", trackerID: #"A"\"#),
            Fix(latitude: 1e-7, longitude: -0.0, timestamp: 101, trackerID: "é,{}"),
            Fix(latitude: -89.999999999999, longitude: 179.99999999999997, timestamp: 102, trackerID: nil),
        ]
        #expect(try store.insertFixes(fixes.map { PendingFix(shareRow: row, fix: $0, receivedAt: 5) }) == [true, true, true])
        #expect(try store.recentFixes(row: row, limit: 10) == fixes)
    }

    /// Tracker states are recorded once per change, whichever instance sees it first, and never over what a stored
    /// fix already contradicts.
    @Test(arguments: Engine.allCases) func trackerStatesAreRecordedOncePerChange(engine: Engine) throws {
        let first = try open(engine), second = try open(engine)
        let share = makeShare()
        let row = try first.insertShare(share)
        let live = TrackerRecord(state: .live, since: 1_000_100, transport: .mqtt)
        #expect(try first.recordTracker(row: row, live, condition: .init()))
        #expect(try !second.recordTracker(row: row, live, condition: .init()))   // the same change, seen twice
        #expect(try first.share(id: share.id)?.share.tracker == live)

        // A will received at 1_000_200, but a fix arrived after it: not recorded.
        _ = try first.insertFixes([PendingFix(shareRow: row, fix: Fix(latitude: 1, longitude: 2, timestamp: 1_000), receivedAt: 1_000_300)])
        let offline = TrackerRecord(state: .offline, since: 1_000_200, reason: TrackerRecord.connectionLost)
        #expect(try !second.recordTracker(row: row, offline, condition: .init(noFixReceivedAfter: 1_000_200)))
        let laterOffline = TrackerRecord(state: .offline, since: 1_000_400, reason: TrackerRecord.connectionLost)
        #expect(try second.recordTracker(row: row, laterOffline, condition: .init(noFixReceivedAfter: 1_000_400)))
        #expect(try first.share(id: share.id)?.share.tracker == TrackerRecord(state: .offline, since: 1_000_400, reason: TrackerRecord.connectionLost, transport: .mqtt))

        // Stale only over live: silence does not turn a lost connection into a mere silence.
        let stale = TrackerRecord(state: .stale, since: 1_200_000)
        #expect(try !first.recordTracker(row: row, stale, condition: .init(from: .live)))
        #expect(try first.recordTracker(row: row, TrackerRecord(state: .live, since: 1_100_000), condition: .init()))
        #expect(try first.recordTracker(row: row, stale, condition: .init(from: .live)))
        // The transport is kept when a change does not name it.
        #expect(try first.share(id: share.id)?.share.tracker == TrackerRecord(state: .stale, since: 1_200_000, transport: .mqtt))

        // An ended share's tracker is left as it was.
        #expect(try first.markEnded(row: row, at: 1_300_000, reason: .stopped))
        #expect(try !first.recordTracker(row: row, live, condition: .init()))
    }

    /// "Locate now": one request per interval across instances; each request answered and handed out once.
    @Test(arguments: Engine.allCases) func locateRequestsAreLimitedAndHandedOutOnce(engine: Engine) throws {
        let first = try open(engine), second = try open(engine)
        let share = makeShare()
        let row = try first.insertShare(share)
        #expect(try !first.takeLocateCommand(row: row, now: 1_000_000, validForMillis: 600_000))
        #expect(try !first.recordLocateAnswer(row: row, at: 1_000_000))      // nothing was asked
        #expect(try first.requestLocate(row: row, at: 1_000_000, minimumIntervalMillis: 30_000))
        #expect(try !second.requestLocate(row: row, at: 1_029_999, minimumIntervalMillis: 30_000))
        #expect(try second.takeLocateCommand(row: row, now: 1_000_500, validForMillis: 600_000))
        #expect(try !first.takeLocateCommand(row: row, now: 1_000_600, validForMillis: 600_000))
        #expect(try second.recordLocateAnswer(row: row, at: 1_001_000))
        #expect(try !first.recordLocateAnswer(row: row, at: 1_001_500))
        let stored = try #require(try first.share(id: share.id)?.share)
        #expect(stored.locateRequestedAt == 1_000_000)
        #expect(stored.locateAnsweredAt == 1_001_000)

        #expect(try second.requestLocate(row: row, at: 1_030_000, minimumIntervalMillis: 30_000))
        // A request nobody collected in time is not handed out late.
        #expect(try !first.takeLocateCommand(row: row, now: 1_700_000, validForMillis: 600_000))
        #expect(try first.markEnded(row: row, at: 1_800_000, reason: .stopped))
        #expect(try !first.requestLocate(row: row, at: 1_900_000, minimumIntervalMillis: 30_000))
    }

    @Test(arguments: Engine.allCases) func aBatchStoresEachFixOnceEvenAcrossBatches(engine: Engine) throws {
        let store = try open(engine)
        let row = try store.insertShare(makeShare())
        let batch = (0..<2000).map { PendingFix(shareRow: row, fix: Fix(latitude: 48, longitude: Double($0) / 1000, timestamp: Int64($0 / 3)), receivedAt: 1) }
        #expect(try store.insertFixes(batch).allSatisfy { $0 })
        let again = try store.insertFixes(Array(batch[1990...]) + [PendingFix(shareRow: row, fix: Fix(latitude: 1, longitude: 1, timestamp: 1), receivedAt: 1)])
        #expect(again == Array(repeating: false, count: 10) + [true])
        #expect(try store.fixCount(row: row) == 2001)
    }

    @Test func postgresErrorsNameTheProblemButNoValuesOrPassword() throws {
        let store = try open(.postgresql)
        let share = makeShare()
        try store.insertShare(share)
        #expect { try store.insertShare(share) } throws: { error in
            let text = "\(error)"
            return text.contains("SQLSTATE 23505") && text.contains("duplicate key") && !text.contains(share.id.rawValue)
        }
        // Nothing listens on this port: the error says so, and the password stays out of it.
        let (refusing, closed) = try FreePort.refusing()
        defer { close(refusing) }
        #expect { try StoreOpener.open(.postgresql(url: "postgresql://flare:s3cret-pw@127.0.0.1:\(closed)/flare"), instance: "test") } throws: { error in
            let text = "\(error)"
            return text.contains("connect failed") && text.contains("\(closed)") && !text.contains("s3cret-pw")
        }
    }

    @Test func postgresRefusesADatabaseFromANewerRelease() throws {
        let url = try Self.databaseURL(for: path)
        _ = try open(.postgresql)
        _ = try TestPostgres.shared.get().query(url, "INSERT INTO flare_schema (version) VALUES (\(PostgresShareStore.schemaVersion + 1))")
        #expect { try open(.postgresql) } throws: { error in
            "\(error)".contains("schema version \(PostgresShareStore.schemaVersion + 1), newer than")
        }
    }

    @Test func storeURLsAreCheckedAndNeverShowThePassword() throws {
        #expect(try StoreLocation(url: nil, dataDirectory: "/srv/flare") == .sqlite(path: "/srv/flare/flare.db"))
        #expect(try StoreLocation(url: "sqlite:/tmp/x.db", dataDirectory: "/srv") == .sqlite(path: "/tmp/x.db"))
        #expect(try StoreLocation(url: "postgresql://flare@db:5432/flare", dataDirectory: "/srv") == .postgresql(url: "postgresql://flare@db:5432/flare"))
        for bad in ["mysql://root:hunter2@db/x", "postgresql://flare:hunter2@", "sqlite:", "postgresql://flare:hunter2@db"] {
            #expect { try StoreLocation(url: bad, dataDirectory: "/srv") } throws: { error in
                let text = "\(error)"
                return text.contains("FLARE_STORE_URL") && !text.contains("hunter2")
            }
        }
        #expect(StoreLocation.redacted("postgresql://flare:hunter2@db:5432/flare") == "postgresql://flare:***@db:5432/flare")
        #expect(StoreLocation.postgresql(url: "postgresql://u:pw@h/d").description == "PostgreSQL postgresql://u:***@h/d")
    }

    /// One process per client id; a silent one is claimed by exactly one other, which then forgets it.
    @Test(arguments: Engine.allCases) func instancesRegisterBeatAndAreTakenOverOnce(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        #expect(try store.registerInstance("flared-a", process: "h:1:x", now: 1_000, staleAfter: 20_000))
        #expect(try !other.registerInstance("flared-a", process: "h:2:y", now: 2_000, staleAfter: 20_000))  // held, alive
        #expect(try store.instanceProcess("flared-a") == "h:1:x")
        #expect(try store.registerInstance("flared-b", process: "h:2:y", now: 2_000, staleAfter: 20_000))
        #expect(try store.heartbeat("flared-a", process: "h:1:x", now: 10_000))
        #expect(try !store.heartbeat("flared-a", process: "h:9:z", now: 10_000))
        // b goes silent; a, still beating, is not claimed; b is claimed once.
        #expect(try store.heartbeat("flared-a", process: "h:1:x", now: 40_000))
        #expect(try store.claimStaleInstance(process: "h:1:x", now: 40_000, staleAfter: 20_000) == "flared-b")
        #expect(try other.claimStaleInstance(process: "h:3:w", now: 40_000, staleAfter: 20_000) == nil)
        try store.removeInstance("flared-b", process: "h:1:x")
        #expect(try store.instanceProcess("flared-b") == nil)
        // A silent holder gives its id to the next process that asks.
        #expect(try other.registerInstance("flared-a", process: "h:5:v", now: 70_000, staleAfter: 20_000))
    }

    /// One holder at a time; the holder renews and records a value; another takes it only once it has run out or
    /// was let go, and finds the value recorded. SQLite serves one instance and goes by its clock (moved by hand
    /// here); PostgreSQL goes by its own (`leasesAndDeadlinesGoByTheDatabasesClock`).
    @Test(arguments: [Engine.sqlite]) func leasesHaveOneHolderAndKeepTheirValue(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        #expect(try store.holdLease("job", holder: "a", now: 1_000, durationMillis: 10_000) == 0)
        #expect(try other.holdLease("job", holder: "b", now: 5_000, durationMillis: 10_000) == nil)
        #expect(try store.setLeaseValue("job", holder: "a", value: 41))
        #expect(try !other.setLeaseValue("job", holder: "b", value: 99))
        #expect(try store.holdLease("job", holder: "a", now: 9_000, durationMillis: 10_000) == 41)  // renewed to 19,000
        #expect(try other.holdLease("job", holder: "b", now: 18_999, durationMillis: 10_000) == nil)
        #expect(try other.holdLease("job", holder: "b", now: 19_000, durationMillis: 10_000) == 41)  // ran out
        #expect(try !store.setLeaseValue("job", holder: "a", value: 42))
        try other.releaseLease("job", holder: "b")
        #expect(try store.holdLease("job", holder: "a", now: 19_001, durationMillis: 10_000) == 41)  // let go: at once
        #expect(try store.holdLease("other job", holder: "b", now: 19_001, durationMillis: 10_000) == 0)
    }

    /// Several instances share a PostgreSQL store, each with its own clock: a lease runs out, and a check-in is due,
    /// by the database's clock alone. An instance whose clock runs an hour fast neither holds a lease for an hour nor
    /// fires a check-in early; one an hour slow does not hold back a deadline that has passed (trust, second round, 5).
    @Test func leasesAndDeadlinesGoByTheDatabasesClock() throws {
        let store = try open(.postgresql), other = try open(.postgresql)
        let now = Int64(Date().timeIntervalSince1970 * 1000), hour: Int64 = 3_600_000
        // Held for ten seconds of the database's time, whatever the holder's clock says.
        #expect(try store.holdLease("job", holder: "fast", now: now + hour, durationMillis: 10_000) == 0)
        #expect(try other.holdLease("job", holder: "b", now: now + 2 * hour, durationMillis: 10_000) == nil, "not run out for the database")
        // A lease of no length runs out at once, however far ahead its holder's clock is.
        #expect(try store.holdLease("job", holder: "fast", now: now + hour, durationMillis: 0) != nil)
        #expect(try other.holdLease("job", holder: "b", now: now - hour, durationMillis: 10_000) != nil, "taken over by the database's clock")

        func armed(dueIn millis: Int64) throws -> Checkin {
            let share = makeShare(now: now)
            let row = try store.insertShare(share)
            let checkin = Checkin(id: .generate(), shareRow: row, shareID: share.id, ownerKeyID: nil, dueAt: now + millis, graceMillis: 0, message: "",
                                  contacts: [], arrive: nil, notifyOnArrival: false, durationSeconds: 60, createdAt: now)
            try store.insertCheckin(checkin)
            return checkin
        }
        _ = try armed(dueIn: hour)
        let past = try armed(dueIn: -60_000)
        #expect(try store.dueCheckins(now: now + 2 * hour, limit: 10).map(\.id) == [past.id], "a fast clock fires nothing early")
        #expect(try store.dueCheckins(now: now - 2 * hour, limit: 10).map(\.id) == [past.id], "a slow clock holds nothing back")
    }
}

extension ShareStoreTests {
    /// Creations from many threads at once (SQLite commits those that wait together in one transaction): the
    /// live-share bound holds exactly, every share created has its event, and a creation that fails (a share id
    /// taken) fails alone.
    @Test(arguments: Engine.allCases) func creationsArrivingTogetherKeepTheLimitsAndFailAlone(engine: Engine) throws {
        let store = try open(engine)
        let limits = KeyLimits(maxLive: 40, maxDurationSeconds: nil, createsPerHour: nil)
        let phone = try store.insertOwnerKey(hash: SecretHash(of: "phone"), label: "phone", createdAt: 1, admin: false, limits: limits)
        let now: UnixMillis = 10_000_000
        @Sendable func share(_ owner: Int64?, id: ShareID = .generate()) -> Share {
            Share(id: id, viewTokenHash: Secret.generate().hash, name: "", createdAt: now, expiresAt: now + 600_000, ownerKeyID: owner)
        }
        let taken = share(nil)
        try store.insertShare(taken)
        struct Outcome: Sendable { var rows: [Int64] = [], refused = 0, failed = 0 }
        let outcome = Mutex(Outcome())
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for round in 0..<12 {
                let made: Share
                let result: Result<Int64, QuotaRefusal>
                do {
                    switch (thread, round) {
                    case (7, 5):  // a share id already taken: refused by the database, for this creation alone
                        made = share(nil, id: taken.id)
                        result = .success(try store.insertShare(made, event: PendingEvent(.started(made), destinations: [.mqtt])))
                    case (_, _) where round % 3 == 0:  // no limits
                        made = share(nil)
                        result = .success(try store.insertShare(made, event: PendingEvent(.started(made), destinations: [.mqtt])))
                    default:
                        made = share(phone)
                        result = try store.insertShare(made, limits: limits, now: now, event: PendingEvent(.started(made), destinations: [.mqtt]))
                    }
                } catch {
                    outcome.withLock { $0.failed += 1 }
                    continue
                }
                switch result {
                case .success(let row): outcome.withLock { $0.rows.append(row) }
                case .failure(let refusal):
                    #expect(refusal.limit == .maxLive)
                    outcome.withLock { $0.refused += 1 }
                }
            }
        }
        let final = outcome.withLock { $0 }
        #expect(final.failed == 1, "only the creation with a taken id failed")
        // 96 creations: 32 without limits, 63 by the phone (of which 40 fit), and the one with a taken id.
        #expect(final.rows.count == 32 + 40 && Set(final.rows).count == final.rows.count && final.refused == 23, "\(final.rows.count), \(final.refused)")
        #expect(try store.listShares(state: .active, after: nil, limit: 100, owner: phone).count == 40)
        let started = try store.dueEvents(now: Int64.max / 2, limit: 500).filter { $0.event.type == .started }
        #expect(started.count == final.rows.count, "each share created has its event, and no other has one")
    }

    /// SQLite's group commit itself: creations held at the lock until eight wait, then committed together, once
    /// all fitting and once with one that fails (a share id taken), which then fails alone.
    @Test func creationsWaitingTogetherAreCommittedTogetherAndFailAlone() throws {
        let store = try SQLiteShareStore(path: path)
        let limits = KeyLimits(maxLive: 3, maxDurationSeconds: nil, createsPerHour: nil)
        let phone = try store.insertOwnerKey(hash: SecretHash(of: "phone"), label: "phone", createdAt: 1, admin: false, limits: limits)
        let now: UnixMillis = 10_000_000
        let taken = Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: now, expiresAt: now + 600_000)
        try store.insertShare(taken)
        for withTakenID in [false, true] {
            let before = try store.dueEvents(now: Int64.max / 2, limit: 500).count
            let results = Mutex<[Int: Result<Result<Int64, QuotaRefusal>, StoreError>]>([:])
            store.database.withLock { _ in
                for slot in 0..<8 {
                    Thread {
                        let owner: Int64? = slot < 5 ? phone : nil
                        let id = withTakenID && slot == 7 ? taken.id : ShareID.generate()
                        let made = Share(id: id, viewTokenHash: Secret.generate().hash, name: "", createdAt: now, expiresAt: now + 600_000, ownerKeyID: owner)
                        let event = PendingEvent(.started(made), destinations: [.mqtt])
                        let result: Result<Result<Int64, QuotaRefusal>, StoreError>
                        do throws(StoreError) { result = .success(try store.insertShare(made, limits: owner == nil ? .none : limits, now: now, event: event)) } catch { result = .failure(error) }
                        results.withLock { $0[slot] = result }
                    }.start()
                }
                // The lock is held here: every creation waits for it, in the group.
                let deadline = Date().addingTimeInterval(30)
                while store.creations.waitingCount < 8 && Date() < deadline { usleep(1_000) }
            }
            let deadline = Date().addingTimeInterval(30)
            while results.withLock({ $0.count }) < 8 && Date() < deadline { usleep(1_000) }
            let all = results.withLock { $0 }
            try #require(all.count == 8)
            let phones = (0..<5).compactMap { try? all[$0]?.get() }
            #expect(phones.filter { (try? $0.get()) != nil }.count == (withTakenID ? 0 : 3), "the phone's bound holds across the group")
            #expect(phones.filter { (try? $0.get()) == nil }.count == (withTakenID ? 5 : 2))
            #expect((5..<7).allSatisfy { (try? all[$0]?.get().get()) != nil })
            #expect((try? all[7]?.get()) == nil ? withTakenID : !withTakenID, "only the taken id fails")
            let created = all.values.filter { (try? $0.get().get()) != nil }.count
            #expect(try store.dueEvents(now: Int64.max / 2, limit: 500).count == before + created, "an event for each share made, none for the others")
        }
    }

    /// Keys with kinds and limits; the live-share and hourly limits checked in the insert's own transaction, from
    /// two connections (two instances) alike; revocation; listing with live counts and by owner.
    @Test(arguments: Engine.allCases) func keysOwnSharesWithinTheirLimits(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        let admin = try store.insertOwnerKey(hash: SecretHash(of: "admin"), label: "admin", createdAt: 1, admin: true, limits: .none)
        let limits = KeyLimits(maxLive: 2, maxDurationSeconds: 600, createsPerHour: 3)
        let phone = try store.insertOwnerKey(hash: SecretHash(of: "phone"), label: "phone", createdAt: 2, admin: false, limits: limits)
        #expect(try other.ownerKey(hash: SecretHash(of: "phone")) == OwnerKeyRecord(id: phone, label: "phone", isAdmin: false, limits: limits, createdAt: 2))
        #expect(try store.ownerKey(hash: SecretHash(of: "nobody")) == nil)
        let now: UnixMillis = 10_000_000
        func share(_ owner: Int64, expiresIn: Int64 = 600_000) -> Share {
            Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: now, expiresAt: now + expiresIn, ownerKeyID: owner)
        }
        let first = try store.insertShare(share(phone, expiresIn: 300_000), limits: limits, now: now)
        #expect((try? first.get()) != nil)
        #expect((try? other.insertShare(share(phone), limits: limits, now: now + 1).get()) != nil)
        // Two live: the third waits for the first to expire (300 s).
        #expect(try store.insertShare(share(phone), limits: limits, now: now + 2) == .failure(QuotaRefusal(limit: .maxLive, value: 2, retryAfterSeconds: 300)))
        let firstRow = try #require(try first.get())
        try other.markEnded(row: firstRow, at: now + 3, reason: .stopped)
        #expect((try? store.insertShare(share(phone), limits: limits, now: now + 4).get()) != nil)
        // Three created this hour; the fourth may come an hour after the first.
        try store.markEnded(row: try #require(try store.listShares(state: .active, after: nil, limit: 1, owner: phone).first).row, at: now + 5, reason: .stopped)
        #expect(try other.insertShare(share(phone), limits: limits, now: now + 6) == .failure(QuotaRefusal(limit: .createRate, value: 3, retryAfterSeconds: 3600)))
        #expect((try? store.insertShare(share(phone), limits: limits, now: now + 3_600_001).get()) != nil)
        // Admin shares are not counted against the phone, and the listing says whose is whose.
        try store.insertShare(share(admin))
        #expect(try store.listShares(state: nil, after: nil, limit: 10, owner: phone).count == 4)
        #expect(try store.listShares(state: nil, after: nil, limit: 10, owner: admin).count == 1)
        #expect(try store.ownerKeys().map(\.liveShares) == [1, 2])
        #expect(try other.revokeOwnerKey(id: phone, at: now))
        #expect(try !store.revokeOwnerKey(id: phone, at: now + 1))
        #expect(try store.ownerKey(id: phone)?.revokedAt == now && !store.ownerKeyExists(hash: SecretHash(of: "phone")))
        try store.noteOwnerKeyUsed(id: admin, at: now + 7)
        #expect(try other.ownerKey(id: admin)?.lastUsedAt == now + 7)
    }

    /// A confirming tracker's mark: through the last number with no gap before it, whichever store connection (or
    /// instance) handled which message; a newer stream starts again, an older one is ignored.
    @Test(arguments: Engine.allCases) func trackerMarksMoveOverHandledRunsOnly(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        let row = try store.insertShare(makeShare())
        func handled(_ numbers: [Int64], stream: Int64 = 1_000, by writer: (any ShareStore)? = nil) throws -> [Int64] {
            try (writer ?? store).recordHandledSequences(numbers.map { (row, TrackerSequence(stream: stream, number: $0)!) })
                .filter { $0.shareRow == row && $0.mark.stream == stream }.map(\.mark.number)
        }
        #expect(try handled([1, 2]) == [2])
        #expect(try handled([4, 5], by: other) == [2])  // 3 is still out
        #expect(try handled([2]) == [2])               // a repeat changes nothing, and hears the mark again
        #expect(try handled([3]) == [5])
        #expect(try handled([7, 1_001], stream: 999) == [])  // an older stream: ignored (it hears the newer mark)
        #expect(try store.recordHandledSequences([(row, TrackerSequence(stream: 999, number: 8)!)]).map(\.mark) == [TrackerSequence(stream: 1_000, number: 5)!])
        #expect(try handled([2], stream: 2_000) == [])        // a newer stream starts again, from 1
        #expect(try handled([1], stream: 2_000) == [2])
        #expect(try handled([6]) == [])
        #expect(try handled([3, 4], stream: 2_000, by: other) == [4])
        #expect(try store.recordHandledSequences([]).isEmpty)
    }
}

extension ShareStoreTests {
    /// Answers go to active shares only, come back in order after an id, mark the share changed, and go with its history.
    @Test(arguments: Engine.allCases) func answersAreKeptWithTheShareAndPurgedWithIt(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        let row = try store.insertShare(makeShare())
        let first = try #require(try store.insertAnswer(row: row, kind: .onMyWay, name: "Mum", at: 5))
        let second = try #require(try other.insertAnswer(row: row, kind: .cannotHelp, name: "", at: 6))
        #expect(second.id > first.id)
        #expect(try store.answers(row: row, after: 0, limit: 10) == [first, second])
        #expect(try store.answers(row: row, after: first.id, limit: 10) == [second])
        #expect(try other.share(id: try #require(try store.loadOpenShares().first).share.id)?.share.lastAnswerID == second.id)
        try store.markEnded(row: row, at: 7, reason: .stopped)
        #expect(try store.insertAnswer(row: row, kind: .onMyWay, name: "late", at: 8) == nil)
        try store.purgeHistory(row: row)
        #expect(try store.answers(row: row, after: 0, limit: 10).isEmpty)
    }
}

extension ShareStoreTests {
    @Test(arguments: Engine.allCases) func theAudienceCountsDistinctViewersAndWhoWatchesNow(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        let row = try store.insertShare(makeShare())
        #expect(try store.audience(row: row, watchingSince: 0) == .nobody)
        #expect(try store.noteViewer(row: row, viewer: SecretHash(of: "a"), at: 1_000))
        #expect(try !other.noteViewer(row: row, viewer: SecretHash(of: "a"), at: 5_000))
        #expect(try other.noteViewer(row: row, viewer: SecretHash(of: "b"), at: 2_000))
        #expect(try store.audience(row: row, watchingSince: 3_000) == Audience(firstOpenedAt: 1_000, opened: 2, watching: 1))
        try store.markEnded(row: row, at: 6_000, reason: .stopped)
        try store.purgeHistory(row: row)
        #expect(try store.audience(row: row, watchingSince: 0) == .nobody)
    }
}

extension ShareStoreTests {
    /// Each change records its event in the same transaction, and only if the change is made (by whichever of two
    /// connections makes it); the outbox hands each event to each destination until it is delivered or given up.
    @Test(arguments: Engine.allCases) func eventsAreRecordedWithTheirChangesOnlyAndLeaveTheOutboxWhenDelivered(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        let destinations: [EventDestination] = [.mqtt, .serverWebhook]
        func pending(_ event: ShareEvent) -> PendingEvent { PendingEvent(event, destinations: destinations) }
        let share = makeShare(now: 1_000)
        let row = try store.insertShare(share, event: pending(.started(share)))
        // Two instances end it: one event.
        #expect(try store.markEnded(row: row, at: 2_000, reason: .stopped, event: pending(.ended(share.id, at: 2_000, reason: .stopped))))
        #expect(try !other.markEnded(row: row, at: 2_001, reason: .expired, event: pending(.ended(share.id, at: 2_001, reason: .expired))))
        // A refused change records nothing either: an ended share takes no answer, and is not extended.
        #expect(try other.insertAnswer(row: row, kind: .onMyWay, name: "x", at: 2_002) { PendingEvent(.answered(share.id, answer: $0), destinations: destinations) } == nil)
        try other.updateExpiry(row: row, expiresAt: 9_000_000, event: pending(.extended(share.id, at: 2_003, expiresAt: 9_000_000)))

        let due = try other.dueEvents(now: 10_000, limit: 10)
        #expect(due.count == 4)
        #expect(Set(due.map(\.destination)) == Set(destinations))
        #expect(due.filter { $0.destination == .mqtt }.map(\.event.type) == [.started, .ended])
        let started = try #require(due.first { $0.event.type == .started && $0.destination == .mqtt })
        #expect(started.event.shareID == share.id && started.attempts == 0 && started.event.at == share.createdAt)
        #expect(try JSONValue.parse(started.event.body).objectValue?["id"]?.stringValue == started.event.id)
        // Not yet due before its time.
        #expect(try store.dueEvents(now: share.createdAt - 1, limit: 10).isEmpty)
        #expect(try store.outboxBacklog().first { $0.destination == .mqtt } == OutboxBacklog(destination: .mqtt, waiting: 2, oldestAt: share.createdAt))

        // Delivered to one destination: still waiting for the other, with the same id.
        try store.eventDelivered(row: started.row, destination: .mqtt)
        let left = try store.dueEvents(now: 10_000, limit: 10)
        #expect(left.count == 3)
        let forServer = try #require(left.first { $0.row == started.row })
        #expect(forServer.destination == .serverWebhook && forServer.event.id == started.event.id)
        // A failure waits for its next attempt, counted; giving up drops it.
        try store.eventFailed(row: forServer.row, destination: .serverWebhook, attempts: 1, retryAt: 20_000)
        #expect(try store.dueEvents(now: 10_000, limit: 10).count == 2)
        let retried = try #require(try store.dueEvents(now: 20_000, limit: 10).first { $0.row == started.row })
        #expect(retried.attempts == 1)
        try store.eventFailed(row: retried.row, destination: .serverWebhook, attempts: 2, retryAt: nil)
        for delivery in try store.dueEvents(now: 20_000, limit: 10) { try store.eventDelivered(row: delivery.row, destination: delivery.destination) }
        #expect(try store.dueEvents(now: .max, limit: 10).isEmpty)
        #expect(try store.outboxBacklog().isEmpty)
    }

    /// A new token key: every key's webhook secrets, current and previous, sealed anew in one transaction; one that
    /// does not open changes nothing at all.
    @Test(arguments: Engine.allCases) func webhookSecretsAreSealedAnewAllOrNothing(engine: Engine) throws {
        let store = try open(engine)
        let a = try store.insertOwnerKey(hash: SecretHash(of: "a"), label: "a", createdAt: 1, admin: false, limits: .none)
        let b = try store.insertOwnerKey(hash: SecretHash(of: "b"), label: "b", createdAt: 1, admin: false, limits: .none)
        _ = try store.insertOwnerKey(hash: SecretHash(of: "c"), label: "no webhook", createdAt: 1, admin: false, limits: .none)
        #expect(try store.setKeyWebhook(id: a, url: "https://a.example/h", sealedSecret: [1], at: 10))
        #expect(try store.setKeyWebhook(id: a, url: "https://a.example/h", sealedSecret: [2], at: 20))
        #expect(try store.setKeyWebhook(id: b, url: "https://b.example/h", sealedSecret: [3], at: 30))
        #expect(throws: StoreError.self) { try store.resealWebhookSecrets { id, sealed in id == b ? nil : sealed + [0] } }
        #expect(try store.keyWebhook(id: a) == KeyWebhook(url: "https://a.example/h", sealedSecret: [2], previousSealedSecret: [1], rotatedAt: 20))
        #expect(try store.resealWebhookSecrets { id, sealed in sealed + [UInt8(id)] } == 2)
        #expect(try store.keyWebhook(id: a) == KeyWebhook(url: "https://a.example/h", sealedSecret: [2, UInt8(a)], previousSealedSecret: [1, UInt8(a)], rotatedAt: 20))
        #expect(try store.keyWebhook(id: b) == KeyWebhook(url: "https://b.example/h", sealedSecret: [3, UInt8(b)], previousSealedSecret: nil, rotatedAt: nil))
    }

    /// A key's webhook adds its destination to its shares' events, keeps the secret sealed as given, and keeps the
    /// previous secret after it is set again; the first viewer of a share is `share.opened`, once.
    @Test(arguments: Engine.allCases) func keyWebhooksAndTheFirstViewerGetTheirEvents(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        let key = try store.insertOwnerKey(hash: SecretHash(of: "k"), label: "phone", createdAt: 1, admin: false, limits: .none)
        #expect(try store.keyWebhook(id: key) == nil)
        #expect(try store.setKeyWebhook(id: key, url: "https://a.example/h", sealedSecret: [1, 2, 3], at: 10))
        #expect(try store.keyWebhook(id: key) == KeyWebhook(url: "https://a.example/h", sealedSecret: [1, 2, 3], previousSealedSecret: nil, rotatedAt: nil))
        #expect(try other.setKeyWebhook(id: key, url: "https://b.example/h", sealedSecret: [4, 5], at: 20))
        #expect(try store.keyWebhook(id: key) == KeyWebhook(url: "https://b.example/h", sealedSecret: [4, 5], previousSealedSecret: [1, 2, 3], rotatedAt: 20))
        #expect(try store.ownerKey(id: key)?.webhookURL == "https://b.example/h")
        #expect(try !store.setKeyWebhook(id: 999, url: "https://b.example/h", sealedSecret: [4], at: 20))

        var share = makeShare(now: 1_000)
        share.ownerKeyID = key
        let row = try store.insertShare(share, event: PendingEvent(.started(share), destinations: [.mqtt]))
        let opened = { (at: UnixMillis) in PendingEvent(.opened(share.id, at: at), destinations: [.mqtt]) }
        #expect(try store.noteViewer(row: row, viewer: SecretHash(of: "a"), at: 5_000, firstViewEvent: opened(5_000)))
        #expect(try other.noteViewer(row: row, viewer: SecretHash(of: "b"), at: 6_000, firstViewEvent: opened(6_000)))
        #expect(try !store.noteViewer(row: row, viewer: SecretHash(of: "a"), at: 7_000, firstViewEvent: opened(7_000)))
        let due = try store.dueEvents(now: 10_000_000, limit: 10)
        #expect(due.filter { $0.destination == .mqtt }.map(\.event.type) == [.started, .opened])
        #expect(due.filter { $0.destination == .keyWebhook(key) }.map(\.event.type) == [.started, .opened])
        // The key's webhook named among the destinations as well: still one delivery to it.
        let answered = PendingEvent(.answered(share.id, answer: Answer(id: 1, kind: .onMyWay, name: "Li", at: 6_500)),
                                    destinations: [.mqtt, .keyWebhook(key)])
        try store.updateExpiry(row: row, expiresAt: share.expiresAt + 1, event: answered)
        #expect(try store.dueEvents(now: 10_000_000, limit: 10).filter { $0.event.type == .answered }.map(\.destination.name).sorted()
                == ["key:\(key)", "mqtt"])

        // Removed, or the key revoked: its new events go to it no more.
        #expect(try store.setKeyWebhook(id: key, url: nil, sealedSecret: nil, at: 30))
        #expect(try store.keyWebhook(id: key) == nil)
        try store.markEnded(row: row, at: 8_000, reason: .stopped, event: PendingEvent(.ended(share.id, at: 8_000, reason: .stopped), destinations: [.mqtt]))
        #expect(try store.dueEvents(now: 10_000_000, limit: 10).filter { $0.event.type == .ended }.map(\.destination) == [.mqtt])
    }

    /// The battery flag is raised and cleared once each, by whichever connection sees it first.
    @Test(arguments: Engine.allCases) func theBatteryFlagChangesOnceEachWay(engine: Engine) throws {
        let store = try open(engine), other = try open(engine)
        let share = makeShare()
        let row = try store.insertShare(share)
        let low = PendingEvent(.batteryLow(share.id, at: 5, level: 9), destinations: [.mqtt])
        #expect(try store.recordBatteryLow(row: row, lowSince: 5, event: low))
        #expect(try !other.recordBatteryLow(row: row, lowSince: 6, event: PendingEvent(.batteryLow(share.id, at: 6, level: 8), destinations: [.mqtt])))
        #expect(try other.share(id: share.id)?.share.batteryLowAt == 5)
        #expect(try other.recordBatteryLow(row: row, lowSince: nil, event: nil))
        #expect(try !store.recordBatteryLow(row: row, lowSince: nil, event: nil))
        #expect(try store.share(id: share.id)?.share.batteryLowAt == nil)
        #expect(try store.dueEvents(now: 100, limit: 10).map(\.event.type) == [.batteryLow])
    }
}

extension ShareStoreTests {
    /// What one instance announces of the fixes it stored is what another reads back, exactly, 30 fixes to a
    /// notification, also for negative numbers, missing fields and every double's last digit.
    @Test func announcedFixesReadBackExactly() throws {
        var fixes: [PendingFix] = []
        for index in 0..<61 {
            let fix = index % 2 == 0
                ? Fix(latitude: -33.868_820_123_456_78 + Double(index) * 1e-7, longitude: 151.209_295_987_654_3, timestamp: 1_800_000_000 + Int64(index),
                      accuracy: 4.5, altitude: -12.25, velocity: 0.1 + 0.2, course: 359.999, battery: 7, batteryStatus: 1, connection: "m")
                : Fix(latitude: 0, longitude: -0.000_001, timestamp: -5)
            fixes.append(PendingFix(shareRow: Int64(index % 3) + 1, fix: fix, receivedAt: 0))
        }
        let literal = PostgresShareStore.announcement(fixes)
        #expect(literal.hasPrefix("{\"") && literal.hasSuffix("\"}"))
        let chunks = literal.dropFirst(2).dropLast(2).components(separatedBy: "\",\"")
        #expect(chunks.count == 3)
        var read: [(shareRow: Int64, fix: Fix)] = []
        for chunk in chunks {
            guard case .fixes(let some)? = PostgresListener.change(from: ("flare_fixes", "other " + chunk), instance: "me") else {
                Issue.record("unreadable: \(chunk)")
                continue
            }
            read += some
        }
        #expect(read.map(\.shareRow) == fixes.map(\.shareRow))
        #expect(read.map(\.fix) == fixes.map(\.fix))
    }
}

extension ShareStoreTests {
    /// A destination with a backlog does not hide the others' events: the limit is per destination.
    @Test(arguments: Engine.allCases) func theDueLimitIsPerDestination(engine: Engine) throws {
        let store = try open(engine)
        for index in 0..<5 {
            let share = makeShare(now: 1_000 + Int64(index))
            try store.insertShare(share, event: PendingEvent(.started(share), destinations: [.serverWebhook]))
        }
        let late = makeShare(now: 9_000)
        try store.insertShare(late, event: PendingEvent(.started(late), destinations: [.mqtt]))
        let due = try store.dueEvents(now: 10_000, limit: 2)
        #expect(due.map(\.destination) == [.serverWebhook, .serverWebhook, .mqtt])
        #expect(due.last?.event.shareID == late.id)
    }
}
