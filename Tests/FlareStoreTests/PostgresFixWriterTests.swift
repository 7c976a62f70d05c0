import FlareCore
@testable import FlarePostgres
import FlareStore
import FlareTestSupport
import Foundation
import Testing

/// The PostgreSQL fix writer's two ways in: fixes that cannot be stored yet go by a plain COPY, the others by
/// `INSERT … ON CONFLICT DO NOTHING`. Whatever the writer knows, or fails to know, of what is stored, each fix is
/// stored once and said to be new once.
@Suite struct PostgresFixWriterTests {
    func pending(_ row: Int64, _ tst: Int64, _ longitude: Double) -> PendingFix {
        PendingFix(shareRow: row, fix: Fix(latitude: 1, longitude: longitude, timestamp: tst), receivedAt: 5)
    }

    func position(_ longitude: Double) -> NewestStoredFixes.Position { .init(latitude: 1, longitude: longitude) }

    // MARK: What the writer knows (in memory)

    @Test func onlyWhatCannotBeStoredIsJudgedNew() {
        let newest = NewestStoredFixes(positionsKept: 2)
        #expect(newest.claimNewFixes(in: [pending(1, 10, 0)]).isEmpty)  // the change feed is not connected
        newest.listening(true)
        #expect(newest.claimNewFixes(in: [pending(1, 10, 0)]).isEmpty)  // a share not read from the database
        let ask = newest.unknown(among: [1, 2, 1])
        #expect(ask.rows == [1, 2])
        newest.seed([1, 2], newest: [(1, 10, position(0))], generation: ask.generation)
        #expect(newest.unknown(among: [1, 2]).rows.isEmpty)
        // Share 1's newest stored fix is at 10 (longitude 0); share 2 has none.
        let batch = [pending(1, 10, 0), pending(1, 9, 5), pending(1, 10, 1), pending(1, 10, 1), pending(2, 1, 0), pending(1, 11, 0)]
        #expect(newest.claimNewFixes(in: batch) == [2, 4, 5])  // not: stored, older, the same one again
        #expect(newest.claimNewFixes(in: batch).isEmpty)       // claimed: they count as stored

        // Past `positionsKept` positions at one time, no fix at that time is judged new, until a later one.
        #expect(newest.claimNewFixes(in: [pending(1, 11, 1), pending(1, 11, 2), pending(1, 11, 3), pending(1, 12, 0)]) == [0, 3])
        #expect(newest.frontier(of: 1) == .init(tst: 12, positions: [position(0)], complete: true))

        // Announcements: kept for known shares, ignored for others (an old fix is not a share's newest).
        newest.stored([(1, pending(1, 20, 7).fix), (4, pending(4, 100, 0).fix)] as [(shareRow: Int64, fix: Fix)])
        #expect(newest.frontier(of: 1)?.tst == 20)
        #expect(newest.frontier(of: 4) == nil)
        newest.forget(1)
        #expect(newest.frontier(of: 1) == nil)
    }

    @Test func whatWasReadBeforeTheFeedReconnectedIsNotKept() {
        let newest = NewestStoredFixes()
        newest.listening(true)
        let ask = newest.unknown(among: [3])
        newest.listening(false)
        #expect(newest.unknown(among: [3]).rows.isEmpty)
        newest.listening(true)
        newest.seed([3], newest: [], generation: ask.generation)  // read before commits the feed did not hear
        #expect(newest.frontier(of: 3) == nil)
        #expect(newest.claimNewFixes(in: [pending(3, 1, 0)]).isEmpty)

        let again = newest.unknown(among: [3])
        newest.seed([3], newest: [], generation: again.generation)
        #expect(newest.claimNewFixes(in: [pending(3, 1, 0)]) == [0])
        newest.listening(false)  // everything is forgotten: the others' commits are not heard now
        #expect(newest.frontier(of: 3) == nil)
    }

    // MARK: The store, on a real server

    func openStore(_ url: String, watching: Bool = true) throws -> PostgresShareStore {
        let store = try PostgresShareStore(url: url, instance: "test-\(UUID().uuidString.prefix(8))")
        if watching { store.watchChanges { _ in } }
        return store
    }

