import FlareCore
import FlareTestSupport
import Foundation
import Testing
@testable import FlareSQLite
import FlareStore

@Suite struct ShareStoreTests {
    let directory: URL
    let path: String

    init() throws {
        directory = try TempDirectory.make(prefix: "flare-store")
        path = directory.appendingPathComponent("flare.db").path
    }

    func makeShare(now: UnixMillis = 1_000_000) -> Share {
        Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "Anna", createdAt: now, expiresAt: now + 3_600_000)
    }

    @Test func sharesAndFixesSurviveReopening() throws {
        let share = makeShare()
        let row: Int64
        do {
            let store = try SQLiteShareStore(path: path)
            row = try store.insertShare(share)
            let fixes = (0..<5).map { PendingFix(shareRow: row, fix: Fix(latitude: 1, longitude: Double($0), timestamp: 100 + Int64($0), accuracy: 5, battery: 50), receivedAt: 9) }
            #expect(try store.insertFixes(fixes) == [true, true, true, true, true])
        }
        let reopened = try SQLiteShareStore(path: path)
        #expect(try reopened.loadOpenShares() == [StoredShare(row: row, share: share)])
        #expect(try reopened.share(id: share.id)?.share == share)
        #expect(try reopened.share(viewTokenHash: share.viewTokenHash)?.row == row)
        let recent = try reopened.recentFixes(row: row, limit: 3)
        #expect(recent.map(\.timestamp) == [102, 103, 104])
        #expect(recent.last?.battery == 50 && recent.last?.accuracy == 5)
    }

    @Test func fixesAreStoredOnceOnRedelivery() throws {
        let store = try SQLiteShareStore(path: path)
        let row = try store.insertShare(makeShare())
        let fix = PendingFix(shareRow: row, fix: Fix(latitude: 48.1, longitude: 11.5, timestamp: 100), receivedAt: 1)
        let other = PendingFix(shareRow: row, fix: Fix(latitude: 48.2, longitude: 11.5, timestamp: 100), receivedAt: 1)
        #expect(try store.insertFixes([fix, other, fix]) == [true, true, false])
        #expect(try store.insertFixes([fix]) == [false])
        #expect(try store.fixCount(row: row) == 2)
    }

    @Test func endingAndPurging() throws {
        let store = try SQLiteShareStore(path: path)
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

    @Test func ownerKeysAreKeptAsHashes() throws {
        let store = try SQLiteShareStore(path: path)
        let key = OwnerKey.generate()
        #expect(try store.ownerKeyCount() == 0)
        try store.insertOwnerKey(hash: SecretHash(of: key), label: "test", createdAt: 1)
        #expect(try store.ownerKeyExists(hash: SecretHash(of: key)))
        #expect(try !store.ownerKeyExists(hash: SecretHash(of: key + "x")))
        let raw = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(raw.range(of: Data(key.utf8)) == nil)
    }

    @Test func seesKeysAnotherProcessAddsLater() throws {
        let server = try SQLiteShareStore(path: path)
        #expect(try server.ownerKeyCount() == 0)
        _ = try server.loadOpenShares()
        let cli = try SQLiteShareStore(path: path)
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

    @Test func listsNewestFirstInPagesAndByState() throws {
        let store = try SQLiteShareStore(path: path)
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
        }
        let store = try SQLiteShareStore(path: path)
        #expect(try store.share(id: share.id)?.share == share)
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

    @Test func refusesADatabaseFromANewerRelease() throws {
        do {
            let newer = try SQLiteDatabase(path: path)
            try newer.execute("PRAGMA user_version = \(SQLiteShareStore.schemaVersion + 1)")
        }
        #expect { try SQLiteShareStore(path: path) } throws: { error in
            "\(error)".contains("schema version \(SQLiteShareStore.schemaVersion + 1), newer than")
        }
    }
}
