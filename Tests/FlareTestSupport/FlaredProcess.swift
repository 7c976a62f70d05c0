import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The built `flared` and `flare` binaries, next to the test bundle in .build/<config>/.
public enum BuiltProducts {
    public static func path(_ name: String) throws -> String {
        var candidates: [String] = []
        let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = testBinary.deletingLastPathComponent()
        for _ in 0..<4 {
            candidates.append(directory.appendingPathComponent(name).path)
            directory = directory.deletingLastPathComponent()
        }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent(".build/debug/\(name)").path)
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        throw TestSupportError("\(name) is not built; run `swift build` first (looked in \(candidates))")
    }
}

/// A running `flared` with its own data directory and ports, connected to a test broker.
public final class FlaredProcess: @unchecked Sendable {
    public let httpPort: Int
    /// The metrics listener's port (FLARE_METRICS_ADDR): /metrics is not on the public one.
    public let metricsPort: Int
    public let dataDirectory: URL
    public let brokerPort: Int
    public let environment: [String: String]
    private var process: Process?
    private let logURL: URL

    public convenience init(broker: TestBroker, dataDirectory: URL? = nil, extraEnvironment: [String: String] = [:]) throws {
        try self.init(brokerPort: broker.port, dataDirectory: dataDirectory, extraEnvironment: extraEnvironment)
    }

    /// Against any broker's MQTT port (a NATS cluster's balancer, say).
    public init(brokerPort: Int, dataDirectory: URL? = nil, extraEnvironment: [String: String] = [:]) throws {
        httpPort = try FreePort.next()
        metricsPort = try FreePort.next()
        self.brokerPort = brokerPort
        self.dataDirectory = try dataDirectory ?? TempDirectory.make(prefix: "flared")
        logURL = self.dataDirectory.appendingPathComponent("flared-\(httpPort).log")
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("FLARE_") }
        environment["FLARE_DATA_DIR"] = self.dataDirectory.path
        environment["FLARE_HTTP_ADDR"] = "127.0.0.1:\(httpPort)"
        environment["FLARE_METRICS_ADDR"] = "127.0.0.1:\(metricsPort)"
        environment["FLARE_MQTT_PORT"] = String(brokerPort)
        environment["FLARE_MQTT_CLIENT_ID"] = "flared-\(self.dataDirectory.lastPathComponent)"
        environment["FLARE_LOG_LEVEL"] = "debug"
        environment.merge(extraEnvironment) { $1 }
        self.environment = environment
        try start()
    }

    public func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try BuiltProducts.path("flared"))
        process.environment = environment
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let log = try FileHandle(forWritingTo: logURL)
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.runUnmasked()
        self.process = process
        // Up = serving and connected to the broker. A test may start it on purpose with its store reported as
        // short of space, so the status code alone is not the test.
        let up = eventually(timeout: .seconds(15)) {
            guard process.isRunning else { return true }
            return (try? RawHTTP.request("GET", port: httpPort, path: "/healthz"))?.json?["mqtt"] as? String == "connected"
        }
        guard up, process.isRunning else {
            throw TestSupportError("flared did not come up; log:\n\(log_)")
        }
    }

    private var log_: String { (try? String(contentsOf: logURL, encoding: .utf8)) ?? "" }
    public var log: String { log_ }

    public var ownerKey: String {
        ((try? String(contentsOf: dataDirectory.appendingPathComponent("owner.key"), encoding: .utf8)) ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// SIGTERM and wait: the orderly drain. A flared that has not stopped after 30 s is stuck: it is killed (with
    /// its stacks on standard error) and the status says SIGKILL.
    @discardableResult
    public func stop() -> Int32 {
        guard let process else { return 0 }
        process.terminate(within: .seconds(30), what: "flared")
        self.process = nil
        return process.terminationStatus
    }

    /// The process while it runs, e.g. to send it signals.
    public var processIdentifier: Int32? { process?.processIdentifier }

    /// Waits up to `timeout` for the process to exit by itself; its status, or nil if it still runs.
    public func waitForExit(timeout: Duration) -> Int32? {
        guard let process else { return nil }
        guard eventually(timeout: timeout, { !process.isRunning }) else { return nil }
        process.waitUntilExit()
        self.process = nil
        return process.terminationStatus
    }

    public func kill() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    deinit { stop() }

    /// Runs the `flare` CLI against this instance.
    public func flare(_ arguments: [String]) throws -> CommandResult {
        try runCommand(try BuiltProducts.path("flare"), arguments, environment: environment)
    }

    /// `GET /metrics` from the metrics listener, as text.
    public func metrics() throws -> String {
        try RawHTTP.request("GET", port: metricsPort, path: "/metrics").text
    }

    /// One unlabelled sample of `/metrics` (`name value`): nil when it is not there or cannot be read.
    public func metric(_ name: String) -> Double? {
        guard let text = try? metrics() else { return nil }
        return text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
    }

    public func request(_ method: String, _ path: String, body: String = "", bearer: String? = nil) throws -> RawHTTPResponse {
        var headers: [String: String] = [:]
        if let bearer { headers["Authorization"] = "Bearer \(bearer)" }
        if !body.isEmpty { headers["Content-Type"] = "application/json" }
        return try RawHTTP.request(method, port: httpPort, path: path, headers: headers, body: Array(body.utf8))
    }
}

public struct CommandResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// Runs a program to completion and captures its output.
public func runCommand(_ path: String, _ arguments: [String], environment: [String: String]? = nil, timeout: Duration = .seconds(30)) throws -> CommandResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let directory = try TempDirectory.make(prefix: "cmd")
    let outURL = directory.appendingPathComponent("out"), errURL = directory.appendingPathComponent("err")
    _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
    _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
    process.standardOutput = try FileHandle(forWritingTo: outURL)
    process.standardError = try FileHandle(forWritingTo: errURL)
    process.standardInput = FileHandle.nullDevice
    try process.runUnmasked()
    let deadline = ContinuousClock.now + timeout
    while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
    if process.isRunning {
        // SIGKILL: a child started from a test thread may inherit a mask that blocks SIGTERM.
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        throw TestSupportError("\(path) \(arguments) did not finish within \(timeout)")
    }
    process.waitUntilExit()
    let out = (try? String(contentsOf: outURL, encoding: .utf8)) ?? ""
    let err = (try? String(contentsOf: errURL, encoding: .utf8)) ?? ""
    try? FileManager.default.removeItem(at: directory)
    return CommandResult(status: process.terminationStatus, stdout: out, stderr: err)
}

