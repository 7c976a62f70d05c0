import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import Testing
@testable import FlareBridge

@Suite struct FixIngestorTests {
    @Test func storesValidFixesAndTellsViewers() throws {
        let fixture = try BridgeFixture()
        let created = try fixture.service.create(name: nil, durationSeconds: 600)
        let id = created.share.id
        let seen = Mutex<[LiveEvent]>([])
        _ = fixture.registry.subscribe(id) { event in seen.withLock { $0.append(event) } }
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fixture.location(48.1, 11.5), retained: false) == nil)
        #expect(eventually { fixture.registry.snapshot(id)?.last?.latitude == 48.1 })
        let row = try #require(fixture.registry.snapshot(id)?.row)
        #expect(try fixture.store.fixCount(row: row) == 1)
        #expect(seen.withLock { $0.count } == 1)
        #expect(fixture.metrics.value(FlareMetrics.fixesAccepted) == 1)
    }

    @Test func refusesWithReasonsAndChangesNothing() throws {
        let fixture = try BridgeFixture()
        let created = try fixture.service.create(name: nil, durationSeconds: 600)
        let id = created.share.id
        let topic = Topics.location(id)
        #expect(fixture.ingestor.handle(topic: topic, payload: Array("{".utf8), retained: false) == .malformed)
        #expect(fixture.ingestor.handle(topic: topic, payload: Array(#"{"lat":100,"lon":0}"#.utf8), retained: false) == .invalidCoordinates)
        #expect(fixture.ingestor.handle(topic: topic, payload: Array(#"{"_type":"transition","tst":1}"#.utf8), retained: false) == .ignoredType)
        #expect(fixture.ingestor.handle(topic: Topics.location(.generate()), payload: fixture.location(1, 1), retained: false) == .unknownShare)
        #expect(fixture.ingestor.handle(topic: "flare/v1/shares/x/location", payload: fixture.location(1, 1), retained: false) == .badTopic)
        #expect(fixture.ingestor.handle(topic: topic, payload: [], retained: true) == nil)  // a cleared retained location
        try fixture.service.stop(id)
        #expect(fixture.ingestor.handle(topic: topic, payload: fixture.location(1, 1), retained: false) == .shareEnded)
        fixture.ingestor.drain(failingStoreGraceSeconds: 20)
        let row = try #require(fixture.registry.snapshot(id)?.row)
        #expect(try fixture.store.fixCount(row: row) == 0)
        #expect(fixture.registry.snapshot(id)?.last == nil)
        #expect(fixture.metrics.value(FlareMetrics.fixesRejected, labels: [("reason", "malformed")]) == 1)
        #expect(fixture.metrics.value(FlareMetrics.fixesRejected, labels: [("reason", "share_ended")]) == 1)
    }

    @Test func redeliveriesAreStoredOnce() throws {
        let fixture = try BridgeFixture()
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let payload = fixture.location(48.1, 11.5)
        for _ in 0..<3 { fixture.ingestor.handle(topic: Topics.location(id), payload: payload, retained: false) }
        // A bare retained payload seen again on resubscribe has no tst: it matches the last fix and is skipped.
        #expect(eventually { fixture.registry.snapshot(id)?.last != nil })
        fixture.ingestor.handle(topic: Topics.location(id), payload: Array(#"{"lat":48.1,"lon":11.5}"#.utf8), retained: true)
        fixture.ingestor.drain(failingStoreGraceSeconds: 20)
        let row = try #require(fixture.registry.snapshot(id)?.row)
        #expect(try fixture.store.fixCount(row: row) == 1)
        #expect(fixture.metrics.value(FlareMetrics.fixesDuplicate) == 3)
    }

    /// The bridge's acknowledgement gate: when it returns true, every fix handed over is already in the store.
    @Test func waitUntilStoredReturnsOnceEveryHandedOverFixIsCommitted() throws {
        let fixture = try BridgeFixture()
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let row = try #require(fixture.registry.snapshot(id)?.row)
        let now = Int64(Date().timeIntervalSince1970)
        var handedOver = 0
        for round in 1...20 {
            for index in 0..<(round * 37) {
                fixture.ingestor.handle(topic: Topics.location(id), payload: fixture.location(1, Double(handedOver + index) / 100_000, tst: now - 100), retained: false)
            }
            handedOver += round * 37
            #expect(fixture.ingestor.waitUntilStored())
            #expect(try fixture.store.fixCount(row: row) == handedOver)
        }
        fixture.ingestor.drain(failingStoreGraceSeconds: 20)
    }

    @Test func drainWritesEverythingQueued() throws {
        let fixture = try BridgeFixture()
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let now = Int64(Date().timeIntervalSince1970)
        for index in 0..<5000 {
            fixture.ingestor.handle(topic: Topics.location(id), payload: fixture.location(1, Double(index) / 10_000, tst: now - 100 + Int64(index % 100)), retained: false)
        }
        fixture.ingestor.drain(failingStoreGraceSeconds: 20)
        let row = try #require(fixture.registry.snapshot(id)?.row)
        #expect(try fixture.store.fixCount(row: row) == 5000)
    }
}

@Suite struct ShareRegistryTests {
    func stored(active: Bool = true, createdAt: UnixMillis = 0) -> StoredShare {
        StoredShare(row: 1, share: Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: createdAt, expiresAt: 1_000_000,
                                         endedAt: active ? nil : 5, endReason: active ? nil : .stopped))
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
    @Test func runsJobsInDeadlineOrderAndHonoursReschedulingAndCancelling() {
        let ran = Mutex<[String]>([])
        let clock = SystemWallClock()
        let scheduler = DeadlineScheduler<String>(clock: clock) { job in ran.withLock { $0.append(job) } }
        let now = clock.now()
        scheduler.schedule("c", at: now + 90)
        scheduler.schedule("a", at: now + 10)
        scheduler.schedule("b", at: now + 50)
        scheduler.schedule("moved", at: now + 20)
        scheduler.schedule("moved", at: now + 120)  // replaces the earlier deadline
        scheduler.schedule("cancelled", at: now + 30)
        scheduler.cancel("cancelled")
        scheduler.schedule("past", at: now - 1000)
        #expect(eventually { ran.withLock { $0.count } == 5 })
        #expect(ran.withLock { $0 } == ["past", "a", "b", "c", "moved"])
        #expect(scheduler.pendingCount == 0)
        scheduler.stop()
    }

    /// Only a new earliest deadline wakes the sleeping thread; a later one waits for the thread's own wake-up, also
    /// when the earliest item is a cancelled one. Either way every job runs at its time, not a minute late.
    @Test func aNewEarliestDeadlineWakesTheThreadAndALaterOneIsStillRun() {
        let ran = Mutex<[String]>([])
        let clock = SystemWallClock()
        let scheduler = DeadlineScheduler<String>(clock: clock) { job in ran.withLock { $0.append(job) } }
        let now = clock.now()
        scheduler.schedule("tomorrow", at: now + 86_400_000)
        usleep(100_000)  // the thread now sleeps a minute (its longest wait)
        scheduler.schedule("soon", at: now + 150)
        #expect(eventually(timeout: .seconds(10)) { ran.withLock { $0 } == ["soon"] })

        let later = clock.now()
        scheduler.schedule("cancelled", at: later + 200)
        scheduler.cancel("cancelled")
        scheduler.schedule("after the cancelled one", at: later + 400)  // not the earliest item: no wake-up
        #expect(eventually(timeout: .seconds(10)) { ran.withLock { $0 } == ["soon", "after the cancelled one"] })
        #expect(scheduler.pendingCount == 1)
        scheduler.stop()
    }
}

@Suite struct BlockingQueueTests {
    @Test func takesInOrderWithAndWithoutWaitingAndDrainsAfterClose() {
        let queue = BlockingQueue<Int>(capacity: 4)
        #expect(queue.takeAvailable(maximum: 10) == [])  // empty: returns at once
        for value in 1...4 { #expect(queue.put(value)) }
        #expect(queue.takeAvailable(maximum: 3) == [1, 2, 3])
        #expect(queue.put(5))
        #expect(queue.takeBatch(maximum: 10) == [4, 5])
        #expect(queue.put(6))
        queue.close()
        #expect(queue.isClosed)
        #expect(!queue.put(7))  // refused once closed…
        #expect(queue.takeBatch(maximum: 10) == [6])  // …but what was queued is still handed out
        #expect(queue.takeBatch(maximum: 10) == [])
    }

    @Test func waitUntilProcessedWaitsForTheConsumerAndFailsForRefusedOrAbandoned() {
        let queue = BlockingQueue<Int>(capacity: 8)
        #expect(queue.waitUntilProcessed())  // nothing accepted: nothing to wait for
        for value in 1...3 { #expect(queue.put(value)) }
        let result = Mutex<Bool?>(nil)
        let waiter = Thread { let ok = queue.waitUntilProcessed(); result.withLock { $0 = ok } }
        waiter.start()
        #expect(eventually { queue.isAwaitingProcessing })
        _ = queue.takeBatch(maximum: 10)
        queue.markProcessed(2)
        #expect(queue.isAwaitingProcessing)  // one of the three is still unprocessed
        #expect(result.withLock { $0 } == nil)
        queue.markProcessed(1)
        #expect(eventually { result.withLock { $0 } == true })

        // A refused element is never processed: the next wait says so at once, the one after is back to normal.
        queue.refuseWhenFull()
        for value in 4...12 { queue.put(value) }  // 8 fit, 1 refused
        _ = queue.takeBatch(maximum: 10)
        queue.markProcessed(8)
        #expect(!queue.waitUntilProcessed())
        #expect(queue.waitUntilProcessed())

        // Abandoned (a store that will not recover): a waiter is released with false.
        #expect(queue.put(13))
        let abandoned = Mutex<Bool?>(nil)
        let second = Thread { let ok = queue.waitUntilProcessed(); abandoned.withLock { $0 = ok } }
        second.start()
        #expect(eventually { queue.isAwaitingProcessing })
        queue.abandonWaits()
        #expect(eventually { abandoned.withLock { $0 } == false })
        #expect(!queue.isAwaitingProcessing)
    }

    @Test func refusesInsteadOfWaitingOnceToldAndCountsIt() {
        let queue = BlockingQueue<Int>(capacity: 2)
        queue.refuseWhenFull()
        #expect(queue.put(1) && queue.put(2))  // room: taken as usual
        #expect(!queue.put(3))  // full: refused, not waited for
        queue.setPaused(true)
        _ = queue.takeAvailable(maximum: 1)
        #expect(!queue.put(4))  // room, but paused (a failing store): refused too
        queue.setPaused(false)
        #expect(queue.put(5))
        #expect(queue.refused == 2)
        #expect(queue.takeBatch(maximum: 10) == [2, 5])
    }
}
