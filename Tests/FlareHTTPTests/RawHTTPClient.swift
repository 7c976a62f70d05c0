import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A plain blocking TCP client that writes HTTP by hand and reads with timeouts, so tests control
/// exactly what goes over the wire (odd bytes, chunked uploads, half-read streams, disconnects).
final class RawHTTPClient {
    private let fd: Int32
    /// Bytes received and not yet consumed by `readResponse`.
    private(set) var buffer: [UInt8] = []
    private(set) var peerClosed = false

    init(port: Int, host: String = "127.0.0.1") throws {
        var ipv4 = sockaddr_in()
        var ipv6 = sockaddr_in6()
        let isIPv6 = inet_pton(AF_INET, host, &ipv4.sin_addr) != 1
        fd = socket(isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ClientError("socket() failed") }
        let connected: Int32
        if isIPv6 {
            guard inet_pton(AF_INET6, host, &ipv6.sin6_addr) == 1 else { throw ClientError("bad host \(host)") }
            ipv6.sin6_family = sa_family_t(AF_INET6)
            ipv6.sin6_port = UInt16(port).bigEndian
            connected = withUnsafePointer(to: &ipv6) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            ipv4.sin_family = sa_family_t(AF_INET)
            ipv4.sin_port = UInt16(port).bigEndian
            connected = withUnsafePointer(to: &ipv4) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        // Closed by deinit, which a throwing initializer runs once every property is set: closing here as well
        // would close whatever descriptor another thread opened in between.
        guard connected == 0 else { throw ClientError("connect to \(host):\(port) failed: errno \(errno)") }
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    func close() {
        shutdown(fd, Int32(SHUT_RDWR))
    }

    func discardBuffer() {
        buffer = []
    }

    func send(_ text: String) throws {
        try send(Array(text.utf8))
    }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw ClientError("send failed: errno \(errno)") }
            offset += written
        }
    }

    /// Reads until `done(buffer)` holds, the peer closes, or the timeout passes. Returns `done(buffer)`.
    @discardableResult
    func read(timeout: Duration = .seconds(10), until done: ([UInt8]) -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !done(buffer), !peerClosed, ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 {
                peerClosed = true
            } else {
                buffer += chunk[0..<count]
            }
        }
        return done(buffer)
    }

    /// Waits until the server closes the connection (draining whatever it still sends).
    func waitForClose(timeout: Duration = .seconds(10)) -> Bool {
        read(timeout: timeout) { _ in false }
        return peerClosed
    }

    /// Reads one complete response (Content-Length or chunked body) and removes it from the buffer.
    func readResponse(timeout: Duration = .seconds(10)) throws -> Response {
        var parsed: (Response, Int)?
        read(timeout: timeout) { bytes in
            parsed = Response.parse(bytes)
            return parsed != nil
        }
        guard let (response, length) = parsed else {
            throw ClientError("no complete response; got \(String(decoding: buffer, as: UTF8.self).debugDescription)")
        }
        buffer.removeFirst(length)
        return response
    }

    /// Reads a response head only (for streams), leaving the body bytes in `buffer`.
    func readHead(timeout: Duration = .seconds(10)) throws -> Response {
        var parsed: (Response, Int)?
        read(timeout: timeout) { bytes in
            parsed = Response.parseHead(bytes)
            return parsed != nil
        }
        guard let (response, length) = parsed else { throw ClientError("no response head") }
        buffer.removeFirst(length)
        return response
    }

    /// The payload of the chunks received so far on a chunked body, and whether the last chunk came.
    func chunkedPayload() -> (payload: String, finished: Bool) {
        var payload: [UInt8] = []
        var index = 0
        while let lineEnd = buffer.firstRange(of: [13, 10], startingAt: index) {
            let sizeText = String(decoding: buffer[index..<lineEnd], as: UTF8.self)
            guard let size = Int(sizeText, radix: 16) else { break }
            if size == 0 { return (String(decoding: payload, as: UTF8.self), buffer.count >= lineEnd + 4) }
            let start = lineEnd + 2
            guard buffer.count >= start + size + 2 else { break }
            payload += buffer[start..<start + size]
            index = start + size + 2
        }
        return (String(decoding: payload, as: UTF8.self), false)
    }

    struct Response {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }

        static func parseHead(_ bytes: [UInt8]) -> (Response, Int)? {
            guard let end = bytes.firstRange(of: [13, 10, 13, 10], startingAt: 0) else { return nil }
            let lines = String(decoding: bytes[..<end], as: UTF8.self).components(separatedBy: "\r\n")
            let statusParts = lines[0].split(separator: " ")
            guard statusParts.count >= 2, let status = Int(statusParts[1]) else { return nil }
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            return (Response(status: status, headers: headers, body: []), end + 4)
        }

        static func parse(_ bytes: [UInt8]) -> (Response, Int)? {
            guard var (response, offset) = parseHead(bytes) else { return nil }
            if response.headers["transfer-encoding"]?.lowercased() == "chunked" {
                var body: [UInt8] = []
                while true {
                    guard let lineEnd = bytes.firstRange(of: [13, 10], startingAt: offset),
                          let size = Int(String(decoding: bytes[offset..<lineEnd], as: UTF8.self), radix: 16) else { return nil }
                    let start = lineEnd + 2
                    guard bytes.count >= start + size + 2 else { return nil }
                    body += bytes[start..<start + size]
                    offset = start + size + 2
                    if size == 0 { break }
                }
                response.body = body
                return (response, offset)
            }
            let length = Int(response.headers["content-length"] ?? "0") ?? 0
            guard bytes.count >= offset + length else { return nil }
            response.body = Array(bytes[offset..<offset + length])
            return (response, offset + length)
        }
    }
}

struct ClientError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension [UInt8] {
    func firstRange(of pattern: [UInt8], startingAt start: Int) -> Int? {
        guard count >= pattern.count, start <= count - pattern.count else { return nil }
        for index in start...(count - pattern.count) where self[index..<index + pattern.count].elementsEqual(pattern) {
            return index
        }
        return nil
    }
}

/// Shared state between a handler running on a server thread and the test.
/// NSLock rather than `Mutex`, which ThreadSanitizer cannot see on Linux.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) {
        stored = value
    }

    var value: Value {
        lock.withLock { stored }
    }

    func update<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.withLock { body(&stored) }
    }
}
