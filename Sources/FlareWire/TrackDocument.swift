public import FlareCore
public import FlareSystem
import FlareAPI
import FlareCodec

/// The file formats a share's recorded track is handed over in: what search-and-rescue tools (CalTopo/SARTopo,
/// Google Earth, Garmin BaseCamp, QGIS) load.
public enum TrackFormat: String, Sendable, CaseIterable {
    /// GPX 1.1 (`trk`/`trkseg`/`trkpt`; accuracy, speed and battery in Flare's extension namespace).
    case gpx
    /// GeoJSON (RFC 7946): the track as a LineString, and the last position as a Point with its time and accuracy.
    case geojson
    /// KML 2.2: the track as a LineString, and each position as a Placemark with its time stamp.
    case kml

    public var contentType: String {
        switch self {
        case .gpx: "application/gpx+xml"
        case .geojson: "application/geo+json"
        case .kml: "application/vnd.google-earth.kml+xml"
        }
    }

    /// The format named by a file name's extension (`track.gpx`); nil for another.
    public init?(fileName: some StringProtocol) {
        guard fileName.hasPrefix("track.") else { return nil }
        self.init(rawValue: String(fileName.dropFirst(6)))
    }

    /// How many times the writer reads the track: KML's line and its points are two lists.
    public var passes: Int { self == .kml ? 2 : 1 }
}

/// What a track document says of its share besides the positions.
public struct TrackHeading: Sendable {
    public let shareID: ShareID
    /// As the sharer named it ("" for none).
    public let name: String
    public let startedAt: UnixMillis
    public let endedAt: UnixMillis?

    public init(shareID: ShareID, name: String, startedAt: UnixMillis, endedAt: UnixMillis?) {
        self.shareID = shareID
        self.name = name
        self.startedAt = startedAt
        self.endedAt = endedAt
    }

    var title: String { name.isEmpty ? "Flare track" : name }
}

/// Writes a track document a piece at a time, as its positions are read, a page at a time: a day at one a second is
/// 86,400 positions, and the document is never whole in memory. Call `begin`, then for each pass (`TrackFormat.passes`)
/// `startPass(_:)` and `add(_:)` for every fix in time order, then `end()`; each returns the bytes to send next.
public struct TrackDocumentWriter: Sendable {
    /// GPX's extension namespace for what GPX 1.1 has no element for.
    public static let extensionNamespace = "https://flare.example.org/xmlschemas/gpx-track/1"

    public let format: TrackFormat
    private let heading: TrackHeading
    private var pass = 0
    private var count = 0
    /// GeoJSON: the first fix, held until a second makes a line (a LineString needs two positions).
    private var first: Fix?
    private var last: Fix?

    public init(format: TrackFormat, heading: TrackHeading) {
        self.format = format
        self.heading = heading
    }

