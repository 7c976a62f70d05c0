import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import FlareServiceTestSupport
import Testing
@testable import FlareShares
import FlareSystem

@Suite struct ShareRegistryTests {
    func stored(active: Bool = true, createdAt: UnixMillis = 0) -> StoredShare {
        StoredShare(row: 1, share: Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: createdAt, expiresAt: 1_000_000,
                                         endedAt: active ? nil : 5, endReason: active ? nil : .stopped))
    }

    /// The view-token index is keyed by the hash's first eight bytes: a token whose hash only begins like a share's
    /// finds nothing, and of two shares whose hashes begin alike the newer is found from memory, the older is left to
    /// the store (nil here), and forgetting the older keeps the newer's index.
    @Test func theViewTokenIndexComparesTheWholeHash() {
        let registry = ShareRegistry(trailLength: 3, trackerRules: TrackerRules(staleAfterMillis: 120_000))
        let hash = Secret.generate().hash
        var alike = hash.bytes
        alike[31] ^= 0xff
        func share(_ viewTokenHash: SecretHash, row: Int64) -> StoredShare {
            StoredShare(row: row, share: Share(id: .generate(), viewTokenHash: viewTokenHash, name: "share \(row)", createdAt: 0, expiresAt: 1_000_000))
        }
        let older = share(hash, row: 1)
        registry.insert(older)
        #expect(registry.name(viewTokenHash: hash) == "share 1")
        #expect(registry.name(viewTokenHash: SecretHash(bytes: alike)) == nil, "same first eight bytes, another hash")
        let newer = share(SecretHash(bytes: alike), row: 2)
        registry.insert(newer)
        #expect(registry.name(viewTokenHash: SecretHash(bytes: alike)) == "share 2")
        #expect(registry.name(viewTokenHash: hash) == nil)
        #expect(registry.snapshot(older.share.id)?.share.name == "share 1", "still known by its id")
        registry.remove(older.share.id)
        #expect(registry.name(viewTokenHash: SecretHash(bytes: alike)) == "share 2" && registry.shareID(ofRow: 2) == newer.share.id)
        #expect(registry.shareID(ofRow: 1) == nil)
    }

    @Test func trailIsBoundedAndOlderFixesDoNotReplaceTheLast() {
        let registry = ShareRegistry(trailLength: 3, trackerRules: TrackerRules(staleAfterMillis: 120_000))
        let share = stored()
        registry.insert(share)
        for t in [10, 20, 30, 40] { registry.record(Fix(latitude: Double(t), longitude: 0, timestamp: Int64(t)), for: share.share.id) }
        registry.record(Fix(latitude: 35, longitude: 0, timestamp: 35), for: share.share.id)
        let snapshot = registry.snapshot(share.share.id)!
        #expect(snapshot.last?.timestamp == 40)
        #expect(snapshot.trail.map(\.timestamp) == [30, 35, 40])
    }

    @Test func aBatchIsRecordedInOrderAndViewersHearOnlyOfNewLastPositions() {
        let registry = ShareRegistry(trailLength: 4, trackerRules: TrackerRules(staleAfterMillis: 120_000))
        let a = stored(), b = stored(), gone = ShareID.generate()
        registry.insert(a)
        registry.insert(b)
        let heard = Mutex<[Int64]>([])
        _ = registry.subscribe(a.share.id) { event in
            if case .fix(let fix) = event { heard.withLock { $0.append(fix.timestamp) } }
        }
        let fix = { (t: Int64) in Fix(latitude: 1, longitude: 2, timestamp: t) }
        registry.record([(a.share.id, fix(10)), (b.share.id, fix(11)), (gone, fix(12)), (a.share.id, fix(30)), (a.share.id, fix(20))])
        #expect(heard.withLock { $0 } == [10, 30])  // 20 arrived after 30: stored in the trail, not news
        #expect(registry.snapshot(a.share.id)?.trail.map(\.timestamp) == [10, 20, 30])
        #expect(registry.snapshot(a.share.id)?.last?.timestamp == 30)
        #expect(registry.snapshot(b.share.id)?.last?.timestamp == 11)
        #expect(registry.snapshot(gone) == nil)
    }

    @Test func aCachedRenderingNeverOutlivesTheStateItShows() {
        let registry = ShareRegistry(trailLength: 32, trackerRules: TrackerRules(staleAfterMillis: 120_000))
        let share = stored()
        let id = share.share.id
        registry.insert(share)
        let first = registry.snapshot(id)!
        #expect(first.cachedView == nil)
        registry.cacheView(id, version: first.version, bytes: [1])
        #expect(registry.snapshot(id)?.cachedView == [1])

        // A rendering of an older snapshot is not kept.
        let before = registry.snapshot(id)!
        registry.record(Fix(latitude: 1, longitude: 2, timestamp: 3), for: id)
        #expect(registry.snapshot(id)?.cachedView == nil)
        registry.cacheView(id, version: before.version, bytes: [2])
        #expect(registry.snapshot(id)?.cachedView == nil)

        for change in [{ registry.updateExpiry(id, expiresAt: 5_000_000) }, { registry.markEnded(id, reason: .stopped, at: 9) }] {
            let current = registry.snapshot(id)!
            registry.cacheView(id, version: current.version, bytes: [3])
            #expect(registry.snapshot(id)?.cachedView == [3])
            change()
            #expect(registry.snapshot(id)?.cachedView == nil)
        }
    }

    /// The periodic sweep names the active shares whose tracker state the passing of time alone has changed, and
    /// no other: not an ended share, not one heard from recently, not one already recorded stale.
    @Test func theTrackerSweepNamesOnlyActiveSharesThatTimeAloneMadeStale() {
        let registry = ShareRegistry(trailLength: 3, trackerRules: TrackerRules(staleAfterMillis: 120_000))
        let silent = stored(), ended = stored(active: false), alreadyStale = stored(), recent = stored(createdAt: 150_000)
        var recorded = alreadyStale
        recorded.share.tracker = TrackerRecord(state: .stale, since: 120_000)
        for share in [silent, ended, recorded, recent] { registry.insert(share) }
        #expect(registry.trackersOutOfDate(now: 200_000) == [silent.share.id])
        #expect(Set(registry.trackersOutOfDate(now: 300_000)) == [silent.share.id, recent.share.id])
    }

    /// The sweep reads the entries a slice at a time: over several slices it still names every one, once.
    @Test func theTrackerSweepFindsEveryStaleShareAcrossItsSlices() {
        let registry = ShareRegistry(trailLength: 3, trackerRules: TrackerRules(staleAfterMillis: 120_000))
        var silent: Set<ShareID> = []
        for index in 0..<(2 * ShareRegistry.sweepSlice + 7) {
            let share = stored(createdAt: index % 3 == 0 ? 150_000 : 0)
            registry.insert(share)
            if index % 3 != 0 { silent.insert(share.share.id) }
        }
        let found = registry.trackersOutOfDate(now: 200_000)
        #expect(found.count == silent.count && Set(found) == silent)
    }

    @Test func countsActiveSharesAndViewers() {
        let registry = ShareRegistry(trailLength: 32, trackerRules: TrackerRules(staleAfterMillis: 120_000))
        let a = stored(), b = stored(active: false)
        registry.insert(a)
        registry.insert(b)
        #expect(registry.activeShareCount == 1 && registry.shareCount == 2)
        let subscription = registry.subscribe(a.share.id) { _ in }
        #expect(registry.subscribe(b.share.id) { _ in } == nil)
        #expect(registry.viewerCount == 1)
        registry.unsubscribe(a.share.id, subscription: subscription!)
        #expect(registry.viewerCount == 0)
        registry.markEnded(a.share.id, reason: .expired, at: 9)
        #expect(registry.activeShareCount == 0)
        registry.remove(a.share.id)
        #expect(registry.snapshot(viewTokenHash: a.share.viewTokenHash) == nil)
    }
}

