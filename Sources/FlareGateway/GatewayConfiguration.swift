public import FlareCore
import FoundationEssentials
public import FlareSystem

/// What the gateway needs to know about its surroundings, read once by `flared` (FlareSettings).
public struct GatewayConfiguration: Sendable {
    /// Base of the links sent to family members, e.g. `https://flare.example.org`.
    public var publicURL: String
    /// The broker address handed to devices in the create response.
    public var mqttPublicURL: String
    /// Debian's libjs-leaflet files, served at /vendor/leaflet/.
    public var leafletDirectory: String
    /// Where Debian's node-tweetnacl is: served at /vendor/tweetnacl/, for pages of end-to-end encrypted shares.
    public var tweetnaclDirectory = "/usr/share/nodejs/tweetnacl"
    /// Overrides the viewer files bundled with the gateway (for a deployment that customises them).
    public var viewerDirectory: String?
    public var tileURLTemplate: String
    public var tileAttribution: String
    public var staleAfterSeconds: Int
    /// Per client address, on link endpoints (/s/…, /api/v1/view/…).
    public var linkRatePerAddress: RateLimiter.Rule
    /// Per view token.
    public var linkRatePerToken: RateLimiter.Rule
    /// SOS starts and stops per client address, whichever devices (`FLARE_SOS_RATE_PER_ADDRESS`).
    public var sosRatePerAddress = RateLimiter.Rule(ratePerSecond: 0.1, burst: 20)
    /// Per share, the fixes its devices send over HTTP (Flare's ingest and the OwnTracks apps' HTTP mode alike).
    public var fixRatePerShare: RateLimiter.Rule
    /// Reverse proxies whose X-Forwarded-For names the client (the per-address limit's key).
    public var trustedProxies: TrustedProxies
    /// What an unknown or malformed token costs the caller's address bucket, in requests.
    public var unknownTokenCost: Double = 10
    /// Comment lines sent to idle live viewers so proxies and phones keep the stream open.
    public var keepaliveSeconds: Int = 15
    /// Answers per client address and share: 5 at once, then one every 10 s.
    public var answerRate = RateLimiter.Rule(ratePerSecond: 0.1, burst: 5)
    /// Answers per client address and share in all, refilled at this many a day (no share lasts longer by default):
    /// the pace above alone would let one address fill a share's 200 in half an hour.
    public var answersPerAddress = 10
    /// Live streams open at once per link and per client address: the HTTP server's connection slots are shared by
    /// every link, the API and OwnTracks HTTP, so no one link or address may hold them all.
    public var liveStreamsPerLink: Int
    public var liveStreamsPerAddress: Int
    /// With a token, the public listener serves /metrics to `Authorization: Bearer <token>`; without, it answers 404
    /// (the metrics have a listener of their own, `FLARE_METRICS_ADDR`).
    public var metricsToken: String?
    /// Web Push, when it is on (`FLARE_VAPID_SUBJECT`): the VAPID public key browsers subscribe with, and whether a
    /// push service on this machine is let through (`FLARE_PUSH_ALLOW_LOOPBACK`, tests only). Nil: off.
    public var push: PushSettings?

    public struct PushSettings: Sendable {
        public let publicKey: [UInt8]
        public let allowsLoopback: Bool

        public init(publicKey: [UInt8], allowsLoopback: Bool) {
            self.publicKey = publicKey
            self.allowsLoopback = allowsLoopback
        }
    }

    public init(publicURL: String, mqttPublicURL: String, leafletDirectory: String, viewerDirectory: String?, tileURLTemplate: String,
                tileAttribution: String, staleAfterSeconds: Int, linkRatePerAddress: RateLimiter.Rule, linkRatePerToken: RateLimiter.Rule,
                fixRatePerShare: RateLimiter.Rule, trustedProxies: TrustedProxies, liveStreamsPerLink: Int, liveStreamsPerAddress: Int,
                metricsToken: String?) {
        self.publicURL = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
        self.mqttPublicURL = mqttPublicURL
        self.leafletDirectory = leafletDirectory
        self.viewerDirectory = viewerDirectory
        self.tileURLTemplate = tileURLTemplate
        self.tileAttribution = tileAttribution
        self.staleAfterSeconds = staleAfterSeconds
        self.linkRatePerAddress = linkRatePerAddress
        self.linkRatePerToken = linkRatePerToken
        self.fixRatePerShare = fixRatePerShare
        self.trustedProxies = trustedProxies
        self.liveStreamsPerLink = liveStreamsPerLink
        self.liveStreamsPerAddress = liveStreamsPerAddress
        self.metricsToken = metricsToken
    }

    /// A link of ours as a URL. `publicURL` was checked at start-up and tokens and ids are base64url, so this
    /// always parses; the fallback only keeps a broken deployment from crashing.
    func url(_ text: String) -> URL {
        URL(string: text) ?? URL(string: "about:invalid")!
    }

    /// The origin that tile images come from, for the Content-Security-Policy (`{s}` subdomains become `*`).
    var tileOrigin: String? {
        guard let schemeEnd = tileURLTemplate.range(of: "://") else { return nil }
        let afterScheme = tileURLTemplate[schemeEnd.upperBound...]
        let host = afterScheme.prefix { $0 != "/" }
        guard !host.isEmpty else { return nil }
        let scheme = tileURLTemplate[..<schemeEnd.lowerBound]
        let wildcarded = host.replacingOccurrences(of: "{s}", with: "*")
        return "\(scheme)://\(wildcarded)"
    }
}

extension Substring {
    func replacingOccurrences(of target: String, with replacement: String) -> String {
        String(self).replacingOccurrences(of: target, with: replacement)
    }
}

extension String {
    func replacingOccurrences(of target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var result = ""
        var rest = self[...]
        while let range = rest.range(of: target) {
            result += rest[..<range.lowerBound]
            result += replacement
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}
