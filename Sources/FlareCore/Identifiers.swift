import FlareCrypto

/// A share's public identifier: 128 random bits as 22 base64url characters. It appears in topic names and
/// URLs and is not a secret on its own; the view token and device token are the capabilities.
public struct ShareID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public static let length = 22

    public init?(_ text: some StringProtocol) {
        guard Base64URL.isValid(text, length: Self.length) else { return nil }
        self.rawValue = String(text)
    }

    public static func generate() -> ShareID { ShareID(Base64URL.encode(Crypto.randomBytes(16)))! }

    public var description: String { rawValue }
}

/// A bearer secret (view token, owner key). 192 random bits; only its SHA-256 is ever stored.
public struct Secret: Sendable {
    public let text: String
    public static let byteCount = 24
    /// Base64url length of `byteCount` bytes.
    public static let length = 32

    public init(text: String) { self.text = text }

    public static func generate() -> Secret { Secret(text: Base64URL.encode(Crypto.randomBytes(byteCount))) }

    public var hash: SecretHash { SecretHash(of: text) }

    /// Shape check before any lookup, so malformed input costs nothing and never reaches the store.
    public static func isWellFormed(_ text: some StringProtocol) -> Bool { Base64URL.isValid(text, length: length) }
}

/// SHA-256 of a secret. Lookups go by hash, so a timing difference in a dictionary lookup reveals nothing
/// about the secret itself; a final comparison still uses constant time.
public struct SecretHash: Hashable, Sendable {
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }
    public init(of secret: String) { self.bytes = Crypto.sha256(secret) }

    public func matches(_ other: SecretHash) -> Bool { Crypto.constantTimeEquals(bytes, other.bytes) }
}

/// Owner keys carry a recognisable prefix so a leaked key is easy to spot in a config or a paste.
public enum OwnerKey {
    public static let prefix = "flare_owner_"

    public static func generate() -> String { prefix + Secret.generate().text }

    public static func isWellFormed(_ text: some StringProtocol) -> Bool {
        guard text.hasPrefix(prefix) else { return false }
        return Secret.isWellFormed(text.dropFirst(prefix.count))
    }
}