@Suite struct DeadlineSchedulerTests {
    /// Runs `body` with a scheduler on a clock the test moves, that records the jobs it runs (`ran`); stops it
    /// afterwards. `asleep`: its thread already waits for a job tomorrow, so a job scheduled in `body` runs at its
    /// time only if something wakes the thread (a new earliest deadline, or the clock moving).
    func withRecordingScheduler(asleep: Bool = false,
                                _ body: (_ scheduler: DeadlineScheduler<String>, _ ran: () -> [String], _ clock: ManualClock) -> Void) {
        let ran = Mutex<[String]>([])
        let clock = ManualClock()
        let scheduler = DeadlineScheduler<String>(clock: clock) { job in ran.withLock { $0.append(job) } }
        if asleep { scheduler.schedule("tomorrow", at: clock.now() + 86_400_000) }
        body(scheduler, { ran.withLock { $0 } }, clock)
        scheduler.stop()
    }

    @Test func runsJobsInDeadlineOrderAndHonoursReschedulingAndCancelling() {
        withRecordingScheduler { scheduler, ran, clock in
            let now = clock.now()
            scheduler.schedule("c", at: now + 90)
            scheduler.schedule("a", at: now + 10)
            scheduler.schedule("b", at: now + 50)
            scheduler.schedule("moved", at: now + 20)
            scheduler.schedule("moved", at: now + 120)  // replaces the earlier deadline
            scheduler.schedule("cancelled", at: now + 30)
            scheduler.cancel("cancelled")
            scheduler.schedule("past", at: now - 1000)
            #expect(eventually { ran() == ["past"] })
            clock.advance(by: 60)
            #expect(eventually { ran() == ["past", "a", "b"] })
            clock.advance(by: 60)
            #expect(eventually { ran().count == 5 })
            #expect(ran() == ["past", "a", "b", "c", "moved"])
            #expect(scheduler.pendingCount == 0)
        }
    }

