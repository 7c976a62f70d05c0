#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// Times in Flare's API, topics and logs: `2026-11-29T14:05:00Z` (UTC, whole seconds). Formatted and parsed without
/// a formatter object, so nothing non-Sendable is shared between threads and no locale data is loaded.
public enum RFC3339 {
    /// The instant `millis` after the Unix epoch, floored to the second.
    public static func format(millis: Int64) -> String { format(seconds: floorDiv(millis, 1000)) }

    public static func format(_ date: Date) -> String { format(seconds: Int64(date.timeIntervalSince1970.rounded(.down))) }

    public static func format(seconds: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20)
        append(seconds: seconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `format(seconds:)` to `bytes` as UTF-8, digit by digit: every view document ends with the server's
    /// time, and making a string of it for each request (six padded numbers) cost a twentieth of the view endpoint.
    public static func append(seconds: Int64, to bytes: inout [UInt8]) {
        let days = floorDiv(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civilDate(daysSinceEpoch: days)
        guard (0...9999).contains(year) else {
            bytes += Array("\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2))Z".utf8)
            return
        }
        func twoDigits(_ value: Int64) {
            bytes.append(UInt8(truncatingIfNeeded: 48 + value / 10))
            bytes.append(UInt8(truncatingIfNeeded: 48 + value % 10))
        }
        twoDigits(year / 100)
        twoDigits(year % 100)
        bytes.append(UInt8(ascii: "-"))
        twoDigits(month)
        bytes.append(UInt8(ascii: "-"))
        twoDigits(day)
        bytes.append(UInt8(ascii: "T"))
        twoDigits(secondOfDay / 3600)
        bytes.append(UInt8(ascii: ":"))
        twoDigits(secondOfDay / 60 % 60)
        bytes.append(UInt8(ascii: ":"))
        twoDigits(secondOfDay % 60)
        bytes.append(UInt8(ascii: "Z"))
    }

    /// `append(seconds:to:)` of the instant `millis` after the Unix epoch, floored to the second.
    public static func append(millis: Int64, to bytes: inout [UInt8]) { append(seconds: floorDiv(millis, 1000), to: &bytes) }

    /// Parses Flare's form, and tolerates fractional seconds and numeric offsets.
    public static func parse(_ text: String) -> Date? {
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
        let days = daysSinceEpoch(year: Int64(year), month: Int64(month), day: Int64(day))
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second - offset)
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    /// Howard Hinnant's days-to-civil algorithm: the proleptic Gregorian (year, month, day) of a day count since
    /// 1970-01-01 (the mail's `Date` header writes it too).
    public static func civilDate(daysSinceEpoch: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = daysSinceEpoch + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Its inverse, days-from-civil.
    private static func daysSinceEpoch(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
