internal import COpenSSL

/// SHA-256, HMAC-SHA256, secure random bytes and constant-time comparison from OpenSSL libcrypto.
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

    public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { input in
                digest.withUnsafeMutableBufferPointer { output in
                    _ = HMAC(EVP_sha256(), keyBuffer.baseAddress, Int32(keyBuffer.count),
                             input.baseAddress, input.count, output.baseAddress, &length)
                }
            }
        }
        return Array(digest.prefix(Int(length)))
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
}
