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
    /// FLARE_VAPID_SUBJECT and FLARE_PUSH_ALLOW_LOOPBACK: nil when push is off.
    public let push: PushSettings?

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
        push = try PushSettings.configured(config, publicURL: gateway.publicURL)
    }
}

/// Web Push: on when `FLARE_VAPID_SUBJECT` is set (RFC 8292 §2.1: a push service's operator needs a way to reach this
/// server's), with `FLARE_PUSH_ALLOW_LOOPBACK` for tests.
public struct PushSettings: Sendable {
    public let subject: String
    public let allowsLoopback: Bool

    static func configured(_ config: Configuration, publicURL: String) throws(Configuration.ConfigurationError) -> PushSettings? {
        let allowsLoopback = config.string("FLARE_PUSH_ALLOW_LOOPBACK") == "1"
        guard let subject = config.string("FLARE_VAPID_SUBJECT"), !subject.isEmpty else {
            if allowsLoopback { throw Configuration.ConfigurationError("FLARE_PUSH_ALLOW_LOOPBACK is set but FLARE_VAPID_SUBJECT is not: push is off") }
            return nil
        }
        guard subject.utf8.count <= 256, !subject.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }),
              (subject.hasPrefix("mailto:") && subject.dropFirst(7).contains("@") && !subject.dropFirst(7).hasPrefix("@"))
                || (subject.hasPrefix("https://") && subject.count > 8) else {
            throw Configuration.ConfigurationError("FLARE_VAPID_SUBJECT must be mailto:you@example.org or an https:// URL (at most 256 characters): push services contact the operator there")
        }
        if allowsLoopback && !Self.isLoopback(publicURL) {
            throw Configuration.ConfigurationError("FLARE_PUSH_ALLOW_LOOPBACK=1 is for tests: it is refused with a public FLARE_PUBLIC_URL (\(publicURL))")
        }
        return PushSettings(subject: subject, allowsLoopback: allowsLoopback)
    }

    /// Whether the URL's host is this machine: `localhost`, 127.0.0.0/8 or ::1.
    static func isLoopback(_ url: String) -> Bool {
        guard let schemeEnd = url.range(of: "://") else { return false }
        var host = String(url[schemeEnd.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" })
        if host.hasPrefix("[") { host = String(host.dropFirst().prefix { $0 != "]" }) } else if let colon = host.lastIndex(of: ":") { host = String(host[..<colon]) }
        if host.lowercased() == "localhost" { return true }
        return IPAddress(host)?.isLoopback ?? false
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
