/// A small, strict JSON reader and writer.
///
/// Payloads arrive from untrusted trackers at tens of thousands per second; this parser is allocation-light,
/// bounded in depth, and never traps on bad input: every problem is a thrown `JSONError`.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var doubleValue: Double? { if case .number(let n) = self { return n } else { return nil } }
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o } else { return nil } }
}

public struct JSONError: Error, Equatable, CustomStringConvertible {
    public let offset: Int
    public let reason: String
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSONValue {
    public static let maximumDepth = 32

    public static func parse(_ bytes: [UInt8]) throws(JSONError) -> JSONValue {
        try parseWhole(bytes) { parser throws(JSONError) in try parser.parseValue(depth: 0) }
    }

    public static func parse(_ text: String) throws(JSONError) -> JSONValue { try parse(Array(text.utf8)) }

    /// Walks a JSON object's members in order without building a dictionary: the ingest path reads a handful of
    /// known keys from every payload, and hashing every key into a fresh dictionary was most of its parse time.
    /// Accepts and refuses exactly the texts `parse` does (and then only objects); a key that appears twice is
    /// reported twice, so a caller keeping the last one sees what `parse(bytes)[key]` would.
    public static func forEachMember(
        ofObject bytes: [UInt8], _ body: (_ key: String, _ value: JSONValue) -> Void
    ) throws(JSONError) {
        try parseWhole(bytes) { parser throws(JSONError) in
            guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "{") else {
                throw parser.error("expected an object")
            }
            try parser.parseMembers(depth: 0, body)
        }
    }

    /// The whole text is one value: leading and trailing whitespace allowed, nothing else around it.
    private static func parseWhole<T>(
        _ bytes: [UInt8], _ value: (inout JSONParser) throws(JSONError) -> T
    ) throws(JSONError) -> T {
        try bytes.withUnsafeBufferPointer { buffer throws(JSONError) in
            var parser = JSONParser(bytes: buffer)
            parser.skipWhitespace()
            let result = try value(&parser)
            parser.skipWhitespace()
            guard parser.index == buffer.count else { throw parser.error("trailing characters after the value") }
            return result
        }
    }
}

