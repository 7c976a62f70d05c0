import FlareAPI
import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import FlareServiceTestSupport
import Testing
@testable import FlareBridge
@testable import FlareShares
import FlareSystem
import FlareCodec

/// What the broker's epoch mark reads as, set by the test.
final class SetEpochReader: BrokerEpochReading {
    enum Reading { case mark(Int64?), unreachable }
    struct Unreachable: Error {}
    private let state = Mutex<(reading: Reading, reads: Int)>((.mark(nil), 0))

    func set(_ reading: Reading) { state.withLock { $0.reading = reading } }
    var reads: Int { state.withLock { $0.reads } }

    func readEpoch() throws -> Int64? {
        let reading = state.withLock { state in
            state.reads += 1
            return state.reading
        }
        switch reading {
        case .mark(let epoch): return epoch
        case .unreachable: throw Unreachable()
        }
    }
}

/// The number of the publisher's connection to the broker, set by the test.
final class Connection: Sendable {
    private let number = Mutex<Int?>(1)
    var current: Int? { number.withLock { $0 } }
    func reconnect() { number.withLock { $0 = ($0 ?? 0) + 1 } }
}

@Suite struct BrokerStateKeeperTests {
    let fixture: ServiceFixture
    let reader = SetEpochReader()
    let connection = Connection()
    let keeper: BrokerStateKeeper

    init() throws {
        fixture = try ServiceFixture()
        let connection = self.connection
        keeper = BrokerStateKeeper(store: fixture.store, shares: fixture.service, publisher: fixture.publisher, reader: reader, holder: "flared",
                                   connection: { connection.current }, clock: fixture.clock, metrics: fixture.metrics,
                                   logger: Logger(label: "test", level: .error))
    }

    /// An active share with one stored fix, and a stopped one.
    func twoShares() throws -> (active: ShareID, fix: [UInt8], stopped: ShareID) {
        let active = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let fix = fixture.location(52.5, 13.4)
        #expect(fixture.ingestor.handle(topic: Topics.location(active), payload: fix, retained: false) == nil)
        #expect(eventually { fixture.registry.snapshot(active)?.last != nil })
        let stopped = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        try fixture.service.stop(stopped)
        return (active, fix, stopped)
    }

    /// What was published after the first `count` messages, leaving out the mark's barrier messages.
    func published(after count: Int) -> [RecordingPublisher.Message] {
        fixture.publisher.messages.dropFirst(count).filter { $0.topic != BrokerStateKeeper.barrierTopic }
    }

    func epochs(in messages: [RecordingPublisher.Message]) -> [Int64] {
        messages.filter { $0.topic == Topics.brokerEpoch }.compactMap {
            (try? JSONValue.parse($0.payload))?["epoch"]?.doubleValue.map { Int64($0) }
        }
    }

    /// The store has recorded that the broker acknowledged epoch `epoch`.
    func storeRecords(_ epoch: Int64) throws {
        #expect(try fixture.store.holdLease(BrokerStateKeeper.leaseName, holder: "flared", now: 0, durationMillis: 1) != nil)
        #expect(try fixture.store.setLeaseValue(BrokerStateKeeper.leaseName, holder: "flared", value: epoch))
    }

    /// A new installation, or the first start after an upgrade: no mark anywhere, and the broker holds what the last
    /// release published. The count starts; nothing is republished.
    @Test func aStoreWithNoMarkStartsTheCount() throws {
        _ = try twoShares()
        let before = fixture.publisher.messages.count
        reader.set(.mark(nil))
        keeper.step()
        #expect(epochs(in: published(after: before)) == [1] && published(after: before).count == 1)
        #expect(try fixture.store.holdLease(BrokerStateKeeper.leaseName, holder: "flared", now: 0, durationMillis: 1) == 1)
        #expect(fixture.metrics.value(FlareMetrics.brokerRestores) == 0)
    }

