/// Values as PostgreSQL's text format writes them: bytea in hex, numbers, and text array literals.
enum PostgresText {
    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        text.reserveCapacity(2 + bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func bytes(fromHex hex: some Collection<UInt8>) -> [UInt8] {
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.count / 2)
        var high: UInt8?
        for digit in hex {
            guard let nibble = value(digit) else { return [] }
            if let first = high {
                bytes.append(first << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        return bytes
    }

    /// Swift's shortest exact form, which PostgreSQL reads back to the same value; a non-finite one is nil.
    static func double(_ value: Double) -> String? { value.isFinite ? "\(value)" : nil }

    /// `{"a","b\"c",NULL}` for text: every element quoted, `"` and `\` escaped. PostgreSQL text cannot hold NUL,
    /// so NULs are dropped (a tracker id never needs one).
    static func textArray(_ values: [String?]) -> String {
        var text = "{"
        for (index, value) in values.enumerated() {
            if index > 0 { text += "," }
            guard let value else { text += "NULL"; continue }
            text += "\""
            for scalar in value.unicodeScalars where scalar.value != 0 {
                if scalar == "\"" || scalar == "\\" { text += "\\" }
                text.unicodeScalars.append(scalar)
            }
            text += "\""
        }
        return text + "}"
    }
}

/// PostgreSQL's binary COPY format for `fixes` rows (share, tst, lat, lon, acc, alt, vel, cog, batt, tid, received_at):
/// a header, then per row a field count and each field as a big-endian length (-1: NULL) and its bytes.
struct BinaryCopy {
    private(set) var bytes: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]

    init(capacity rows: Int) { bytes.reserveCapacity(19 + rows * 110) }

    mutating func beginRow(fields: Int16) { append(UInt16(bitPattern: fields)) }

    mutating func int64(_ value: Int64) {
        append(UInt32(8))
        append(UInt64(bitPattern: value))
    }

    mutating func int32(_ value: Int32?) {
        guard let value else { return null() }
        append(UInt32(4))
        append(UInt32(bitPattern: value))
    }

    mutating func double(_ value: Double?) {
        guard let value, value.isFinite else { return null() }
        append(UInt32(8))
        append(value.bitPattern)
    }

    /// PostgreSQL text cannot hold NUL: dropped (a tracker id never needs one).
    mutating func text(_ value: String?) {
        guard let value else { return null() }
        let utf8 = value.utf8.filter { $0 != 0 }
        append(UInt32(utf8.count))
        bytes.append(contentsOf: utf8)
    }

    mutating func finish() { append(UInt16(0xFFFF)) }

    private mutating func null() { append(UInt32(0xFFFF_FFFF)) }

    private mutating func append<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }
}
