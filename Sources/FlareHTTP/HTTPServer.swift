import FlareSystem
/// An HTTP/1.1 server on GNU libmicrohttpd: an epoll thread pool that calls `handler` once per
/// request, on one of its threads, after the whole body arrived.
public final class HTTPServer: @unchecked Sendable {
    // @unchecked: the daemon and the bound port are read and written only under `lock`.
    public struct Configuration: Sendable {
        /// An IP address: "127.0.0.1", "0.0.0.0", "::1", "::" ("::" also accepts IPv4).
        public var host: String
        /// 0 picks a free port; read it back from `HTTPServer.port`.
        public var port: Int
        public var threadPoolSize: Int
        /// Open connections, streams included (each needs a file descriptor: mind `ulimit -n`).
        public var connectionLimit: Int
        /// Idle timeout of a connection; a stream waiting for its next event does not time out.
        public var connectionTimeoutSeconds: Int
        /// Larger bodies are answered with 413 without calling the handler.
        public var maxBodyBytes: Int
        /// Per-connection memory for the request line and headers; overflow is answered by libmicrohttpd itself.
        public var maxHeaderBytes: Int
        /// Receives libmicrohttpd's own error messages after start (connection-level trouble such as
        /// the connection limit being reached). Nil drops them.
        public var errorLog: (@Sendable (String) -> Void)?

        public init(
            host: String,
            port: Int,
            threadPoolSize: Int = 2,
            connectionLimit: Int = 20_000,
            connectionTimeoutSeconds: Int = 30,
            maxBodyBytes: Int = 16 * 1024,
            maxHeaderBytes: Int = 16 * 1024,
            errorLog: (@Sendable (String) -> Void)? = nil
        ) {
            self.host = host
            self.port = port
            self.threadPoolSize = threadPoolSize
            self.connectionLimit = connectionLimit
            self.connectionTimeoutSeconds = connectionTimeoutSeconds
            self.maxBodyBytes = maxBodyBytes
            self.maxHeaderBytes = maxHeaderBytes
            self.errorLog = errorLog
        }
    }

    public let configuration: Configuration
    private let handler: @Sendable (HTTPRequest) -> HTTPResponse
    private let lock = ConditionLock()
    private var daemon: MicroHTTPDaemon?
    private var boundPort = 0

    public init(configuration: Configuration, handler: @escaping @Sendable (HTTPRequest) -> HTTPResponse) {
        self.configuration = configuration
        self.handler = handler
    }

    /// Binds and starts serving. Throws `HTTPServerError` (e.g. "address 127.0.0.1:8080 is already in use").
    /// Does nothing if already running.
    public func start() throws {
        try lock.withLock {
            guard daemon == nil else { return }
            let started = try MicroHTTPDaemon(configuration: configuration, handler: handler)
            daemon = started
            boundPort = started.port
        }
    }

    /// The bound port once started (the real one when configured with 0); 0 before.
    public var port: Int {
        lock.withLock { boundPort }
    }

    /// Stops accepting, finishes every open `EventStream` (their `onClose` runs), closes all
    /// connections and waits for libmicrohttpd's threads. Idempotent. Must not be called from the
    /// handler or an `onClose` callback that a server thread runs: it joins those threads.
    public func stop() {
        let running = lock.withLock {
            defer { daemon = nil }
            return daemon
        }
        running?.stop()
    }

    deinit {
        stop()
    }
}

public struct HTTPServerError: Error, CustomStringConvertible {
    public let message: String

    init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}
