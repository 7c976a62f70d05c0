import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// A real PostgreSQL server of the tests' own, on a free loopback port in a temp directory (Debian's `postgresql`):
/// `initdb`, `pg_ctl start`, trust authentication for the user `flare`, fsync off (tests quote no durability).
/// `initdb` and `pg_ctl` refuse to run as root, so as root they run as the `postgres` user the package creates.
///
/// `TestPostgres.shared` is one server for the whole test process, started on first use and stopped at exit; each
/// test takes a database of its own from it (`makeDatabase()`). A test that restarts the server makes its own.
public final class TestPostgres: @unchecked Sendable {
    // @unchecked: the stored properties are set in init and only read afterwards.
    public let port: Int
    public let directory: URL
    private let binaries: String
    private let databaseCounter = Atomic<Int>(0)

    public static let shared: Result<TestPostgres, TestSupportError> = {
        do {
            let server = try TestPostgres()
            sharedDataDirectory.withLock { $0 = (server.binaries, server.directory.path) }
            atexit {
                guard let (binaries, directory) = TestPostgres.sharedDataDirectory.withLock({ $0 }) else { return }
                _ = try? TestPostgres.run(binaries + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
            }
            return .success(server)
        } catch let error as TestSupportError {
            return .failure(error)
        } catch {
            return .failure(TestSupportError("\(error)"))
        }
    }()
    private static let sharedDataDirectory = Mutex<(String, String)?>(nil)

    public init() throws {
        guard let version = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql"))?
            .compactMap(Int.init).max() else {
            throw TestSupportError("PostgreSQL is not installed (Debian's postgresql package; scripts/deps.sh installs it)")
        }
        binaries = "/usr/lib/postgresql/\(version)/bin"
        port = try FreePort.next()
        directory = try TempDirectory.make(prefix: "flare-pg")
        if getuid() == 0 {
            _ = try Self.run("/usr/bin/chown", ["postgres:postgres", directory.path], asPostgres: false)
        }
        let initdb = try Self.run(binaries + "/initdb", ["-D", directory.path + "/data", "-U", "flare", "--auth=trust", "--no-sync", "-E", "UTF8"])
        guard initdb.status == 0 else { throw TestSupportError("initdb failed: \(initdb.stderr)") }
        try start()
    }

    public func start() throws {
        let started = try Self.run(binaries + "/pg_ctl", [
            "-D", directory.path + "/data", "-l", directory.path + "/server.log", "-w", "-t", "60",
            "-o", "-p \(port) -k \(directory.path) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", "start",
        ])
        guard started.status == 0 else {
            throw TestSupportError("pg_ctl start failed: \(started.stderr)\n\(log)")
        }
    }

    /// `immediate` is a crash (no checkpoint); `fast` an orderly stop.
    public func stop(mode: String = "fast") {
        _ = try? Self.run(binaries + "/pg_ctl", ["-D", directory.path + "/data", "-m", mode, "-w", "stop"])
    }

    public var log: String { (try? String(contentsOfFile: directory.path + "/server.log", encoding: .utf8)) ?? "" }

    /// A fresh, empty database; its URL.
    public func makeDatabase() throws -> String {
        let name = "flare_\(getpid())_\(databaseCounter.add(1, ordering: .relaxed).newValue)"
        let created = try runCommand("/usr/bin/createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", "flare", name])
        guard created.status == 0 else { throw TestSupportError("createdb failed: \(created.stderr)") }
        return url(database: name)
    }

    public func url(database: String) -> String { "postgresql://flare@127.0.0.1:\(port)/\(database)" }

    /// Everything a database holds, as `pg_dump` writes it (what a backup of it would contain).
    public func dump(_ databaseURL: String) throws -> String {
        let result = try runCommand("/usr/bin/pg_dump", [databaseURL, "--no-owner"])
        guard result.status == 0 else { throw TestSupportError("pg_dump failed: \(result.stderr)") }
        return result.stdout
    }

    /// Runs one SQL statement with psql; its output (unaligned, tuples only).
    public func query(_ databaseURL: String, _ sql: String) throws -> String {
        let result = try runCommand("/usr/bin/psql", [databaseURL, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        guard result.status == 0 else { throw TestSupportError("psql failed: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    deinit { stop(mode: "immediate") }  // `shared` lives until exit, where `atexit` stops it

    @discardableResult
    private static func run(_ path: String, _ arguments: [String], asPostgres: Bool = true) throws -> CommandResult {
        if asPostgres && getuid() == 0 {
            return try spawnAndWait("/usr/sbin/runuser", ["-u", "postgres", "--", path] + arguments)
        }
        return try spawnAndWait(path, arguments)
    }

    /// posix_spawn and waitpid, without Foundation's Process: `pg_ctl start` leaves a server running that would
    /// inherit every descriptor the test process has open without close-on-exec, and Foundation then never sees the
    /// `pg_ctl` it started end. Here the child gets /dev/null, one output file, and nothing else (closefrom 3).
    private static func spawnAndWait(_ path: String, _ arguments: [String]) throws -> CommandResult {
        let output = try TempDirectory.make(prefix: "pg-cmd").appendingPathComponent("output").path
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // glibc 2.34+ has it, but its header hides it from Swift's Glibc module: look it up by name.
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
            throw TestSupportError("this C library has no posix_spawn_file_actions_addclosefrom_np")
        }
        _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
        guard spawned == 0 else { throw TestSupportError("cannot start \(path): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        let exited = status & 0x7f == 0
        return CommandResult(status: exited ? (status >> 8) & 0xff : 128 + (status & 0x7f), stdout: text, stderr: text)
    }
}
