import FlareCrypto
import FlareSystem
import FlareCodec

/// A contact's id: 16 random bytes in base64url (22 characters). Not a capability (reading a contact takes its
/// owner's key), but unguessable all the same, so that ids say nothing about how many contacts exist.
public struct ContactID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public static let length = 22

    public init?(_ text: some StringProtocol) {
        guard Base64URL.isValid(text, length: Self.length) else { return nil }
        self.rawValue = String(text)
    }

    public static func generate() -> ContactID { ContactID(Base64URL.encode(Crypto.randomBytes(16)))! }

    public var description: String { rawValue }
}

/// The language Flare writes to a contact in.
public enum ContactLanguage: String, Sendable, CaseIterable {
    case en
    case zhCN = "zh-CN"
}

/// Someone the person who shares may tell: owned by the key that made them, as shares are.
public struct Contact: Sendable, Equatable {
    public let id: ContactID
    /// The key that made the contact; only that key (or an admin key) sees it.
    public let ownerKeyID: Int64?
    public let name: String
    public let email: String?
    /// E.164: `+` and 8 to 15 digits.
    public let phone: String?
    public let language: ContactLanguage
    public let createdAt: UnixMillis

    public init(id: ContactID, ownerKeyID: Int64?, name: String, email: String?, phone: String?, language: ContactLanguage,
                createdAt: UnixMillis) {
        self.id = id
        self.ownerKeyID = ownerKeyID
        self.name = name
        self.email = email
        self.phone = phone
        self.language = language
        self.createdAt = createdAt
    }
}

/// What makes a contact valid, with a named code for each refusal (the API answers 400 with it).
public enum ContactRules {
    /// A contact's name, as a share's.
    public static let name = NameBounds(maximumScalars: 80)
    /// The most contacts one key keeps: enough for any family and any club, too few to fill the store.
    public static let maximumPerKey = 1_000

    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public let code: String
        public let message: String
        public var description: String { message }

        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    public static func validName(_ text: String) throws(Refusal) -> String {
        let trimmed = text.trimmingWhitespace
        guard !trimmed.isEmpty else { throw Refusal(code: "invalid_name", message: "a contact needs a name") }
        guard name.admits(trimmed), !NameBounds.hasHiddenScalars(trimmed) else {
            throw Refusal(code: "invalid_name", message: "name must be \(name.description), without control or format characters")
        }
        return trimmed
    }

    /// An address mail can go to: one `@`, a local part, a domain name with a dot, printable ASCII without spaces, at
    /// most 254 bytes (RFC 5321's path limit). Not a full RFC 5322 parser: what mail servers take in practice, and no
    /// more than that, since the operator's server sends what a key typed:
    /// - the domain is a host name (letters, digits, hyphens, dots), never an address literal: `x@[10.0.0.5]` would
    ///   make the operator's relay deliver into its own network;
    /// - the local part has no `%` or `!`: the old source routes (`a%b@relay`, `host!user`) that some relays still
    ///   follow, sending the mail on to a third address the check never saw.
    public static func validEmail(_ text: String) throws(Refusal) -> String {
        let refusal = Refusal(code: "invalid_email", message: "email must be an address such as anna@example.org")
        let bytes = Array(text.utf8)
        guard (3...254).contains(bytes.count), bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
              bytes.filter({ $0 == UInt8(ascii: "@") }).count == 1, let at = bytes.firstIndex(of: UInt8(ascii: "@")) else { throw refusal }
        let local = bytes[..<at], domain = bytes[(at + 1)...]
        let routing: Set<UInt8> = Set(",<>\"\\%![]():;".utf8)
        guard !local.isEmpty, local.count <= 64, !local.contains(where: routing.contains) else { throw refusal }
        let labels = domain.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard labels.count >= 2, labels.allSatisfy({ label in
            (1...63).contains(label.count) && label.first != UInt8(ascii: "-") && label.last != UInt8(ascii: "-")
                && label.allSatisfy { $0.isASCIILetterOrDigit || $0 == UInt8(ascii: "-") }
        }) else { throw refusal }
        return text
    }

    /// E.164: `+`, a first digit 1 to 9, 8 to 15 digits in all.
    public static func validPhone(_ text: String) throws(Refusal) -> String {
        let bytes = Array(text.utf8)
        guard bytes.first == UInt8(ascii: "+"), (9...16).contains(bytes.count), (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[1]),
              bytes.dropFirst().allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            throw Refusal(code: "invalid_phone", message: "phone must be in E.164 form: + and 8 to 15 digits, e.g. +4915123456789")
        }
        return text
    }

    public static func language(_ text: String) throws(Refusal) -> ContactLanguage {
        guard let language = ContactLanguage(rawValue: text) else {
            throw Refusal(code: "invalid_language", message: "language must be one of \(ContactLanguage.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return language
    }
}

extension UInt8 {
    fileprivate var isASCIILetterOrDigit: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}

/// A contact's alerts page (`/alerts#c=<secret>`), where they get push alerts before any SOS.
public enum ContactAlerts {
    /// The contact's alerts secret: derived from the token key and the contact's id (as personal links are), so that
    /// every instance, and every mail, gives the same one while the store keeps only its hash. Deleting the contact
    /// ends it; a new token key gives new ones.
    public static func secret(tokenKey: [UInt8], contact: ContactID) -> String {
        let derived = Crypto.hmacSHA256(key: tokenKey, message: Array("flare-alerts-v1:\(contact.rawValue)".utf8))
        return Base64URL.encode(Array(derived.prefix(Secret.byteCount)))
    }
}
