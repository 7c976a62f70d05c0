import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Three real NATS 2.15.1 nodes on loopback (JetStream, MQTT, the auth callout to flared), from broker/nats/node.conf.in,
/// the binary scripts/nats-server.sh fetched. Optionally HAProxy in front of the three MQTT listeners, as phones reach
/// the cluster. `stop()` (or deinit) ends every process it started.
public final class TestNATSCluster: @unchecked Sendable {
    public struct Node {
        public let name: String
        public let clientPort: Int, mqttPort: Int, httpPort: Int, clusterPort: Int
        public var url: String { "nats://127.0.0.1:\(clientPort)" }
    }

    public let directory: URL
    public private(set) var nodes: [Node]
    /// flared's own full-access login's (the callout checks it; the nodes never hold it), the callout's (`flare-auth`)
    /// and the system account's (`flare-sys`): three credentials, each with only its rights.
    public let password: String
    public let calloutPassword = UUID().uuidString
    public let systemPassword = UUID().uuidString
    /// HAProxy's MQTT port (round robin over the nodes' MQTT listeners), when started with `balancer: true`.
    public private(set) var balancerPort: Int?
    /// HAProxy's MQTT-over-TLS port for phones (broker/nats/haproxy-tls.cfg.in), with `balancer: true`, and the
    /// self-signed certificate (for localhost and 127.0.0.1) a client trusts it by.
    public private(set) var balancerTLSPort: Int?
    public var certificatePath: String { directory.appendingPathComponent("tls/cert.pem").path }
    private var processes: [Int: Process] = [:]
    private var balancer: Process?

    public var urls: [String] { nodes.map(\.url) }

    /// Starts the three nodes and waits until each is healthy (JetStream ready) and its MQTT listener accepts. A port
    /// chosen free can be taken before the node binds it (by an outgoing connection: free ports come from the ephemeral
    /// range): a cluster that does not come up is made again on other ports, up to three times.
    public init(issuer: String, password: String = UUID().uuidString, balancer withBalancer: Bool = false) throws {
        directory = try TempDirectory.make(prefix: "flare-nats")
        self.password = password
        nodes = []
        var attempt = 1
        while true {
            do {
                try startCluster(issuer: issuer, balancer: withBalancer)
                return
            } catch {
                stopProcesses()
                guard attempt < 3 else {
                    try? FileManager.default.removeItem(at: directory)
                    throw error
                }
                attempt += 1
            }
        }
    }

    private func startCluster(issuer: String, balancer withBalancer: Bool) throws {
        nodes = try (1...3).map { index in
            Node(name: "n\(index)", clientPort: try FreePort.next(), mqttPort: try FreePort.next(), httpPort: try FreePort.next(),
                 clusterPort: try FreePort.next())
        }
        for node in nodes { try? FileManager.default.removeItem(at: directory.appendingPathComponent("js-\(node.name)")) }
        let template = try String(contentsOf: AuthPlugin.repositoryRoot.appendingPathComponent("broker/nats/node.conf.in"), encoding: .utf8)
        let routes = nodes.map { "nats-route://127.0.0.1:\($0.clusterPort)" }.joined(separator: ", ")
        for (index, node) in nodes.enumerated() {
            let config = template
                .replacingOccurrences(of: "@NAME@", with: node.name)
                .replacingOccurrences(of: "@HOST@", with: "127.0.0.1")
                .replacingOccurrences(of: "@CLIENT_PORT@", with: String(node.clientPort))
                .replacingOccurrences(of: "@HTTP_PORT@", with: String(node.httpPort))
                .replacingOccurrences(of: "@CLUSTER_PORT@", with: String(node.clusterPort))
                .replacingOccurrences(of: "@MQTT_PORT@", with: String(node.mqttPort))
                .replacingOccurrences(of: "@STORE_DIR@", with: directory.appendingPathComponent("js-\(node.name)").path)
                .replacingOccurrences(of: "@ROUTES@", with: routes)
                .replacingOccurrences(of: "@CALLOUT_PASSWORD@", with: calloutPassword)
                .replacingOccurrences(of: "@SYSTEM_PASSWORD@", with: systemPassword)
                .replacingOccurrences(of: "@ISSUER@", with: issuer)
            try config.write(to: configURL(index), atomically: true, encoding: .utf8)
        }
        for index in nodes.indices { try start(index) }
        for index in nodes.indices { try waitHealthy(index, timeout: .seconds(30)) }
        if withBalancer { try startBalancer() }
    }

    deinit { stop() }

    public static var serverPath: String { AuthPlugin.repositoryRoot.appendingPathComponent(".build/nats/nats-server").path }

    /// The installed server, fetched by scripts/nats-server.sh when missing (a test run outside `make test`).
    public static func ensureServer() throws {
        if FileManager.default.isExecutableFile(atPath: serverPath) { return }
        let result = try runCommand("/bin/bash", [AuthPlugin.repositoryRoot.appendingPathComponent("scripts/nats-server.sh").path], timeout: .seconds(120))
        guard result.status == 0 else { throw TestSupportError("scripts/nats-server.sh failed:\n\(result.stderr)") }
    }

    private func configURL(_ index: Int) -> URL { directory.appendingPathComponent("\(nodes[index].name).conf") }

