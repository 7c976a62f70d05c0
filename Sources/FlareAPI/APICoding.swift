#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// How every body of the API is encoded and decoded: the server answers with `APIJSON.encode`, clients read with
/// `APIJSON.decode`, so both sides agree on dates (RFC 3339 strings), URLs and key names by construction.
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

extension KeyedDecodingContainer {
    func decodeRFC3339(_ key: Key) throws -> Date {
        let text = try decode(String.self, forKey: key)
        guard let date = RFC3339.parse(text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "not an RFC 3339 time: \(text)")
        }
        return date
    }

    func decodeRFC3339IfPresent(_ key: Key) throws -> Date? {
        guard let text = try decodeIfPresent(String.self, forKey: key) else { return nil }
        guard let date = RFC3339.parse(text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "not an RFC 3339 time: \(text)")
        }
        return date
    }

    func decodeURL(_ key: Key) throws -> URL {
        let text = try decode(String.self, forKey: key)
        guard let url = URL(string: text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "not a URL: \(text)")
        }
        return url
    }

    func decodeURLIfPresent(_ key: Key) throws -> URL? {
        try contains(key) ? decodeURL(key) : nil
    }

    /// Unix seconds, written as a JSON number (OwnTracks' `tst`).
    func decodeUnixSeconds(_ key: Key) throws -> Date {
        Date(timeIntervalSince1970: try decode(Double.self, forKey: key))
    }
}

extension KeyedEncodingContainer {
    mutating func encodeRFC3339(_ date: Date, forKey key: Key) throws {
        try encode(RFC3339.format(date), forKey: key)
    }

    mutating func encodeRFC3339IfPresent(_ date: Date?, forKey key: Key) throws {
        if let date { try encode(RFC3339.format(date), forKey: key) }
    }

    mutating func encodeUnixSeconds(_ date: Date, forKey key: Key) throws {
        try encode(Int64(date.timeIntervalSince1970.rounded(.down)), forKey: key)
    }
}

extension Date {
    /// The API's times come from Unix milliseconds on the server.
    public init(unixMillis: Int64) { self.init(timeIntervalSince1970: Double(unixMillis) / 1000) }
}
