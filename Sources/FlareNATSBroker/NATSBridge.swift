import FlareBridge
import FlareCore
import FlareMQTT
import FlareShares
import FlareStore
import FlareSystem

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
    private let sessions: NATSSessions
    private let names: NATSAuthCallout.LoginNames
    private let logger: Logger

    public init(responder: AuthCalloutResponder, client: MQTTClient, options: MQTTClient.Options, publisher: NATSPublisher, ingest: NATSIngest,
                sessions: NATSSessions, names: NATSAuthCallout.LoginNames, store: any LeaseRecords, shares: ShareService, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.responder = responder
        self.sessions = sessions
        self.names = names
        self.client = client
        self.ingest = ingest
        self.shares = shares
        self.logger = logger
        keeper = .keeping(client, options: options, publisher: publisher, store: store, shares: shares, clock: clock, metrics: metrics, logger: logger)
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
                logger.error("the NATS cluster refused flared's MQTT login: \(reason); trying again (a callout that did not answer in time during a failover passes; a wrong password does not: FLARE_NATS_PASSWORD_FILE must hold the one the nodes' configuration has)")
            }
        }
        try client.connect()
        try ingest.start()
        keeper.start()
        // A token key changed since these connections logged in (`flare token-key rotate`, then a restart): their
        // tokens no longer verify, and the connections end now rather than at their tokens' expiry.
        let sessions = self.sessions, names = self.names, logger = self.logger
        _ = NamedThread.start(name: "flare-key-sweep") {
            do {
                let ended = try sessions.endOtherKeys(than: names)
                if ended > 0 { logger.warning("ended \(ended) connections whose tokens an earlier token key signed") }
            } catch {
                logger.warning("could not look for connections of an earlier token key: \(error)")
            }
        }
    }

    /// Stops taking fixes (what was fetched and not committed is delivered again), then the keeper and the connection.
    /// The responder goes on answering logins until the process ends: the other instances' clients may need it.
    public func stop() {
        ingest.stop()
        keeper.stop()
        client.disconnect()
    }
}
