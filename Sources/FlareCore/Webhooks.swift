import FlareCrypto
import FlareCodec

/// A webhook signing secret in the Standard Webhooks form: `whsec_` and 24 to 64 random bytes, base64-encoded.
public struct WebhookSecret: Sendable, Equatable, CustomStringConvertible {
    public let bytes: [UInt8]
    public static let prefix = "whsec_"
    public static let byteRange = 24...64

    public init?(_ text: some StringProtocol) {
        guard text.hasPrefix(Self.prefix), let bytes = Base64URL.decode(standard: text.dropFirst(Self.prefix.count)),
              Self.byteRange.contains(bytes.count) else { return nil }
        self.bytes = bytes
    }

    public init(bytes: [UInt8]) {
        precondition(Self.byteRange.contains(bytes.count))
        self.bytes = bytes
    }

    /// 32 bytes from the CSPRNG.
    public static func generate() -> WebhookSecret { WebhookSecret(bytes: Crypto.randomBytes(32)) }

    public var text: String { Self.prefix + Base64URL.encodeStandard(bytes) }
    /// Never the secret itself: logs and `print` show only that there is one.
    public var description: String { "whsec_…" }

    /// The secrets a setting lists (space-separated: the new one first while receivers move over); nil if any is
    /// malformed.
    public static func list(_ text: String) -> [WebhookSecret]? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        guard !parts.isEmpty else { return nil }
        var secrets: [WebhookSecret] = []
        for part in parts {
            guard let secret = WebhookSecret(part) else { return nil }
            secrets.append(secret)
        }
        return secrets
    }
}

/// Signing per Standard Webhooks: `webhook-signature` is a space-separated list of `v1,<base64 HMAC-SHA256 of
/// "id.timestamp.body">`, one per secret, so that a receiver keeps verifying while a secret is rotated.
public enum WebhookSignature {
    /// The three headers of one delivery attempt; `timestamp` in Unix seconds.
    public static func headers(id: String, timestamp: Int64, body: [UInt8], secrets: [WebhookSecret]) -> [(name: String, value: String)] {
        [("webhook-id", id), ("webhook-timestamp", String(timestamp)),
         ("webhook-signature", secrets.map { signature(id: id, timestamp: timestamp, body: body, secret: $0) }.joined(separator: " "))]
    }

    public static func signature(id: String, timestamp: Int64, body: [UInt8], secret: WebhookSecret) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + body
        return "v1," + Base64URL.encodeStandard(Crypto.hmacSHA256(key: secret.bytes, message: content))
    }

    /// What a receiver does: true if one of the listed `v1` signatures is this secret's (compared in constant time) and
    /// the timestamp is within `tolerance` seconds of `now` (replays of old deliveries are refused).
    public static func verify(id: String, timestamp: Int64, body: [UInt8], signatures: String, secret: WebhookSecret,
                              now: Int64, tolerance: Int64 = 300) -> Bool {
        guard abs(now - timestamp) <= tolerance else { return false }
        let expected = Array(signature(id: id, timestamp: timestamp, body: body, secret: secret).utf8)
        var found = false
        for candidate in signatures.split(separator: " ") where Crypto.constantTimeEquals(Array(candidate.utf8), expected) { found = true }
        return found
    }
}

/// Keeps the keys' webhook secrets sealed in the store: AES-256-GCM under a key derived from the token key, which
/// lives in the data directory (`token.key`, mode 0600) and never in the store, with the key's id as authenticated
/// context. A copy of the database alone (a dump, a backup, a replica) does not reveal a secret, and a sealed secret
/// moved to another key's row does not open.
public struct WebhookSecretSealer: Sendable {
    private let key: [UInt8]

    public init(tokenKey: [UInt8]) {
        key = Crypto.hmacSHA256(key: tokenKey, message: Array("flare webhook secrets v1".utf8))
    }

    public func seal(_ secret: WebhookSecret, ownerKey id: Int64) -> [UInt8]? {
        Crypto.seal(secret.bytes, key: key, context: Array("key:\(id)".utf8))
    }

    public func open(_ sealed: [UInt8], ownerKey id: Int64) -> WebhookSecret? {
        guard let bytes = Crypto.open(sealed, key: key, context: Array("key:\(id)".utf8)), WebhookSecret.byteRange.contains(bytes.count) else { return nil }
        return WebhookSecret(bytes: bytes)
    }
}
