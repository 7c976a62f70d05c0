internal import COpenSSL

/// SHA-256, HMAC-SHA256, AES-256-GCM, secure random bytes and constant-time comparison from OpenSSL libcrypto.
/// The only importer of COpenSSL; everything else sees plain `[UInt8]`.
public enum Crypto {
    public static func sha256(_ message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        message.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { output in
                _ = SHA256(input.baseAddress, input.count, output.baseAddress)
            }
        }
        return digest
    }

    public static func sha256(_ text: String) -> [UInt8] { sha256(Array(text.utf8)) }

    /// The HMAC-SHA256 context every call copies (`flare_hmac_sha256_template`), made once: a global's initialiser
    /// runs once, thread-safely. Never freed: it lives as long as the process.
    private final class HMACTemplate: @unchecked Sendable {
        // @unchecked: the context is only read (copied) after it is made.
        let context: OpaquePointer?
        init() { context = flare_hmac_sha256_template() }
    }
    private static let hmacTemplate = HMACTemplate()

    public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        let ok = key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { input in
                digest.withUnsafeMutableBufferPointer { output in
                    flare_hmac_sha256(hmacTemplate.context, keyBuffer.baseAddress, keyBuffer.count, input.baseAddress, input.count,
                                      output.baseAddress)
                }
            }
        }
        // Tokens signed with a broken MAC would be refused everywhere; a system without HMAC-SHA256 cannot run Flare.
        precondition(ok == 1, "OpenSSL could not compute HMAC-SHA256")
        return digest
    }

    /// Bytes from OpenSSL's CSPRNG. A failure here means the system cannot make secrets: stop rather than
    /// hand out guessable capabilities.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        precondition(ok == 1, "OpenSSL RAND_bytes failed: no secure randomness available")
        return bytes
    }

    /// Compares two byte strings in time that depends only on their lengths (CRYPTO_memcmp).
    public static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { pa in
            b.withUnsafeBytes { pb in CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 }
        }
    }

    /// AES-256-GCM with a fresh 96-bit nonce: `nonce ‖ ciphertext ‖ 16-byte tag`. `context` is authenticated, not
    /// encrypted (what the sealed bytes belong to, so they cannot be moved to another row). Nil only if OpenSSL fails.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], context: [UInt8]) -> [UInt8]? {
        precondition(key.count == 32, "AES-256 takes a 32-byte key")
        let nonce = randomBytes(12)
        return gcmSeal(EVP_aes_256_gcm(), key: key, nonce: nonce, authenticated: context, plaintext: plaintext).map { nonce + $0 }
    }

    /// Opens what `seal` made with the same key and context; nil if anything was changed (or the key differs).
    public static func open(_ sealed: [UInt8], key: [UInt8], context: [UInt8]) -> [UInt8]? {
        guard key.count == 32, sealed.count >= 28 else { return nil }
        return gcmOpen(EVP_aes_256_gcm(), key: key, nonce: Array(sealed.prefix(12)), authenticated: context, sealed: Array(sealed.dropFirst(12)))
    }

    /// GCM encryption under `cipher` (AES-128 or AES-256 GCM), the caller's key and 12-byte nonce, `authenticated`
    /// covered by the tag but not encrypted: ciphertext ‖ 16-byte tag. Nil if OpenSSL fails.
    static func gcmSeal(_ cipherKind: OpaquePointer?, key: [UInt8], nonce: [UInt8], authenticated: [UInt8], plaintext: [UInt8]) -> [UInt8]? {
        guard let cipher = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(cipher) }
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0, total = 0
        guard EVP_EncryptInit_ex(cipher, cipherKind, nil, key, nonce) == 1 else { return nil }
        if !authenticated.isEmpty {
            guard EVP_EncryptUpdate(cipher, nil, &length, authenticated, Int32(authenticated.count)) == 1 else { return nil }
        }
        if !plaintext.isEmpty {
            let updated = output.withUnsafeMutableBufferPointer { out in
                EVP_EncryptUpdate(cipher, out.baseAddress, &length, plaintext, Int32(plaintext.count))
            }
            guard updated == 1 else { return nil }
            total = Int(length)
        }
        let finished = output.withUnsafeMutableBufferPointer { out in EVP_EncryptFinal_ex(cipher, out.baseAddress! + total, &length) }
        guard finished == 1 else { return nil }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { return nil }
        return output.prefix(total) + tag
    }

    /// Opens what `gcmSeal` made (ciphertext ‖ tag) under the same cipher, key, nonce and authenticated bytes; nil if
    /// any of them differs, a byte was changed, or `sealed` is shorter than a tag.
    static func gcmOpen(_ cipherKind: OpaquePointer?, key: [UInt8], nonce: [UInt8], authenticated: [UInt8], sealed: [UInt8]) -> [UInt8]? {
        guard sealed.count >= 16, let cipher = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(cipher) }
        let body = Array(sealed.dropLast(16))
        var tag = Array(sealed.suffix(16))
        var output = [UInt8](repeating: 0, count: body.count + 16)
        var length: Int32 = 0, total = 0
        guard EVP_DecryptInit_ex(cipher, cipherKind, nil, key, nonce) == 1 else { return nil }
        if !authenticated.isEmpty {
            guard EVP_DecryptUpdate(cipher, nil, &length, authenticated, Int32(authenticated.count)) == 1 else { return nil }
        }
        if !body.isEmpty {
            let updated = output.withUnsafeMutableBufferPointer { out in EVP_DecryptUpdate(cipher, out.baseAddress, &length, body, Int32(body.count)) }
            guard updated == 1 else { return nil }
            total = Int(length)
        }
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1 else { return nil }
        let finished = output.withUnsafeMutableBufferPointer { out in EVP_DecryptFinal_ex(cipher, out.baseAddress! + total, &length) }
        guard finished == 1 else { return nil }
        return Array(output.prefix(total + Int(length)))
    }
}

extension Crypto {
    /// PBKDF2-HMAC-SHA256 (RFC 8018) from OpenSSL: a slow hash for low-entropy secrets such as a PIN, which a plain
    /// SHA-256 would give up to anyone holding the store in a fraction of a second.
    public static func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: Int, length: Int = 32) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: length)
        let ok = password.withUnsafeBufferPointer { pass in
            salt.withUnsafeBufferPointer { saltBuffer in
                output.withUnsafeMutableBufferPointer { out in
                    pass.withMemoryRebound(to: CChar.self) { passChars in
                        PKCS5_PBKDF2_HMAC(passChars.baseAddress, Int32(pass.count), saltBuffer.baseAddress, Int32(saltBuffer.count),
                                          Int32(iterations), EVP_sha256(), Int32(length), out.baseAddress)
                    }
                }
            }
        }
        precondition(ok == 1, "OpenSSL could not compute PBKDF2-HMAC-SHA256")
        return output
    }
}
