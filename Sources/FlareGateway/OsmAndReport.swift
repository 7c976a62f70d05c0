import FlareAPI
import FlareCodec
import FoundationEssentials

/// One request of the OsmAnd protocol as the tracking apps send it (Traccar Client, GPSLogger, OsmAnd and trackers
/// that speak it), read into Flare's terms. Three shapes arrive at the same URL (docs/trackers.md cites each app's
/// source):
/// - the query string, with an empty body (Traccar Client for Android before 9 and for iOS, GPSLogger, OsmAnd);
/// - a form body, `application/x-www-form-urlencoded` (Traccar Client 10);
/// - a JSON body, `application/json` (Traccar Client 9): `{"device_id", "location": {"timestamp", "coords": {…},
///   "battery": {…}, "alarm"?, "extras": {…}}}`.
/// Units follow Traccar's decoder, which the apps were written against: `speed` is in knots in the query and form
/// (Flare's own setup for GPSLogger and OsmAnd sends `speed_mps` instead, their unit), metres per second in JSON.
struct OsmAndReport: Equatable {
    /// The device's identifier as the app sent it (`id`, `deviceid`, or JSON `device_id`): Flare's device secret.
    var identifier: String?
    var latitude: Double?
    var longitude: Double?
    /// Unix seconds; nil: the app sent none (the time of arrival is used).
    var timestamp: Double?
    var accuracy: Double?
    var altitude: Double?
    var speedKmh: Double?
    var course: Double?
    var battery: Int?
    var charging: Bool?
    /// An alarm `sos` among the request's alarms: the SOS starts with this position.
    var sos = false
    /// Traccar Client's push-token upload: no position, nothing to store.
    var tokenOnly = false

    var hasPosition: Bool { latitude != nil && longitude != nil }

    struct Refusal: Error, Equatable {
        let code: String
        let message: String
    }

    /// Reads a request: the query, and the body when it is a form or JSON (`contentType`). A field given twice in
    /// one place is refused (which would count?); the query's fields win over the body's.
    static func read(query: [String: String], repeated: Set<String>, contentType: String?, body: [UInt8]) throws(Refusal) -> OsmAndReport {
        if let name = repeated.first { throw Refusal(code: "duplicate_field", message: "\(name.prefix(40)) is given more than once") }
        let type = (contentType ?? "").lowercased()
        var report: OsmAndReport
        if type.hasPrefix("application/json") {
            report = try json(body)
        } else if !body.isEmpty, type.isEmpty || type.hasPrefix("application/x-www-form-urlencoded") || type.hasPrefix("text/plain") {
            let (fields, twice) = form(body)
            if let name = twice.first { throw Refusal(code: "duplicate_field", message: "\(name.prefix(40)) is given more than once") }
            report = OsmAndReport()
            try report.take(fields)
        } else {
            report = OsmAndReport()
        }
        try report.take(query)
        return report
    }

    /// Takes the query or form fields (later calls override earlier ones).
    private mutating func take(_ fields: [String: String]) throws(Refusal) {
        func number(_ name: String) throws(Refusal) -> Double? {
            guard let text = fields[name], !text.isEmpty else { return nil }
            guard let value = Self.number(text) else { throw Refusal(code: "invalid_\(name)", message: "\(name) must be a number") }
            return value
        }
        if let id = fields["id"] ?? fields["deviceid"] { identifier = id }
        if let lat = try number("lat") { latitude = lat }
        if let lon = try number("lon") { longitude = lon }
        if let location = fields["location"] {
            let parts = location.split(separator: ",")
            guard parts.count == 2, let lat = Self.number(String(parts[0])), let lon = Self.number(String(parts[1])) else {
                throw Refusal(code: "invalid_location", message: "location must be lat,lon")
            }
            latitude = lat
            longitude = lon
        }
        if let text = fields["timestamp"], !text.isEmpty {
            guard let seconds = Self.time(text) else {
                throw Refusal(code: "invalid_timestamp", message: "timestamp must be Unix seconds, Unix milliseconds or ISO 8601 with a zone")
            }
            timestamp = seconds
        }
        if let value = try number("accuracy") { accuracy = value > 0 ? value : nil }  // 0: Traccar Client's "from GPS, unknown"
        if let value = try number("altitude") { altitude = value }
        if let knots = try number("speed") { speedKmh = knots >= 0 ? knots * 1.852 : nil }
        if let mps = try number("speed_mps") { speedKmh = mps >= 0 ? mps * 3.6 : nil }
        let bearing = try number("bearing"), heading = try number("heading")
        if let value = bearing ?? heading { course = value >= 0 ? value : nil }
        if let value = try number("batt") {
            guard (0...100).contains(value) else { throw Refusal(code: "invalid_batt", message: "batt must be a percentage from 0 to 100") }
            battery = Int(value.rounded())
        }
        if let text = fields["charge"], !text.isEmpty { charging = text == "true" || text == "1" }
        if let alarm = fields["alarm"], Self.alarms(alarm).contains("sos") { sos = true }
        if fields["notificationToken"] != nil && fields["lat"] == nil && fields["location"] == nil { tokenOnly = true }
    }

