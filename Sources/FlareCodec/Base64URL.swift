/// Unpadded base64url (RFC 4648 §5): the alphabet of share ids, secrets and JWT segments.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let decodeTable: [Int8] = {
        var table = [Int8](repeating: -1, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = Int8(index) }
        return table
    }()

    public static func encode(_ bytes: [UInt8]) -> String { bytes.withUnsafeBytes { encode($0) } }

    /// From memory the caller holds (a hash's inline words), with no array made for it.
    public static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
            output.append(alphabet[Int(chunk & 63)])
            index += 3
        }
        let remaining = bytes.count - index
        if remaining == 1 {
            let chunk = UInt32(bytes[index]) << 16
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
        } else if remaining == 2 {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    public static func encode(_ text: String) -> String { encode(Array(text.utf8)) }

    /// Standard base64 (RFC 4648 §4, `+` `/` and `=` padding), as Standard Webhooks signatures and secrets use it.
    public static func encodeStandard(_ bytes: [UInt8]) -> String {
        let url = encode(bytes).replacingAll("-", with: "+").replacingAll("_", with: "/")
        return url + String(repeating: "=", count: (4 - url.count % 4) % 4)
    }

    /// Decodes unpadded base64url; nil for any character outside the alphabet or an impossible length.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let input = Array(text.utf8)
        guard input.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(input.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in input {
            let value = decodeTable[Int(byte)]
            guard value >= 0 else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero, so each byte string has exactly one encoding.
        guard accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return output
    }

    /// Decodes standard base64 (RFC 4648 §4, `+` `/` and `=` padding), as HTTP Basic credentials carry it; nil for
    /// anything else.
    public static func decode(standard text: some StringProtocol) -> [UInt8]? {
        var body = Substring(text)
        var padding = 0
        while body.hasSuffix("=") && padding < 2 {
            body = body.dropLast()
            padding += 1
        }
        guard !body.contains("-"), !body.contains("_"), !body.contains("="), padding == 0 || (body.count + padding) % 4 == 0 else { return nil }
        return decode(String(body).replacingAll("+", with: "-").replacingAll("/", with: "_"))
    }

    /// Every link request checks its token with this. Called from other modules it is not specialised, so
    /// the generic part only finds the bytes; the loop runs on a plain buffer.
    public static func isValid(_ text: some StringProtocol, length: Int) -> Bool {
        if let valid = text.utf8.withContiguousStorageIfAvailable({ isValid($0, length: length) }) { return valid }
        return Array(text.utf8).withUnsafeBufferPointer { isValid($0, length: length) }
    }

    private static func isValid(_ bytes: UnsafeBufferPointer<UInt8>, length: Int) -> Bool {
        guard bytes.count == length else { return false }
        let table = decodeTable
        for byte in bytes where table[Int(byte)] < 0 { return false }
        return true
    }
}

extension String {
    /// Every `target` byte replaced (both are ASCII here; no Foundation in FlareCore).
    fileprivate func replacingAll(_ target: Character, with replacement: Character) -> String {
        String(map { $0 == target ? replacement : $0 })
    }
}
