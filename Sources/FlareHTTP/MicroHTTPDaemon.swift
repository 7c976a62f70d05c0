internal import CMicroHTTPD
import FlareSystem
#if canImport(Glibc)
import Glibc
#endif

/// The module's only contact with libmicrohttpd: one running MHD daemon, its C callbacks and the
/// suspend/resume calls of `EventStream`. Everything above this file is plain Swift.
///
/// MHD gets `self` (unretained) as the closure of every daemon callback; `HTTPServer` keeps this
/// object alive until `MHD_stop_daemon` has returned, after which MHD calls nothing any more.
/// `@unchecked`: `daemon` and `port` are written in `init`, before anyone but MHD's own threads
/// (which never read them) can see `self`, and in `stop`; the rest is guarded by `lock`.
final class MicroHTTPDaemon: @unchecked Sendable {
    private(set) var port = 0
    private var daemon: OpaquePointer?
    private let maxBodyBytes: Int
    private let handler: @Sendable (HTTPRequest) -> HTTPResponse
    private let errorLog: (@Sendable (String) -> Void)?
    private let lock = ConditionLock()
    /// MHD's messages while starting, to explain a failure; nil once running.
    private var startupLog: [String]? = []
    /// Streams being served, so `stop` can finish them: MHD aborts the process if it is stopped
    /// with a connection still suspended.
    private var openStreams: [ObjectIdentifier: EventStream] = [:]
    private var stopping = false