    @Test func aBrokerWithNoMarkGetsEveryShareBackAndThenTheMark() throws {
        let (active, fix, stopped) = try twoShares()
        try storeRecords(3)
        let before = fixture.publisher.messages.count
        reader.set(.mark(nil))  // a broker that lost everything (it kept no persistence file, or lost it)
        keeper.step()
        let sent = published(after: before)
        let status = try #require(sent.last { $0.topic == Topics.status(active) })
        #expect((try JSONValue.parse(status.payload))["state"] == .string("active") && status.retain)
        let position = try #require(sent.last { $0.topic == Topics.location(active) })
        // Marked as flared's own, so that no bridge stores it again; the fix as the tracker's topic carries it.
        #expect(position.isOwnPosition && position.retain)
        let sentFix = try JSONValue.parse(position.payload), storedFix = try JSONValue.parse(fix)
        #expect(sentFix["lat"] == storedFix["lat"] && sentFix["tst"] == storedFix["tst"])
        // The stopped share says so, and has no position (the broker may have gone back to a save from before the stop).
        #expect(sent.last { $0.topic == Topics.status(stopped) }.flatMap { try? JSONValue.parse($0.payload) }?["state"] == .string("ended"))
        #expect(sent.last { $0.topic == Topics.location(stopped) }?.payload == [])
        // The mark comes last, and the store remembers it once acknowledged.
        #expect(sent.last?.topic == Topics.brokerEpoch && epochs(in: sent) == [4])
        #expect(try fixture.store.holdLease(BrokerStateKeeper.leaseName, holder: "flared", now: 0, durationMillis: 1) == 4)
        #expect(fixture.metrics.value(FlareMetrics.brokerRestores) == 1)
        #expect(fixture.metrics.value(FlareMetrics.brokerRestoredMessages) == 4)

        // Then the mark goes up once a second, and nothing else is sent again.
        let afterRestore = fixture.publisher.messages.count
        keeper.step()
        #expect(epochs(in: published(after: afterRestore)) == [5] && published(after: afterRestore).count == 1)
    }