    private static func json(_ body: [UInt8]) throws(Refusal) -> OsmAndReport {
        let root: JSONValue
        do { root = try JSONValue.parse(body) } catch { throw Refusal(code: "invalid_json", message: "the body is not JSON: \(error.reason)") }
        guard root.objectValue != nil else { throw Refusal(code: "invalid_json", message: "the body must be a JSON object") }
        var report = OsmAndReport()
        report.identifier = root["device_id"]?.stringValue ?? root["device_id"]?.doubleValue.map { String(Int64($0)) }
        guard let location = root["location"], location.objectValue != nil else { return report }
        if let text = location["timestamp"]?.stringValue {
            guard let seconds = time(text) else { throw Refusal(code: "invalid_timestamp", message: "location.timestamp must be ISO 8601 with a zone") }
            report.timestamp = seconds
        }
        if let coords = location["coords"], coords.objectValue != nil {
            guard let lat = coords["latitude"]?.doubleValue, let lon = coords["longitude"]?.doubleValue else {
                throw Refusal(code: "invalid_coords", message: "location.coords needs latitude and longitude as numbers")
            }
            report.latitude = lat
            report.longitude = lon
            // -1 is the app's "unknown".
            report.accuracy = coords["accuracy"]?.doubleValue.flatMap { $0 > 0 ? $0 : nil }
            report.altitude = coords["altitude"]?.doubleValue
            report.speedKmh = coords["speed"]?.doubleValue.flatMap { $0 >= 0 ? $0 * 3.6 : nil }
            report.course = coords["heading"]?.doubleValue.flatMap { $0 >= 0 ? $0 : nil }
        }
        if let battery = location["battery"], battery.objectValue != nil {
            if let level = battery["level"]?.doubleValue, level >= 0, level <= 1 { report.battery = Int((level * 100).rounded()) }
            if case .bool(let charging) = battery["is_charging"] { report.charging = charging }
        }
        // `location.alarm`, else `location.extras.alarm` (Traccar Client 9 puts it in either); builds before its fix
        // sent `extras: {"sos": true}`.
        let alarm = location["alarm"]?.stringValue ?? location["extras"]?["alarm"]?.stringValue
        if let alarm, alarms(alarm).contains("sos") { report.sos = true }
        if case .bool(true) = location["extras"]?["sos"] { report.sos = true }
        return report
    }

    /// `a=1&b=2` with `+` for a space and `%HH` escapes; the names given twice.
    static func form(_ body: [UInt8]) -> (fields: [String: String], repeated: Set<String>) {
        var fields: [String: String] = [:]
        var repeated = Set<String>()
        for pair in body.split(separator: UInt8(ascii: "&")) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = decode(parts[0]), value = parts.count > 1 ? decode(parts[1]) : ""
            if fields[name] != nil { repeated.insert(name) } else { fields[name] = value }
        }
        return (fields, repeated)
    }

    private static func decode(_ bytes: ArraySlice<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 48...57: byte - 48
            case 65...70: byte - 55
            case 97...102: byte - 87
            default: nil
            }
        }
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                out.append(32)
            } else if byte == UInt8(ascii: "%"), index + 2 < bytes.endIndex, let high = hex(bytes[index + 1]), let low = hex(bytes[index + 2]) {
                out.append(high << 4 | low)
                index += 2
            } else {
                out.append(byte)
            }
            index += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A decimal number as the apps write it (`52.52`, `1.0E-4`, `-3`): no hex, no infinity, no NaN, bounded length.
    static func number(_ text: String) -> Double? {
        guard text.utf8.count <= 32, text.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || $0 == 43 || $0 == 45 || $0 == 46 || $0 == 69 || $0 == 101 }),
              let value = Double(text), value.isFinite else { return nil }
        return value
    }

    /// Unix seconds from Traccar's three forms: a number under 2147483647 is seconds, over it milliseconds; else ISO
    /// 8601 with a zone (`2026-12-06T04:00:00Z`, `+01:00`), or `yyyy-MM-dd HH:mm:ss` taken as UTC.
    static func time(_ text: String) -> Double? {
        if let value = number(text) { return value < 2_147_483_647 ? value : value / 1000 }
        var iso = text
        if text.utf8.count == 19, text.contains(" ") { iso = text.replacingOccurrences(of: " ", with: "T") + "Z" }
        guard iso.utf8.count <= 40, let date = RFC3339.parse(iso) else { return nil }
        return date.timeIntervalSince1970
    }

    /// The alarms of an `alarm` value: Traccar splits it on commas.
    static func alarms(_ text: String) -> [Substring] { text.split(separator: ",").map { $0.drop { $0 == " " } } }

    /// The position as an OwnTracks `location` message, for the same checks and path as every fix (`LocationPayloadParser`).
    func ownTracksMessage(receivedAtSeconds: Int64) -> [UInt8] {
        var writer = JSONWriter(capacity: 200)
        writer.beginObject()
        writer.field("_type", "location")
        writer.field("lat", latitude ?? 0)
        writer.field("lon", longitude ?? 0)
        writer.field("tst", timestamp.map { Int64($0.rounded(.down)) } ?? receivedAtSeconds)
        if let accuracy { writer.field("acc", accuracy) }
        if let altitude { writer.field("alt", altitude) }
        if let speedKmh { writer.field("vel", speedKmh) }
        if let course { writer.field("cog", course) }
        if let battery { writer.field("batt", battery) }
        if let charging { writer.field("bs", charging ? 2 : 1) }
        writer.endObject()
        return writer.bytes
    }
}