    init(configuration: HTTPServer.Configuration, handler: @escaping @Sendable (HTTPRequest) -> HTTPResponse) throws {
        self.maxBodyBytes = configuration.maxBodyBytes
        self.handler = handler
        self.errorLog = configuration.errorLog
        try Self.validate(configuration)
        guard let address = SocketAddress(host: configuration.host, port: configuration.port) else {
            throw HTTPServerError("host \"\(configuration.host)\" is not an IP address (use e.g. 127.0.0.1, 0.0.0.0, ::1 or ::)")
        }

        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue
        if address.isIPv6 {
            // Only the wildcard "::" also takes IPv4, as people expect from listening on "::".
            flags |= (address.isWildcard ? MHD_USE_DUAL_STACK : MHD_USE_IPv6).rawValue
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        daemon = address.withSockaddr { sockaddr, _ in
            flare_mhd_start_daemon(
                flags, sockaddr,
                Callbacks.access, Callbacks.completed, Callbacks.log, Callbacks.keepEscaped, context,
                UInt32(configuration.threadPoolSize),
                UInt32(configuration.connectionLimit),
                UInt32(configuration.connectionTimeoutSeconds),
                configuration.maxHeaderBytes)
        }
        let messages = lock.withLock {
            defer { startupLog = nil }
            return startupLog ?? []
        }
        guard let daemon else { throw Self.startError(address, messages: messages) }
        port = Int(flare_mhd_bound_port(daemon))
    }

    func stop() {
        guard let daemon else { return }
        // Quiescing first would be nicer, but MHD_quiesce_daemon races the epoll workers and can
        // MHD_PANIC; instead no stream may suspend from here on, so MHD_stop_daemon finds none suspended.
        let open = lock.withLock {
            stopping = true
            return Array(openStreams.values)
        }
        open.forEach { $0.finish() }
        MHD_stop_daemon(daemon)
        self.daemon = nil
    }

    func forget(_ stream: EventStream) {
        _ = lock.withLock { openStreams.removeValue(forKey: ObjectIdentifier(stream)) }
    }

    // MARK: - Requests

    /// The per-request state MHD keeps for us in `*req_cls`: this marker after the first call, or
    /// a retained `RequestBody` once body bytes arrived (released in `complete`).
    private static var headersSeen: UnsafeMutableRawPointer { UnsafeMutableRawPointer(bitPattern: 1)! }

    private final class RequestBody {
        var bytes: [UInt8] = []
        var discarded = 0
        /// Declared too large: read and dropped, answered 413 at the end.
        var refused = false
    }

    /// How much of a body that will be refused is still read (and dropped) so that the client hears the 413. Many
    /// clients (Python's urllib, most HTTP libraries) send the whole body before they read anything: closing on
    /// them with unread data makes the kernel answer with a reset, and they report a broken connection instead of
    /// the 413. Past this, the client is not going to stop: close without an answer.
    private var discardLimit: Int { 64 * maxBodyBytes + 1_048_576 }

    /// MHD calls this once when the headers are in, once per piece of body, and once at the end.
    fileprivate func access(
        connection: OpaquePointer, url: UnsafePointer<CChar>, method: UnsafePointer<CChar>,
        upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
        requestState: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let state = requestState.pointee else {
            // libmicrohttpd decodes `chunked` and nothing else: with another transfer coding it reads the body until the
            // client closes, so the request (a GET with `Transfer-Encoding: gzip`, say) would hang until the connection
            // times out. RFC 9112 §6.1: a coding the server does not understand is answered 501 (MHD then closes).
            if let coding = MHD_lookup_connection_value(connection, .HEADER_KIND, "Transfer-Encoding"),
               String(cString: coding).lowercased().split(whereSeparator: { $0 == " " || $0 == "\t" }) != ["chunked"] {
                return queue(.error(status: 501, code: "unsupported_transfer_encoding",
                                    message: "the only transfer coding this server reads is chunked"), on: connection)
            }
            if let declared = MHD_lookup_connection_value(connection, .HEADER_KIND, "Content-Length"),
               Self.exceeds(contentLength: declared, limit: maxBodyBytes) {
                // A client that waits for `100 Continue` has sent nothing yet, and one that announces more than we
                // would read is answered at once (MHD then closes the connection). Any other client is probably
                // sending the body already: read and drop it, then answer.
                let expectsContinue = MHD_lookup_connection_value(connection, .HEADER_KIND, "Expect")
                    .map { String(cString: $0).lowercased() == "100-continue" } ?? false
                if expectsContinue || Self.exceeds(contentLength: declared, limit: discardLimit) {
                    return queue(bodyTooLarge, on: connection)
                }
                let body = RequestBody()
                body.refused = true
                requestState.pointee = Unmanaged.passRetained(body).toOpaque()
                return .YES
            }
            requestState.pointee = Self.headersSeen
            return .YES
        }

        if uploadSize.pointee > 0 {
            let body: RequestBody
            if state == Self.headersSeen {
                body = RequestBody()
                requestState.pointee = Unmanaged.passRetained(body).toOpaque()
            } else {
                body = Unmanaged<RequestBody>.fromOpaque(state).takeUnretainedValue()
            }
            let piece = UnsafeRawBufferPointer(start: upload, count: uploadSize.pointee)
            uploadSize.pointee = 0
            // A response cannot be queued while body data is being handed over, so an oversize
            // chunked body is read and dropped, and answered at the end.
            if body.refused || body.discarded > 0 || body.bytes.count + piece.count > maxBodyBytes {
                body.bytes = []
                body.discarded += piece.count
                return body.discarded > discardLimit ? .NO : .YES
            }
            body.bytes.append(contentsOf: piece)
            return .YES
        }

        var bytes: [UInt8] = []
        if state != Self.headersSeen {
            let body = Unmanaged<RequestBody>.fromOpaque(state).takeRetainedValue()
            requestState.pointee = Self.headersSeen
            if body.refused || body.discarded > 0 { return queue(bodyTooLarge, on: connection) }
            bytes = body.bytes
        }
        let request = HTTPRequest(
            trusted: String(cString: method),
            path: String(cString: url),
            query: Self.values(of: connection, kind: .GET_ARGUMENT_KIND),
            headers: Self.values(of: connection, kind: .HEADER_KIND),
            body: bytes,
            clientAddress: Self.clientAddress(of: connection))
        return queue(handler(request), on: connection)
    }

    /// The end of a request, however it ended: frees a body the handler never got.
    fileprivate static func complete(requestState: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        guard let state = requestState.pointee else { return }
        requestState.pointee = nil
        if state != headersSeen {
            Unmanaged<RequestBody>.fromOpaque(state).release()
        }
    }

    private var bodyTooLarge: HTTPResponse {
        .error(status: 413, code: "body_too_large", message: "the request body is larger than \(maxBodyBytes) bytes")
    }

    private static func exceeds(contentLength: UnsafePointer<CChar>, limit: Int) -> Bool {
        let text = String(cString: contentLength)
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return false  // malformed: MHD answers it
        }
        guard let length = UInt64(text) else { return true }
        return length > UInt64(limit)
    }

    // MARK: - Responses

