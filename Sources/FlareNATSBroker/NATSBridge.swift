import FlareBridge
import FlareCore
import FlareMQTT
import FlareShares
import FlareStore

/// The NATS cluster's side of flared, in the order it needs: the auth callout's responder first (every login, flared's
/// own too, waits for an answer from some instance), then flared's MQTT connection (publishing: statuses, positions,
/// commands), then the ingest (the MQTT layer's stream exists once an MQTT client has connected) and the keeper of
/// the retained state (the epoch mark, and the restore when the cluster lost retained messages).
public final class NATSBridge: Sendable {
    private let responder: AuthCalloutResponder
    private let client: MQTTClient
    private let ingest: NATSIngest
    private let keeper: BrokerStateKeeper
    private let shares: ShareService
    private let logger: Logger

    public init(responder: AuthCalloutResponder, client: MQTTClient, options: MQTTClient.Options, publisher: NATSPublisher, ingest: NATSIngest,
                store: any LeaseRecords, shares: ShareService, metrics: Metrics, logger: Logger) {
        self.responder = responder
        self.client = client
        self.ingest = ingest
        self.shares = shares
        self.logger = logger
        keeper = BrokerStateKeeper(store: store, shares: shares, publisher: publisher, reader: BrokerEpochProbe(bridgeOptions: options),
                                   holder: options.clientID, connection: { [client] in client.connectionNumber },
                                   clock: SystemWallClock(), metrics: metrics, logger: logger.with(label: "keeper"))
        metrics.registerGauge(FlareMetrics.mqttConnected) { [client] in client.isConnected ? 1 : 0 }
    }

    public func start() throws {
        client.setConnectionHandler { [shares, logger] event in
            switch event {
            case .connected:
                logger.info("connected to the NATS cluster's MQTT")
                shares.flushUnsent()
            case .disconnected(let reason):
                logger.warning("lost the NATS cluster's MQTT: \(reason); reconnecting")
            case .refused(let reason):
                logger.error("the NATS cluster refused flared's MQTT login: \(reason) (FLARE_NATS_PASSWORD_FILE must hold the password the nodes' configuration has)")
            }
        }
        try client.connect()
        try ingest.start()
        keeper.start()
    }

    /// Stops taking fixes (what was fetched and not committed is delivered again), then the keeper and the connection.
    /// The responder goes on answering logins until the process ends: the other instances' clients may need it.
    public func stop() {
        ingest.stop()
        keeper.stop()
        client.disconnect()
    }
}
