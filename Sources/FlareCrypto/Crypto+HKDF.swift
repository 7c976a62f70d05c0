extension Crypto {
    /// HKDF with SHA-256 (RFC 5869): `length` bytes of key drawn from `inputKey`, bound to `info`. Written on
    /// `hmacSHA256` rather than OpenSSL's EVP_KDF, whose OSSL_PARAM inputs point at memory Swift lends for one call
    /// only; the RFC's two steps are a few lines, and the HMAC is the one any number of threads already share.
    /// An empty salt is the RFC's default (32 zero bytes): HMAC pads a short key with zeros either way.
    public static func hkdfSHA256(salt: [UInt8], inputKey: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
        hkdfExpandSHA256(pseudorandomKey: hkdfExtractSHA256(salt: salt, inputKey: inputKey), info: info, length: length)
    }

    /// HKDF-Extract (RFC 5869 §2.2): the pseudorandom key PRK = HMAC-SHA-256(salt, IKM).
    static func hkdfExtractSHA256(salt: [UInt8], inputKey: [UInt8]) -> [UInt8] {
        hmacSHA256(key: salt, message: inputKey)
    }

    /// HKDF-Expand (RFC 5869 §2.3): T(i) = HMAC-SHA-256(PRK, T(i-1) ‖ info ‖ i), concatenated and cut to `length`,
    /// which the RFC caps at 255 blocks (8160 bytes).
    static func hkdfExpandSHA256(pseudorandomKey: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
        precondition((0...255 * 32).contains(length), "HKDF-SHA256 yields 0 to 8160 bytes")
        var output: [UInt8] = []
        output.reserveCapacity(length + 32)
        var block: [UInt8] = []
        var counter: UInt8 = 1
        while output.count < length {
            block = hmacSHA256(key: pseudorandomKey, message: block + info + [counter])
            output += block
            counter &+= 1
        }
        return Array(output.prefix(length))
    }
}
