public import FlareCore
public import FlareEvents
public import FlareGateway
public import FlareSettings

// Every component's settings read into the typed values it takes, in one place: the components know nothing of
// `Configuration`, and `flared`'s wiring (`DaemonSettings`) reads each setting once, at start, before anything is
// opened. The settings themselves are declared once, with their defaults, in `FlaredSettings`.

extension LocationPayloadParser {
    /// The parser `flared` uses: FLARE_MAX_PAYLOAD_BYTES.
    public init(_ config: Configuration) throws(Configuration.ConfigurationError) {
        self.init(maximumBytes: Int(try config.integer("FLARE_MAX_PAYLOAD_BYTES")))
    }
}

extension TrackerRules {
    /// FLARE_STALE_AFTER_S.
    public init(_ config: Configuration) throws(Configuration.ConfigurationError) {
        self.init(staleAfterMillis: try config.integer("FLARE_STALE_AFTER_S") * 1000)
    }
}

extension SharePolicy {
    /// FLARE_DEFAULT_DURATION_S, FLARE_MAX_DURATION_S and FLARE_HISTORY_RETENTION_S, checked against each other.
    public init(_ config: Configuration) throws(Configuration.ConfigurationError) {
        self.init(defaultDurationSeconds: try config.integer("FLARE_DEFAULT_DURATION_S"),
                  maximumDurationSeconds: try config.integer("FLARE_MAX_DURATION_S"),
                  historyRetentionSeconds: try config.integer("FLARE_HISTORY_RETENTION_S"),
                  maximumFixesPerShare: Int(try config.integer("FLARE_MAX_FIXES_PER_SHARE")))
        guard defaultDurationSeconds <= maximumDurationSeconds else {
            throw Configuration.ConfigurationError("FLARE_DEFAULT_DURATION_S must not exceed FLARE_MAX_DURATION_S")
        }
    }
}

extension ServerWebhook {
    /// FLARE_WEBHOOK_URL and FLARE_WEBHOOK_SECRET: nil when neither is set; either without the other is an error.
    public static func configured(_ config: Configuration) throws(Configuration.ConfigurationError) -> ServerWebhook? {
        let urlText = config.string("FLARE_WEBHOOK_URL") ?? ""
        let secretText = config.string("FLARE_WEBHOOK_SECRET") ?? ""
        if urlText.isEmpty && secretText.isEmpty { return nil }
        guard !urlText.isEmpty else { throw Configuration.ConfigurationError("FLARE_WEBHOOK_SECRET is set but FLARE_WEBHOOK_URL is not") }
        guard !secretText.isEmpty else {
            throw Configuration.ConfigurationError("FLARE_WEBHOOK_URL is set but FLARE_WEBHOOK_SECRET is not: make one with `flare webhook-secret`")
        }
        let url: WebhookURL
        do { url = try WebhookURL(urlText) } catch { throw Configuration.ConfigurationError("FLARE_WEBHOOK_URL: \(error)") }
        guard let secrets = WebhookSecret.list(secretText) else {
            throw Configuration.ConfigurationError("FLARE_WEBHOOK_SECRET must be whsec_ followed by 24 to 64 random bytes in base64 (several separated by spaces); make one with `flare webhook-secret`")
        }
        return ServerWebhook(url: url, secrets: secrets)
    }
}

extension MailServer {
    /// FLARE_SMTP_URL and FLARE_SMTP_FROM: nil when neither is set; either without the other is an error.
    public static func configured(_ config: Configuration) throws(Configuration.ConfigurationError) -> MailServer? {
        let urlText = config.string("FLARE_SMTP_URL") ?? ""
        let from = config.string("FLARE_SMTP_FROM") ?? ""
        if urlText.isEmpty && from.isEmpty { return nil }
        guard !urlText.isEmpty else { throw Configuration.ConfigurationError("FLARE_SMTP_FROM is set but FLARE_SMTP_URL is not") }
        guard !from.isEmpty else { throw Configuration.ConfigurationError("FLARE_SMTP_URL is set but FLARE_SMTP_FROM is not: the address mail to contacts comes from") }
        do { return try MailServer(url: urlText, from: from) } catch { throw Configuration.ConfigurationError(error.description) }
    }
}

extension GatewayConfiguration {
    static func trustedProxies(_ config: Configuration) throws(Configuration.ConfigurationError) -> TrustedProxies {
        do { return try TrustedProxies(parsing: config.string("FLARE_TRUSTED_PROXIES") ?? "") } catch {
            throw Configuration.ConfigurationError("FLARE_TRUSTED_PROXIES: \(error.message)")
        }
    }

    /// The gateway's settings, from `FlaredSettings` (their one declaration, with their defaults).
    public init(_ config: Configuration) throws(Configuration.ConfigurationError) {
        guard let publicURL = config.string("FLARE_PUBLIC_URL"), let mqttPublicURL = config.string("FLARE_MQTT_PUBLIC_URL"),
              let leafletDirectory = config.string("FLARE_LEAFLET_DIR"), let tileURLTemplate = config.string("FLARE_TILE_URL"),
              let tileAttribution = config.string("FLARE_TILE_ATTRIBUTION") else {
            throw Configuration.ConfigurationError("FLARE_PUBLIC_URL, FLARE_MQTT_PUBLIC_URL, FLARE_LEAFLET_DIR, FLARE_TILE_URL and FLARE_TILE_ATTRIBUTION must not be empty")
        }
        var metricsToken: String?
        if let token = config.string("FLARE_METRICS_TOKEN") {
            // Said without the value: it is a secret.
            guard (16...256).contains(token.utf8.count), token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw Configuration.ConfigurationError("FLARE_METRICS_TOKEN must be 16 to 256 printable ASCII characters without spaces")
            }
            metricsToken = token
        }
        self.init(publicURL: publicURL, mqttPublicURL: mqttPublicURL, leafletDirectory: leafletDirectory,
                  viewerDirectory: config.string("FLARE_VIEWER_DIR"), tileURLTemplate: tileURLTemplate, tileAttribution: tileAttribution,
                  staleAfterSeconds: Int(try config.integer("FLARE_STALE_AFTER_S")),
                  linkRatePerAddress: try config.rateRule("FLARE_LINK_RATE_PER_ADDRESS"),
                  linkRatePerToken: try config.rateRule("FLARE_LINK_RATE_PER_TOKEN"),
                  fixRatePerShare: try config.rateRule("FLARE_FIX_RATE_PER_SHARE"),
                  trustedProxies: try Self.trustedProxies(config),
                  liveStreamsPerLink: Int(try config.integer("FLARE_LIVE_STREAMS_PER_LINK")),
                  liveStreamsPerAddress: Int(try config.integer("FLARE_LIVE_STREAMS_PER_ADDRESS")), metricsToken: metricsToken)
        if let directory = config.string("FLARE_TWEETNACL_DIR") { tweetnaclDirectory = directory }
        sosRatePerAddress = try config.rateRule("FLARE_SOS_RATE_PER_ADDRESS")
    }
}
