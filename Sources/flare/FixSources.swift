import FlareCore
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// Where `flare track` gets its positions. `next()` blocks until the next fix is due and returns nil when the
/// source has nothing more (the end of a GPX track). Fix times are the time of sending: a share refuses fixes
/// from before it began, and a replay is meant to look live.
protocol FixSource {
    /// For the status line: what is being tracked, never a position.
    var summary: String { get }
    mutating func next() throws -> Fix?
}

/// The built-in walking loop, one fix every `interval` seconds.
struct RouteSource: FixSource {
    let interval: Double
    let speed: Double
    private var produced = 0
    private var battery = 87.0

    init(interval: Double, speed: Double) {
        self.interval = interval
        self.speed = speed
    }

    var summary: String { "the built-in route every \(interval) s at \(speed) m/s" }

    mutating func next() throws -> Fix? {
        if produced > 0 { Thread.sleep(forTimeInterval: interval) }
        let position = Route.position(afterMetres: Double(produced) * speed * interval)
        var fix = Fix(latitude: position.lat, longitude: position.lon, timestamp: Int64(Date().timeIntervalSince1970))
        fix.accuracy = 8
        fix.velocity = (speed * 3.6).rounded()
        fix.course = position.course
        fix.battery = Int(battery)
        fix.trackerID = "ft"
        battery = max(5, battery - 0.02)
        produced += 1
        return fix
    }
}

/// A GPX file's track points (`trkpt`, else route points `rtept`), replayed with their original spacing in
/// time divided by `speedFactor`; points without times are `fallbackInterval` apart.
struct GPXSource: FixSource {
    struct Point {
        var latitude: Double
        var longitude: Double
        var elevation: Double?
        var time: Date?
    }

    let points: [Point]
    let speedFactor: Double
    let fallbackInterval: Double
    let name: String
    private var index = 0

    init(path: String, speedFactor: Double, fallbackInterval: Double) throws {
        guard let data = FileManager.default.contents(atPath: path) else { throw CLIError("cannot read GPX file \(path)") }
        let reader = GPXReader()
        let parser = XMLParser(data: data)
        parser.delegate = reader
        guard parser.parse() else {
            throw CLIError("\(path) is not valid GPX: \(parser.parserError.map { "\($0)" } ?? "XML error") at line \(parser.lineNumber)")
        }
        let points = reader.trackPoints.isEmpty ? reader.routePoints : reader.trackPoints
        guard !points.isEmpty else { throw CLIError("\(path) has no track points (trkpt) or route points (rtept)") }
        guard speedFactor > 0 else { throw CLIError("--speed-factor must be greater than 0") }
        self.points = points
        self.speedFactor = speedFactor
        self.fallbackInterval = fallbackInterval
        self.name = URL(fileURLWithPath: path).lastPathComponent
    }

    var summary: String {
        let factor = speedFactor == speedFactor.rounded() ? String(Int(speedFactor)) : String(speedFactor)
        return "\(points.count) points from \(name) at \(factor)× speed"
    }

    mutating func next() throws -> Fix? {
        guard index < points.count else { return nil }
        let point = points[index]
        var fix = Fix(latitude: point.latitude, longitude: point.longitude, timestamp: Int64(Date().timeIntervalSince1970))
        fix.altitude = point.elevation
        fix.trackerID = "gx"
        if index > 0 {
            let previous = points[index - 1]
            var seconds = fallbackInterval
            if let start = previous.time, let end = point.time, end > start { seconds = end.timeIntervalSince(start) }
            Thread.sleep(forTimeInterval: seconds / speedFactor)
            fix.timestamp = Int64(Date().timeIntervalSince1970)
            let metres = Route.distance((previous.latitude, previous.longitude), (point.latitude, point.longitude))
            if metres > 0 {
                fix.course = Route.bearing((previous.latitude, previous.longitude), (point.latitude, point.longitude))
                // The speed the track was recorded at, in km/h as OwnTracks has it (not the replay's speed).
                fix.velocity = (metres / seconds * 3.6).rounded()
            }
        }
        index += 1
        return fix
    }
}

/// XMLParser delegate collecting GPX 1.0/1.1 points. Namespaces are ignored: element names are matched bare.
private final class GPXReader: NSObject, XMLParserDelegate {
    var trackPoints: [GPXSource.Point] = []
    var routePoints: [GPXSource.Point] = []
    private var current: GPXSource.Point?
    private var currentIsRoute = false
    private var text = ""

    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
        let bare = name.split(separator: ":").last.map(String.init) ?? name
        text = ""
        guard bare == "trkpt" || bare == "rtept" else { return }
        guard let lat = attributes["lat"].flatMap(Double.init), let lon = attributes["lon"].flatMap(Double.init),
              abs(lat) <= 90, abs(lon) <= 180 else { return }
        current = GPXSource.Point(latitude: lat, longitude: lon)
        currentIsRoute = bare == "rtept"
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        let bare = name.split(separator: ":").last.map(String.init) ?? name
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        switch bare {
        case "ele": current?.elevation = Double(value)
        case "time": current?.time = ISO8601.parse(value)
        case "trkpt", "rtept":
            if let point = current { currentIsRoute ? routePoints.append(point) : trackPoints.append(point) }
            current = nil
        default: break
        }
    }
}

/// ISO 8601 / RFC 3339 times as GPX files and gpsd write them (`2026-11-29T15:17:03.000Z`).
enum ISO8601 {
    static func parse(_ text: String) -> Date? {
        let plain = ISO8601DateFormatter()
        if let date = plain.date(from: text) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return fractional.date(from: text)
    }
}
