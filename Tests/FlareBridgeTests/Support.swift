import FlareAPI
import FlareCore
import FlareCrypto
import FlareSQLite
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
@testable import FlareBridge

/// Records what the share service announces; can pretend the broker is down.
final class RecordingPublisher: BrokerPublisher {
    struct Message: Equatable {
        let topic: String; let payload: [UInt8]; let retain: Bool
        /// Sent with flared's origin property (`publishOwnPosition`).
        var isOwnPosition = false
    }
    private let state = Mutex<(messages: [Message], down: Bool)>(([], false))

    func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool {
        state.withLock { state in
            guard !state.down else { return false }
            state.messages.append(Message(topic: topic, payload: payload, retain: retain))
            return true
        }
    }

    func publishOwnPosition(topic: String, payload: [UInt8]) -> Bool {
        state.withLock { state in
            guard !state.down else { return false }
            state.messages.append(Message(topic: topic, payload: payload, retain: true, isOwnPosition: true))
            return true
        }
    }

    func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?, timeout: Duration) -> Bool {
        publish(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: expirySeconds)
    }

    var messages: [Message] { state.withLock { $0.messages } }
    func setDown(_ down: Bool) { state.withLock { $0.down = down } }

    func last(on topic: String) -> Message? { messages.last { $0.topic == topic } }
    func lastJSON(on topic: String) -> JSONValue? { last(on: topic).flatMap { try? JSONValue.parse($0.payload) } }
}

/// The system's time, except that no two readings are the same millisecond: a test that sends a will and then a fix
/// within one millisecond means the fix came after it, which is what the tracker rules are told by a later reading.
/// (Flare counts a fix heard in the same millisecond as the will as sent before it.)
final class StrictlyIncreasingClock: WallClock {
    private let last = Mutex<UnixMillis>(0)
    func now() -> UnixMillis {
        let system = SystemWallClock().now()
        return last.withLock { last in
            last = max(system, last + 1)
            return last
        }
    }
}

/// A share service, registry, ingestor and store on a real SQLite file in a temp directory.
struct BridgeFixture {
    let directory: URL
    let store: any ShareStore
    let registry: ShareRegistry
    let publisher: RecordingPublisher
    let service: ShareService
    let ingestor: FixIngestor
    let metrics: Metrics
    let key: [UInt8]

    init(directory: URL? = nil, retentionSeconds: Int64 = 86_400, staleAfterSeconds: Int64 = 120, key: [UInt8] = Crypto.randomBytes(32),
         publisher: RecordingPublisher = RecordingPublisher(), eventDestinations: [EventDestination] = [.mqtt],
         hostResolver: any HostResolving = FixedResolver.public) throws {
        self.directory = try directory ?? TempDirectory.make(prefix: "flare-bridge")
        store = try SQLiteShareStore(path: self.directory.appendingPathComponent("flare.db").path)
        self.publisher = publisher
        self.key = key
        metrics = Metrics()
        let logger = Logger(label: "test", level: .error)
        let clock = StrictlyIncreasingClock()
        service = ShareService(store: store, trailLength: 4, publisher: publisher, tokenKey: key,
                               policy: SharePolicy(defaultDurationSeconds: 3600, maximumDurationSeconds: 86_400, historyRetentionSeconds: retentionSeconds),
                               trackerRules: TrackerRules(staleAfterMillis: staleAfterSeconds * 1000), clock: clock, metrics: metrics, logger: logger,
                               eventDestinations: eventDestinations, hostResolver: hostResolver)
        registry = service.registry
        ingestor = FixIngestor(shares: service, metrics: metrics, logger: logger, clock: clock,
                               parser: try LocationPayloadParser(Configuration.defaults(FlaredSettings.all)))
        ingestor.start()
    }

    func location(_ lat: Double, _ lon: Double, tst: Int64? = nil) -> [UInt8] {
        Array(#"{"_type":"location","lat":\#(lat),"lon":\#(lon),"tst":\#(tst ?? Int64(Date().timeIntervalSince1970))}"#.utf8)
    }
}

extension ShareRegistry {
    /// A fix recorded as if heard at its own time, over MQTT.
    func record(_ fix: Fix, for id: ShareID) {
        record([HeardFix(share: id, fix: fix, heardAt: fix.timestamp * 1000, transport: .mqtt)])
    }

    func record(_ fixes: [(ShareID, Fix)]) {
        record(fixes.map { HeardFix(share: $0.0, fix: $0.1, heardAt: $0.1.timestamp * 1000, transport: .mqtt) })
    }
}

/// Answers every host name with the same addresses: lookups where the tests have no DNS.
struct FixedResolver: HostResolving {
    let answers: [IPAddress]

    /// A public address (one of example.com's), where nothing of the tests listens.
    static let `public` = FixedResolver(answers: [IPAddress("93.184.215.14")!])
    static let loopback = FixedResolver(answers: [IPAddress("127.0.0.1")!])

    func addresses(of host: String) -> [IPAddress] { answers }
}
