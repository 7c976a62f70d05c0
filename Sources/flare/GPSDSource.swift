import FlareCore
import Foundation
import FlareCodec
#if canImport(Glibc)
import Glibc
#endif

/// A live GPS receiver through gpsd, over gpsd's own JSON protocol on TCP (`?WATCH={"enable":true,"json":true}`,
/// then one `TPV` object per fix). That protocol is what libgps speaks internally and gpsd documents it as its
/// stable interface; speaking it directly needs no C library and no libgps ABI version to match.
///
/// Survives gpsd restarts and receivers that lose their fix: it reconnects with backoff and only passes on
/// TPV reports with a 2D or 3D fix, at most one every `interval` seconds.
struct GPSDSource: FixSource {
    let host: String
    let port: Int
    let interval: Double
    let log: (String) -> Void
    private var connection: LineConnection?
    private var lastSent: ContinuousClock.Instant?
    private var lastReport: (lat: Double, lon: Double, time: String?)?
    private var reconnectDelay = 0.5
    private var warnedAboutClock = false

    init(address: String, interval: Double, log: @escaping (String) -> Void) throws {
        guard let hostPort = HostPort(address) else { throw CLIError("--gpsd needs HOST:PORT (gpsd listens on 127.0.0.1:2947), got \(address)") }
        self.host = hostPort.host
        self.port = hostPort.port
        self.interval = interval
        self.log = log
    }

    var summary: String { "gpsd at \(host):\(port), a fix at most every \(interval) s" }

    mutating func next() throws -> Fix? {
        while true {
            if connection == nil {
                do {
                    let opened = try LineConnection(host: host, port: port)
                    try opened.send(#"?WATCH={"enable":true,"json":true}"# + "\n")
                    connection = opened
                    reconnectDelay = 0.5
                    log("gpsd: connected to \(host):\(port)")
                } catch {
                    log("gpsd: \(error); retrying in \(reconnectDelay) s")
                    Thread.sleep(forTimeInterval: reconnectDelay)
                    reconnectDelay = min(reconnectDelay * 2, 10)
                    continue
                }
            }
            guard let line = connection?.readLine() else {
                log("gpsd: connection closed; reconnecting")
                connection = nil
                continue
            }
            guard let report = try? JSONValue.parse(line), report["class"]?.stringValue == "TPV",
                  let mode = report["mode"]?.doubleValue, mode >= 2,
                  let lat = report["lat"]?.doubleValue, let lon = report["lon"]?.doubleValue else { continue }
            // gpsd may report one receiver cycle twice: first without a time (a GGA before the first RMC gave the
            // date), then with it. Same position, and no time or the same time on either side: one fix.
            let time = report["time"]?.stringValue
            if let last = lastReport, last.lat == lat, last.lon == lon, last.time == nil || time == nil || last.time == time {
                continue
            }
            let now = ContinuousClock.now
            if let lastSent, now - lastSent < .milliseconds(Int64(interval * 1000)) { continue }
            lastSent = now
            lastReport = (lat, lon, time)
            return fix(report, lat: lat, lon: lon)
        }
    }

    private mutating func fix(_ report: JSONValue, lat: Double, lon: Double) -> Fix {
        let systemTime = Int64(Date().timeIntervalSince1970)
        var timestamp = systemTime
        // The receiver's time is the fix's real time, unless the clocks disagree (a replayed recording, a
        // receiver without a time fix): then the system clock, since the share refuses times far off.
        if let text = report["time"]?.stringValue, let date = ISO8601.parse(text) {
            let gpsTime = Int64(date.timeIntervalSince1970)
            if abs(gpsTime - systemTime) <= 60 { timestamp = gpsTime } else if !warnedAboutClock {
                warnedAboutClock = true
                log("gpsd: receiver time is \(gpsTime - systemTime) s off the system clock; using the system clock")
            }
        }
        var fix = Fix(latitude: lat, longitude: lon, timestamp: timestamp)
        fix.altitude = report["altMSL"]?.doubleValue ?? report["alt"]?.doubleValue
        if let speed = report["speed"]?.doubleValue { fix.velocity = (speed * 3.6 * 10).rounded() / 10 }  // m/s → km/h
        fix.course = report["track"]?.doubleValue
        if let eph = report["eph"]?.doubleValue ?? [report["epx"]?.doubleValue, report["epy"]?.doubleValue].compactMap({ $0 }).max() {
            fix.accuracy = eph.rounded()
        }
        fix.trackerID = "gp"
        return fix
    }
}

/// A blocking TCP connection that reads newline-terminated lines, with a read timeout so a silent gpsd is
/// noticed (gpsd reports at least once a second while a receiver is attached).
final class LineConnection {
    private let fd: Int32
    private var buffer: [UInt8] = []

    init(host: String, port: Int, readTimeoutSeconds: Int = 30) throws {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let first = result else {
            throw CLIError("cannot resolve \(host)")
        }
        defer { freeaddrinfo(result) }
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        var connected: Int32 = -1
        while let info = candidate, connected < 0 {
            let socketFD = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            if socketFD >= 0 {
                if Glibc.connect(socketFD, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { connected = socketFD } else { close(socketFD) }
            }
            candidate = info.pointee.ai_next
        }
        guard connected >= 0 else { throw CLIError("cannot connect to \(host):\(port) (\(String(cString: strerror(errno))))") }
        fd = connected
        var timeout = timeval(tv_sec: readTimeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == bytes.count else { throw CLIError("cannot write to gpsd") }
    }

    /// The next line, or nil when the connection closed, failed or stayed silent past the timeout.
    func readLine() -> [UInt8]? {
        while true {
            if let newline = buffer.firstIndex(of: 10) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return line
            }
            guard buffer.count < 1 << 20 else { return nil }  // no line is that long: not gpsd
            var chunk = [UInt8](repeating: 0, count: 8192)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return nil }
            buffer += chunk[..<count]
        }
    }
}
