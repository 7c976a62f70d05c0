public import FlareCore
public import FlareEvents
public import FlareGateway
public import FlareSystem
public import FlareSettings

/// Everything `flared` reads from its settings, as typed values, read once and checked before anything is created or
/// opened: a bad setting leaves nothing half-started. The daemon's wiring hands each component its part.
public struct DaemonSettings: Sendable {
    public let logLevel: Logger.Level
    public let shutdownTimeout: Duration
    public let storeGraceSeconds: Int
    public let dataDirectory: String
    public let httpAddress: HostPort
    /// Nil: no metrics listener.
    public let metricsAddress: HostPort?
    public let mqttURL: MQTTURL
    /// `FLARE_STORE_URL` as given (nil: the SQLite file in the data directory).
    public let storeURL: String?
    public let clientID: String
    public let mqttUsername: String?
    public let mqttPassword: String?
    public let mqttPasswordFile: String?
    /// With FLARE_BROKER=nats: the cluster; nil for mosquitto.
    public let nats: NATSBrokerSettings?
    public let trailLength: Int
    /// `FLARE_MAIL_PER_KEY_PER_HOUR`.
    public let mailPerKeyPerHour: Int
    /// `FLARE_SOS_PER_DEVICE_PER_HOUR`.
    public let sosPerDevicePerHour: Int
    public let instanceStaleAfterSeconds: Int64
    public let storeMinimumFreeBytes: Int64
    public let httpThreads: Int
    public let policy: SharePolicy
    public let trackerRules: TrackerRules
    public let parser: LocationPayloadParser
    public let gateway: GatewayConfiguration
    public let serverWebhook: ServerWebhook?
    /// FLARE_SMTP_URL and FLARE_SMTP_FROM: nil when neither is set.
    public let mailServer: MailServer?

    public init(_ config: Configuration) throws(Configuration.ConfigurationError) {
        guard let level = Logger.Level(name: config.string("FLARE_LOG_LEVEL") ?? "") else {
            throw Configuration.ConfigurationError("FLARE_LOG_LEVEL must be debug, info, warning or error")
        }
        logLevel = level
        shutdownTimeout = .seconds(try config.integer("FLARE_SHUTDOWN_TIMEOUT_S"))
        storeGraceSeconds = Int(try config.integer("FLARE_SHUTDOWN_STORE_GRACE_S"))
        serverWebhook = try ServerWebhook.configured(config)
        mailServer = try MailServer.configured(config)
        guard let dataDirectory = config.string("FLARE_DATA_DIR") else { throw Configuration.ConfigurationError("FLARE_DATA_DIR must not be empty") }
        self.dataDirectory = dataDirectory
        httpAddress = try config.hostPort("FLARE_HTTP_ADDR")
        metricsAddress = config.string("FLARE_METRICS_ADDR") != nil ? try config.hostPort("FLARE_METRICS_ADDR") : nil
        guard let mqttText = config.string("FLARE_MQTT_URL"), let mqttURL = MQTTURL(mqttText) else {
            throw Configuration.ConfigurationError("FLARE_MQTT_URL must look like mqtt://host:port")
        }
        self.mqttURL = mqttURL
        storeURL = config.string("FLARE_STORE_URL")
        clientID = config.string("FLARE_MQTT_CLIENT_ID") ?? ""
        // Share tokens connect as flare-<share id>…: a bridge with such an id could have its session taken by a phone.
        guard !ClientIDs.isTokenForm(clientID) else {
            throw Configuration.ConfigurationError("FLARE_MQTT_CLIENT_ID must not start with \"flare-\": those ids belong to share tokens (use e.g. flared-a)")
        }
        mqttUsername = config.string("FLARE_MQTT_USERNAME")
        mqttPassword = config.string("FLARE_MQTT_PASSWORD")
        mqttPasswordFile = config.string("FLARE_MQTT_PASSWORD_FILE")
        nats = try NATSBrokerSettings.configured(config, dataDirectory: dataDirectory)
        trailLength = Int(try config.integer("FLARE_TRAIL_LENGTH"))
        mailPerKeyPerHour = Int(try config.integer("FLARE_MAIL_PER_KEY_PER_HOUR"))
        sosPerDevicePerHour = Int(try config.integer("FLARE_SOS_PER_DEVICE_PER_HOUR"))
        instanceStaleAfterSeconds = try config.integer("FLARE_INSTANCE_STALE_AFTER_S")
        storeMinimumFreeBytes = try config.integer("FLARE_STORE_MIN_FREE_MB") * 1_048_576
        httpThreads = Int(try config.integer("FLARE_HTTP_THREADS"))
        policy = try SharePolicy(config)
        trackerRules = try TrackerRules(config)
        parser = try LocationPayloadParser(config)
        gateway = try GatewayConfiguration(config)
    }
}

/// FLARE_BROKER=nats: where the cluster is and the secrets flared's logins use.
public struct NATSBrokerSettings: Sendable {
    public let urls: [String]
    public let issuerSeedFile: String
    /// flared's own login (`flared`), the callout's (`flare-auth`) and the system account's (`flare-sys`).
    public let passwordFile: String
    public let calloutPasswordFile: String
    public let systemPasswordFile: String

    static func configured(_ config: Configuration, dataDirectory: String) throws(Configuration.ConfigurationError) -> NATSBrokerSettings? {
        guard config.string("FLARE_BROKER") == "nats" else {
            for name in ["FLARE_NATS_URLS", "FLARE_NATS_ISSUER_SEED_FILE", "FLARE_NATS_PASSWORD_FILE", "FLARE_NATS_CALLOUT_PASSWORD_FILE",
                         "FLARE_NATS_SYSTEM_PASSWORD_FILE"] where config.string(name) != nil {
                throw Configuration.ConfigurationError("\(name) is set but FLARE_BROKER is not nats")
            }
            return nil
        }
        // What flared would log in to mosquitto with: on NATS its logins use FLARE_NATS_PASSWORD_FILE only, and a setting
        // that would be ignored is an operator's mistake to point out, not to pass over.
        for name in ["FLARE_MQTT_USERNAME", "FLARE_MQTT_PASSWORD", "FLARE_MQTT_PASSWORD_FILE"] where config.string(name) != nil {
            throw Configuration.ConfigurationError("\(name) is for mosquitto; with FLARE_BROKER=nats flared logs in with the password in FLARE_NATS_PASSWORD_FILE")
        }
        let urls = (config.string("FLARE_NATS_URLS") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !urls.isEmpty else {
            throw Configuration.ConfigurationError("FLARE_BROKER=nats needs FLARE_NATS_URLS: the nodes' client URLs, e.g. nats://10.0.0.1:4222,nats://10.0.0.2:4222")
        }
        for url in urls where !(url.hasPrefix("nats://") || url.hasPrefix("tls://")) || url.utf8.count > 255 {
            throw Configuration.ConfigurationError("FLARE_NATS_URLS: \(url) is not a nats:// URL")
        }
        return NATSBrokerSettings(urls: urls,
                                  issuerSeedFile: config.string("FLARE_NATS_ISSUER_SEED_FILE") ?? dataDirectory + "/nats/issuer.seed",
                                  passwordFile: config.string("FLARE_NATS_PASSWORD_FILE") ?? dataDirectory + "/nats/password",
                                  calloutPasswordFile: config.string("FLARE_NATS_CALLOUT_PASSWORD_FILE") ?? dataDirectory + "/nats/callout.password",
                                  systemPasswordFile: config.string("FLARE_NATS_SYSTEM_PASSWORD_FILE") ?? dataDirectory + "/nats/system.password")
    }
}
