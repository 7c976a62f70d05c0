internal import CSodium

/// NaCl's secretbox (XSalsa20-Poly1305) through libsodium, in the form the OwnTracks apps send:
/// `nonce (24) | Poly1305 tag (16) | ciphertext`, which is the nonce followed by `crypto_secretbox_easy`'s output.
public enum SecretBox {
    public static let keyBytes = 32
    public static let nonceBytes = 24
    public static let tagBytes = 16

    /// `sodium_init`, once, before the first call (Swift runs a global's initialiser once, thread-safely).
    private static let ready: Bool = sodium_init() >= 0

    /// Seals `plaintext` under `key` (32 bytes) with a fresh random nonce.
    public static func seal(_ plaintext: [UInt8], key: [UInt8]) -> [UInt8] {
        precondition(ready && key.count == keyBytes, "libsodium unavailable, or a key that is not 32 bytes")
        var nonce = [UInt8](repeating: 0, count: nonceBytes)
        randombytes_buf(&nonce, nonceBytes)
        var sealed = [UInt8](repeating: 0, count: tagBytes + plaintext.count)
        let result = crypto_secretbox_easy(&sealed, plaintext, UInt64(plaintext.count), nonce, key)
        precondition(result == 0, "crypto_secretbox_easy failed")
        return nonce + sealed
    }

    /// Opens `box` (nonce | tag | ciphertext); nil when it is too short, or was not sealed under `key`, or was changed.
    public static func open(_ box: [UInt8], key: [UInt8]) -> [UInt8]? {
        guard ready, key.count == keyBytes, box.count >= nonceBytes + tagBytes else { return nil }
        let nonce = Array(box.prefix(nonceBytes)), sealed = Array(box.dropFirst(nonceBytes))
        var plaintext = [UInt8](repeating: 0, count: sealed.count - tagBytes)
        guard crypto_secretbox_open_easy(&plaintext, sealed, UInt64(sealed.count), nonce, key) == 0 else { return nil }
        return plaintext
    }
}