    func newShare(_ store: PostgresShareStore) throws -> Int64 {
        try store.insertShare(Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "Anna", createdAt: 1_000, expiresAt: 3_600_000))
    }

    @Test func newFixesAreCopiedAndRepeatsAreNot() throws {
        let store = try openStore(try TestPostgres.shared.get().makeDatabase())
        defer { store.stopWatching() }
        let row = try newShare(store)
        #expect(try store.insertFixes([pending(row, 1, 0), pending(row, 2, 0), pending(row, 2, 1)]) == [true, true, true])
        #expect(store.fixesCopied == 3)
        // A redelivery of the second beside a new one; the same one twice in a batch: new once.
        #expect(try store.insertFixes([pending(row, 2, 0), pending(row, 3, 0), pending(row, 3, 0)]) == [false, true, false])
        #expect(store.fixesCopied == 4)
        #expect(store.batchesRetried == 0)
        #expect(try store.fixCount(row: row) == 4)
    }

    @Test func aFixStoredUnheardIsStoredOnce() throws {
        let url = try TestPostgres.shared.get().makeDatabase()
        let store = try openStore(url)
        defer { store.stopWatching() }
        let row = try newShare(store)
        #expect(try store.insertFixes([pending(row, 1, 0)]) == [true])
        // Stored by a writer whose announcement this instance has not heard (yet).
        _ = try TestPostgres.shared.get().query(url, "INSERT INTO fixes (share, tst, lat, lon, received_at) VALUES (\(row), 20, 1, 0, 5)")
        #expect(try store.insertFixes([pending(row, 20, 0), pending(row, 21, 0)]) == [false, true])
        #expect(store.batchesRetried == 1)
        #expect(store.fixesCopied == 1)
        #expect(try store.fixCount(row: row) == 3)
        // And the next batch is copied again.
        #expect(try store.insertFixes([pending(row, 22, 0)]) == [true])
        #expect(store.fixesCopied == 2)
    }

    @Test func anotherInstancesFixesAreKnownFromItsAnnouncement() throws {
        let url = try TestPostgres.shared.get().makeDatabase()
        let first = try openStore(url), second = try openStore(url)
        defer { first.stopWatching(); second.stopWatching() }
        let row = try newShare(first)
        #expect(try first.insertFixes([pending(row, 1, 0)]) == [true])
        #expect(try second.insertFixes([pending(row, 30, 0)]) == [true])
        let deadline = Date().addingTimeInterval(10)
        while first.newestStoredFrontier(of: row)?.tst != 30 && Date() < deadline { usleep(10_000) }
        #expect(first.newestStoredFrontier(of: row)?.tst == 30)
        #expect(try first.insertFixes([pending(row, 30, 0), pending(row, 31, 0)]) == [false, true])
        #expect(first.batchesRetried == 0)
        #expect(first.fixesCopied == 2)
    }

    @Test func aReopenedStoreReadsTheNewestFromTheDatabase() throws {
        let url = try TestPostgres.shared.get().makeDatabase()
        let row: Int64
        do {
            let store = try openStore(url)
            defer { store.stopWatching() }
            row = try newShare(store)
            #expect(try store.insertFixes([pending(row, 1, 0), pending(row, 2, 0), pending(row, 2, 1)]) == [true, true, true])
        }
        // After a restart the broker hands back the retained last position: stored already, at the newest time.
        let store = try openStore(url)
        defer { store.stopWatching() }
        #expect(try store.insertFixes([pending(row, 2, 1), pending(row, 2, 2), pending(row, 3, 0)]) == [false, true, true])
        #expect(store.batchesRetried == 0)
        #expect(store.fixesCopied == 2)
    }

    @Test func aStoreNotFollowingTheFeedCopiesNothing() throws {
        let store = try openStore(try TestPostgres.shared.get().makeDatabase(), watching: false)
        let row = try newShare(store)
        #expect(try store.insertFixes([pending(row, 1, 0), pending(row, 1, 0)]) == [true, false])
        #expect(try store.insertFixes([pending(row, 2, 0)]) == [true])
        #expect(store.fixesCopied == 0)
        #expect(try store.fixCount(row: row) == 2)
    }
}
