
/// A NATS "nkey": an Ed25519 key written as base32 text whose first character says what it belongs to (`A…` an
/// account, `U…` a user, `N…` a server; a private seed starts `S` and then that letter) and whose last two bytes are a
/// CRC-16 of the rest. Flare's auth callout signs as an account key (`SA…` seed, `A…` public key in the nodes'
/// configuration) and reads the server's (`N…`) and the connecting user's (`U…`) from the broker's request.
public enum NKey {
    public enum Kind: UInt8, Sendable {
        case account = 0      // 'A'
        case server = 104     // 'N' (13 << 3)
        case user = 160       // 'U' (20 << 3)
    }
    private static let seedPrefix: UInt8 = 18 << 3  // 'S'

    /// A public key's text.
    public static func encodePublic(_ key: [UInt8], kind: Kind) -> String {
        precondition(key.count == 32, "an nkey is a 32-byte Ed25519 key")
        return encode([kind.rawValue] + key)
    }

    /// The 32 key bytes of a public key of `kind`; nil for anything else (another kind, a bad checksum, bad text).
    public static func decodePublic(_ text: String, kind: Kind) -> [UInt8]? {
        guard let raw = decode(text), raw.count == 33, raw[0] == kind.rawValue else { return nil }
        return Array(raw[1...])
    }

    /// A seed's text (the private key).
    public static func encodeSeed(_ seed: [UInt8], kind: Kind) -> String {
        precondition(seed.count == 32, "an nkey seed is 32 bytes")
        return encode([seedPrefix | (kind.rawValue >> 5), (kind.rawValue & 31) << 3] + seed)
    }

    /// The 32 bytes of a seed of `kind`; nil for anything else.
    public static func decodeSeed(_ text: String, kind: Kind) -> [UInt8]? {
        guard let raw = decode(text), raw.count == 34,
              raw[0] & 0xF8 == seedPrefix, (raw[0] & 7) << 5 | (raw[1] >> 3) == kind.rawValue
        else { return nil }
        return Array(raw[2...])
    }

    /// A fresh account seed and its public key: what `flare nats-issuer` hands the operator.
    public static func newAccount() -> (seed: String, publicKey: String) {
        let seed = Crypto.randomBytes(32)
        guard let key = Ed25519.publicKey(seed: seed) else { preconditionFailure("OpenSSL could not derive an Ed25519 key") }
        return (encodeSeed(seed, kind: .account), encodePublic(key, kind: .account))
    }

    // MARK: base32 (RFC 4648, no padding) with a trailing little-endian CRC-16/XMODEM

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    private static func encode(_ payload: [UInt8]) -> String {
        let crc = crc16(payload)
        let bytes = payload + [UInt8(crc & 0xFF), UInt8(crc >> 8)]
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count * 8 + 4) / 5)
        var buffer: UInt32 = 0, bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 5 {
                bits -= 5
                output.append(alphabet[Int((buffer >> UInt32(bits)) & 31)])
            }
        }
        if bits > 0 { output.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return String(decoding: output, as: UTF8.self)
    }

    private static func decode(_ text: String) -> [UInt8]? {
        guard text.utf8.count <= 64 else { return nil }
        var output: [UInt8] = []
        var buffer: UInt32 = 0, bits = 0
        for character in text.utf8 {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            buffer = buffer << 5 | UInt32(value)
            bits += 5
            if bits >= 8 {
                bits -= 8
                output.append(UInt8((buffer >> UInt32(bits)) & 0xFF))
            }
        }
        guard output.count >= 3 else { return nil }
        let payload = Array(output.dropLast(2))
        let crc = UInt16(output[output.count - 2]) | UInt16(output[output.count - 1]) << 8
        return crc16(payload) == crc ? payload : nil
    }

    private static func crc16(_ bytes: [UInt8]) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc ^= UInt16(byte) << 8
            for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        }
        return crc
    }
}
