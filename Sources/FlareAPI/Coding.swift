#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// How every body of the API is encoded and decoded: the server answers with `APIJSON.encode`, clients read with
/// `APIJSON.decode`, so both sides agree on dates, URLs and key names by construction.
public enum APIJSON {
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: some Collection<UInt8>) throws -> T {
        try JSONDecoder().decode(type, from: Data(bytes))
    }
}

// The API's three ways of writing a value that JSON has no type for, as property wrappers, so that every body type
// keeps the compiler's Codable conformance and only names its keys.

/// A time as an RFC 3339 string: `"2026-11-29T14:05:00Z"`.
@propertyWrapper
public struct RFC3339Time: Codable, Sendable, Equatable {
    public var wrappedValue: Date
    public init(wrappedValue: Date) { self.wrappedValue = wrappedValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let date = RFC3339.parse(text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an RFC 3339 time: \(text)")
        }
        wrappedValue = date
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(RFC3339.format(wrappedValue))
    }
}

/// An optional RFC 3339 time: the key is left out when there is none.
@propertyWrapper
public struct OptionalRFC3339Time: Codable, Sendable, Equatable {
    public var wrappedValue: Date?
    public init(wrappedValue: Date?) { self.wrappedValue = wrappedValue }

    public init(from decoder: any Decoder) throws {
        wrappedValue = try RFC3339Time(from: decoder).wrappedValue
    }

    public func encode(to encoder: any Encoder) throws {
        if let wrappedValue { try RFC3339Time(wrappedValue: wrappedValue).encode(to: encoder) }
    }
}

/// A time as OwnTracks writes it: Unix seconds, a JSON number.
@propertyWrapper
public struct UnixSecondsTime: Codable, Sendable, Equatable {
    public var wrappedValue: Date
    public init(wrappedValue: Date) { self.wrappedValue = wrappedValue }

    public init(from decoder: any Decoder) throws {
        wrappedValue = Date(timeIntervalSince1970: try decoder.singleValueContainer().decode(Double.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(Int64(wrappedValue.timeIntervalSince1970.rounded(.down)))
    }
}

/// An optional value whose key is always written, as `null` when there is none (`"last": null`): a client can
/// tell "no position yet" from a server that does not know the field.
@propertyWrapper
public struct AlwaysPresent<Value: Codable & Sendable & Equatable>: Codable, Sendable, Equatable {
    public var wrappedValue: Value?
    public init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension KeyedDecodingContainer {
    // A missing key is nil for the optional wrappers (the compiler's Codable would otherwise require the key).
    public func decode(_ type: OptionalRFC3339Time.Type, forKey key: Key) throws -> OptionalRFC3339Time {
        try decodeIfPresent(type, forKey: key) ?? OptionalRFC3339Time(wrappedValue: nil)
    }

    public func decode<Value>(_ type: AlwaysPresent<Value>.Type, forKey key: Key) throws -> AlwaysPresent<Value> {
        try decodeIfPresent(type, forKey: key) ?? AlwaysPresent(wrappedValue: nil)
    }
}

extension KeyedEncodingContainer {
    // No key at all for an absent optional time (the compiler's Codable would write the wrapper, i.e. a key).
    public mutating func encode(_ value: OptionalRFC3339Time, forKey key: Key) throws {
        if let date = value.wrappedValue { try encode(RFC3339Time(wrappedValue: date), forKey: key) }
    }
}

extension Date {
    /// The API's times come from Unix milliseconds on the server.
    public init(unixMillis: Int64) { self.init(timeIntervalSince1970: Double(unixMillis) / 1000) }
}
