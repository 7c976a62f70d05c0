import FlareCrypto
import FlareCodec

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
///
/// Its 32 bytes are held inline, as four words: the registry keeps one for every live share and link, and as an
/// array each was an allocation of its own (64 B with malloc's header, 6 MiB at 100,000 shares).
public struct SecretHash: Hashable, Sendable {
    private let words: (UInt64, UInt64, UInt64, UInt64)
    /// False for bytes that are not 32 long (Flare never makes such a hash; a damaged row could hold one): such a
    /// hash matches nothing, not even itself.
    private let isWhole: Bool
    public static let byteCount = 32

    public init(bytes: [UInt8]) {
        isWhole = bytes.count == Self.byteCount
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { target in
            bytes.withUnsafeBytes { source in target.copyMemory(from: UnsafeRawBufferPointer(rebasing: source.prefix(Self.byteCount))) }
        }
        self.words = words
    }

    public init(of secret: String) { self.init(bytes: Crypto.sha256(secret)) }

    /// The first eight bytes, as a dictionary key where the whole hash is compared after the lookup: SHA-256's bytes
    /// are uniform, so eight of them spread as well as 32. Not a comparison: use `matches`.
    public var indexKey: UInt64 { words.0 }

    /// The 32 bytes in base64url, with no array made for them: the key a link request's rate limit and the miss
    /// memory use for this hash.
    public var base64URL: String {
        withUnsafeBytes(of: words) { Base64URL.encode($0) }
    }

    /// The 32 bytes, for the store to bind or read back.
    public var bytes: [UInt8] {
        withUnsafeBytes(of: words) { Array($0) }
    }

    /// Equal and whole, in constant time.
    public func matches(_ other: SecretHash) -> Bool { self == other && isWhole }

    /// In constant time: every word is compared, whatever the first difference.
    public static func == (lhs: SecretHash, rhs: SecretHash) -> Bool {
        let difference = (lhs.words.0 ^ rhs.words.0) | (lhs.words.1 ^ rhs.words.1) | (lhs.words.2 ^ rhs.words.2) | (lhs.words.3 ^ rhs.words.3)
        return difference == 0 && lhs.isWhole == rhs.isWhole
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }
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
