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
    }
}

/// `202` from HTTP ingest: the broker took the fix; the bridge stores it as it stores MQTT fixes.
public struct IngestReceipt: Codable, Sendable, Equatable {
    /// `accepted`.
    public let status: String
    /// The fix's time as the server will store it (Unix seconds).
    public let tst: Int64

    public init(status: String = "accepted", tst: Int64) {
        self.status = status
        self.tst = tst
    }
}
