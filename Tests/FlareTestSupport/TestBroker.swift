import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real Debian `mosquitto` on a free loopback port with its own config and data directory.
/// Tests talk to this, never to a mock. `stop()` (or deinit) terminates it.
public final class TestBroker: @unchecked Sendable {
    public let port: Int
    public let directory: URL
    public let configURL: URL
    private var process: Process?

    /// Starts mosquitto on 127.0.0.1 and waits until it accepts connections: with `allow_anonymous true`, or,
    /// given `auth`, as Flare deploys it (the flare_auth plugin, a password file and broker/acl.in).
    /// `extraConfig` lines are appended to the generated config file.
    public init(port: Int? = nil, directory: URL? = nil, persistence: Bool = true, auth: BrokerAuth? = nil, extraConfig: [String] = []) throws {
        self.port = try port ?? FreePort.next()
        self.directory = try directory ?? TempDirectory.make(prefix: "flare-broker")
        self.configURL = self.directory.appendingPathComponent("mosquitto.conf")
        var lines = [
            "listener \(self.port) 127.0.0.1",
            // Started as root, mosquitto would switch to the `mosquitto` user and could not write its persistence
            // file into a temp directory it does not own.
            "user \(TestBroker.currentUserName)",
            "persistence \(persistence)",
            "persistence_location \(self.directory.path)/",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
        ]
        if let auth {
            lines += try auth.configLines(in: self.directory)
        } else {
            lines.append("allow_anonymous true")
        }
        lines += extraConfig
        try (lines.joined(separator: "\n") + "\n").write(to: configURL, atomically: true, encoding: .utf8)
        try start()
    }

    /// (Re)starts the broker process on the same port, directory and config.
    public func start() throws {
        precondition(process == nil, "broker already running")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestBroker.mosquittoPath)
        process.arguments = ["-c", configURL.path]
        process.standardOutput = FileHandle.nullDevice
        // Appended across restarts; `log` reads it (the auth tests look for the plugin's refusals).
        let logURL = directory.appendingPathComponent("mosquitto.log")
        if !FileManager.default.fileExists(atPath: logURL.path) { _ = FileManager.default.createFile(atPath: logURL.path, contents: nil) }
        let log = try FileHandle(forWritingTo: logURL)
        log.seekToEndOfFile()
        process.standardError = log
        try process.runUnmasked()
        self.process = process
        guard FreePort.waitUntilAccepting(port: port, timeout: .seconds(10)) else {
            process.terminate()
            self.process = nil
            throw TestSupportError("mosquitto did not start listening on port \(port)")
        }
    }

    /// Stops the broker (SIGTERM, which lets it write its persistence file) and waits for it to exit.
    public func stop() {
        guard let process else { return }
        process.terminate(within: .seconds(30), what: "mosquitto")
        self.process = nil
    }

    /// Kills the broker without letting it save anything.
    public func kill() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    public var isRunning: Bool { process?.isRunning ?? false }

    /// What mosquitto wrote to stderr so far (errors, warnings, and the flare_auth plugin's notices).
    public var log: String { (try? String(contentsOf: directory.appendingPathComponent("mosquitto.log"), encoding: .utf8)) ?? "" }

    /// The broker's pid while it runs, e.g. to SIGSTOP it and simulate a broker that stopped answering.
    public var processIdentifier: Int32? { process?.processIdentifier }

    deinit { stop() }

    /// Test code runs on Swift-concurrency/Dispatch threads, which block almost every signal, and a spawned
    /// process inherits the spawning thread's mask (Foundation's Process does not reset it). mosquitto would
    /// then never receive SIGTERM and `stop()` would wait forever; so spawn with nothing blocked.
    public static func withNoSignalsBlocked<T>(_ body: () throws -> T) rethrows -> T {
        var none = sigset_t(), previous = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        return try body()
    }

    static var currentUserName: String {
        guard let entry = getpwuid(getuid()), let name = entry.pointee.pw_name else { return "root" }
        return String(cString: name)
    }

    public static var mosquittoPath: String {
        for candidate in ["/usr/sbin/mosquitto", "/usr/bin/mosquitto", "/usr/local/sbin/mosquitto"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        return "/usr/sbin/mosquitto"
    }
}

public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

public enum TempDirectory {
    /// A fresh, uniquely named directory under the system temp dir.
    public static func make(prefix: String = "flare-test") throws -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(12))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}

public enum FreePort {
    /// Asks the kernel for a free loopback TCP port (bind to port 0, read it back, close).
    public static func next() throws -> Int {
        let (fd, port) = try bound()
        close(fd)
        return port
    }

    /// A loopback port that refuses connections for as long as the returned socket stays open: bound, never
    /// listening, so no other test's server can take it meanwhile (a closed free port can be taken at once).
    public static func refusing() throws -> (socket: Int32, port: Int) { try bound() }

    private static func bound() throws -> (Int32, Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket() failed") }
        var keep = false
        defer { if !keep { close(fd) } }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw TestSupportError("bind() failed") }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        guard named == 0 else { throw TestSupportError("getsockname() failed") }
        keep = true
        return (fd, Int(UInt16(bigEndian: addr.sin_port)))
    }

    /// Polls until something accepts TCP connections on 127.0.0.1:`port`, or the timeout passes.
    public static func waitUntilAccepting(port: Int, timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if canConnect(port: port) { return true }
            usleep(20_000)
        }
        return false
    }

    public static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}

/// Polls `condition` until it is true or `timeout` passes. For waiting on real processes, not for timing assertions.
public func eventually(timeout: Duration = .seconds(20), _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        usleep(10_000)
    }
    return try condition()
}

extension Process {
    /// SIGTERM, then waits up to `deadline` for the process to exit. One that is still running then is stuck (a
    /// deadlock in its shutdown): its stacks go to standard error, where gdb is installed, and SIGKILL ends it, so
    /// that the test fails on what it checks next instead of hanging the run. True if it exited by itself.
    @discardableResult
    public func terminate(within deadline: Duration, what: String) -> Bool {
        guard isRunning else { return true }
        terminate()
        if eventually(timeout: deadline, { !isRunning }) {
            waitUntilExit()
            return true
        }
        let pid = processIdentifier
        var stacks = "gdb is not installed"
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/gdb"),
           let result = try? runCommand("/usr/bin/gdb", ["-p", String(pid), "-batch", "-nx", "-ex", "thread apply all bt 30"], timeout: .seconds(60)) {
            stacks = result.stdout
        }
        FileHandle.standardError.write(Data("\(what) (pid \(pid)) did not stop within \(deadline) of SIGTERM; killed. Its stacks:\n\(stacks)\n".utf8))
        Glibc.kill(pid, SIGKILL)
        waitUntilExit()
        return false
    }

    /// `run()` with no signals blocked in the child (see `TestBroker.withNoSignalsBlocked`).
    ///
    /// Foundation spawns after listing /proc/self/fd and closing each listed descriptor in the child; a descriptor
    /// that another test thread closes in between makes the spawn fail with EBADF. Nothing was started then, so
    /// try again (a few times) instead of failing the test.
    public func runUnmasked() throws {
        var attempt = 0
        while true {
            do {
                try TestBroker.withNoSignalsBlocked { try run() }
                return
            } catch let error as NSError where attempt < 5 && Self.isBadDescriptor(error) {
                attempt += 1
                usleep(10_000)
            }
        }
    }

    private static func isBadDescriptor(_ error: NSError) -> Bool {
        if error.domain == NSPOSIXErrorDomain && error.code == Int(EBADF) { return true }
        guard let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError else { return false }
        return isBadDescriptor(underlying)
    }
}