    /// An end-to-end encrypted share's position is the phone's ciphertext, which the server cannot read: the restore
    /// publishes it again as it came, in the apps' `encrypted` message.
    @Test func aBrokerWithNoMarkGetsAnEncryptedSharesCiphertextBack() throws {
        let id = try fixture.service.create(name: nil, durationSeconds: 600, endToEnd: true).share.id
        let data = Data((0..<72).map { UInt8($0 * 7 % 256) }).base64EncodedString()
        let message = #"{"_type":"encrypted","data":"\#(data)"}"#
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(message.utf8), retained: false) == nil)
        #expect(eventually { fixture.registry.snapshot(id)?.last?.sealed == data })
        try storeRecords(3)
        let before = fixture.publisher.messages.count
        reader.set(.mark(nil))
        keeper.step()
        let sent = published(after: before)
        #expect(sent.last { $0.topic == Topics.status(id) }.flatMap { try? JSONValue.parse($0.payload) }?["state"] == .string("active"))
        let position = try #require(sent.last { $0.topic == Topics.location(id) })
        #expect(position.isOwnPosition && position.retain)
        #expect(try JSONValue.parse(position.payload) == JSONValue.parse(Array(message.utf8)))
        #expect(epochs(in: sent) == [4] && fixture.metrics.value(FlareMetrics.brokerRestores) == 1)
    }

    @Test func aBrokerShowingTheStoresMarkIsLeftAlone() throws {
        _ = try twoShares()
        reader.set(.mark(nil))
        keeper.step()  // the first mark
        let keeper2 = BrokerStateKeeper(store: fixture.store, shares: fixture.service, publisher: fixture.publisher, reader: reader, holder: "flared",
                                        connection: { 1 }, clock: SystemClock(), metrics: Metrics(),
                                        logger: Logger(label: "test", level: .error))
        // A restarted flared (same holder) finds the broker as it left it: the mark it recorded, or a newer one.
        reader.set(.mark(1))
        let before = fixture.publisher.messages.count
        keeper2.step()
        #expect(published(after: before).isEmpty)
        keeper2.step()
        #expect(epochs(in: published(after: before)) == [2])
        #expect(published(after: before).count == 1)
    }

    @Test func aBrokerBehindTheStoreLostRetainedMessagesAndGetsThemBack() throws {
        let (active, _, _) = try twoShares()
        try storeRecords(7)
        reader.set(.mark(5))  // a save two seconds older than what the broker had acknowledged
        let before = fixture.publisher.messages.count
        keeper.step()
        let sent = published(after: before)
        #expect(sent.contains { $0.topic == Topics.status(active) } && sent.contains { $0.topic == Topics.location(active) })
        #expect(epochs(in: sent) == [8])
    }

    @Test func aReconnectionIsCheckedAgainAndAnUnreachableBrokerTriedAgain() throws {
        _ = try twoShares()
        reader.set(.mark(nil))
        keeper.step()
        keeper.step()  // the mark goes up on the checked connection
        reader.set(.unreachable)
        connection.reconnect()
        let before = fixture.publisher.messages.count
        keeper.step()
        #expect(published(after: before).isEmpty)  // neither a restore nor a mark until the broker says which
        reader.set(.mark(nil))  // it came back empty (no persistence, or a crash)
        keeper.step()
        #expect(published(after: before).count == 5 && epochs(in: published(after: before)) == [3])
    }

    /// A broker that goes away during the restore may hold only part of it: the next connection is checked and
    /// restored again, and the mark is never raised on a connection that was not checked.
    @Test func aRestoreCutOffByAReconnectionIsDoneAgain() throws {
        _ = try twoShares()
        try storeRecords(2)
        reader.set(.mark(nil))
        // The restore runs on connection 1; the broker goes and comes back as the mark is published after it.
        let cutting = BrokerStateKeeper(store: fixture.store, shares: fixture.service, publisher: ReconnectingPublisher(fixture.publisher, connection),
                                        reader: reader, holder: "flared", connection: { [connection] in connection.current },
                                        clock: SystemClock(), metrics: Metrics(), logger: Logger(label: "test", level: .error))
        cutting.step()
        #expect(try fixture.store.holdLease(BrokerStateKeeper.leaseName, holder: "flared", now: 0, durationMillis: 1) == 2)
        let again = fixture.publisher.messages.count
        keeper.step()  // connection 2: checked, restored, marked
        #expect(published(after: again).count == 5 && epochs(in: published(after: again)) == [3])
    }

    @Test func anotherInstanceHoldingTheLeaseKeepsTheBroker() throws {
        _ = try twoShares()
        #expect(try fixture.store.holdLease(BrokerStateKeeper.leaseName, holder: "flared-b", now: SystemClock().now(),
                                            durationMillis: 60_000) == 0)
        let before = fixture.publisher.messages.count
        keeper.step()
        #expect(published(after: before).isEmpty && reader.reads == 0)
    }

    /// A share ended (here by another instance, straight in the store) while its active state was being republished
    /// may have had its end overtaken on the broker: the confirmation announces the end again.
    @Test func aShareEndedDuringTheRestoreIsNotBroughtBack() throws {
        let (active, _, _) = try twoShares()
        let restored = try #require(fixture.service.restoreBrokerState(window: 1, timeout: .seconds(1)))
        #expect(restored.shares == 2)
        let row = try #require(try fixture.store.share(id: active)).row
        #expect(try fixture.store.markEnded(row: row, at: SystemClock().now(), reason: .stopped))
        let before = fixture.publisher.messages.count
        #expect(fixture.service.confirmRestore(restored) == 1)
        let sent = published(after: before)
        #expect(sent.last { $0.topic == Topics.location(active) }?.payload == [])
        #expect(sent.last { $0.topic == Topics.status(active) }.flatMap { try? JSONValue.parse($0.payload) }?["state"] == .string("ended"))
        #expect(fixture.registry.snapshot(active)?.share.isActive == false)
    }

    @Test func aRestoreThatLosesTheBrokerIsReportedUnfinished() throws {
        _ = try twoShares()
        try storeRecords(1)
        fixture.publisher.setDown(true)
        #expect(fixture.service.restoreBrokerState(window: 200, timeout: .seconds(1)) == nil)
        reader.set(.mark(nil))
        keeper.step()
        fixture.publisher.setDown(false)
        let before = fixture.publisher.messages.count
        keeper.step()  // still to be checked: the restore runs now
        #expect(epochs(in: published(after: before)) == [2] && published(after: before).count == 5)
    }

    /// A restored (or HTTP) position that came back through the bridge after a newer fix from the tracker: the
    /// broker retained the older one, so the newest stored is published again; an echo of the newest changes nothing.
    @Test func anOvertakenRestoredPositionIsPutRight() throws {
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let now = Int64(Date().timeIntervalSince1970)
        for tst in [now - 20, now - 10] {
            #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fixture.location(1, 2, tst: tst), retained: false) == nil)
        }
        #expect(eventually { fixture.registry.snapshot(id)?.last?.timestamp == now - 10 })
        let before = fixture.publisher.messages.count
        fixture.service.ownPositionCameBack(topic: Topics.location(id), payload: fixture.location(1, 2, tst: now - 20))
        fixture.clock.advance(by: ShareService.positionCheckDelayMillis)
        #expect(eventually { published(after: before).contains { $0.topic == Topics.location(id) } })
        let republished = try #require(published(after: before).first { $0.topic == Topics.location(id) })
        let republishedFix = try JSONValue.parse(republished.payload)
        #expect(republished.isOwnPosition && republishedFix["tst"] == .number(Double(now - 10)))

        let afterFix = fixture.publisher.messages.count
        fixture.service.ownPositionCameBack(topic: Topics.location(id), payload: republished.payload)
        // The witness: a share ending after the check is due. The scheduler runs jobs in deadline order, so once it
        // has ended the check has run, and whatever it would have published is there.
        let witness = try fixture.service.create(name: nil, durationSeconds: Double(ShareService.positionCheckDelayMillis / 1000 + 1)).share.id
        fixture.clock.advance(by: ShareService.positionCheckDelayMillis + 1_100)
        #expect(eventually { fixture.registry.snapshot(witness)?.share.isActive == false })
        #expect(!published(after: afterFix).contains { $0.topic == Topics.location(id) })
    }
}

