import FlareCrypto
import FlareCodec

/// An end-to-end encrypted share's passphrase, and the key the OwnTracks apps make of it.
///
/// Both apps encrypt with NaCl's secretbox when their `encryptionKey` setting is set, keyed by the setting's UTF-8
/// bytes cut or zero-padded to 32. Android cuts at byte 32; iOS never cuts a character in half. The two differ only for
/// a non-ASCII passphrase longer than 32 bytes. Flare's passphrases are 24 random bytes in base64url (32 ASCII
/// characters, 192 bits), so every app makes the same key of them. A passphrase typed by hand is keyed the iOS way.
public enum E2EPassphrase {
    public static let keyBytes = 32

    /// A new passphrase: 192 random bits, 32 characters of base64url.
    public static func generate() -> String { Base64URL.encode(Crypto.randomBytes(24)) }

    /// The secretbox key of `passphrase`: its UTF-8 bytes, whole characters only, cut or zero-padded to 32.
    public static func key(_ passphrase: String) -> [UInt8] {
        var key: [UInt8] = []
        for character in passphrase {
            let bytes = Array(String(character).utf8)
            guard key.count + bytes.count <= keyBytes else { break }
            key += bytes
        }
        return key + [UInt8](repeating: 0, count: keyBytes - key.count)
    }

    /// The shortest passphrase taken from a person: 16 characters. The key is the passphrase itself (no key
    /// derivation: the apps have none), so a short one is guessed offline from one captured ciphertext.
    public static let minimumCharacters = 16

    public struct Refusal: Error, CustomStringConvertible {
        public let description: String
    }

    /// Checks a passphrase given by hand: at least `minimumCharacters` characters, and at most `keyBytes` bytes of
    /// UTF-8, since the apps key with the first 32 bytes only and what lies beyond would protect nothing (refused, not
    /// cut: the person would believe the whole of it counts).
    public static func checkGiven(_ passphrase: String) throws(Refusal) {
        guard passphrase.count >= minimumCharacters else {
            throw Refusal(description: "--e2e-key must be at least \(minimumCharacters) characters (it is the encryption key itself); omit it to use the 32-character key `flare share create --e2e` made")
        }
        guard passphrase.utf8.count <= keyBytes else {
            throw Refusal(description: "--e2e-key must be at most \(keyBytes) bytes: the apps use only the first \(keyBytes), so the rest would protect nothing (it is \(passphrase.utf8.count) bytes)")
        }
    }

    /// Whether `text` is a passphrase Flare makes: 32 base64url characters.
    public static func isGenerated(_ text: String) -> Bool { Base64URL.isValid(text, length: 32) }
}
