import Dispatch
import FlareBridge
import FlareCore
import FlareGateway
import FlareHTTP
import FlareMQTT
import FlareSQLite
import FlareStore
import Foundation

/// Builds the service from its configuration and runs it until a signal asks it to stop.
final class Daemon: Sendable {
    let logger: Logger
    let store: any ShareStore
    let shares: ShareService
    let ingestor: FixIngestor
    let bridge: Bridge
    let gateway: Gateway
    let server: HTTPServer
    let shutdownStoreGraceSeconds: Int

    init(configuration config: Configuration) throws {
        let level = Logger.Level(name: config.string("FLARE_LOG_LEVEL", default: "info"))
        guard let level else { throw Configuration.ConfigurationError("FLARE_LOG_LEVEL must be debug, info, warning or error") }
        let logger = Logger(label: "flared", level: level)
        self.logger = logger
        shutdownStoreGraceSeconds = Int(try config.integer("FLARE_SHUTDOWN_STORE_GRACE_S", in: 1...3600))
        let clock = SystemWallClock()
        let metrics = Metrics()

        let dataDirectory = config.string("FLARE_DATA_DIR", default: "./data")
        try DataDirectory.prepare(dataDirectory)
        guard let httpAddress = HostPort(config.string("FLARE_HTTP_ADDR", default: "127.0.0.1:8080")) else {
            throw Configuration.ConfigurationError("FLARE_HTTP_ADDR must be host:port, e.g. 127.0.0.1:8080 or [::1]:8080")
        }
        let mqttPort = try config.integer("FLARE_MQTT_PORT", in: 1...65535)
        let mqttText = config.string("FLARE_MQTT_URL") ?? "mqtt://127.0.0.1:\(mqttPort)"
        guard let mqttURL = MQTTURL(mqttText) else {
            throw Configuration.ConfigurationError("FLARE_MQTT_URL must look like mqtt://host:port (got \(mqttText))")
        }
        guard !mqttURL.tls else {
            throw Configuration.ConfigurationError("FLARE_MQTT_URL: the bridge connects without TLS (use the loopback listener)")
        }
        let publicURL = config.string("FLARE_PUBLIC_URL") ?? "http://\(httpAddress.description)"

        let sqlite = try SQLiteShareStore(path: dataDirectory + "/flare.db")
        store = sqlite
        let tokenKey = try DataDirectory.tokenKey(in: dataDirectory, logger: logger)
        try DataDirectory.ensureOwnerKey(in: dataDirectory, store: store, clock: clock, logger: logger)

        var mqttOptions = MQTTClient.Options(clientID: config.string("FLARE_MQTT_CLIENT_ID", default: "flared"))
        mqttOptions.host = mqttURL.host
        mqttOptions.port = mqttURL.port
        let credentials = try DataDirectory.brokerCredentials(
            in: dataDirectory, username: config.string("FLARE_MQTT_USERNAME"), password: config.string("FLARE_MQTT_PASSWORD"),
            passwordFile: config.string("FLARE_MQTT_PASSWORD_FILE"))
        mqttOptions.username = credentials.username
        mqttOptions.password = credentials.password
        mqttOptions.cleanSession = false
        // The bridge acknowledges a batch of QoS 1 fixes once it is committed (one commit per read), so the broker may
        // send this many before it waits: a larger window makes fewer, larger commits. Kept below mosquitto's queue
        // limits; a flared killed with a full window gets all of it again.
        mqttOptions.receiveMaximum = 1000
        let client = try MQTTClient(options: mqttOptions)

        let policy = SharePolicy(
            defaultDurationSeconds: try config.integer("FLARE_DEFAULT_DURATION_S", in: 1...31_536_000),
            maximumDurationSeconds: try config.integer("FLARE_MAX_DURATION_S", in: 1...31_536_000),
            historyRetentionSeconds: try config.integer("FLARE_HISTORY_RETENTION_S", in: 0...31_536_000))
        guard policy.defaultDurationSeconds <= policy.maximumDurationSeconds else {
            throw Configuration.ConfigurationError("FLARE_DEFAULT_DURATION_S must not exceed FLARE_MAX_DURATION_S")
        }
        let parser = LocationPayloadParser(maximumBytes: Int(try config.integer("FLARE_MAX_PAYLOAD_BYTES", in: 64...65536)))
        shares = ShareService(store: store, trailLength: Int(try config.integer("FLARE_TRAIL_LENGTH", in: 1...1000)), publisher: client, tokenKey: tokenKey, policy: policy,
                              clock: clock, metrics: metrics, logger: logger.with(label: "shares"))
        ingestor = FixIngestor(shares: shares, metrics: metrics, logger: logger.with(label: "bridge"),
                               clock: clock, parser: parser)
        bridge = Bridge(client: client, ingestor: ingestor, shares: shares, metrics: metrics, logger: logger.with(label: "bridge"))

        let gatewayConfiguration = GatewayConfiguration(
            publicURL: publicURL,
            mqttPublicURL: config.string("FLARE_MQTT_PUBLIC_URL") ?? mqttText,
            leafletDirectory: config.string("FLARE_LEAFLET_DIR", default: "/usr/share/javascript/leaflet"),
            viewerDirectory: config.string("FLARE_VIEWER_DIR"),
            tileURLTemplate: config.string("FLARE_TILE_URL", default: "https://tile.openstreetmap.org/{z}/{x}/{y}.png"),
            tileAttribution: config.string("FLARE_TILE_ATTRIBUTION", default: "&copy; OpenStreetMap contributors"),
            staleAfterSeconds: Int(try config.integer("FLARE_STALE_AFTER_S", in: 1...86_400)),
            linkRatePerAddress: try Self.rateRule(config, "FLARE_LINK_RATE_PER_ADDRESS", default: "5/60"),
            linkRatePerToken: try Self.rateRule(config, "FLARE_LINK_RATE_PER_TOKEN", default: "20/120"),
            trustedProxies: try TrustedProxies(parsing: config.string("FLARE_TRUSTED_PROXIES", default: "")))
        let ingestor = self.ingestor
        let space = StoreSpace(storePath: sqlite.path, minimumFreeBytes: try config.integer("FLARE_STORE_MIN_FREE_MB", in: 0...1_048_576) * 1_048_576,
                               logger: logger.with(label: "store"))
        metrics.registerGauge(FlareMetrics.storeFreeBytes) { Double(space.read().freeBytes ?? -1) }
        gateway = try Gateway(configuration: gatewayConfiguration, shares: shares, ingestPublisher: client, metrics: metrics, logger: logger.with(label: "gateway"),
                              clock: clock, parser: parser) {
            let reading = space.read()
            return HealthReport(mqttConnected: client.isConnected, storeHealthy: ingestor.isStoreHealthy,
                                storeSpaceLow: reading.isLow, storeFreeBytes: reading.freeBytes)
        }
        var serverConfiguration = HTTPServer.Configuration(host: httpAddress.host, port: httpAddress.port)
        serverConfiguration.threadPoolSize = Int(try config.integer("FLARE_HTTP_THREADS", in: 1...64))
        let httpLogger = logger.with(label: "http")
        serverConfiguration.errorLog = { message in httpLogger.warning(Logger.redactingSecrets(message)) }
        server = HTTPServer(configuration: serverConfiguration, handler: gateway.handle)
        logger.info("data in \(dataDirectory); links as \(publicURL)/s/…; broker \(mqttURL.host):\(mqttURL.port)")
    }

