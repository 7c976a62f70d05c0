public import FlareCore
public import FlareMQTT
public import FlareShares
public import FlareStore
import FlareSystem
import Synchronization
public import FlareIngest
import FlareCodec
#if canImport(Glibc)
import Glibc
#endif

/// Connects the broker to the ingest path: one persistent MQTT session (it survives a bridge restart, so fixes
/// published meanwhile are delivered when it comes back) subscribed to every share's location topic at QoS 1.
public final class Bridge: Sendable {
    private let client: MQTTClient
    private let ingestor: FixIngestor
    private let shares: ShareService
    private let store: any InstanceRecords
    private let metrics: Metrics
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let subscription: String
    /// Copied for the clients that take over a dead instance's session.
    private let options: MQTTClient.Options
    /// This process, as the instances table knows it: host, pid and a random part.
    private let process: String
    private let lastMessageAt = LastMessage()
    private let brokerStats = BrokerStats()
    private let membership = Mutex<NamedThread?>(nil)
    private let membershipStop = Atomic<Bool>(false)
    /// Puts back the retained state a crashed broker forgot (one instance at a time does it).
    private let keeper: BrokerStateKeeper
    /// What is stored (heartbeats, registrations) and the heartbeat's pace read this clock; waiting for the broker
    /// itself (a takeover, a drained queue) follows the system's time, which no test clock makes the broker keep.
    private let clock: any Clock

    /// How long without a heartbeat before another instance takes this one's session over (FLARE_INSTANCE_STALE_AFTER_S),
    /// and how often an instance says it is alive: a quarter of that, at most every 5 s.
    private let staleAfterMillis: Int64
    private var heartbeatMillis: Int64 { min(5_000, staleAfterMillis / 4) }
    /// A released session is ended once no message came for this long after UNSUBSCRIBE (its queue is empty).
    static let drainQuietMillis: Int64 = 1_000

    /// - Parameters:
    ///   - subscription: `Topics.allLocations` for the only instance of a store, `Topics.sharedLocations` when
    ///     several instances share one.
    ///   - options: the client's options (its client id is this instance's name in the store).
    public init(client: MQTTClient, options: MQTTClient.Options, store: any InstanceRecords & LeaseRecords, ingestor: FixIngestor, shares: ShareService, subscription: String,
                staleAfterSeconds: Int64, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.clock = clock
        self.subscription = subscription
        self.staleAfterMillis = staleAfterSeconds * 1000
        self.options = options
        var host = [CChar](repeating: 0, count: 256)
        gethostname(&host, host.count - 1)
        process = "\(String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)):\(getpid()):\(Secret.generate().text.prefix(8))"
        self.client = client
        self.ingestor = ingestor
        self.shares = shares
        self.metrics = metrics
        self.logger = logger
        self.store = store
        keeper = .keeping(client, options: options, publisher: client, store: store, shares: shares, clock: clock, metrics: metrics, logger: logger)
        metrics.registerGauge(FlareMetrics.mqttConnected) { [client] in client.isConnected ? 1 : 0 }
        metrics.registerGauge(FlareMetrics.brokerRateDisconnects) { [brokerStats] in Double(brokerStats.rateDisconnects.load(ordering: .relaxed)) }
        metrics.register(FlareMetrics.ownPositionsSkipped)
    }

    public struct DuplicateInstance: Error, CustomStringConvertible {
        public let clientID: String
        public var description: String {
            "another flared is running with FLARE_MQTT_CLIENT_ID=\(clientID) on this store (it keeps saying it is alive); give each instance its own client id"
        }
    }

