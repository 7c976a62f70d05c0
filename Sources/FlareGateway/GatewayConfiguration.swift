public import FlareCore
import FoundationEssentials

/// What the gateway needs to know about its surroundings, read once by `flared`.
public struct GatewayConfiguration: Sendable {
    /// Base of the links sent to family members, e.g. `https://flare.example.org`.
    public var publicURL: String
    /// The broker address handed to devices in the create response.
    public var mqttPublicURL: String
    /// Debian's libjs-leaflet files, served at /vendor/leaflet/.
    public var leafletDirectory: String
    /// Overrides the viewer files bundled with the gateway (for a deployment that customises them).
    public var viewerDirectory: String?
    public var tileURLTemplate: String
    public var tileAttribution: String
    public var staleAfterSeconds: Int
    /// Per client address, on link endpoints (/s/…, /api/v1/view/…).
    public var linkRatePerAddress: RateLimiter.Rule
    /// Per view token.
    public var linkRatePerToken: RateLimiter.Rule
    /// Reverse proxies whose X-Forwarded-For names the client (the per-address limit's key).
    public var trustedProxies: TrustedProxies
    /// What an unknown or malformed token costs the caller's address bucket.
    public var unknownTokenCost: Double
    /// Comment lines sent to idle live viewers so proxies and phones keep the stream open.
    public var keepaliveSeconds: Int

    public init(publicURL: String, mqttPublicURL: String,
                leafletDirectory: String = "/usr/share/javascript/leaflet",
                viewerDirectory: String? = nil,
                tileURLTemplate: String = "https://tile.openstreetmap.org/{z}/{x}/{y}.png",
                tileAttribution: String = "&copy; <a href=\"https://www.openstreetmap.org/copyright\">OpenStreetMap</a> contributors",
                staleAfterSeconds: Int = 120,
                linkRatePerAddress: RateLimiter.Rule = .init(ratePerSecond: 5, burst: 60),
                linkRatePerToken: RateLimiter.Rule = .init(ratePerSecond: 20, burst: 120),
                trustedProxies: TrustedProxies = .none,
                unknownTokenCost: Double = 10,
                keepaliveSeconds: Int = 15) {
        self.publicURL = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
        self.mqttPublicURL = mqttPublicURL
        self.leafletDirectory = leafletDirectory
        self.viewerDirectory = viewerDirectory
        self.tileURLTemplate = tileURLTemplate
        self.tileAttribution = tileAttribution
        self.staleAfterSeconds = staleAfterSeconds
        self.linkRatePerAddress = linkRatePerAddress
        self.linkRatePerToken = linkRatePerToken
        self.trustedProxies = trustedProxies
        self.unknownTokenCost = unknownTokenCost
        self.keepaliveSeconds = keepaliveSeconds
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