    /// "RATE/BURST", e.g. "5/60": RATE requests per second on average, BURST at once.
    static func rateRule(_ config: Configuration, _ name: String, default fallback: String) throws -> RateLimiter.Rule {
        let text = config.string(name, default: fallback)
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let rate = Double(parts[0]), let burst = Double(parts[1]),
              rate > 0, rate.isFinite, burst >= 1, burst.isFinite else {
            throw Configuration.ConfigurationError("\(name) must be RATE/BURST with RATE > 0 and BURST >= 1, e.g. 5/60 (got \(text))")
        }
        return RateLimiter.Rule(ratePerSecond: rate, burst: burst)
    }

    func start() throws {
        try shares.recover()
        ingestor.start()
        try bridge.start()
        try server.start()
        logger.info("HTTP gateway listening on port \(server.port)")
    }

    /// The ordered drain: stop taking HTTP requests, stop taking MQTT messages, write what is queued, stop timers.
    /// Returns false when queued fixes could not be written (the store kept failing).
    func shutdown() -> Bool {
        logger.info("shutting down: closing live streams and the HTTP gateway")
        gateway.closeLiveStreams()
        server.stop()
        logger.info("disconnecting from the broker")
        ingestor.prepareForShutdown()
        bridge.stop()
        logger.info("writing \(ingestor.queueDepth) queued fixes")
        if let unwritten = ingestor.drain(failingStoreGraceSeconds: shutdownStoreGraceSeconds) {
            logger.error("the store kept failing: \(unwritten) received fixes could not be written; those that came at QoS 1 were not acknowledged, so the broker delivers them again when flared is back (QoS 0 ones are lost)")
            return false
        }
        shares.stopScheduler()
        logger.info("stopped cleanly")
        return true
    }
}

extension MQTTClient: IngestPublisher {
    public func publishAndWait(topic: String, payload: [UInt8], timeoutMillis: Int) throws {
        try publishAndWait(topic: topic, payload: payload, qos: 1, retain: true, timeout: .milliseconds(timeoutMillis))
    }
}
