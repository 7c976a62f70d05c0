#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value-type logger. Messages are autoclosures, so nothing is built below the level. By rule, callers never
/// pass a secret, a token or a coordinate: log share ids, counts and reasons.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case debug, info, warning, error
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
        public init?(name: String) {
            switch name.lowercased() {
            case "debug": self = .debug
            case "info": self = .info
            case "warning", "warn": self = .warning
            case "error": self = .error
            default: return nil
            }
        }
        var word: String { switch self { case .debug: "debug"; case .info: "info"; case .warning: "warn"; case .error: "error" } }
    }

    public let label: String
    public var level: Level
    private let clock: any Clock

    public init(label: String, level: Level = .info, clock: any Clock = SystemClock()) {
        self.label = label
        self.level = level
        self.clock = clock
    }

    public func with(label: String) -> Logger { Logger(label: label, level: level, clock: clock) }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message) }

    private func log(_ at: Level, _ message: () -> String) {
        guard at >= level else { return }
        let line = "\(Self.timestamp(clock.now())) \(at.word) \(label): \(message())\n"
        // One write(2) per line, so lines from different threads never interleave.
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
    }

    /// UTC to the second, RFC 3339 (`2026-12-06T01:47:56Z`), by the C library.
    static func timestamp(_ millis: UnixMillis) -> String {
        var seconds = time_t(millis >= 0 ? millis / 1000 : (millis - 999) / 1000)
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return "\(millis)" }
        var text = [CChar](repeating: 0, count: 32)
        let length = strftime(&text, text.count, "%Y-%m-%dT%H:%M:%SZ", &parts)
        return String(decoding: text.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension Logger {
    /// Replaces anything shaped like a token (a run of 20+ base64url or JWT characters) in text that Flare did not
    /// write itself, such as a C library's error message quoting a URL.
    public static func redactingSecrets(_ text: String) -> String {
        var output = ""
        var run = ""
        func flush() {
            output += run.count >= 20 ? "[redacted]" : run
            run = ""
        }
        for character in text {
            if character.isASCII && (character.isLetter || character.isNumber || character == "-" || character == "_" || character == ".") {
                run.append(character)
            } else {
                flush()
                output.append(character)
            }
        }
        flush()
        return output
    }
}
