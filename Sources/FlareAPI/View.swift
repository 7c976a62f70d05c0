#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A stored position as the API shows it: the OwnTracks fields Flare keeps, `tst` in Unix seconds. The `last` of a
/// share and of a view document, and the data of each live `fix` event.
public struct ReportedLocation: Codable, Sendable, Equatable {
    public let latitude: Double
    public let longitude: Double
    public let timestamp: Date
    /// Horizontal accuracy in metres.
    public let accuracy: Double?
    public let altitude: Double?
    /// km/h, as OwnTracks reports it.
    public let velocity: Double?
    /// Course over ground in degrees.
    public let course: Double?
    /// Battery level in percent.
    public let battery: Int?

    enum CodingKeys: String, CodingKey { case lat, lon, tst, acc, alt, vel, cog, batt }

    public init(latitude: Double, longitude: Double, timestamp: Date, accuracy: Double? = nil, altitude: Double? = nil,
                velocity: Double? = nil, course: Double? = nil, battery: Int? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.timestamp = timestamp
        self.accuracy = accuracy
        self.altitude = altitude
        self.velocity = velocity
        self.course = course
        self.battery = battery
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        latitude = try c.decode(Double.self, forKey: .lat)
        longitude = try c.decode(Double.self, forKey: .lon)
        timestamp = try c.decodeUnixSeconds(.tst)
        accuracy = try c.decodeIfPresent(Double.self, forKey: .acc)
        altitude = try c.decodeIfPresent(Double.self, forKey: .alt)
        velocity = try c.decodeIfPresent(Double.self, forKey: .vel)
        course = try c.decodeIfPresent(Double.self, forKey: .cog)
        battery = try c.decodeIfPresent(Double.self, forKey: .batt).map { Int($0) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(latitude, forKey: .lat)
        try c.encode(longitude, forKey: .lon)
        try c.encodeUnixSeconds(timestamp, forKey: .tst)
        try c.encodeIfPresent(accuracy, forKey: .acc)
        try c.encodeIfPresent(altitude, forKey: .alt)
        try c.encodeIfPresent(velocity, forKey: .vel)
        try c.encodeIfPresent(course, forKey: .cog)
        try c.encodeIfPresent(battery, forKey: .batt)
    }
}

/// `GET /api/v1/view/{view_token}`: what the link holder's page shows. 200 while active; 410 with the same shape
/// (`state: ended`, `reason`, `ended_at`) once the share has ended. The server renders it by hand, because it is
/// the most requested body of all (see `ViewDocumentRenderer`); this type is its contract, and the gateway tests
/// decode every rendering with it.
public struct ViewDocument: Codable, Sendable, Equatable {
    /// A point of the recent trail: just enough to draw a line.
    public struct TrailPoint: Codable, Sendable, Equatable {
        public let lat: Double
        public let lon: Double
        /// Unix seconds.
        public let tst: Int64
        public init(lat: Double, lon: Double, tst: Int64) {
            self.lat = lat
            self.lon = lon
            self.tst = tst
        }
    }

    public let state: ShareState
    /// `expired` or `stopped`, when ended.
    public let reason: String?
    public let endedAt: Date?
    public let name: String
    public let expiresAt: Date
    public let last: ReportedLocation?
    /// Oldest first.
    public let trail: [TrailPoint]
    /// The server's clock, so the page can say "2 minutes ago" right on a phone whose clock is off.
    public let serverTime: Date

    enum CodingKeys: String, CodingKey {
        case state, reason, endedAt = "ended_at", name, expiresAt = "expires_at", last, trail, serverTime = "server_time"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        state = try c.decode(ShareState.self, forKey: .state)
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
        endedAt = try c.decodeRFC3339IfPresent(.endedAt)
        name = try c.decode(String.self, forKey: .name)
        expiresAt = try c.decodeRFC3339(.expiresAt)
        last = try c.decodeIfPresent(ReportedLocation.self, forKey: .last)
        trail = try c.decode([TrailPoint].self, forKey: .trail)
        serverTime = try c.decodeRFC3339(.serverTime)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(state, forKey: .state)
        try c.encodeIfPresent(reason, forKey: .reason)
        try c.encodeRFC3339IfPresent(endedAt, forKey: .endedAt)
        try c.encode(name, forKey: .name)
        try c.encodeRFC3339(expiresAt, forKey: .expiresAt)
        try c.encode(last, forKey: .last)
        try c.encode(trail, forKey: .trail)
        try c.encodeRFC3339(serverTime, forKey: .serverTime)
    }
}

/// The events of `GET /api/v1/view/{view_token}/events` (Server-Sent Events): `status` (`LiveStatus`, first and
/// after each extension), `fix` (a `ReportedLocation`, each new last position) and `ended` (`LiveEnded`, last).
public enum LiveEventName: String, Sendable, CaseIterable {
    case status, fix, ended
}

/// The `status` event: the share is active until `expires_at`.
public struct LiveStatus: Codable, Sendable, Equatable {
    public let state: ShareState
    public let expiresAt: Date

    enum CodingKeys: String, CodingKey { case state, expiresAt = "expires_at" }

    public init(expiresAt: Date) {
        self.state = .active
        self.expiresAt = expiresAt
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        state = try c.decode(ShareState.self, forKey: .state)
        expiresAt = try c.decodeRFC3339(.expiresAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(state, forKey: .state)
        try c.encodeRFC3339(expiresAt, forKey: .expiresAt)
    }
}

/// The `ended` event: the share is over; the stream closes after it.
public struct LiveEnded: Codable, Sendable, Equatable {
    public let state: ShareState
    public let reason: String
    public let endedAt: Date

    enum CodingKeys: String, CodingKey { case state, reason, endedAt = "ended_at" }

    public init(reason: String, endedAt: Date) {
        self.state = .ended
        self.reason = reason
        self.endedAt = endedAt
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        state = try c.decode(ShareState.self, forKey: .state)
        reason = try c.decode(String.self, forKey: .reason)
        endedAt = try c.decodeRFC3339(.endedAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(state, forKey: .state)
        try c.encode(reason, forKey: .reason)
        try c.encodeRFC3339(endedAt, forKey: .endedAt)
    }
}
