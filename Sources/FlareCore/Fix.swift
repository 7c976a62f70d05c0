/// One position report. Field names and units follow OwnTracks: `acc` metres, `alt` metres,
/// `vel` km/h, `cog` degrees, `batt` percent, `tst` Unix seconds.
public struct Fix: Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var timestamp: Int64
    public var accuracy: Double?
    public var altitude: Double?
    public var velocity: Double?
    public var course: Double?
    public var battery: Int?
    public var trackerID: String?

    public init(latitude: Double, longitude: Double, timestamp: Int64, accuracy: Double? = nil, altitude: Double? = nil,
                velocity: Double? = nil, course: Double? = nil, battery: Int? = nil, trackerID: String? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.timestamp = timestamp
        self.accuracy = accuracy
        self.altitude = altitude
        self.velocity = velocity
        self.course = course
        self.battery = battery
        self.trackerID = trackerID
    }

    /// The viewer's form: `{"lat":…,"lon":…,"tst":…,"acc":…,…}`, optional fields only when known.
    public func writeViewJSON(into writer: inout JSONWriter) {
        writer.beginObject()
        writer.field("lat", latitude)
        writer.field("lon", longitude)
        writeMeasurements(into: &writer)
        writer.endObject()
    }

    /// `tst` and the optional OwnTracks fields, shared by both forms.
    private func writeMeasurements(into writer: inout JSONWriter) {
        writer.field("tst", timestamp)
        if let accuracy { writer.field("acc", accuracy) }
        if let altitude { writer.field("alt", altitude) }
        if let velocity { writer.field("vel", velocity) }
        if let course { writer.field("cog", course) }
        if let battery { writer.field("batt", battery) }
    }

    public var viewJSON: [UInt8] {
        var writer = JSONWriter(capacity: 128)
        writeViewJSON(into: &writer)
        return writer.bytes
    }

    /// An OwnTracks `location` message, as published to the broker for HTTP-ingested fixes.
    public var ownTracksJSON: [UInt8] {
        var writer = JSONWriter(capacity: 160)
        writer.beginObject()
        writer.field("_type", "location")
        writer.field("lat", latitude)
        writer.field("lon", longitude)
        writeMeasurements(into: &writer)
        if let trackerID { writer.field("tid", trackerID) }
        writer.endObject()
        return writer.bytes
    }
}