    public func start() throws {
        // One process per client id: two would take the broker session from each other all day. A takeover of this
        // id by another instance (after a crash) is waited for.
        var registered = false
        // Long enough for a holder that died to go stale, or a takeover of this id to finish.
        let giveUpAt = monotonicMillis() + staleAfterMillis + 5_000
        while !registered && monotonicMillis() < giveUpAt {
            // A holder on this machine whose process is gone (killed, crashed) is no holder: restart at once.
            let holderIsDead = try store.instanceProcess(options.clientID).map(isDeadLocalProcess) ?? false
            registered = try store.registerInstance(options.clientID, process: process, now: clock.now(),
                                                    staleAfter: holderIsDead ? 0 : staleAfterMillis)
            if !registered { usleep(1_000_000) }
        }
        guard registered else { throw DuplicateInstance(clientID: options.clientID) }
        feedIngestor(from: client, noting: lastMessageAt)
        client.setConnectionHandler { [weak self, shares, logger] event in
            switch event {
            case .connected(let sessionPresent):
                logger.info("connected to the broker (\(sessionPresent ? "session resumed" : "new session"))")
                shares.flushUnsent()
            case .disconnected(let reason):
                if self?.stopping.load(ordering: .relaxed) ?? true {
                    logger.info("disconnected from the broker")
                } else {
                    logger.warning("lost the broker: \(reason); reconnecting")
                }
            case .refused(let reason):
                logger.error("the broker refused the bridge: \(reason)")
            }
        }
        try client.subscribe(subscription, qos: 1)
        try client.subscribe(Topics.brokerStats, qos: 0)
        try client.connect()
        keeper.start()
    }


    /// Hands a client's messages to the ingestor. The broker hears that a fix arrived only once it is stored: a
    /// bridge killed before that gets it again.
    private func feedIngestor(from client: MQTTClient, noting lastMessage: LastMessage) {
        client.setMessageHandler { [ingestor, shares, metrics, brokerStats] message in
            if message.topic == Topics.brokerStats {
                brokerStats.take(message.payload)
                return
            }
            lastMessage.now()
            // Stored already, by the instance that published it.
            guard !message.isFlaredsOwn else {
                metrics.increment(FlareMetrics.ownPositionsSkipped)
                shares.ownPositionCameBack(topic: message.topic, payload: message.payload)
                return
            }
            ingestor.handle(topic: message.topic, payload: message.payload, retained: message.retain)
        }
        client.setAcknowledgementGate { [ingestor] in ingestor.waitUntilStored() }
    }

    /// `host:pid:nonce` of a process on this host that no longer runs (or that had this very pid before us).
    private func isDeadLocalProcess(_ holder: String) -> Bool {
        let parts = holder.split(separator: ":")
        let mine = process.split(separator: ":")
        guard parts.count == 3, mine.count == 3, parts[0] == mine[0], let pid = Int32(parts[1]) else { return false }
        if pid == getpid() { return parts[2] != mine[2] }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    /// Starts saying that this instance is alive, and taking over the sessions of instances that died: a dead
    /// member of the shared subscription keeps its turn, and its queue grows, until a client with its id returns.
    public func startMembership() {
        let started = NamedThread.start(name: "flare-members") { [self] in
            var next = clock.monotonicMillis()
            while !membershipStop.load(ordering: .relaxed) {
                if clock.monotonicMillis() >= next {
                    next = clock.monotonicMillis() + heartbeatMillis
                    beat()
                }
                usleep(200_000)
            }
        }
        membership.withLock { $0 = started }
    }

    private func beat() {
        let now = clock.now()
        do {
            if try !store.heartbeat(options.clientID, process: process, now: now) {
                // Someone took this id over while we could not say we were alive (a long store outage): take it back.
                _ = try store.registerInstance(options.clientID, process: process, now: now, staleAfter: 0)
            }
            guard subscription == Topics.sharedLocations,
                  let dead = try store.claimStaleInstance(process: process, now: now, staleAfter: staleAfterMillis) else { return }
            takeOver(dead)
        } catch {
            logger.warning("instance heartbeat failed: \(error)")
        }
    }

    /// Connects with a dead instance's client id, resuming its session, and releases it: what the broker kept for
    /// it is stored (and acknowledged only then, as always), and the session is ended so that it leaves the shared
    /// subscription. Nothing is lost, and the store keeps each fix once.
    func takeOver(_ clientID: String) {
        logger.warning("instance \(clientID) has not been seen for \(staleAfterMillis / 1000) s: taking over its broker session to store what it holds")
        var options = self.options
        options.clientID = clientID
        options.cleanSession = false
        do {
            let taken = try MQTTClient(options: options)
            let lastAt = LastMessage()
            feedIngestor(from: taken, noting: lastAt)
            try taken.connect()
            guard taken.waitUntilConnected(timeout: .seconds(10)) else {
                taken.disconnect()
                logger.warning("could not connect as \(clientID) to drain it; trying again later")
                return
            }
            if release(taken, lastMessageAt: lastAt) {
                try store.removeInstance(clientID, process: process)
                logger.info("took over instance \(clientID): stored the \(lastAt.count) messages it held and ended its session")
            }
        } catch {
            logger.warning("taking over instance \(clientID) failed: \(error); trying again later")
        }
    }

    /// Leaves the shared subscription and ends the session once the messages already queued for it have arrived
    /// (none came for `drainQuietMillis` after UNSUBSCRIBE), so the broker routes nothing more to it. True when the
    /// session was ended that way.
    private func release(_ client: MQTTClient, lastMessageAt: LastMessage) -> Bool {
        do { try client.unsubscribe(Topics.sharedLocations) } catch {
            client.disconnect()
            return false
        }
        lastMessageAt.restart()
        let deadline = monotonicMillis() + 30_000
        while monotonicMillis() - lastMessageAt.millis < Self.drainQuietMillis && monotonicMillis() < deadline {
            usleep(100_000)
        }
        let connected = client.isConnected
        client.disconnect(endingSession: connected)
        return connected
    }

    /// Stops taking messages. The caller then drains the ingestor. With a shared subscription the session is released
    /// first (see `release`): the instances that go on get this one's turn at once, instead of its queue growing
    /// until it returns.
    public func stop() {
        keeper.stop()
        membershipStop.store(true, ordering: .relaxed)
        let running = membership.withLock { thread in
            defer { thread = nil }
            return thread
        }
        running?.join()
        guard subscription == Topics.sharedLocations, client.isConnected else {
            stopping.store(true, ordering: .relaxed)
            client.disconnect()
            // The only instance of its store keeps its session (it resumes it on restart) but not its claim on the id.
            // A shared one that could not release its session stays listed, so that another takes the session over.
            // At shutdown a failed removal is harmless: the row goes stale and the next start (or another instance)
            // takes the id over once `staleAfter` has passed.
            if subscription != Topics.sharedLocations { try? store.removeInstance(options.clientID, process: process) }
            return
        }
        let released = release(client, lastMessageAt: lastMessageAt)
        stopping.store(true, ordering: .relaxed)
        if released {
            // The session is gone: nobody needs to take it over. A removal that fails leaves a row that goes stale, and
            // a stale row with no session is taken over and ended at once.
            try? store.removeInstance(options.clientID, process: process)
            logger.info("left the shared subscription and ended this instance's broker session")
        }
    }
}

extension MQTTClient: BrokerPublisher {
    public func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool {
        (try? publish(topic: topic, payload: payload, qos: qos, retain: retain, messageExpirySeconds: expirySeconds)) != nil
    }

