import Foundation

/// What `POST /api/v1/shares` answers: a flat object of strings (older clients decode it as `[String: String]`).
public struct CreatedShare: Sendable, Equatable, Decodable {
    public let shareID: String
    /// The link to text to family members: `https://host/s/<view token>`.
    public let shareURL: URL
    public let expiresAt: Date
    /// The publish capability for this share: the MQTT password and the HTTP ingest bearer token.
    public let deviceToken: String
    public let mqttURL: String
    public let mqttUsername: String
    public let mqttTopic: String
    public let statusTopic: String?
    public let ingestURL: URL?
    public let ownTracksConfigURL: URL?

    enum CodingKeys: String, CodingKey {
        case shareID = "share_id", shareURL = "share_url", expiresAt = "expires_at", deviceToken = "device_token"
        case mqttURL = "mqtt_url", mqttUsername = "mqtt_username", mqttTopic = "mqtt_topic", statusTopic = "status_topic"
        case ingestURL = "ingest_url", ownTracksConfigURL = "owntracks_config_url"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        shareID = try c.decode(String.self, forKey: .shareID)
        shareURL = try c.decodeURL(.shareURL)
        expiresAt = try c.decodeRFC3339(.expiresAt)
        deviceToken = try c.decode(String.self, forKey: .deviceToken)
        mqttURL = try c.decode(String.self, forKey: .mqttURL)
        mqttUsername = try c.decode(String.self, forKey: .mqttUsername)
        mqttTopic = try c.decode(String.self, forKey: .mqttTopic)
        statusTopic = try c.decodeIfPresent(String.self, forKey: .statusTopic)
        ingestURL = try c.contains(.ingestURL) ? c.decodeURL(.ingestURL) : nil
        ownTracksConfigURL = try c.contains(.ownTracksConfigURL) ? c.decodeURL(.ownTracksConfigURL) : nil
    }
}

/// A share as its owner sees it (`GET /api/v1/shares/{id}`).
public struct ShareStatus: Sendable, Equatable, Decodable {
    public enum State: String, Sendable, Decodable { case active, ended }
    public let shareID: String
    public let name: String
    public let state: State
    public let createdAt: Date
    public let expiresAt: Date
    public let endedAt: Date?
    /// `expired` or `stopped` once the share has ended.
    public let reason: String?
    public let historyDeleted: Bool
    public let last: ReportedLocation?
    public let viewers: Int

    enum CodingKeys: String, CodingKey {
        case shareID = "share_id", name, state, createdAt = "created_at", expiresAt = "expires_at", endedAt = "ended_at"
        case reason, historyDeleted = "history_deleted", last, viewers
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        shareID = try c.decode(String.self, forKey: .shareID)
        name = try c.decodeIfPresent(String.self, forKey: .name) ?? ""
        state = try c.decode(State.self, forKey: .state)
        createdAt = try c.decodeRFC3339(.createdAt)
        expiresAt = try c.decodeRFC3339(.expiresAt)
        endedAt = try c.contains(.endedAt) ? c.decodeRFC3339(.endedAt) : nil
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
        historyDeleted = try c.decodeIfPresent(Bool.self, forKey: .historyDeleted) ?? false
        last = try c.decodeIfPresent(ReportedLocation.self, forKey: .last)
        viewers = try c.decodeIfPresent(Int.self, forKey: .viewers) ?? 0
    }
}

/// The last position as the server stored it.
public struct ReportedLocation: Sendable, Equatable, Decodable {
    public let latitude: Double
    public let longitude: Double
    public let timestamp: Date
    public let accuracy: Double?
    public let battery: Int?

    enum CodingKeys: String, CodingKey { case lat, lon, tst, acc, batt }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        latitude = try c.decode(Double.self, forKey: .lat)
        longitude = try c.decode(Double.self, forKey: .lon)
        timestamp = Date(timeIntervalSince1970: try c.decode(Double.self, forKey: .tst))
        accuracy = try c.decodeIfPresent(Double.self, forKey: .acc)
        battery = try c.decodeIfPresent(Double.self, forKey: .batt).map { Int($0) }
    }
}

/// `POST /api/v1/shares/{id}/stop`.
public struct StoppedShare: Sendable, Equatable, Decodable {
    public let shareID: String
    public let state: String
    public let reason: String
    public let endedAt: Date?

    enum CodingKeys: String, CodingKey { case shareID = "share_id", state, reason, endedAt = "ended_at" }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        shareID = try c.decode(String.self, forKey: .shareID)
        state = try c.decode(String.self, forKey: .state)
        reason = try c.decodeIfPresent(String.self, forKey: .reason) ?? "stopped"
        endedAt = try c.contains(.endedAt) ? c.decodeRFC3339(.endedAt) : nil
    }
}

/// `POST /api/v1/shares/{id}/extend`: same link, a new expiry and a device token valid until then.
public struct ExtendedShare: Sendable, Equatable, Decodable {
    public let shareID: String
    public let expiresAt: Date
    public let deviceToken: String

    enum CodingKeys: String, CodingKey { case shareID = "share_id", expiresAt = "expires_at", deviceToken = "device_token" }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        shareID = try c.decode(String.self, forKey: .shareID)
        expiresAt = try c.decodeRFC3339(.expiresAt)
        deviceToken = try c.decode(String.self, forKey: .deviceToken)
    }
}

