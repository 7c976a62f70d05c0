import FlareBridge
import FlareCore
import FlareMQTT
import FlareNATS
import FlareNATSBroker
import FlareDaemonSettings
import FlareShares
import FlareStore
import FlareSystem
import FlareIngest

/// Which broker flared talks to (`FLARE_BROKER`), chosen once from the settings with the logins it needs there. It
/// says how flared's own MQTT connection logs in, and then, given that connection, builds the kind's publisher and
/// bridge (the bridge holds the kind's keeper of the broker's retained state).
enum BrokerChoice {
    /// mosquitto with the flare_auth plugin: a persistent session, fixes through it.
    case mosquitto(username: String?, password: String?)
    /// A NATS cluster's MQTT layer: logins answered by flared's callout, fixes from the JetStream stream.
    case nats(NATSBrokerSettings, DataDirectory.NATSSecrets)

    static func from(_ settings: DaemonSettings) throws -> BrokerChoice {
        if let nats = settings.nats { return .nats(nats, try DataDirectory.natsSecrets(nats)) }
        let credentials = try DataDirectory.brokerCredentials(in: settings.dataDirectory, username: settings.mqttUsername,
                                                              password: settings.mqttPassword, passwordFile: settings.mqttPasswordFile)
        return .mosquitto(username: credentials.username, password: credentials.password)
    }

    /// flared's own connection to the broker.
    func clientOptions(clientID: String, url: MQTTURL) -> MQTTClient.Options {
        var options = MQTTClient.Options(clientID: clientID)
        options.host = url.host
        options.port = url.port
        switch self {
        case .mosquitto(let username, let password):
            options.username = username
            options.password = password
            options.cleanSession = false
        case .nats(_, let secrets):
            // MQTT 3.1.1 (NATS's MQTT layer has no v5), the service login the callout knows, and no session to keep
            // (the connection only publishes; fixes come from the stream).
            options.protocolVersion = .v311
            options.username = NATSAuthCallout.serviceUsername
            options.password = secrets.password
            options.cleanSession = true
            // A login refused while the cluster fails over (the callout timed out) is tried again.
            options.retriesAfterRefusal = true
        }
        // The bridge acknowledges a batch of QoS 1 fixes once it is committed (one commit per read), so the broker may
        // send this many before it waits: a larger window makes fewer, larger commits. Kept below mosquitto's queue
        // limits; a flared killed with a full window gets all of it again.
        options.receiveMaximum = 1000
        return options
    }

    /// The kind's parts on `client` (made with `clientOptions`). On NATS, the callout's responder is made here, so
    /// that it answers logins before anything of flared's own logs in.
    func wire(client: MQTTClient, options: MQTTClient.Options, tokenKey: [UInt8], store: any ShareStore, clock: any Clock,
              logger: Logger) throws(StartupFailure) -> any BrokerWiring {
        switch self {
        case .mosquitto:
            return MosquittoWiring(client: client, options: options)
        case .nats(let nats, let secrets):
            if !secrets.sharedPasswords.isEmpty {
                logger.warning("one password serves flared's NATS logins that should each have their own: \(secrets.sharedPasswords.joined(separator: ", ")) name no file; make them (scripts/nats-cluster.sh does) and put them in the nodes' configuration")
            }
            do {
                return try NATSWiring(nats: nats, secrets: secrets, client: client, options: options, tokenKey: tokenKey, store: store, clock: clock, logger: logger)
            } catch {
                throw StartupFailure("reach the NATS cluster (FLARE_NATS_URLS: \(nats.urls.joined(separator: ",")))", error)
            }
        }
    }
}

/// One broker kind's parts, once flared's connection is made.
protocol BrokerWiring {
    /// What flared publishes through (status, positions, revocations, events).
    var publisher: any BrokerPublisher { get }
    /// The service that takes fixes from the broker into `ingestor`, and keeps the broker's retained state.
    func bridge(ingestor: FixIngestor, shares: ShareService, store: any ShareStore, settings: DaemonSettings, isShared: Bool,
                clock: any Clock, metrics: Metrics, logger: Logger) -> ServiceGroup.Service
}

struct MosquittoWiring: BrokerWiring {
    let client: MQTTClient
    let options: MQTTClient.Options

    var publisher: any BrokerPublisher { client }

