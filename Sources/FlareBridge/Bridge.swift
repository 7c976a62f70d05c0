public import FlareCore
public import FlareMQTT
import Synchronization

/// Connects the broker to the ingest path: one persistent MQTT session (it survives a bridge restart, so fixes
/// published meanwhile are delivered when it comes back) subscribed to every share's location topic at QoS 1.
public final class Bridge: Sendable {
    private let client: MQTTClient
    private let ingestor: FixIngestor
    private let shares: ShareService
    private let metrics: Metrics
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let subscription: String

    /// - Parameter subscription: `Topics.allLocations` for the only instance of a store, `Topics.sharedLocations`
    ///   when several instances share one.
    public init(client: MQTTClient, ingestor: FixIngestor, shares: ShareService, subscription: String, metrics: Metrics, logger: Logger) {
        self.subscription = subscription
        self.client = client
        self.ingestor = ingestor
        self.shares = shares
        self.metrics = metrics
        self.logger = logger
        metrics.registerGauge(FlareMetrics.mqttConnected) { [client] in client.isConnected ? 1 : 0 }
    }

    public func start() throws {
        client.setMessageHandler { [ingestor] message in
            ingestor.handle(topic: message.topic, payload: message.payload, retained: message.retain)
        }
        // The broker hears that a fix arrived only once it is stored: a bridge killed before that gets it again.
        client.setAcknowledgementGate { [ingestor] in ingestor.waitUntilStored() }
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
        try client.connect()
    }


    /// Stops taking messages. The caller then drains the ingestor.
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        client.disconnect()
    }
}

extension MQTTClient: BrokerPublisher {
    public func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool {
        (try? publish(topic: topic, payload: payload, qos: qos, retain: retain, messageExpirySeconds: expirySeconds)) != nil
    }
}
