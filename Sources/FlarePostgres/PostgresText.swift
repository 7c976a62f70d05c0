/// Values as PostgreSQL's text format writes them: bytea in hex, and the array literals that let one statement
/// carry a whole batch (`unnest($1::bigint[], …)`): one round trip per batch instead of one per row.
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

    /// `{1,2,NULL}` for numbers. Doubles are written in Swift's shortest exact form, which PostgreSQL reads back
    /// to the same value; a non-finite one (never valid in a fix) is NULL.
    static func array<T>(_ values: [T?], _ render: (T) -> String?) -> String {
        var text = "{"
        text.reserveCapacity(values.count * 12)
        for (index, value) in values.enumerated() {
            if index > 0 { text += "," }
            text += value.flatMap(render) ?? "NULL"
        }
        return text + "}"
    }

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
