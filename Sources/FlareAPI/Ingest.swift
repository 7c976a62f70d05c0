#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// One position fix as a device sends it (`POST /api/v1/shares/{id}/locations`, or MQTT): an OwnTracks `location`
/// object. Build it from a `CLLocation` on iOS (see docs/ios.md). The server's parser (`LocationPayloadParser`)
/// accepts exactly this and the rest of OwnTracks' `location` fields.
public struct Location: Codable, Sendable, Equatable {
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
    /// This fix answers a `reportLocation` command ("locate now"): sent as OwnTracks' `t: "r"`, so the page shows
    /// the phone answered even when the position is one it already sent.
    public var answersLocateRequest: Bool

    public init(latitude: Double, longitude: Double, timestamp: Date = Date(), accuracy: Double? = nil, altitude: Double? = nil,
                speedKmh: Double? = nil, course: Double? = nil, battery: Int? = nil, trackerID: String? = nil,
                answersLocateRequest: Bool = false) {
        self.latitude = latitude
        self.longitude = longitude
        self.timestamp = timestamp
        self.accuracy = accuracy
        self.altitude = altitude
        self.speedKmh = speedKmh
        self.course = course
        self.battery = battery
        self.trackerID = trackerID
        self.answersLocateRequest = answersLocateRequest
    }

    enum CodingKeys: String, CodingKey { case type = "_type", lat, lon, tst, acc, alt, vel, cog, batt, tid, t }
    static let responseTrigger = "r"

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        latitude = try c.decode(Double.self, forKey: .lat)
        longitude = try c.decode(Double.self, forKey: .lon)
        timestamp = try c.decode(UnixSecondsTime.self, forKey: .tst).wrappedValue
        accuracy = try c.decodeIfPresent(Double.self, forKey: .acc)
        altitude = try c.decodeIfPresent(Double.self, forKey: .alt)
        speedKmh = try c.decodeIfPresent(Double.self, forKey: .vel)
        course = try c.decodeIfPresent(Double.self, forKey: .cog)
        battery = try c.decodeIfPresent(Double.self, forKey: .batt).map { Int($0) }
        trackerID = try c.decodeIfPresent(String.self, forKey: .tid)
        answersLocateRequest = try c.decodeIfPresent(String.self, forKey: .t) == Self.responseTrigger
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode("location", forKey: .type)
        try c.encode(latitude, forKey: .lat)
        try c.encode(longitude, forKey: .lon)
        try c.encode(UnixSecondsTime(wrappedValue: timestamp), forKey: .tst)
        // Negative accuracy/speed/course is CoreLocation's "unknown": leave those out rather than send nonsense.
        if let accuracy, accuracy >= 0 { try c.encode(accuracy, forKey: .acc) }
        try c.encodeIfPresent(altitude, forKey: .alt)
        if let speedKmh, speedKmh >= 0 { try c.encode(speedKmh, forKey: .vel) }
        if let course, course >= 0 { try c.encode(course, forKey: .cog) }
        if let battery, battery >= 0 { try c.encode(battery, forKey: .batt) }
        try c.encodeIfPresent(trackerID, forKey: .tid)
        if answersLocateRequest { try c.encode(Self.responseTrigger, forKey: .t) }
    }
}

/// A command for the tracker, in OwnTracks' form (`{"_type":"cmd","action":"reportLocation"}`): what Flare hands a
/// phone that reports over HTTP, in the answer to its POST (Flare's ingest and the OwnTracks apps' HTTP mode alike),
/// since it cannot hear the share's command topic.
public struct DeviceCommand: Codable, Sendable, Equatable {
    /// `reportLocation`: send a fresh position now, marked as the answer (`Location.answersLocateRequest`).
    public let action: String

    public static let reportLocation = DeviceCommand(action: "reportLocation")

    public init(action: String) { self.action = action }

    enum CodingKeys: String, CodingKey { case type = "_type", action }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        action = try c.decode(String.self, forKey: .action)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode("cmd", forKey: .type)
        try c.encode(action, forKey: .action)
    }
}

/// `202` from HTTP ingest: the fix is stored (committed, shown to the share's viewers, and published to its topic
/// for integrators), or was already.
public struct IngestReceipt: Codable, Sendable, Equatable {
    /// `accepted`.
    public let status: String
    /// The fix's time as the server stored it (Unix seconds).
    public let tst: Int64
    /// What the tracker is asked to do now (usually none): `reportLocation` after someone asked for a fresh position.
    public let commands: [DeviceCommand]

    public init(status: String = "accepted", tst: Int64, commands: [DeviceCommand] = []) {
        self.status = status
        self.tst = tst
        self.commands = commands
    }

    enum CodingKeys: String, CodingKey { case status, tst, commands }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        status = try c.decode(String.self, forKey: .status)
        tst = try c.decode(Int64.self, forKey: .tst)
        // A server before commands over HTTP does not send the field.
        commands = try c.decodeIfPresent([DeviceCommand].self, forKey: .commands) ?? []
    }
}
