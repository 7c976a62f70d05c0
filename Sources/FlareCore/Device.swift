import FlareCodec
import FlareCrypto
public import FlareSystem

/// A device's id: 128 random bits, base64url (as a contact's). Not a secret: the owner names devices by it.
public struct DeviceID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public static let length = 22

    public init?(_ text: some StringProtocol) {
        guard Base64URL.isValid(text, length: Self.length) else { return nil }
        self.rawValue = String(text)
    }

    public static func generate() -> DeviceID { DeviceID(Base64URL.encode(Crypto.randomBytes(16)))! }

    public var description: String { rawValue }
}

/// One person's phone or tracker, standing ready to start an SOS: its secret (kept only as a hash) is its only
/// credential, and it may start, feed and stop its own SOS and nothing else. Owned by the key that made it; an SOS
/// it starts is a share of that key, with a personal link for each of `contacts`.
public struct Device: Sendable, Equatable {
    public let id: DeviceID
    public let ownerKeyID: Int64
    public var name: String
    public var secretHash: SecretHash
    public var contacts: [ContactID]
    /// How long its SOS runs (nil: the server's default).
    public var durationSeconds: Int64?
    /// What the contacts read in the SOS mail, beside the link ("" : none).
    public var message: String
    /// The PIN that stops its SOS, and the duress PIN that seems to stop it (`PINHash`); nil: none.
    public var pin: PINHash?
    public var duressPin: PINHash?
    /// Seconds the SOS page counts down after a press, with a Cancel, before it starts the SOS (0: at once).
    public var countdownSeconds: Int
    /// The escalation ladder of its SOS (`EscalationRules`; 0: off).
    public var escalateAfterSeconds: Int
    public let createdAt: UnixMillis

    public init(id: DeviceID, ownerKeyID: Int64, name: String, secretHash: SecretHash, contacts: [ContactID], durationSeconds: Int64?,
                message: String, pin: PINHash?, duressPin: PINHash?, countdownSeconds: Int = DeviceRules.defaultCountdownSeconds,
                escalateAfterSeconds: Int = EscalationRules.defaultSeconds, createdAt: UnixMillis) {
        self.id = id
        self.ownerKeyID = ownerKeyID
        self.name = name
        self.secretHash = secretHash
        self.contacts = contacts
        self.durationSeconds = durationSeconds
        self.message = message
        self.pin = pin
        self.duressPin = duressPin
        self.countdownSeconds = countdownSeconds
        self.escalateAfterSeconds = escalateAfterSeconds
        self.createdAt = createdAt
    }
}

/// What the store keeps of a device's SOS, across instances: the share of its current (or last) SOS, the hourly
/// budget of starts, when the contacts were last told of a repeated press, wrong PINs and the lock they cause, and
/// when the device was last heard.
public struct DeviceSOSState: Sendable, Equatable {
    public var shareRow: Int64?
    public var repeatMailedAt: UnixMillis?
    public var wrongPins: Int
    public var wrongPinsSince: UnixMillis?
    public var stopLockedUntil: UnixMillis?
    public var lastHeardAt: UnixMillis?
    /// When its SOS share went on under duress (the duress PIN), read from the share's row.
    public var duressAt: UnixMillis?

    public init(shareRow: Int64? = nil, repeatMailedAt: UnixMillis? = nil, wrongPins: Int = 0, wrongPinsSince: UnixMillis? = nil,
                stopLockedUntil: UnixMillis? = nil, lastHeardAt: UnixMillis? = nil, duressAt: UnixMillis? = nil) {
        self.shareRow = shareRow
        self.repeatMailedAt = repeatMailedAt
        self.wrongPins = wrongPins
        self.wrongPinsSince = wrongPinsSince
        self.stopLockedUntil = stopLockedUntil
        self.lastHeardAt = lastHeardAt
        self.duressAt = duressAt
    }
}

/// A PIN, kept as PBKDF2-HMAC-SHA256 with a salt of its own: a PIN has few digits, and a plain hash of it would give
/// it up to anyone holding the store at once. Text form `pbkdf2-sha256$<iterations>$<salt>$<hash>` (base64url).
public struct PINHash: Sendable, Equatable {
    public let text: String
    /// About 50 ms here: paid at each stop with a PIN (a few a day) and bounded by the stop's lockout.
    public static let iterations = 120_000

    public init?(text: String) {
        let parts = text.split(separator: "$")
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", Int(parts[1]).map({ $0 > 0 && $0 <= 10_000_000 }) == true else { return nil }
        self.text = text
    }

    public static func make(_ pin: String) -> PINHash {
        let salt = Crypto.randomBytes(16)
        let hash = Crypto.pbkdf2SHA256(password: Array(pin.utf8), salt: salt, iterations: iterations)
        return PINHash(text: "pbkdf2-sha256$\(iterations)$\(Base64URL.encode(salt))$\(Base64URL.encode(hash))")!
    }

    /// Whether `pin` is the PIN this hash was made from (compared in constant time).
    public func matches(_ pin: String) -> Bool {
        let parts = text.split(separator: "$")
        guard parts.count == 4, let rounds = Int(parts[1]), let salt = Base64URL.decode(String(parts[2])),
              let expected = Base64URL.decode(String(parts[3])) else { return false }
        return Crypto.constantTimeEquals(Crypto.pbkdf2SHA256(password: Array(pin.utf8), salt: salt, iterations: rounds, length: expected.count), expected)
    }
}

/// What makes a device valid, with a named code for each refusal (the API answers 400 with it).
public enum DeviceRules {
    public static let name = NameBounds(maximumScalars: 80)
    /// What the contacts read with the link: a sentence or two.
    public static let message = NameBounds(maximumScalars: 280)
    /// The most devices one key keeps: a family's phones and trackers.
    public static let maximumPerKey = 50
    /// Wrong PINs that lock stopping, within `wrongPinWindowMillis`, for `stopLockMillis`.
    public static let wrongPinsBeforeLock = 5
    public static let wrongPinWindowMillis: Int64 = 15 * 60_000
    public static let stopLockMillis: Int64 = 15 * 60_000
    /// The SOS page's countdown after a press, against pocket presses.
    public static let countdownSeconds = 0...10
    public static let defaultCountdownSeconds = 5
    /// A repeated press tells the contacts at most this often (the event goes out every time).
    public static let repeatMailIntervalMillis: Int64 = 60_000

    public typealias Refusal = ContactRules.Refusal

    public static func validName(_ text: String) throws(Refusal) -> String {
        let trimmed = text.trimmingWhitespace
        guard !trimmed.isEmpty else { throw Refusal(code: "invalid_name", message: "a device needs a name, e.g. \"Anna's phone\"") }
        guard name.admits(trimmed), !NameBounds.hasHiddenScalars(trimmed) else {
            throw Refusal(code: "invalid_name", message: "name must be \(name.description), without control or format characters")
        }
        return trimmed
    }

    public static func validMessage(_ text: String?) throws(Refusal) -> String {
        let trimmed = (text ?? "").trimmingWhitespace
        guard message.admits(trimmed), !NameBounds.hasHiddenScalars(trimmed, allowingNewlines: true) else {
            throw Refusal(code: "invalid_message", message: "message must be \(message.description), without control or format characters")
        }
        return trimmed
    }

    /// 4 to 12 digits (ASCII): what a phone's keypad types in a hurry.
    public static func validPIN(_ text: String, field: String) throws(Refusal) -> String {
        guard (4...12).contains(text.utf8.count), text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            throw Refusal(code: "invalid_\(field)", message: "\(field) must be 4 to 12 digits")
        }
        return text
    }
}