    /// (Re)starts node `index` on its own ports, configuration and store.
    public func start(_ index: Int) throws {
        precondition(processes[index] == nil, "node already running")
        try Self.ensureServer()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.serverPath)
        process.arguments = ["-c", configURL(index).path]
        process.standardOutput = FileHandle.nullDevice
        let logURL = directory.appendingPathComponent("\(nodes[index].name).log")
        if !FileManager.default.fileExists(atPath: logURL.path) { _ = FileManager.default.createFile(atPath: logURL.path, contents: nil) }
        let log = try FileHandle(forWritingTo: logURL)
        log.seekToEndOfFile()
        process.standardError = log
        try process.runUnmasked()
        processes[index] = process
    }

    /// Waits until node `index` says it is healthy (`/healthz`: JetStream current) and its MQTT port accepts.
    public func waitHealthy(_ index: Int, timeout: Duration) throws {
        let deadline = ContinuousClock.now + timeout
        let node = nodes[index]
        while ContinuousClock.now < deadline {
            if let result = try? runCommand("/usr/bin/curl", ["-sf", "-m", "2", "http://127.0.0.1:\(node.httpPort)/healthz"], timeout: .seconds(3)),
               result.status == 0, FreePort.waitUntilAccepting(port: node.mqttPort, timeout: .milliseconds(100)) {
                return
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        throw TestSupportError("NATS node \(node.name) was not healthy within \(timeout): \(log(index).suffix(2000))")
    }

    /// kill -9 of node `index`: nothing saved, nothing handed over.
    public func kill(_ index: Int) {
        guard let process = processes.removeValue(forKey: index) else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Every node killed, its store deleted, and started again: a cluster that lost everything it held (every retained
    /// message, every session, the MQTT layer's streams), as after losing all its disks.
    public func restartEmpty() throws {
        for index in nodes.indices { kill(index) }
        for node in nodes { try? FileManager.default.removeItem(at: directory.appendingPathComponent("js-\(node.name)")) }
        for index in nodes.indices { try start(index) }
        for index in nodes.indices { try waitHealthy(index, timeout: .seconds(30)) }
    }

    public func isRunning(_ index: Int) -> Bool { processes[index]?.isRunning ?? false }

    public func log(_ index: Int) -> String {
        (try? String(contentsOf: directory.appendingPathComponent("\(nodes[index].name).log"), encoding: .utf8)) ?? ""
    }

    /// Ends every node and the balancer, and removes the stores.
    public func stop() {
        stopProcesses()
        try? FileManager.default.removeItem(at: directory)
    }

    private func stopProcesses() {
        for index in processes.keys.sorted() {
            _ = processes[index]?.terminate(within: .seconds(10), what: "nats-server")
        }
        processes.removeAll()
        _ = balancer?.terminate(within: .seconds(5), what: "haproxy")
        balancer = nil
        balancerPort = nil
        balancerTLSPort = nil
    }

    private func startBalancer() throws {
        let port = try FreePort.next(), tlsPort = try FreePort.next()
        precondition(nodes.count == 3, "broker/nats/haproxy.cfg.in names three nodes")
        let root = AuthPlugin.repositoryRoot
        let template = try String(contentsOf: root.appendingPathComponent("broker/nats/haproxy.cfg.in"), encoding: .utf8)
        // The certificate as scripts/nats-cluster.sh makes it, and HAProxy's file of it and its key.
        let tls = directory.appendingPathComponent("tls")
        let made = try runCommand(root.appendingPathComponent("scripts/self-signed-cert.sh").path, [tls.path])
        guard made.status == 0 else { throw TestSupportError("no TLS certificate: \(made.stderr)") }
        let pem = tls.appendingPathComponent("haproxy.pem")
        try (try String(contentsOf: tls.appendingPathComponent("cert.pem"), encoding: .utf8)
             + String(contentsOf: tls.appendingPathComponent("key.pem"), encoding: .utf8)).write(to: pem, atomically: true, encoding: .utf8)
        let tlsFrontend = try String(contentsOf: root.appendingPathComponent("broker/nats/haproxy-tls.cfg.in"), encoding: .utf8)
            .replacingOccurrences(of: "@TLS_BIND@", with: "127.0.0.1")
            .replacingOccurrences(of: "@TLS_PORT@", with: String(tlsPort))
            .replacingOccurrences(of: "@TLS_PEM@", with: pem.path)
        let config = template
            .replacingOccurrences(of: "@MAXCONN@", with: "4096")
            .replacingOccurrences(of: "@PORT@", with: String(port))
            .replacingOccurrences(of: "@MQTT1@", with: String(nodes[0].mqttPort))
            .replacingOccurrences(of: "@MQTT2@", with: String(nodes[1].mqttPort))
            .replacingOccurrences(of: "@MQTT3@", with: String(nodes[2].mqttPort)) + tlsFrontend
        let url = directory.appendingPathComponent("haproxy.cfg")
        try config.write(to: url, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/haproxy")
        process.arguments = ["-db", "-f", url.path]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.runUnmasked()
        balancer = process
        guard FreePort.waitUntilAccepting(port: port, timeout: .seconds(10)), FreePort.waitUntilAccepting(port: tlsPort, timeout: .seconds(10)) else {
            throw TestSupportError("haproxy did not listen on \(port) and \(tlsPort)")
        }
        balancerPort = port
        balancerTLSPort = tlsPort
    }
}