/// `202` from HTTP ingest: the broker took the fix.
public struct IngestReceipt: Sendable, Equatable, Decodable {
    public let status: String
    /// The fix's time as the server will store it (Unix seconds).
    public let tst: Int64
}

/// One position fix, sent as an OwnTracks `location` object. Build it from a `CLLocation` on iOS (see docs/ios.md).
public struct Location: Sendable, Equatable, Encodable {
    public var latitude: Double
    public var longitude: Double
    public var timestamp: Date
    /// Horizontal accuracy in metres.
    public var accuracy: Double?
    public var altitude: Double?
    /// Speed in km/h (OwnTracks' unit for `vel`).
    public var speedKmh: Double?
    /// Course over ground in degrees.
    public var course: Double?
    /// Battery level in percent.
    public var battery: Int?
    /// Two-character tracker id shown next to the position.
    public var trackerID: String?

    public init(latitude: Double, longitude: Double, timestamp: Date = Date(), accuracy: Double? = nil, altitude: Double? = nil,
                speedKmh: Double? = nil, course: Double? = nil, battery: Int? = nil, trackerID: String? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.timestamp = timestamp
        self.accuracy = accuracy
        self.altitude = altitude
        self.speedKmh = speedKmh
        self.course = course
        self.battery = battery
        self.trackerID = trackerID
    }

    enum CodingKeys: String, CodingKey { case type = "_type", lat, lon, tst, acc, alt, vel, cog, batt, tid }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode("location", forKey: .type)
        try c.encode(latitude, forKey: .lat)
        try c.encode(longitude, forKey: .lon)
        try c.encode(Int64(timestamp.timeIntervalSince1970.rounded(.down)), forKey: .tst)
        // Negative accuracy/speed/course is CoreLocation's "unknown": leave those out rather than send nonsense.
        if let accuracy, accuracy >= 0 { try c.encode(accuracy, forKey: .acc) }
        try c.encodeIfPresent(altitude, forKey: .alt)
        if let speedKmh, speedKmh >= 0 { try c.encode(speedKmh, forKey: .vel) }
        if let course, course >= 0 { try c.encode(course, forKey: .cog) }
        if let battery, battery >= 0 { try c.encode(battery, forKey: .batt) }
        try c.encodeIfPresent(trackerID, forKey: .tid)
    }
}

/// Flare's error shape, `{"error":"<code>","message":"…"}`, with the HTTP status it came with.
public struct FlareAPIError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    /// Machine-readable: `unauthorized`, `not_found`, `share_ended`, `invalid_coordinates`, `rate_limited`, …
    public let code: String
    public let message: String
    /// From a `Retry-After` header (429, 503), in seconds.
    public let retryAfter: Double?

    public init(status: Int, code: String, message: String, retryAfter: Double? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    /// Worth trying again: the server or something in front of it is unavailable, or asked us to slow down.
    public var isRetryable: Bool { status >= 500 || status == 429 || status == 408 }
    /// The share is over (ended, or its device token no longer valid): stop reporting.
    public var meansShareIsOver: Bool { code == "share_ended" || status == 410 || status == 401 }

    public var description: String { "\(status) \(code): \(message)" }
}

/// Everything a `FlareClient` call can throw.
public enum FlareClientError: Error, Sendable, CustomStringConvertible {
    /// The server answered with an error.
    case api(FlareAPIError)
    /// No answer: no network, connection refused, timeout. Worth retrying.
    case transport(String)
    /// An answer that is not what the API promises (a proxy's HTML page, a truncated body).
    case unexpectedResponse(status: Int, detail: String)
    /// The client needs a credential it was not given (e.g. creating a share without an owner key).
    case missingCredential(String)

    public var isRetryable: Bool {
        switch self {
        case .api(let error): error.isRetryable
        case .transport: true
        case .unexpectedResponse(let status, _): status >= 500
        case .missingCredential: false
        }
    }

    public var description: String {
        switch self {
        case .api(let error): "Flare answered \(error)"
        case .transport(let detail): "no answer from Flare: \(detail)"
        case .unexpectedResponse(let status, let detail): "unexpected answer from Flare (\(status)): \(detail)"
        case .missingCredential(let detail): detail
        }
    }
}

extension KeyedDecodingContainer {
    func decodeRFC3339(_ key: Key) throws -> Date {
        let text = try decode(String.self, forKey: key)
        guard let date = RFC3339Date.parse(text) else {
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
}

/// Parses the server's `2026-11-29T14:05:00Z` (and tolerates fractional seconds and offsets) without a
/// formatter object, so nothing non-Sendable is shared between tasks.
enum RFC3339Date {
    static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20 else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                guard index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 else { return nil }
                value = value * 10 + Int(bytes[index] - 48)
            }
            return value
        }
        guard let year = number(0..<4), bytes[4] == UInt8(ascii: "-"), let month = number(5..<7), bytes[7] == UInt8(ascii: "-"),
              let day = number(8..<10), bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second <= 60
        else { return nil }
        var index = 19
        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        guard index < bytes.count else { return nil }
        var offset = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            guard index + 1 == bytes.count else { return nil }
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard index + 6 == bytes.count, let oh = number(index + 1..<index + 3), let om = number(index + 4..<index + 6) else { return nil }
            offset = (oh * 3600 + om * 60) * (bytes[index] == UInt8(ascii: "+") ? 1 : -1)
        default:
            return nil
        }
        // Days from civil (Howard Hinnant), as the server formats them.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }
}