    private func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
        guard (200...599).contains(response.status) else {
            return queue(.error(status: 500, code: "internal_error", message: "the handler answered with status \(response.status)"), on: connection)
        }
        let created: OpaquePointer?
        switch response.body {
        case .bytes(let bytes):
            created = bytes.withUnsafeBytes {
                MHD_create_response_from_buffer($0.count, UnsafeMutableRawPointer(mutating: $0.baseAddress), .RESPMEM_MUST_COPY)
            }
        case .segments(let segments):
            // Joined straight into a buffer that MHD takes over (and frees with `free` when it destroys the response),
            // so the body is copied once. (MHD's I/O-vector responses avoid even that, but send the header and the
            // body in separate writes: measured slower for the page than one more copy.)
            let size = segments.reduce(0) { $0 + $1.count }
            guard let buffer = malloc(max(1, size)) else { return .NO }
            var offset = 0
            for segment in segments {
                segment.withUnsafeBytes { (buffer + offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
                offset += segment.count
            }
            created = MHD_create_response_from_buffer_with_free_callback(size, buffer, free)
            if created == nil { free(buffer) }
        case .stream(let stream):
            guard stream.attach(connection: connection, owner: self) else {
                return queue(.error(status: 500, code: "internal_error", message: "an EventStream can be sent only once"), on: connection)
            }
            let accepted = lock.withLock {
                if !stopping { openStreams[ObjectIdentifier(stream)] = stream }
                return !stopping
            }
            if !accepted { stream.finish() }
            // MHD owns one reference until it calls `Callbacks.streamDone`, also when creation fails.
            let retained = Unmanaged.passRetained(stream).toOpaque()
            created = MHD_create_response_from_callback(UInt64.max /* MHD_SIZE_UNKNOWN: chunked */, Self.streamBlockBytes,
                                                        Callbacks.streamRead, retained, Callbacks.streamDone)
            if created == nil { Callbacks.streamDone(retained) }
        }
        guard let created else { return .NO }
        defer { MHD_destroy_response(created) }
        for (name, value) in response.headers where !Self.isFraming(name) {
            guard MHD_add_response_header(created, name, value) == .YES else {
                return queue(.error(status: 500, code: "internal_error", message: "the handler set an invalid header"), on: connection)
            }
        }
        return MHD_queue_response(connection, UInt32(response.status), created)
    }

    /// The buffer libmicrohttpd allocates with each stream's response, kept for as long as the stream is open. A
    /// chunked body (HTTP/1.1, every browser, Caddy) is read straight into the connection's own pool and never uses
    /// it; only an HTTP/1.0 client (nginx's default upstream protocol) reads through it, a block at a time. At 4 KiB
    /// it was a quarter of a live viewer's memory; at 512 B an event of a few KB reaches HTTP/1.0 in a few rounds.
    static let streamBlockBytes = 512

    /// MHD writes these from the body it is given; one set by hand would contradict it.
    private static func isFraming(_ name: String) -> Bool {
        let length = name.utf8.count
        guard length == 14 || length == 17 else { return false }  // spares a lowercased copy per header
        let lowercased = name.lowercased()
        return lowercased == "content-length" || lowercased == "transfer-encoding"
    }

    // MARK: - Request parts

    private static func values(of connection: OpaquePointer, kind: MHD_ValueKind) -> [String: String] {
        var values: [String: String] = [:]
        _ = withUnsafeMutablePointer(to: &values) { pointer in
            MHD_get_connection_values_n(connection, kind, kind == .HEADER_KIND ? Callbacks.collectHeader : Callbacks.collectArgument, pointer)
        }
        return values
    }

    private static func clientAddress(of connection: OpaquePointer) -> String {
        guard let address = flare_mhd_client_address(connection) else { return "" }
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN)) { text in
            let written: UnsafePointer<CChar>?
            switch Int32(address.pointee.sa_family) {
            case AF_INET:
                written = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { ipv4 in
                    withUnsafePointer(to: ipv4.pointee.sin_addr) { inet_ntop(AF_INET, $0, text.baseAddress, socklen_t(text.count)) }
                }
            case AF_INET6:
                written = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { ipv6 in
                    withUnsafeBytes(of: ipv6.pointee.sin6_addr) { bytes in
                        // A v4 peer on a dual-stack socket (::ffff:a.b.c.d) is shown as the v4 address it is.
                        let mapped = bytes.prefix(10).allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
                        return mapped
                            ? inet_ntop(AF_INET, bytes.baseAddress! + 12, text.baseAddress, socklen_t(text.count))
                            : inet_ntop(AF_INET6, bytes.baseAddress, text.baseAddress, socklen_t(text.count))
                    }
                }
            default:
                written = nil
            }
            return written.map { String(cString: $0) } ?? ""
        }
    }

    // MARK: - Starting

    private static func validate(_ configuration: HTTPServer.Configuration) throws {
        func check(_ ok: Bool, _ message: String) throws {
            if !ok { throw HTTPServerError(message) }
        }
        try check((0...65535).contains(configuration.port), "port \(configuration.port) is not between 0 and 65535")
        try check((1...1024).contains(configuration.threadPoolSize), "threadPoolSize must be between 1 and 1024")
        try check(configuration.connectionLimit > 0 && configuration.connectionLimit <= Int(UInt32.max), "connectionLimit must be positive")
        try check(configuration.connectionTimeoutSeconds >= 0 && configuration.connectionTimeoutSeconds <= Int(UInt32.max), "connectionTimeoutSeconds must not be negative (0 = no timeout)")
        try check(configuration.maxBodyBytes >= 0, "maxBodyBytes must not be negative")
        try check(configuration.maxHeaderBytes >= 1024, "maxHeaderBytes must be at least 1024")
    }

    /// MHD says little about why it failed; binding the address ourselves tells which errno it was.
    private static func startError(_ address: SocketAddress, messages: [String]) -> HTTPServerError {
        switch address.bindError() {
        case EADDRINUSE?: HTTPServerError("address \(address) is already in use")
        case EADDRNOTAVAIL?: HTTPServerError("address \(address) is not an address of this machine")
        case EACCES?: HTTPServerError("no permission to listen on \(address) (ports below 1024 need privileges)")
        case EAFNOSUPPORT?: HTTPServerError("cannot listen on \(address): IPv6 is not available on this machine")
        case let code?: HTTPServerError("cannot listen on \(address): \(String(cString: strerror(code)))")
        case nil: HTTPServerError("libmicrohttpd could not start on \(address)"
            + (messages.isEmpty ? "" : ": " + messages.joined(separator: "; ")))
        }
    }

    fileprivate func log(_ message: String) {
        let duringStart = lock.withLock {
            startupLog?.append(message)
            return startupLog != nil
        }
        if !duringStart { errorLog?(message) }
    }
}

