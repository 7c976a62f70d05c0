import FlareSystem
import FlareCodec
/// One position report. Field names and units follow OwnTracks: `acc` metres, `alt` metres,
/// `vel` km/h, `cog` degrees, `batt` percent, `bs` battery status (`BatteryStatus`), `conn` connectivity
/// (`w` Wi-Fi, `m` mobile data, `o` offline), `tst` Unix seconds.
public struct Fix: Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var timestamp: Int64
    /// Metres.
    @Packed public var accuracy: Double?
    /// Metres.
    @Packed public var altitude: Double?
    /// km/h.
    @Packed public var velocity: Double?
    /// Degrees.
    @Packed public var course: Double?
    // Kept in 32 bits with a sentinel, as `Packed` does for the numbers above: the parser takes a battery from 0 to 100
    // and a status from 0 to 3.
    private var storedBattery = Fix.absentInteger
    private var storedBatteryStatus = Fix.absentInteger
    public var connection: String?
    public var trackerID: String?
    /// What made the tracker send it (OwnTracks `t`); `r` answers a "report location" command. Not stored.
    public var trigger: String?
    /// Where it stands in the stream of a tracker that asks Flare to confirm what is stored (`seq_stream`, `seq`).
    /// Not stored with the fix: the store keeps the share's mark instead.
    public var sequence: TrackerSequence?
    /// For an end-to-end encrypted share: the `data` of the OwnTracks `encrypted` message, as received (base64 of
    /// nonce | Poly1305 tag | XSalsa20 ciphertext). The server stores and relays it unread: `latitude` and
    /// `longitude` are then 0, `timestamp` is when it arrived, and nothing else is known.
    public var sealed: String?

    /// Percent; kept as a 32-bit number (a larger one is clamped).
    public var battery: Int? {
        get { Self.integer(storedBattery) }
        set { storedBattery = Self.storedInteger(newValue) }
    }
    /// `BatteryStatus`; kept as a 32-bit number (a larger one is clamped).
    public var batteryStatus: Int? {
        get { Self.integer(storedBatteryStatus) }
        set { storedBatteryStatus = Self.storedInteger(newValue) }
    }

    private static let absentInteger = Int32.min

    private static func integer(_ stored: Int32) -> Int? { stored == absentInteger ? nil : Int(stored) }
    private static func storedInteger(_ value: Int?) -> Int32 {
        guard let value else { return absentInteger }
        return max(Int32(clamping: value), absentInteger + 1)
    }

    public init(latitude: Double, longitude: Double, timestamp: Int64, accuracy: Double? = nil, altitude: Double? = nil,
                velocity: Double? = nil, course: Double? = nil, battery: Int? = nil, batteryStatus: Int? = nil,
                connection: String? = nil, trackerID: String? = nil, trigger: String? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.timestamp = timestamp
        self.connection = connection
        self.trackerID = trackerID
        self.trigger = trigger
        self.accuracy = accuracy
        self.altitude = altitude
        self.velocity = velocity
        self.course = course
        self.battery = battery
        self.batteryStatus = batteryStatus
    }

    /// An encrypted message that arrived at `receivedAt`.
    public static func sealed(_ data: String, receivedAt: UnixMillis) -> Fix {
        var fix = Fix(latitude: 0, longitude: 0, timestamp: receivedAt / 1000)
        fix.sealed = data
        return fix
    }

    public var isSealed: Bool { sealed != nil }

    /// The `t` of a tracker's answer to a "report location" command.
    public static let responseTrigger = "r"
    public var isCommandResponse: Bool { trigger == Self.responseTrigger }
}

/// A message's place in a confirming tracker's stream: `seq_stream` names the stream (a number that grows with each
/// new stream: `flare track` uses its start time in Unix milliseconds), `seq` counts its messages from 1. Flare
/// publishes, per share, the highest `seq` through which every message of the newest stream is handled (stored, or
/// refused for good) on `flare/v1/shares/{id}/stored`: `{"seq_stream": S, "seq": N}`.
public struct TrackerSequence: Sendable, Hashable {
    public let stream: Int64
    public let number: Int64

    /// Both between 1 and 2^53 (a JSON number stays exact up to there).
    public static let range: ClosedRange<Int64> = 1...(1 << 53)

    public init?(stream: Int64, number: Int64) {
        guard Self.range.contains(stream), Self.range.contains(number) else { return nil }
        self.stream = stream
        self.number = number
    }

    init?(stream: JSONValue?, number: JSONValue?) {
        guard let stream = stream?.doubleValue, let number = number?.doubleValue,
              let streamValue = Int64(exactly: stream), let numberValue = Int64(exactly: number) else { return nil }
        self.init(stream: streamValue, number: numberValue)
    }
}

/// A point of the recent trail: just enough to draw a line, so that 100,000 shares' trails fit in tens of MB.
public struct TrailPoint: Sendable, Equatable {
    public let latitude: Double
    public let longitude: Double
    public let timestamp: Int64

    public init(latitude: Double, longitude: Double, timestamp: Int64) {
        self.latitude = latitude
        self.longitude = longitude
        self.timestamp = timestamp
    }
}
