internal import COpenSSL

extension Crypto {
    /// AES-128-GCM under the caller's key and 12-byte nonce: ciphertext ‖ 16-byte tag. For protocols that fix the key
    /// size and derive the nonce themselves (RFC 8188's `aes128gcm`, which Web Push encrypts with); Flare's own sealed
    /// data uses `seal`, which draws a fresh nonce. A nonce must never repeat under one key: the protocol's job here.
    /// Nil for a key that is not 16 bytes, a nonce that is not 12, or an OpenSSL failure.
    public static func aes128GCMSeal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8]) -> [UInt8]? {
        guard key.count == 16, nonce.count == 12 else { return nil }
        return gcmSeal(EVP_aes_128_gcm(), key: key, nonce: nonce, authenticated: [], plaintext: plaintext)
    }

    /// Opens what `aes128GCMSeal` made under the same key and nonce; nil if any byte was changed, the key or nonce
    /// differs, or the input is shorter than a tag.
    public static func aes128GCMOpen(key: [UInt8], nonce: [UInt8], sealed: [UInt8]) -> [UInt8]? {
        guard key.count == 16, nonce.count == 12 else { return nil }
        return gcmOpen(EVP_aes_128_gcm(), key: key, nonce: nonce, authenticated: [], sealed: sealed)
    }
}
