import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import FlareServiceTestSupport
import Testing
@testable import FlareBridge
@testable import FlareShares
@testable import FlareIngest
import FlareSystem

@Suite struct FixIngestorTests {
    @Test func storesValidFixesAndTellsViewers() throws {
        let fixture = try ServiceFixture()
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
        let fixture = try ServiceFixture()
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
        let fixture = try ServiceFixture()
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
        let fixture = try ServiceFixture()
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
        let fixture = try ServiceFixture()
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