/// Debian's mosquitto_pub against a test broker (as a device or an integrator would use it).
public enum MosquittoClients {
    /// With a `username` (a share id), the client id is one of the share's device ids, as the broker's plugin requires.
    public static func publish(port: Int, topic: String, payload: String, retain: Bool = true, username: String? = nil, password: String? = nil) throws -> CommandResult {
        var arguments = ["-h", "127.0.0.1", "-p", String(port), "-t", topic, "-q", "1", "-m", payload]
        if retain { arguments.append("-r") }
        if let username { arguments += ["-u", username, "-i", "flare-\(username)-cli-\(UInt32.random(in: 0...UInt32.max))"] }
        if let password { arguments += ["-P", password] }
        return try runCommand("/usr/bin/mosquitto_pub", arguments)
    }
}

/// Another process holding an exclusive lock on a SQLite file (Python's sqlite3), so that every write to it fails
/// after SQLite's busy timeout: a store that cannot be written, with nothing faked. Released by `release()` or deinit.
public final class SQLiteLock {
    private let process = Process()
    private let input = Pipe()

    public init(path: String) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1], isolation_level=None)
            db.execute("BEGIN EXCLUSIVE")
            print("locked", flush=True)
            sys.stdin.read()  # holds the lock until the test closes this pipe
            """, path]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = input
        try process.runUnmasked()
        let said = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        guard said.hasPrefix("locked") else {
            release()
            throw TestSupportError("could not lock \(path): \(said)")
        }
    }

    public func release() {
        try? input.fileHandleForWriting.close()
        if process.isRunning { process.waitUntilExit() }
    }

    deinit { release() }
}