    /// Untracked items cost no table entry: rescheduling or cancelling does not touch them, each runs when due, in
    /// deadline order with the tracked ones, and waking works for them as for the others.
    @Test func untrackedJobsRunWhenDueWhateverWasScheduledSince() {
        withRecordingScheduler(asleep: true) { scheduler, ran, clock in
            let now = clock.now()
            scheduler.scheduleUntracked("expire", at: now + 600)
            scheduler.scheduleUntracked("expire", at: now + 1_600)  // an extension: the first one still runs
            scheduler.cancel("expire")  // no effect on untracked items
            scheduler.schedule("tracked", at: now + 1_100)
            #expect(scheduler.pendingCount == 4)
            clock.advance(by: 600)
            #expect(eventually { ran() == ["expire"] })
            clock.advance(by: 1_000)
            #expect(eventually { ran() == ["expire", "tracked", "expire"] })
            #expect(scheduler.pendingCount == 1)
        }
    }

    /// Only a new earliest deadline wakes the sleeping thread on its own; a later one is looked at when the thread
    /// next wakes, also when the earliest item is a cancelled one. The clock moving wakes it too, so every job runs
    /// at its time, not a minute late.
    @Test func aNewEarliestDeadlineWakesTheThreadAndALaterOneIsStillRun() {
        withRecordingScheduler(asleep: true) { scheduler, ran, clock in
            scheduler.schedule("due", at: clock.now())
            #expect(eventually { ran() == ["due"] })

            let later = clock.now()
            scheduler.schedule("cancelled", at: later + 200)
            scheduler.cancel("cancelled")
            scheduler.schedule("after the cancelled one", at: later + 400)  // not the earliest item: no wake-up
            clock.advance(by: 399)
            // The witness: due now, and the earliest, so it wakes the thread; the later job is not due yet.
            scheduler.schedule("witness", at: clock.now())
            #expect(eventually { ran() == ["due", "witness"] })
            clock.advance(by: 1)
            #expect(eventually { ran() == ["due", "witness", "after the cancelled one"] })
            #expect(scheduler.pendingCount == 1)
        }
    }
}
