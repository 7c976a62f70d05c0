import FlareBridge
public import FlareCore
import FlareDaemonSettings
import FlareCrypto
public import FlareEvents
public import FlareShares
import FlareSQLite
public import FlareStore
import FlareTestSupport
public import Foundation
import Synchronization
public import FlareSystem
public import FlareIngest
public import FlareCodec
import FlareSettings

// What the tests of the application layer (shares, bridge, events, gateway) share: a recording broker, a clock, a
// resolver and a fixture with the real SQLite store.

/// Records what the share service announces; can pretend the broker is down.
public final class RecordingPublisher: BrokerPublisher {
    public struct Message: Equatable, Sendable {
        public let topic: String; public let payload: [UInt8]; public let retain: Bool
        /// Sent with flared's origin property (`publishOwnPosition`).
        public var isOwnPosition = false

        public init(topic: String, payload: [UInt8], retain: Bool, isOwnPosition: Bool = false) {
            self.topic = topic
            self.payload = payload
            self.retain = retain
            self.isOwnPosition = isOwnPosition
        }
    }

    public init() {}
    private let state = Mutex<(messages: [Message], down: Bool)>(([], false))

    public func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool {
        state.withLock { state in
            guard !state.down else { return false }
            state.messages.append(Message(topic: topic, payload: payload, retain: retain))
            return true
        }
    }

    public func publishOwnPosition(topic: String, payload: [UInt8]) -> Bool {
        state.withLock { state in
            guard !state.down else { return false }
            state.messages.append(Message(topic: topic, payload: payload, retain: true, isOwnPosition: true))
            return true
        }
    }

    public func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?, timeout: Duration) -> Bool {
        publish(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: expirySeconds)
    }

    public var messages: [Message] { state.withLock { $0.messages } }
    public func setDown(_ down: Bool) { state.withLock { $0.down = down } }

    public func last(on topic: String) -> Message? { messages.last { $0.topic == topic } }
    public func lastJSON(on topic: String) -> JSONValue? { last(on: topic).flatMap { try? JSONValue.parse($0.payload) } }
}

/// A clock the test moves: its time stands still until `advance`, which wakes whatever sleeps until one of its
/// deadlines (the scheduler), so a test of an expiry, a sweep or a rate limit waits for nothing.
///
/// `readingsIncrease`: no two wall readings are the same millisecond (each reading moves the wall time on by one),
/// as a real service's readings are when one thing happens after another: a test that sends a will and then a fix
/// means the fix came after it, which is what the tracker rules are told by a later reading. (Flare counts a fix
/// heard in the same millisecond as the will as sent before it.)
public final class ManualClock: Clock {
    private struct State {
        var wall: UnixMillis
        var monotonic: Int64 = 1_000_000
        var wakes: [@Sendable () -> Void] = []
    }
    private let state: Mutex<State>
    private let readingsIncrease: Bool

    public init(startingAt wall: UnixMillis = SystemClock().now(), readingsIncrease: Bool = false) {
        state = Mutex(State(wall: wall))
        self.readingsIncrease = readingsIncrease
    }

    public func now() -> UnixMillis {
        state.withLock { state in
            if readingsIncrease { state.wall += 1 }
            return state.wall
        }
    }

    public func monotonicMillis() -> Int64 { state.withLock { $0.monotonic } }

    public func whenMoved(_ wake: @escaping @Sendable () -> Void) { state.withLock { $0.wakes.append(wake) } }

    /// Moves both readings on by `millis` and wakes whoever sleeps until a deadline of this clock.
    public func advance(by millis: Int64) {
        precondition(millis >= 0, "time does not go back")
        let wakes = state.withLock { state in
            state.wall += millis
            state.monotonic += millis
            return state.wakes
        }
        for wake in wakes { wake() }
    }

    public func advance(seconds: Int64) { advance(by: seconds * 1000) }
}

/// A share service, registry, ingestor and store on a real SQLite file in a temp directory.
public struct ServiceFixture: Sendable {
    public let directory: URL
    public let store: any ShareStore
    package let registry: ShareRegistry
    public let publisher: RecordingPublisher
    public let service: ShareService
    public let ingestor: FixIngestor
    public let metrics: Metrics
    public let key: [UInt8]
    /// The service's clock, which the test moves (`advance`): expiries, sweeps and marks happen only then. Whatever
    /// reads the outbox or the check-ins beside the service uses this one too, since the service's records carry its
    /// times, not the system's.
    public let clock: ManualClock

    public init(directory: URL? = nil, retentionSeconds: Int64 = 86_400, staleAfterSeconds: Int64 = 120, key: [UInt8] = Crypto.randomBytes(32),
         publisher: RecordingPublisher = RecordingPublisher(), eventDestinations: [EventDestination] = [.mqtt], mailsContacts: Bool = false,
         mailPerKeyPerHour: Int = 60, hostResolver: any HostResolving = FixedResolver.public) throws {
        self.directory = try directory ?? TempDirectory.make(prefix: "flare-bridge")
        store = try SQLiteShareStore(path: self.directory.appendingPathComponent("flare.db").path)
        self.publisher = publisher
        self.key = key
        metrics = Metrics()
        let logger = Logger(label: "test", level: .error)
        let clock = ManualClock(readingsIncrease: true)
        self.clock = clock
        service = ShareService(store: store, trailLength: 4, publisher: publisher, tokenKey: key,
                               policy: SharePolicy(defaultDurationSeconds: 3600, maximumDurationSeconds: 86_400, historyRetentionSeconds: retentionSeconds),
                               trackerRules: TrackerRules(staleAfterMillis: staleAfterSeconds * 1000), clock: clock, metrics: metrics, logger: logger,
                               eventDestinations: eventDestinations, mailsContacts: mailsContacts, mailPerKeyPerHour: mailPerKeyPerHour,
                               hostResolver: hostResolver)
        registry = service.registry
        ingestor = FixIngestor(store: store, shares: service, metrics: metrics, logger: logger, clock: clock,
                               parser: try LocationPayloadParser(Configuration.defaults(FlaredSettings.all)))
        ingestor.start()
    }

    public func location(_ lat: Double, _ lon: Double, tst: Int64? = nil) -> [UInt8] {
        Array(#"{"_type":"location","lat":\#(lat),"lon":\#(lon),"tst":\#(tst ?? Int64(Date().timeIntervalSince1970))}"#.utf8)
    }
}

extension ShareRegistry {
    /// A fix recorded as if heard at its own time, over MQTT.
    package func record(_ fix: Fix, for id: ShareID) {
        record([HeardFix(share: id, fix: fix, heardAt: fix.timestamp * 1000, transport: .mqtt)])
    }

    package func record(_ fixes: [(ShareID, Fix)]) {
        record(fixes.map { HeardFix(share: $0.0, fix: $0.1, heardAt: $0.1.timestamp * 1000, transport: .mqtt) })
    }
}

/// Answers every host name with the same addresses: lookups where the tests have no DNS.
public struct FixedResolver: HostResolving {
    public let answers: [IPAddress]

    public init(answers: [IPAddress]) { self.answers = answers }

    /// A public address (one of example.com's), where nothing of the tests listens.
    public static let `public` = FixedResolver(answers: [IPAddress("93.184.215.14")!])
    public static let loopback = FixedResolver(answers: [IPAddress("127.0.0.1")!])

    public func addresses(of host: String) -> [IPAddress] { answers }
}
