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
    @UnixSecondsTime public var timestamp: Date
    /// Horizontal accuracy in metres.
    public let accuracy: Double?
    public let altitude: Double?
    /// km/h, as OwnTracks reports it.
    public let velocity: Double?
    /// Course over ground in degrees.
    public let course: Double?
    /// Battery level in percent.
    public let battery: Int?

    enum CodingKeys: String, CodingKey {
        case latitude = "lat", longitude = "lon", timestamp = "tst", accuracy = "acc", altitude = "alt", velocity = "vel"
        case course = "cog", battery = "batt"
    }

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
}

/// `GET /api/v1/view/{view_token}`: what the link holder's page shows. 200 while active; 410 with the same shape
/// (`state: ended`, `reason`, `ended_at`) once the share has ended. The server renders it by hand, because it is
/// the most requested body of all (`FlareBridge.ViewDocumentRenderer`); this type is its contract, and the
/// gateway tests decode every rendering with it.
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
    @OptionalRFC3339Time public var endedAt: Date?
    public let name: String
    @RFC3339Time public var expiresAt: Date
    @AlwaysPresent public var last: ReportedLocation?
    /// Oldest first.
    public let trail: [TrailPoint]
    /// The server's clock, so the page can say "2 minutes ago" right on a phone whose clock is off.
    @RFC3339Time public var serverTime: Date

    enum CodingKeys: String, CodingKey {
        case state, reason, endedAt = "ended_at", name, expiresAt = "expires_at", last, trail, serverTime = "server_time"
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
    @RFC3339Time public var expiresAt: Date

    enum CodingKeys: String, CodingKey { case state, expiresAt = "expires_at" }

    public init(expiresAt: Date) {
        self.state = .active
        self.expiresAt = expiresAt
    }
}

/// The `ended` event: the share is over; the stream closes after it.
public struct LiveEnded: Codable, Sendable, Equatable {
    public let state: ShareState
    public let reason: String
    @RFC3339Time public var endedAt: Date

    enum CodingKeys: String, CodingKey { case state, reason, endedAt = "ended_at" }

    public init(reason: String, endedAt: Date) {
        self.state = .ended
        self.reason = reason
        self.endedAt = endedAt
    }
}
