import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A tiny HTTP/1.1 client over a plain socket, so tests see exactly what the server sends (status, headers,
/// streamed Server-Sent Events) without a client library in between.
public struct RawHTTPResponse: Sendable {
    public let status: Int
    public let headers: [String: String]  // lowercased names
    public let body: [UInt8]
    public var text: String { String(decoding: body, as: UTF8.self) }
    public var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }
}

public enum RawHTTP {
    public static func request(_ method: String, port: Int, path: String, headers: [String: String] = [:],
                               body: [UInt8] = [], host: String = "127.0.0.1") throws -> RawHTTPResponse {
        let connection = try Connection(port: port, host: host, timeoutSeconds: 10)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        try connection.send(Array(head.utf8) + body)
        var data: [UInt8] = []
        while let chunk = connection.receive(), !chunk.isEmpty { data += chunk }
        return try parse(data)
    }

    public static func parse(_ data: [UInt8]) throws -> RawHTTPResponse {
        guard let split = data.firstRange(of: Array("\r\n\r\n".utf8)) else { throw TestSupportError("no HTTP header in response") }
        let head = String(decoding: data[..<split.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = head[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw TestSupportError("bad status line \(head[0])") }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(data[split.upperBound...])
        if headers["transfer-encoding"]?.lowercased() == "chunked" { body = dechunk(body) }
        return RawHTTPResponse(status: status, headers: headers, body: body)
    }

    static func dechunk(_ data: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        var index = 0
        while index < data.count {
            guard let lineEnd = data[index...].firstRange(of: [13, 10]) else { break }
            let sizeText = String(decoding: data[index..<lineEnd.lowerBound], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText, radix: 16), size > 0 else { break }
            let start = lineEnd.upperBound
            let end = min(start + size, data.count)
            output += data[start..<end]
            index = end + 2
        }
        return output
    }
}

/// One TCP connection with a receive timeout.
public final class Connection: @unchecked Sendable {
    let fd: Int32

    public init(port: Int, host: String = "127.0.0.1", timeoutSeconds: Int) throws {
        let isV6 = host.contains(":")
        fd = socket(isV6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket() failed") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let result: Int32
        if isV6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = UInt16(port).bigEndian
            inet_pton(AF_INET6, host, &address.sin6_addr)
            result = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr(host)
            result = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        // No close here: a throwing class initializer that has set every property still runs deinit, and closing
        // twice would close whatever descriptor another thread opened in between (a test saw its socket vanish).
        guard result == 0 else { throw TestSupportError("cannot connect to \(host):\(port)") }
    }

    deinit { if fd >= 0 { close(fd) } }

    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // Foundation's Process watches children with a SIGCHLD handler: with tests starting processes in parallel,
            // a send may be interrupted before it wrote anything. That is no failure.
            if sent < 0 && errno == EINTR { continue }
            guard sent > 0 else { throw TestSupportError("send failed: \(String(cString: strerror(errno)))") }
            offset += sent
        }
    }

    /// Next bytes, [] at end of stream, nil on timeout or error.
    public func receive() -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        while count < 0 && errno == EINTR { count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) } }
        guard count >= 0 else { return nil }
        return Array(buffer[..<count])
    }
}

/// Reads a Server-Sent Events response as it streams.
public final class EventStreamReader: @unchecked Sendable {
    private let connection: Connection
    private var buffer: [UInt8] = []
    public private(set) var status = 0
    public private(set) var events: [(name: String, data: String)] = []
    public private(set) var ended = false

    public init(port: Int, path: String) throws {
        connection = try Connection(port: port, timeoutSeconds: 1)
        try connection.send(Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".utf8))
    }

    /// Reads until `condition` holds for the events so far, the stream ends, or the timeout passes.
    @discardableResult
    public func waitFor(timeout: Duration = .seconds(10), _ condition: ([(name: String, data: String)]) -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition(events) && !ended && ContinuousClock.now < deadline {
            guard let chunk = connection.receive() else { continue }
            if chunk.isEmpty { ended = true; break }
            buffer += chunk
            parse()
        }
        return condition(events)
    }

    private var headerDone = false

    private func parse() {
        if !headerDone {
            guard let split = buffer.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
            let statusLine = String(decoding: buffer[..<split.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")[0]
            status = Int(statusLine.split(separator: " ")[1]) ?? 0
            buffer = Array(buffer[split.upperBound...])
            headerDone = true
        }
        // De-chunk whatever is complete, then split events on blank lines.
        let text = String(decoding: RawHTTP.dechunk(buffer), as: UTF8.self)
        var parsed: [(String, String)] = []
        for block in text.components(separatedBy: "\n\n") where block.contains("data:") {
            var name = "message", data = ""
            for line in block.split(separator: "\n") {
                if line.hasPrefix("event:") { name = line.dropFirst(6).trimmingCharacters(in: .whitespaces) }
                if line.hasPrefix("data:") { data = line.dropFirst(5).trimmingCharacters(in: .whitespaces) }
            }
            parsed.append((name, data))
        }
        // A trailing block may still be incomplete: only count blocks followed by a blank line.
        if !text.hasSuffix("\n\n"), !parsed.isEmpty, let last = text.components(separatedBy: "\n\n").last, last.contains("data:") {
            parsed.removeLast()
        }
        events = parsed
        if buffer.suffix(5) == Array("0\r\n\r\n".utf8) { ended = true }
    }
}