// MARK: - EventStream's connection

extension EventStream {
    static func suspend(_ connection: OpaquePointer) {
        MHD_suspend_connection(connection)
    }

    /// Safe from any thread: MHD only flags the connection and wakes its worker.
    static func resume(_ connection: OpaquePointer) {
        MHD_resume_connection(connection)
    }
}

// MARK: - C callbacks (capture-free; the context comes back through `cls`)

private enum Callbacks {
    static let access: MHD_AccessHandlerCallback = { cls, connection, url, method, _, upload, uploadSize, requestState in
        guard let cls, let connection, let url, let method, let uploadSize, let requestState else { return .NO }
        return Unmanaged<MicroHTTPDaemon>.fromOpaque(cls).takeUnretainedValue().access(
            connection: connection, url: url, method: method,
            upload: upload, uploadSize: uploadSize, requestState: requestState)
    }

    static let completed: MHD_RequestCompletedCallback = { _, _, requestState, _ in
        if let requestState { MicroHTTPDaemon.complete(requestState: requestState) }
    }

    static let log: MHD_LogCallback = { cls, format, arguments in
        guard let cls, let format, let arguments else { return }
        var message = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 512) { text in
            text[0] = 0
            _ = vsnprintf(text.baseAddress, text.count, format, arguments)
            return String(cString: text.baseAddress!)
        }
        while message.last?.isNewline == true { message.removeLast() }
        Unmanaged<MicroHTTPDaemon>.fromOpaque(cls).takeUnretainedValue().log(message)
    }

    /// Leaves the URL and arguments percent-encoded: the path stays raw (a `%2F` is not a `/`),
    /// and arguments are decoded in Swift, where a `%00` cannot cut a C string short.
    static let keepEscaped: flare_mhd_unescape_callback = { _, _, text in
        text.map { strlen($0) } ?? 0
    }

    static let collectHeader: MHD_KeyValueIteratorN = { cls, _, key, keySize, value, valueSize in
        guard let cls, let key else { return .YES }
        let values = cls.assumingMemoryBound(to: [String: String].self)
        let name = String(decoding: UnsafeRawBufferPointer(start: key, count: keySize), as: UTF8.self).lowercased()
        let text = value.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: valueSize), as: UTF8.self) } ?? ""
        values.pointee[name] = values.pointee[name].map { "\($0), \(text)" } ?? text
        return .YES
    }

    static let collectArgument: MHD_KeyValueIteratorN = { cls, _, key, keySize, value, valueSize in
        guard let cls, let key else { return .YES }
        let values = cls.assumingMemoryBound(to: [String: String].self)
        let name = percentDecoded(UnsafeRawBufferPointer(start: key, count: keySize))
        if values.pointee[name] == nil {
            values.pointee[name] = value.map { percentDecoded(UnsafeRawBufferPointer(start: $0, count: valueSize)) } ?? ""
        } else {
            // The first value is kept; that there was another is kept too, for the paths that refuse a doubled field.
            values.pointee[HTTPRequest.repeatedMark + name] = ""
        }
        return .YES
    }

    /// Returning 0 without suspending would make MHD call again at once (a busy loop), so an
    /// empty queue always suspends.
    static let streamRead: MHD_ContentReaderCallback = { cls, _, buffer, max in
        guard let cls, let buffer else { return -2 }
        let stream = Unmanaged<EventStream>.fromOpaque(cls).takeUnretainedValue()
        switch stream.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max)) {
        case .bytes(let count): return count
        case .suspended: return 0
        case .end: return -1  // MHD_CONTENT_READER_END_OF_STREAM: the terminating chunk follows
        case .abort: return -2  // MHD_CONTENT_READER_END_WITH_ERROR: the connection is dropped
        }
    }

    /// MHD is finished with the response: balance the retain taken when it was created.
    static let streamDone: MHD_ContentReaderFreeCallback = { cls in
        guard let cls else { return }
        Unmanaged<EventStream>.fromOpaque(cls).takeRetainedValue().detach()
    }
}

