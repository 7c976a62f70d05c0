internal import COpenSSL

/// Ed25519 signatures from OpenSSL libcrypto: what NATS signs its JWTs with (an "nkey" is an Ed25519 key). Flare signs
/// the answers of the broker's auth callout with one and checks the requests the broker signs with its own.
public enum Ed25519 {
    /// The 32-byte public key of a 32-byte private key (seed); nil if `seed` is not 32 bytes.
    public static func publicKey(seed: [UInt8]) -> [UInt8]? {
        guard seed.count == 32, let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, seed, 32) else { return nil }
        defer { EVP_PKEY_free(key) }
        var length = 32
        var publicKey = [UInt8](repeating: 0, count: 32)
        guard EVP_PKEY_get_raw_public_key(key, &publicKey, &length) == 1, length == 32 else { return nil }
        return publicKey
    }

    /// The 64-byte signature of `message` under the 32-byte `seed`; nil if the seed is not 32 bytes or OpenSSL fails.
    public static func sign(_ message: [UInt8], seed: [UInt8]) -> [UInt8]? {
        guard seed.count == 32, let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, seed, 32) else { return nil }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, nil, nil, key) == 1 else { return nil }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        let signed = message.withUnsafeBufferPointer { input in
            EVP_DigestSign(context, &signature, &length, input.baseAddress, input.count)
        }
        return signed == 1 && length == 64 ? signature : nil
    }

    /// Whether `signature` is `publicKey`'s over `message`. Any malformed input is simply "no".
    public static func verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard signature.count == 64, publicKey.count == 32,
              let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, publicKey, 32) else { return false }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, nil, nil, key) == 1 else { return false }
        return message.withUnsafeBufferPointer { input in
            EVP_DigestVerify(context, signature, 64, input.baseAddress, input.count) == 1
        }
    }
}
