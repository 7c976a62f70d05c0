/// Milliseconds since the Unix epoch. Share expiry is wall-clock time (it is shown to people and stored),
/// so it is kept in this form rather than as a monotonic instant.
public typealias UnixMillis = Int64

/// The source of wall-clock time, so tests can move time by hand.
public protocol WallClock: Sendable {
    func now() -> UnixMillis
}

#if canImport(Glibc)
import Glibc
#endif

public struct SystemWallClock: WallClock {
    public init() {}
    public func now() -> UnixMillis {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }
}

public enum RFC3339 {
    /// `2026-11-29T14:05:00Z` for the given instant (UTC, whole seconds).
    public static func format(millis: UnixMillis) -> String { format(seconds: floorDiv(millis, 1000)) }

    public static func format(seconds: Int64) -> String {
        let days = floorDiv(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civilDate(daysSinceEpoch: days)
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2))Z"
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    /// Howard Hinnant's days-to-civil algorithm.
    private static func civilDate(daysSinceEpoch: Int64) -> (Int64, Int64, Int64) {
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
}