    public func begin() -> [UInt8] {
        switch format {
        case .gpx:
            var text = #"<?xml version="1.0" encoding="UTF-8"?>"# + "\n"
            text += #"<gpx version="1.1" creator="Flare" xmlns="http://www.topografix.com/GPX/1/1" xmlns:flare="\#(Self.extensionNamespace)" "#
            text += #"xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="http://www.topografix.com/GPX/1/1 http://www.topografix.com/GPX/1/1/gpx.xsd">"# + "\n"
            text += "<metadata><name>\(Self.xml(heading.title))</name><desc>\(Self.xml(description))</desc>"
            text += "<time>\(RFC3339.format(millis: heading.startedAt))</time></metadata>\n"
            text += "<trk><name>\(Self.xml(heading.title))</name><trkseg>\n"
            return Array(text.utf8)
        case .geojson:
            return Array(#"{"type":"FeatureCollection","features":["#.utf8)
        case .kml:
            var text = #"<?xml version="1.0" encoding="UTF-8"?>"# + "\n" + #"<kml xmlns="http://www.opengis.net/kml/2.2">"# + "\n"
            text += "<Document><name>\(Self.xml(heading.title))</name><description>\(Self.xml(description))</description>\n"
            return Array(text.utf8)
        }
    }

    /// Before each pass's fixes (0, then 1 for KML).
    public mutating func startPass(_ number: Int) -> [UInt8] {
        pass = number
        guard format == .kml else { return [] }
        return Array((number == 0
            ? "<Placemark><name>\(Self.xml(heading.title)): track</name><LineString><tessellate>1</tessellate><coordinates>\n"
            : "<Folder><name>Positions</name>\n").utf8)
    }

    public mutating func add(_ fix: Fix) -> [UInt8] {
        defer {
            count += pass == 0 ? 1 : 0
            last = fix
        }
        switch format {
        case .gpx:
            var text = #"<trkpt lat="\#(Self.number(fix.latitude))" lon="\#(Self.number(fix.longitude))">"#
            if let altitude = fix.altitude { text += "<ele>\(Self.number(altitude))</ele>" }
            text += "<time>\(RFC3339.format(seconds: fix.timestamp))</time>"
            var extensions = ""
            if let accuracy = fix.accuracy { extensions += "<flare:accuracy>\(Self.number(accuracy))</flare:accuracy>" }
            if let speed = fix.velocity { extensions += "<flare:speed>\(Self.number(speed / 3.6))</flare:speed>" }
            if let battery = fix.battery { extensions += "<flare:battery>\(battery)</flare:battery>" }
            if !extensions.isEmpty { text += "<extensions>\(extensions)</extensions>" }
            return Array((text + "</trkpt>\n").utf8)
        case .geojson:
            guard let held = first else {
                first = fix
                return []
            }
            var text = ""
            if count == 1 {
                text = #"{"type":"Feature","geometry":{"type":"LineString","coordinates":["# + Self.position(held)
            }
            return Array((text + "," + Self.position(fix)).utf8)
        case .kml:
            // The line in two dimensions: a position without an altitude among ones with (a phone's first fixes) makes
            // the whole line unreadable to some tools. Each point below keeps its altitude.
            if pass == 0 { return Array("\(Self.number(fix.longitude)),\(Self.number(fix.latitude))\n".utf8) }
            var text = "<Placemark><TimeStamp><when>\(RFC3339.format(seconds: fix.timestamp))</when></TimeStamp>"
            var facts: [String] = []
            if let accuracy = fix.accuracy { facts.append("accuracy \(Self.number(accuracy)) m") }
            if let speed = fix.velocity { facts.append("speed \(Self.number(speed)) km/h") }
            if let battery = fix.battery { facts.append("battery \(battery) %") }
            if !facts.isEmpty { text += "<description>\(facts.joined(separator: ", "))</description>" }
            text += "<Point><coordinates>\(Self.number(fix.longitude)),\(Self.number(fix.latitude))\(fix.altitude.map { "," + Self.number($0) } ?? "")</coordinates></Point></Placemark>\n"
            return Array(text.utf8)
        }
    }

    /// After each pass's fixes.
    public mutating func endPass() -> [UInt8] {
        guard format == .kml else { return [] }
        return Array((pass == 0 ? "</coordinates></LineString></Placemark>\n" : "</Folder>\n").utf8)
    }

    public func end() -> [UInt8] {
        switch format {
        case .gpx:
            return Array("</trkseg></trk>\n</gpx>\n".utf8)
        case .geojson:
            var writer = JSONWriter(capacity: 512)
            var features: [[UInt8]] = []
            if count >= 2 {
                var line = JSONWriter(capacity: 256)
                line.beginObject()
                line.field("share_id", heading.shareID.rawValue)
                line.field("name", heading.title)
                line.field("points", count)
                line.field("started_at", RFC3339.format(millis: heading.startedAt))
                if let ended = heading.endedAt { line.field("ended_at", RFC3339.format(millis: ended)) }
                line.endObject()
                features.append(Array("]},\"properties\":".utf8) + line.bytes + Array("}".utf8))
            }
            if let last {
                writer.beginObject()
                writer.field("type", "Feature")
                writer.key("geometry")
                writer.beginObject()
                writer.field("type", "Point")
                writer.key("coordinates")
                writer.beginArray()
                writer.number(last.longitude)
                writer.number(last.latitude)
                if let altitude = last.altitude { writer.number(altitude) }
                writer.endArray()
                writer.endObject()
                writer.key("properties")
                writer.beginObject()
                writer.field("name", "\(heading.title): last position")
                writer.field("time", RFC3339.format(seconds: last.timestamp))
                if let accuracy = last.accuracy { writer.field("accuracy_m", accuracy) }
                if let speed = last.velocity { writer.field("speed_kmh", speed) }
                if let battery = last.battery { writer.field("battery", battery) }
                writer.endObject()
                writer.endObject()
            }
            // The line's end (when it has one), the point, the collection's end.
            var out: [UInt8] = features.first ?? []
            if !writer.bytes.isEmpty { out += (count >= 2 ? Array(",".utf8) : []) + writer.bytes }
            return out + Array("]}\n".utf8)
        case .kml:
            return Array("</Document>\n</kml>\n".utf8)
        }
    }

    /// Said in the document: whose track, from when, until when.
    private var description: String {
        let until = heading.endedAt.map { "until \(RFC3339.format(millis: $0)) (sharing ended)" } ?? "still sharing"
        return "Positions shared through Flare from \(RFC3339.format(millis: heading.startedAt)), \(until)."
    }

    /// A position of the line, in two dimensions (see the KML line's).
    static func position(_ fix: Fix) -> String {
        "[\(number(fix.longitude)),\(number(fix.latitude))]"
    }

    /// A number as JSON and XML take it: the shortest form that reads back the same, no exponent for the values here.
    static func number(_ value: Double) -> String {
        guard value.isFinite else { return "0" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    /// Text for XML element content.
    static func xml(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default:
                // XML 1.0 has no control characters but tab and newlines (names never hold them, but never mind).
                if scalar.value < 0x20 && scalar != "\t" && scalar != "\n" { continue }
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

/// The live KML feed (`/s/{view_token}/feed.kml`): a small document a rescue tool polls (Google Earth's network link
/// refreshes it; CalTopo/SARTopo import it as a live layer): the last position, with its time and accuracy, and the
/// recent trail. An ended share's says so in its name and description.
public enum LiveFeedDocument {
    public static func kml(heading: TrackHeading, last: Fix?, trail: [TrailPoint], now: UnixMillis) -> [UInt8] {
        let title = heading.endedAt == nil ? heading.title : "\(heading.title) (sharing ended)"
        var text = #"<?xml version="1.0" encoding="UTF-8"?>"# + "\n" + #"<kml xmlns="http://www.opengis.net/kml/2.2">"# + "\n"
        text += "<Document><name>\(TrackDocumentWriter.xml(title))</name>"
        let state = heading.endedAt.map { "Sharing ended at \(RFC3339.format(millis: $0)); this is the last position shared." }
            ?? "Live: the person is sharing their position. Updated \(RFC3339.format(millis: now))."
        text += "<description>\(TrackDocumentWriter.xml(state))</description>\n"
        if trail.count >= 2 {
            text += "<Placemark><name>\(TrackDocumentWriter.xml(heading.title)): recent track</name><LineString><tessellate>1</tessellate><coordinates>\n"
            for point in trail { text += "\(TrackDocumentWriter.number(point.longitude)),\(TrackDocumentWriter.number(point.latitude))\n" }
            text += "</coordinates></LineString></Placemark>\n"
        }
        if let last {
            var facts = ["at \(RFC3339.format(seconds: last.timestamp))"]
            if let accuracy = last.accuracy { facts.append("accuracy \(TrackDocumentWriter.number(accuracy)) m") }
            if let battery = last.battery { facts.append("battery \(battery) %") }
            text += "<Placemark><name>\(TrackDocumentWriter.xml(heading.title))</name><description>\(TrackDocumentWriter.xml(facts.joined(separator: ", ")))</description>"
            text += "<TimeStamp><when>\(RFC3339.format(seconds: last.timestamp))</when></TimeStamp>"
            text += "<Point><coordinates>\(TrackDocumentWriter.number(last.longitude)),\(TrackDocumentWriter.number(last.latitude))\(last.altitude.map { "," + TrackDocumentWriter.number($0) } ?? "")</coordinates></Point></Placemark>\n"
        }
        return Array((text + "</Document>\n</kml>\n").utf8)
    }
}