/// Passes messages on, and has the broker go away and come back (a new connection) as the first epoch mark is sent.
final class ReconnectingPublisher: BrokerPublisher {
    let inner: RecordingPublisher
    let connection: Connection
    private let cut = Mutex(false)

    init(_ inner: RecordingPublisher, _ connection: Connection) {
        self.inner = inner
        self.connection = connection
    }

    func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool {
        if topic == Topics.brokerEpoch, !cut.withLock({ $0 }) {
            cut.withLock { $0 = true }
            connection.reconnect()
        }
        return inner.publish(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: expirySeconds)
    }

    func publishOwnPosition(topic: String, payload: [UInt8]) -> Bool { inner.publishOwnPosition(topic: topic, payload: payload) }

    func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?, timeout: Duration) -> Bool {
        publish(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: expirySeconds)
    }
}

@Suite struct ConfirmingTrackerTests {
    func fix(_ lat: Double, seq: Int64, stream: Int64 = 1_764_600_000_000) -> [UInt8] {
        Array(#"{"_type":"location","lat":\#(lat),"lon":13.4,"tst":\#(Int64(Date().timeIntervalSince1970)),"seq_stream":\#(stream),"seq":\#(seq)}"#.utf8)
    }

    func marks(_ fixture: ServiceFixture, _ id: ShareID) -> [Int64] {
        fixture.publisher.messages.filter { $0.topic == Topics.stored(id) }.compactMap {
            (try? JSONValue.parse($0.payload))?["seq"]?.doubleValue.map { Int64($0) }
        }
    }

    /// The mark follows what is committed, moves past a refused message (sending it again would change nothing), and
    /// is published at most once a second, retained, with the newest number.
    @Test func theMarkCoversStoredAndRefusedMessagesOnceASecond() throws {
        let fixture = try ServiceFixture()
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fix(52.1, seq: 1), retained: false) == nil)
        #expect(eventually { marks(fixture, id) == [1] })
        #expect(fixture.publisher.last(on: Topics.stored(id))?.retain == true)
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fix(52.2, seq: 2), retained: false) == nil)
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fix(999, seq: 3), retained: false) == .invalidCoordinates)
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fix(52.4, seq: 4), retained: false) == nil)
        // Their marks are handled after the fixes count as stored: a fix handed over once they are stored is written in
        // a later round, after those marks were held. The refusal's job is due at once, before the held mark's.
        #expect(fixture.ingestor.waitUntilStored())
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fixture.location(52.5, 13.4), retained: false) == nil)
        #expect(fixture.ingestor.waitUntilStored())
        #expect(marks(fixture, id) == [1])
        fixture.clock.advance(by: 1_000)
        #expect(eventually { marks(fixture, id).last == 4 })
        // Within the second after the first mark, at most one more was published: the newest.
        #expect(marks(fixture, id).count <= 3)
        let stream = try #require(fixture.publisher.lastJSON(on: Topics.stored(id)))
        #expect(stream["seq_stream"] == .number(1_764_600_000_000))
        // A fix sent again (its confirmation was lost) hears the mark again.
        fixture.clock.advance(by: 1_100)
        let before = marks(fixture, id).count
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fix(52.4, seq: 4), retained: false) == nil)
        #expect(eventually { marks(fixture, id).count == before + 1 })
    }
}