    func bridge(ingestor: FixIngestor, shares: ShareService, store: any ShareStore, settings: DaemonSettings, isShared: Bool,
                clock: any Clock, metrics: Metrics, logger: Logger) -> ServiceGroup.Service {
        // With a shared store, every instance takes a share of the location stream (a shared subscription).
        let bridge = Bridge(client: client, options: options, store: store, ingestor: ingestor, shares: shares,
                            subscription: isShared ? Topics.sharedLocations : Topics.allLocations,
                            staleAfterSeconds: settings.instanceStaleAfterSeconds, clock: clock, metrics: metrics, logger: logger)
        return .init("MQTT bridge", start: {
            try bridge.start()
            bridge.startMembership()
        }, stop: { _ in
            ingestor.prepareForShutdown()
            bridge.stop()
            return true
        })
    }
}

struct NATSWiring: BrokerWiring {
    let client: MQTTClient
    let options: MQTTClient.Options
    let responder: AuthCalloutResponder
    let sessions: NATSSessions
    let natsPublisher: NATSPublisher
    let connection: NATSConnection
    let loginNames: NATSAuthCallout.LoginNames
    let tokenKey: [UInt8]

    init(nats: NATSBrokerSettings, secrets: DataDirectory.NATSSecrets, client: MQTTClient, options: MQTTClient.Options, tokenKey: [UInt8], store: any ShareStore,
         clock: any Clock, logger: Logger) throws {
        self.client = client
        self.options = options
        self.tokenKey = tokenKey
        let clientID = options.clientID
        loginNames = NATSAuthCallout.LoginNames(tokenKey: tokenKey)
        responder = try AuthCalloutResponder(servers: nats.urls, calloutPassword: secrets.calloutPassword, servicePassword: secrets.password,
                                             issuerSeed: secrets.issuerSeed, tokenKey: tokenKey, shares: store, clock: clock,
                                             logger: logger.with(label: "callout"), instanceName: clientID)
        sessions = try NATSSessions(servers: nats.urls, password: secrets.systemPassword, instanceName: clientID, logger: logger.with(label: "sessions"))
        // Own positions marked, revocations as ended connections.
        natsPublisher = NATSPublisher(client: client, mark: OwnPositionMark(tokenKey: tokenKey), sessions: sessions, names: loginNames,
                                      clock: clock, logger: logger.with(label: "sessions"))
        connection = try NATSConnection(servers: nats.urls, user: NATSAuthCallout.serviceUsername, password: secrets.password, name: clientID + "-ingest")
    }

    var publisher: any BrokerPublisher { natsPublisher }

    func bridge(ingestor: FixIngestor, shares: ShareService, store: any ShareStore, settings: DaemonSettings, isShared: Bool,
                clock: any Clock, metrics: Metrics, logger: Logger) -> ServiceGroup.Service {
        let ingest = NATSIngest(connection: connection, ingestor: ingestor, shares: shares, mark: OwnPositionMark(tokenKey: tokenKey),
                                fixRate: settings.gateway.fixRatePerShare, sessions: sessions, names: loginNames,
                                clock: clock, metrics: metrics, logger: logger)
        let bridge = NATSBridge(responder: responder, client: client, options: options, publisher: natsPublisher, ingest: ingest,
                                sessions: sessions, names: loginNames, store: store, shares: shares, clock: clock, metrics: metrics, logger: logger)
        if !isShared { logger.warning("FLARE_BROKER=nats with the SQLite store: one flared answers every login to the cluster; with PostgreSQL, several instances do") }
        return .init("NATS bridge", start: { try bridge.start() }, stop: { _ in
            ingestor.prepareForShutdown()
            bridge.stop()
            return true
        })
    }
}

/// Something flared needed at start could not be done (the store would not open, the cluster could not be reached):
/// not a wrong setting, though a setting may be why. Says what was being done, and why it failed.
struct StartupFailure: Error, CustomStringConvertible {
    let operation: String
    let cause: any Error
    /// What the operator can do about it, when there is something.
    let advice: String?

    init(_ operation: String, _ cause: any Error, advice: String? = nil) {
        self.operation = operation
        self.cause = cause
        self.advice = advice
    }

    var description: String { "cannot \(operation): \(cause)\(advice.map { " (\($0))" } ?? "")" }
}
