#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// `POST /api/v1/keys` (admin keys only): a new owner key. Every field is optional: a limited key with no limits
/// by default (it sees only its own shares), an admin key with `admin: true`.
public struct KeyRequest: RequestBody, Equatable {
    public var label: String?
    public var admin: Bool?
    /// Live shares at once.
    public var maxLive: Int?
    /// A share's whole length, from creation to expiry, whoever extends it.
    public var maxDurationSeconds: Int?
    /// Shares created in any hour.
    public var createRatePerHour: Int?

    enum CodingKeys: String, CodingKey {
        case label, admin, maxLive = "max_live", maxDurationSeconds = "max_duration_s", createRatePerHour = "create_rate_per_hour"
    }

    public init(label: String? = nil, admin: Bool? = nil, maxLive: Int? = nil, maxDurationSeconds: Int? = nil, createRatePerHour: Int? = nil) {
        self.label = label
        self.admin = admin
        self.maxLive = maxLive
        self.maxDurationSeconds = maxDurationSeconds
        self.createRatePerHour = createRatePerHour
    }

    public static let memberRefusals = [
        "label": BodyRefusal("invalid_label", "label must be text"),
        "admin": BodyRefusal("invalid_admin", "admin must be true or false"),
        "max_live": BodyRefusal("invalid_max_live", "max_live must be a whole number"),
        "max_duration_s": BodyRefusal("invalid_max_duration_s", "max_duration_s must be a whole number"),
        "create_rate_per_hour": BodyRefusal("invalid_create_rate_per_hour", "create_rate_per_hour must be a whole number"),
    ]
    public static let emptyIsEmptyObject = true
}

/// An owner key as `GET /api/v1/keys` shows it: never the key itself.
public struct KeyInfo: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case admin, limited }
    public let id: String
    public let label: String
    public let kind: Kind
    public let maxLive: Int?
    public let maxDurationSeconds: Int?
    public let createRatePerHour: Int?
    @RFC3339Time public var createdAt: Date
    @OptionalRFC3339Time public var lastUsedAt: Date?
    @OptionalRFC3339Time public var revokedAt: Date?
    public let liveShares: Int
    /// Where its shares' events are sent, if it set a webhook (`PUT /api/v1/keys/{id}/webhook`); never the secret.
    public let webhookURL: String?

    enum CodingKeys: String, CodingKey {
        case id, label, kind, maxLive = "max_live", maxDurationSeconds = "max_duration_s", createRatePerHour = "create_rate_per_hour"
        case createdAt = "created_at", lastUsedAt = "last_used_at", revokedAt = "revoked_at", liveShares = "live_shares"
        case webhookURL = "webhook_url"
    }

    public init(id: String, label: String, kind: Kind, maxLive: Int?, maxDurationSeconds: Int?, createRatePerHour: Int?,
                createdAt: Date, lastUsedAt: Date?, revokedAt: Date?, liveShares: Int, webhookURL: String? = nil) {
        self.id = id
        self.label = label
        self.kind = kind
        self.maxLive = maxLive
        self.maxDurationSeconds = maxDurationSeconds
        self.createRatePerHour = createRatePerHour
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
        self.liveShares = liveShares
        self.webhookURL = webhookURL
    }
}

/// `PUT /api/v1/keys/{id}/webhook`: where the key's shares' events are to go.
/// The body is that one member: anything else in it is refused (`invalid_webhook`, as every wrong body).
public struct WebhookRequest: RequestBody, Equatable {
    public let url: String
    public init(url: String) { self.url = url }

    enum CodingKeys: String, CodingKey { case url }

    /// Any member's name, to count them.
    private struct MemberName: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        url = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .url)
        guard try decoder.container(keyedBy: MemberName.self).allKeys.count == 1 else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "a webhook body holds url and nothing else"))
        }
    }

    static let refusal = BodyRefusal("invalid_webhook", #"the body must be {"url": "https://…"}"#)
    public static let memberRefusals = ["url": refusal]
    public static let malformedRefusal = refusal
}

/// The answer to `PUT /api/v1/keys/{id}/webhook` (200): the signing secret, shown this once (Standard Webhooks:
/// `whsec_` and base64). Setting the webhook again makes a new secret; the previous one keeps signing beside it for
/// `previous_secret_valid_s`, so a receiver can move over without missing a delivery.
public struct WebhookCreated: Codable, Sendable, Equatable {
    public let url: String
    public let secret: String
    public let previousSecretValidSeconds: Int?

    enum CodingKeys: String, CodingKey { case url, secret, previousSecretValidSeconds = "previous_secret_valid_s" }

    public init(url: String, secret: String, previousSecretValidSeconds: Int?) {
        self.url = url
        self.secret = secret
        self.previousSecretValidSeconds = previousSecretValidSeconds
    }
}

/// `POST /api/v1/keys` answers (201) with the key, once, and how to enrol a phone with it.
public struct CreatedKey: Codable, Sendable, Equatable {
    public let key: String
    public let info: KeyInfo
    /// `flare://enroll?server=…&key=…`, for a phone to scan once (`FlareClient(enrollmentLink:)`).
    public let enrollmentURL: String

    enum CodingKeys: String, CodingKey { case key, info, enrollmentURL = "enrollment_url" }

    public init(key: String, info: KeyInfo, enrollmentURL: String) {
        self.key = key
        self.info = info
        self.enrollmentURL = enrollmentURL
    }
}

/// `GET /api/v1/keys`.
public struct KeyList: Codable, Sendable, Equatable {
    public let keys: [KeyInfo]
    public init(keys: [KeyInfo]) { self.keys = keys }
}

/// An enrolment link: the server's public URL and an owner key, for a phone to scan once and keep the key in its
/// keychain. `flare://enroll?server=<percent-encoded URL>&key=<key>`.
public struct Enrollment: Sendable, Equatable {
    public let server: URL
    public let key: String

    public static let scheme = "flare"

    public init(server: URL, key: String) {
        self.server = server
        self.key = key
    }

    public var link: String {
        "\(Self.scheme)://enroll?server=\(Self.encode(server.absoluteString))&key=\(Self.encode(key))"
    }

    /// Nil for anything that is not a well-formed enrolment link with an http(s) server and an owner key.
    public init?(link: String) {
        let prefix = "\(Self.scheme)://enroll?"
        guard link.utf8.count <= 2048, link.hasPrefix(prefix) else { return nil }
        var fields: [String: String] = [:]
        for pair in link.dropFirst(prefix.count).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let value = Self.decode(parts[1]) else { return nil }
            fields[String(parts[0])] = value
        }
        guard let serverText = fields["server"], let server = URL(string: serverText),
              let scheme = server.scheme?.lowercased(), scheme == "https" || scheme == "http", server.host != nil,
              let key = fields["key"], key.hasPrefix("flare_owner_"), key.utf8.count <= 128 else { return nil }
        self.init(server: server, key: key)
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters.
    private static func encode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return out
    }

    private static func decode(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next(), let low = iterator.next(),
                  let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(value)
        }
        return String(validating: bytes, as: UTF8.self)
    }
}
