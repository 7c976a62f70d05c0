import FlareCore
import FlareServiceTestSupport
import FlareStore
import FlareSQLite
import FlareCrypto
import FlareTestSupport
import Testing
@testable import FlareShares
import FlareSystem

/// Where shares are found: memory first, then the store (what another instance made), a miss remembered for a while.
@Suite struct ShareDirectoryTests {
    func share(_ fixture: ServiceFixture, expiresIn seconds: Int64 = 600) -> (share: Share, viewToken: Secret) {
        let token = Secret.generate()
        return (Share(id: ShareID.generate(), viewTokenHash: token.hash, name: "Anna", createdAt: fixture.clock.now(),
                      expiresAt: fixture.clock.now() + seconds * 1000, ownerKeyID: nil, endToEnd: false), token)
    }

    /// A share another instance stored is found by id and by its link, taken into memory with its timers.
    @Test func aShareOnlyTheStoreKnowsIsFoundAndAdopted() throws {
        let fixture = try ServiceFixture()
        let (other, token) = share(fixture, expiresIn: 60)
        _ = try fixture.store.insertShare(other, event: nil)
        #expect(fixture.service.directory.snapshot(other.id) == nil)
        guard case .live(let found) = try fixture.service.directory.share(viewTokenHash: token.hash) else {
            Issue.record("not found by its link")
            return
        }
        #expect(found.share.id == other.id)
        #expect(fixture.service.directory.snapshot(other.id)?.share == other)
        // Its expiry was scheduled here too.
        fixture.clock.advance(seconds: 61)
        #expect(eventually { fixture.service.directory.snapshot(other.id)?.share.endReason == .expired })
    }

    /// An id the store did not know is not asked about again for `missMemoryMillis`: a stream of messages for an
    /// unknown share costs one query. After that, the store is asked again.
    @Test func aMissIsRememberedForAWhile() throws {
        let fixture = try ServiceFixture()
        let (late, _) = share(fixture)
        #expect(try fixture.service.directory.share(late.id) == nil)
        _ = try fixture.store.insertShare(late, event: nil)
        #expect(try fixture.service.directory.share(late.id) == nil, "the miss is remembered")
        fixture.clock.advance(by: ShareDirectory.missMemoryMillis)
        #expect(try fixture.service.directory.share(late.id)?.share.id == late.id)
    }

    /// A row the store has as ended (another instance stopped it) is followed: memory ends it too, and the purge is
    /// scheduled from the row's end.
    @Test func anEndMadeElsewhereIsFollowed() throws {
        let fixture = try ServiceFixture(retentionSeconds: 60)
        let created = try fixture.service.create(name: "Anna", durationSeconds: 600)
        let row = try #require(fixture.service.directory.snapshot(created.share.id)?.row)
        #expect(try fixture.store.markEnded(row: row, at: fixture.clock.now(), reason: .stopped, event: nil))
        let stored = try #require(try fixture.store.share(id: created.share.id))
        fixture.service.directory.follow(stored)
        #expect(fixture.service.directory.snapshot(created.share.id)?.share.endReason == .stopped)
        fixture.clock.advance(seconds: 61)
        #expect(eventually { fixture.service.directory.snapshot(created.share.id) == nil })
        #expect(try fixture.store.share(id: created.share.id)?.share.historyPurged == true)
    }
}

/// A service let go lets go of its store (and so of the store's file and watch): nothing of it holds itself.
@Suite struct ShareServiceLifetimeTests {
    @Test func aServiceLetGoReleasesItsStore() throws {
        weak var released: SQLiteShareStore?
        let directory = try TempDirectory.make(prefix: "flare-lifetime")
        do {
            let store = try SQLiteShareStore(path: directory.appendingPathComponent("flare.db").path)
            released = store
            let clock = ManualClock()
            let service = ShareService(store: store, trailLength: 4, publisher: RecordingPublisher(), tokenKey: Crypto.randomBytes(32),
                                       policy: SharePolicy(defaultDurationSeconds: 60, maximumDurationSeconds: 600, historyRetentionSeconds: 60),
                                       trackerRules: TrackerRules(staleAfterMillis: 60_000), clock: clock, metrics: Metrics(),
                                       logger: Logger(label: "test", level: .error))
            let id = try service.create(name: "Anna", durationSeconds: 60).share.id
            service.lastWillArrived(id, at: clock.now())
            clock.advance(seconds: 61)
            #expect(eventually { service.directory.snapshot(id)?.share.isActive == false })
            service.stopScheduler()
        }
        #expect(eventually { released == nil })
    }
}
