internal import COpenSSL

/// ECDH and ECDSA on NIST P-256 (prime256v1) from OpenSSL libcrypto: the curve Web Push is built on. A browser's
/// subscription key meets each message's sender key in ECDH (RFC 8291), and the application server signs its VAPID
/// token with ES256 (RFC 8292). Keys cross this boundary as bytes, in the forms those protocols carry: a private key is
/// the 32-byte big-endian scalar, a public key the 65-byte uncompressed point 0x04 ‖ X ‖ Y (the Push API's `p256dh`).
///
/// Every call makes and frees its own OpenSSL objects, so any number of threads may call at once.
public enum P256 {
    /// A fresh private key from OpenSSL's key generator. A failure means the system cannot make secrets: stop rather
    /// than hand out a guessable key (as `Crypto.randomBytes` does).
    public static func newPrivateKey() -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { preconditionFailure("OpenSSL has no EC keys") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
              EVP_PKEY_generate(context, &key) == 1 else { preconditionFailure("OpenSSL could not generate a P-256 key") }
        defer { EVP_PKEY_free(key) }
        var scalar: OpaquePointer?
        defer { BN_clear_free(scalar) }
        var bytes = [UInt8](repeating: 0, count: 32)
        guard EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_PRIV_KEY, &scalar) == 1, BN_bn2binpad(scalar, &bytes, 32) == 32
        else { preconditionFailure("OpenSSL could not read a P-256 key it made") }
        return bytes
    }

    /// The uncompressed public point of a private key; nil unless `privateKey` is 32 bytes holding a scalar in
    /// [1, n-1] (zero has no point, and a scalar past the order n would be a second spelling of a smaller key).
    public static func publicKey(privateKey: [UInt8]) -> [UInt8]? {
        guard privateKey.count == 32, let group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1) else { return nil }
        defer { EC_GROUP_free(group) }
        guard let scalar = BN_bin2bn(privateKey, 32, nil) else { return nil }
        defer { BN_clear_free(scalar) }
        guard BN_is_zero(scalar) == 0, BN_cmp(scalar, EC_GROUP_get0_order(group)) < 0, let point = EC_POINT_new(group)
        else { return nil }
        defer { EC_POINT_free(point) }
        var bytes = [UInt8](repeating: 0, count: 65)
        guard EC_POINT_mul(group, point, scalar, nil, nil, nil) == 1,
              EC_POINT_point2oct(group, point, POINT_CONVERSION_UNCOMPRESSED, &bytes, 65, nil) == 65 else { return nil }
        return bytes
    }

    /// Whether `bytes` is an uncompressed point on the curve. A subscription's key comes from the network: a point off
    /// the curve would make ECDH leak bits of the private key (an invalid-curve attack), so nothing uses one unchecked.
    /// P-256's cofactor is 1, so every point on the curve but infinity (which has no 65-byte form) is in the group.
    public static func isValidPublicKey(_ bytes: [UInt8]) -> Bool {
        guard bytes.count == 65, bytes[0] == 0x04, let group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1) else { return false }
        defer { EC_GROUP_free(group) }
        guard let point = EC_POINT_new(group) else { return false }
        defer { EC_POINT_free(point) }
        return EC_POINT_oct2point(group, point, bytes, 65, nil) == 1 && EC_POINT_is_on_curve(group, point, nil) == 1
    }

    /// The ECDH shared secret: the 32-byte X coordinate of privateKey × peerPublicKey, what RFC 8291 calls
    /// `ecdh_secret`. Nil for an invalid private key or peer key.
    public static func sharedSecret(privateKey: [UInt8], peerPublicKey: [UInt8]) -> [UInt8]? {
        guard isValidPublicKey(peerPublicKey), let key = keyPair(privateKey: privateKey) else { return nil }
        defer { EVP_PKEY_free(key) }
        guard let peer = flare_p256_key(nil, peerPublicKey) else { return nil }
        defer { EVP_PKEY_free(peer) }
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else { return nil }
        defer { EVP_PKEY_CTX_free(context) }
        var secret = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, peer) == 1,
              EVP_PKEY_derive(context, &secret, &length) == 1, length == 32 else { return nil }
        return secret
    }

    /// ECDSA over SHA-256 of `message` (JOSE's ES256) as the 64-byte r ‖ s a JWT carries (RFC 7518 §3.4), each half
    /// left-padded to 32 bytes; OpenSSL signs in DER, which is converted here. Nil for an invalid private key.
    public static func signES256(_ message: [UInt8], privateKey: [UInt8]) -> [UInt8]? {
        guard let key = keyPair(privateKey: privateKey) else { return nil }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(context) }
        var length = 0
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1,
              EVP_DigestSign(context, nil, &length, message, message.count) == 1 else { return nil }
        var der = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &der, &length, message, message.count) == 1 else { return nil }
        let signature = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, length)
        }
        guard let signature else { return nil }
        defer { ECDSA_SIG_free(signature) }
        var raw = [UInt8](repeating: 0, count: 64)
        let written = raw.withUnsafeMutableBufferPointer { out in
            (BN_bn2binpad(ECDSA_SIG_get0_r(signature), out.baseAddress, 32),
             BN_bn2binpad(ECDSA_SIG_get0_s(signature), out.baseAddress! + 32, 32))
        }
        return written == (32, 32) ? raw : nil
    }

    /// Whether the 64-byte r ‖ s `signature` is `publicKey`'s ES256 signature over `message`. Any malformed input is
    /// simply "no".
    public static func verifyES256(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard signature.count == 64, isValidPublicKey(publicKey), let key = flare_p256_key(nil, publicKey) else { return false }
        defer { EVP_PKEY_free(key) }
        guard let der = der(signature) else { return false }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        return EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1
            && EVP_DigestVerify(context, der, der.count, message, message.count) == 1
    }

    /// An EVP_PKEY holding both halves of a private key (its public point computed here, so the scalar is checked once
    /// and every operation sees a complete key); nil for an invalid scalar. The caller frees it.
    private static func keyPair(privateKey: [UInt8]) -> OpaquePointer? {
        guard let publicKey = publicKey(privateKey: privateKey) else { return nil }
        return flare_p256_key(privateKey, publicKey)
    }

    /// The DER form OpenSSL verifies of a raw r ‖ s signature.
    private static func der(_ signature: [UInt8]) -> [UInt8]? {
        guard let parsed = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(parsed) }
        let r = BN_bin2bn(signature, 32, nil)
        let s = signature.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s, ECDSA_SIG_set0(parsed, r, s) == 1 else {  // on success the signature owns r and s
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = Int(i2d_ECDSA_SIG(parsed, nil))
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: length)
        let written = der.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return Int(i2d_ECDSA_SIG(parsed, &cursor))
        }
        return written == length ? der : nil
    }
}