    public func publishOwnPosition(topic: String, payload: [UInt8]) -> Bool {
        (try? publish(topic: topic, payload: payload, qos: 1, retain: true, userProperties: [Self.flaredOrigin])) != nil
    }

    public func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?, timeout: Duration) -> Bool {
        (try? publishAndWait(topic: topic, payload: payload, qos: qos, retain: retain, messageExpirySeconds: expirySeconds, timeout: timeout)) != nil
    }

    static let flaredOrigin = MQTTUserProperty(name: Topics.originProperty.name, value: Topics.originProperty.value)
}

extension MQTTMessage {
    /// Published by flared itself (see `Topics.originProperty`).
    var isFlaredsOwn: Bool { userProperty(Topics.originProperty.name) == Topics.originProperty.value }
}

/// What the broker's auth plugin counts (`Topics.brokerStats`), as it last said.
final class BrokerStats: Sendable {
    /// Devices disconnected for sending beyond their share's rate, since the broker started.
    let rateDisconnects = Atomic<Int>(0)

    func take(_ payload: [UInt8]) {
        // Written by the plugin only; anything else there is ignored.
        guard let count = (try? JSONValue.parse(payload))?["rate_disconnects"]?.doubleValue, count >= 0, count < 1e15 else { return }
        rateDisconnects.store(Int(count), ordering: .relaxed)
    }
}

/// When a client last received a message, and how many it received: a released session is quiet once its queue is
/// empty.
final class LastMessage: Sendable {
    private let at = Atomic<Int64>(monotonicMillis())
    private let received = Atomic<Int>(0)

    func now() {
        at.store(monotonicMillis(), ordering: .relaxed)
        received.add(1, ordering: .relaxed)
    }

    /// Starts the quiet period from now, without counting a message.
    func restart() { at.store(monotonicMillis(), ordering: .relaxed) }

    var millis: Int64 { at.load(ordering: .relaxed) }
    var count: Int { received.load(ordering: .relaxed) }
}
