import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A TCP listener on a free loopback port (127.0.0.1 or ::1) whose connections one thread takes in turn.
public class TestListener: @unchecked Sendable {
    // @unchecked: `socket` and `port` are set once in init; the rest is behind mutexes.
    public let port: Int
    public let host: String
    private let socket: Int32
    private let stopped = Mutex(false)
    private let accepted = Mutex(0)

    init(host: String) throws {
        self.host = host
        let isV6 = host.contains(":")
        let fd = Glibc.socket(isV6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket() failed") }
        var storage = sockaddr_storage()
        var length: socklen_t
        if isV6 {
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                    address.pointee.sin6_family = sa_family_t(AF_INET6)
                    _ = inet_pton(AF_INET6, host, &address.pointee.sin6_addr)
                }
            }
        } else {
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    address.pointee.sin_family = sa_family_t(AF_INET)
                    address.pointee.sin_addr.s_addr = inet_addr(host)
                }
            }
        }
        let bound = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { address -> Bool in
                bind(fd, address, length) == 0 && listen(fd, 64) == 0 && getsockname(fd, address, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw TestSupportError("cannot listen on \(host)")
        }
        let port = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }  // same offset in sockaddr_in6
        }
        self.socket = fd
        self.port = port
    }

    /// Takes connections until `stop`, handing each to `handle` on the accepting thread.
    func run(_ handle: @escaping @Sendable (Int32) -> Void) {
        let socket = self.socket
        let thread = Thread { [weak self] in
            while true {
                let connection = accept(socket, nil, nil)
                guard connection >= 0 else {
                    // Closed here, not in `stopListening`: closed there, the number could be a new listener's by the
                    // time this thread calls accept again, and it would take that listener's connections.
                    close(socket)
                    return
                }
                self?.accepted.withLock { $0 += 1 }
                handle(connection)
            }
        }
        thread.start()
    }

    /// Connections taken so far.
    public var connections: Int { accepted.withLock { $0 } }

    /// Stops taking connections (those taken stay as their handler left them): the accepting thread's accept fails,
    /// and it closes the socket.
    public func stopListening() {
        guard stopped.withLock({ let was = $0; $0 = true; return !was }) else { return }
        shutdown(socket, Int32(SHUT_RDWR))
    }

    deinit { stopListening() }
}

/// A receiver that accepts every connection and never answers (nor closes it, until `stop`): a webhook receiver that
/// hangs.
public final class SilentReceiver: TestListener, @unchecked Sendable {
    private let held = Mutex<[Int32]>([])

    public init() throws {
        try super.init(host: "127.0.0.1")
        run { [weak self] connection in
            guard let self else {
                close(connection)
                return
            }
            held.withLock { $0.append(connection) }
        }
    }

    /// Stops listening and closes every connection it holds.
    public func stop() {
        stopListening()
        held.withLock { held in
            for connection in held { close(connection) }
            held.removeAll()
        }
    }

    deinit { stop() }
}

/// An HTTP/1.1 receiver that keeps every request it gets and answers each with `status` (and `headers`), one
/// connection at a time, then closes it.
public final class RecordingReceiver: TestListener, @unchecked Sendable {
    public struct Request: Sendable {
        public let method: String
        public let path: String
        /// Names lowercased.
        public let headers: [String: String]
        public let body: [UInt8]
    }

    private let received = Mutex<[Request]>([])

    public init(host: String = "127.0.0.1", status: Int = 204, headers: [(String, String)] = []) throws {
        try super.init(host: host)
        run { [weak self] connection in
            defer { close(connection) }
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            guard let request = Self.read(connection) else { return }
            self?.received.withLock { $0.append(request) }
            var answer = "HTTP/1.1 \(status) Answer\r\nContent-Length: 0\r\nConnection: close\r\n"
            for (name, value) in headers { answer += "\(name): \(value)\r\n" }
            answer += "\r\n"
            _ = answer.withCString { send(connection, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        }
    }

    public var requests: [Request] { received.withLock { $0 } }

    public func stop() { stopListening() }

    private static func read(_ connection: Int32) -> Request? {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        func more() -> Bool {
            let count = recv(connection, &buffer, buffer.count, 0)
            guard count > 0 else { return false }
            data += buffer[0..<count]
            return true
        }
        var split: Range<Int>?
        while split == nil {
            guard more() else { return nil }
            split = data.firstRange(of: Array("\r\n\r\n".utf8))
        }
        let lines = String(decoding: data[..<split!.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = lines[0].split(separator: " ")
        guard requestLine.count == 3 else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        while data.count - split!.upperBound < length { guard more() else { return nil } }
        return Request(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers,
                       body: Array(data[split!.upperBound..<(split!.upperBound + length)]))
    }
}