// MARK: - Addresses

/// The listening address as MHD_OPTION_SOCK_ADDR wants it.
private enum SocketAddress: CustomStringConvertible {
    case v4(sockaddr_in)
    case v6(sockaddr_in6)

    init?(host: String, port: Int) {
        var ipv4 = sockaddr_in()
        if inet_pton(AF_INET, host, &ipv4.sin_addr) == 1 {
            ipv4.sin_family = sa_family_t(AF_INET)
            ipv4.sin_port = UInt16(port).bigEndian
            self = .v4(ipv4)
            return
        }
        var ipv6 = sockaddr_in6()
        if inet_pton(AF_INET6, host, &ipv6.sin6_addr) == 1 {
            ipv6.sin6_family = sa_family_t(AF_INET6)
            ipv6.sin6_port = UInt16(port).bigEndian
            self = .v6(ipv6)
            return
        }
        return nil
    }

    var isIPv6: Bool {
        if case .v6 = self { true } else { false }
    }

    var isWildcard: Bool {
        switch self {
        case .v4(let address): address.sin_addr.s_addr == 0
        case .v6(let address): withUnsafeBytes(of: address.sin6_addr) { $0.allSatisfy { $0 == 0 } }
        }
    }

    var description: String {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN)) { text in
            switch self {
            case .v4(var address):
                inet_ntop(AF_INET, &address.sin_addr, text.baseAddress, socklen_t(text.count))
                return "\(String(cString: text.baseAddress!)):\(UInt16(bigEndian: address.sin_port))"
            case .v6(var address):
                inet_ntop(AF_INET6, &address.sin6_addr, text.baseAddress, socklen_t(text.count))
                return "[\(String(cString: text.baseAddress!))]:\(UInt16(bigEndian: address.sin6_port))"
            }
        }
    }

    func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        switch self {
        case .v4(var address):
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        case .v6(var address):
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
    }

    /// The errno of binding this address the way MHD does (SO_REUSEADDR), or nil if it binds.
    func bindError() -> Int32? {
        let family = isIPv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        if isIPv6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, socklen_t(MemoryLayout<Int32>.size)) }
        return withSockaddr { bind(fd, $0, $1) } == 0 ? nil : errno
    }
}