private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    func error(_ reason: String) -> JSONError { JSONError(offset: index, reason: reason) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue(depth: Int) throws(JSONError) -> JSONValue {
        guard depth < JSONValue.maximumDepth else { throw error("nested too deeply") }
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error("unexpected end of input") }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] {
            throw error("invalid literal")
        }
        index += count
    }

    mutating func parseObject(depth: Int) throws(JSONError) -> JSONValue {
        var members: [String: JSONValue] = [:]
        try parseMembers(depth: depth) { key, value in members[key] = value }
        return .object(members)
    }

    /// From the opening brace to just past the closing one, handing each member to `body` as it is read.
    /// (The depth is checked by `parseValue`, the only way in below the top level.)
    mutating func parseMembers(depth: Int, _ body: (String, JSONValue) -> Void) throws(JSONError) {
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a member name") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            body(key, try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return }
            throw error("expected ',' or '}'")
        }
    }

    mutating func parseArray(depth: Int) throws(JSONError) -> JSONValue {
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            throw error("expected ',' or ']'")
        }
    }

    mutating func parseNumber() throws(JSONError) -> Double {
        let start = index
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
        // The digits, as an integer, while they fit the exact fast path below (at most 15 of them).
        var mantissa: UInt64 = 0
        var digits = 0
        var fractionDigits = 0
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            digits = 1
        } else {
            while index < bytes.count, isDigit(bytes[index]) {
                mantissa = digits < 15 ? mantissa &* 10 &+ UInt64(bytes[index] &- UInt8(ascii: "0")) : mantissa
                digits += 1
                index += 1
            }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
            while index < bytes.count, isDigit(bytes[index]) {
                mantissa = digits < 15 ? mantissa &* 10 &+ UInt64(bytes[index] &- UInt8(ascii: "0")) : mantissa
                digits += 1
                fractionDigits += 1
                index += 1
            }
        }
        var hasExponent = false
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            hasExponent = true
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        guard index - start <= 64 else { throw error("number too long") }
        // Clinger's fast path: an integer below 2^53 and a power of ten up to 10^22 are both exact doubles, so
        // one IEEE division rounds correctly. That covers coordinates as trackers send them (strtod was a
        // tenth of the ingest path); anything longer or with an exponent goes through the full conversion.
        if !hasExponent, digits <= 15, fractionDigits <= 22 {
            let magnitude = Double(mantissa) / Self.powersOfTen[fractionDigits]
            return negative ? -magnitude : magnitude
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(text) else { throw error("invalid number") }
        return value
    }

    private static let powersOfTen: [Double] = (0...22).map { exponent in
        (0..<exponent).reduce(1.0) { power, _ in power * 10 }  // exact: every 10^k up to 10^22 is a double
    }

    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    mutating func parseString() throws(JSONError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                return try validUTF8(slice)
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw error("control character in string") }
            index += 1
        }
        var scalars = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return try scalars.withUnsafeBufferPointer { buffer throws(JSONError) in try validUTF8(buffer) }
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw error("unexpected end of input") }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""): scalars.append(0x22)
                case UInt8(ascii: "\\"): scalars.append(0x5C)
                case UInt8(ascii: "/"): scalars.append(0x2F)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try parseHex4()
                    if (0xD800...0xDBFF).contains(code) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                        else { throw error("unpaired surrogate") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(code) {
                        throw error("unpaired surrogate")
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw error("invalid escape") }
                    scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: throw error("invalid escape")
                }
            default:
                guard byte >= 0x20 else { throw error("control character in string") }
                scalars.append(byte)
                index += 1
            }
        }
        throw error("unterminated string")
    }

    mutating func parseHex4() throws(JSONError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("unexpected end of input") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("invalid \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    func validUTF8(_ buffer: UnsafeBufferPointer<UInt8>) throws(JSONError) -> String {
        // Keys and most values are ASCII, which is valid as it stands; String(validating:) is generic over the
        // encoding and looked up type metadata on every call.
        if buffer.allSatisfy({ $0 < 0x80 }) { return String(decoding: buffer, as: UTF8.self) }
        guard let string = String(validating: buffer, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
        return string
    }
}

/// Builds compact JSON text. Output is ASCII-safe for control characters and escapes what JSON requires.
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8] = []
    private var needsComma: [Bool] = []
    /// The next value belongs to a key just written: no comma before it.
    private var afterKey = false

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    public var string: String { String(decoding: bytes, as: UTF8.self) }

    public mutating func beginObject() { separate(); bytes.append(UInt8(ascii: "{")); needsComma.append(false) }
    public mutating func endObject() { bytes.append(UInt8(ascii: "}")); needsComma.removeLast() }
    public mutating func beginArray() { separate(); bytes.append(UInt8(ascii: "[")); needsComma.append(false) }
    public mutating func endArray() { bytes.append(UInt8(ascii: "]")); needsComma.removeLast() }

    public mutating func key(_ name: String) {
        separate()
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
        afterKey = true
    }

    public mutating func string(_ value: String) { separate(); appendQuoted(value) }
    public mutating func number(_ value: Double) {
        separate()
        if value.isFinite, value == value.rounded(), abs(value) < 1e15 {
            bytes.append(contentsOf: String(Int64(value)).utf8)
        } else if value.isFinite {
            bytes.append(contentsOf: String(value).utf8)
        } else {
            bytes.append(contentsOf: "null".utf8)
        }
    }
    public mutating func number(_ value: Int) { separate(); bytes.append(contentsOf: String(value).utf8) }
    public mutating func number(_ value: Int64) { separate(); bytes.append(contentsOf: String(value).utf8) }
    public mutating func bool(_ value: Bool) { separate(); bytes.append(contentsOf: (value ? "true" : "false").utf8) }
    public mutating func null() { separate(); bytes.append(contentsOf: "null".utf8) }

    public mutating func field(_ name: String, _ value: String) { key(name); string(value) }
    public mutating func field(_ name: String, _ value: Double) { key(name); number(value) }
    public mutating func field(_ name: String, _ value: Int) { key(name); number(value) }
    public mutating func field(_ name: String, _ value: Int64) { key(name); number(value) }
    public mutating func field(_ name: String, _ value: Bool) { key(name); bool(value) }

    /// Appends raw, already-encoded JSON as the next value.
    public mutating func raw(_ json: [UInt8]) { separate(); bytes.append(contentsOf: json) }

    private mutating func separate() {
        if afterKey { afterKey = false; return }
        guard !needsComma.isEmpty else { return }
        if needsComma[needsComma.count - 1] { bytes.append(UInt8(ascii: ",")) }
        needsComma[needsComma.count - 1] = true
    }

    private mutating func appendQuoted(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = value
        text.withUTF8 { utf8 in
            // Most strings (ids, tokens, topics, times) need no escape: one scan and one copy of the contiguous
            // UTF-8, not an append per byte.
            if !utf8.contains(where: Self.needsEscape) {
                bytes.append(contentsOf: utf8)
            } else {
                for byte in utf8 { appendEscaping(byte) }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscaping(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "\""): bytes.append(contentsOf: [0x5C, 0x22])
        case UInt8(ascii: "\\"): bytes.append(contentsOf: [0x5C, 0x5C])
        case 0x0A: bytes.append(contentsOf: [0x5C, UInt8(ascii: "n")])
        case 0x0D: bytes.append(contentsOf: [0x5C, UInt8(ascii: "r")])
        case 0x09: bytes.append(contentsOf: [0x5C, UInt8(ascii: "t")])
        case 0..<0x20:
            let hex: [UInt8] = Array("0123456789abcdef".utf8)
            bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
        case UInt8(ascii: "<"):
            // Keeps JSON safe to embed in HTML.
            bytes.append(contentsOf: Array("\\u003c".utf8))
        default: bytes.append(byte)
        }
    }

    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "<")
    }
}

extension JSONWriter {
    /// A flat object whose values are all strings, in the given order.
    public static func flatObject(_ pairs: [(String, String)]) -> [UInt8] {
        var writer = JSONWriter(capacity: pairs.reduce(2) { $0 + $1.0.utf8.count + $1.1.utf8.count + 6 })
        writer.beginObject()
        for (name, value) in pairs { writer.field(name, value) }
        writer.endObject()
        return writer.bytes
    }
}
