import FlareCore
import FlareCrypto
import FlareMQTT
import FlareTestSupport
import Foundation
import Testing

import FlareCodec
#if canImport(Glibc)
import Glibc
#endif

/// scripts/broker.sh as `make run` uses it: it makes the token key, the flared password and the hashed password
/// file with owner-only permissions, a self-signed certificate, and runs mosquitto with the plugin on the plain,
/// TLS and WebSockets listeners.
@Suite struct BrokerScriptTests {
    @Test func theBrokerScriptMakesItsSecretsAndServesEveryListenerWithTokens() throws {
        let data = try TempDirectory.make(prefix: "flare-broker-script")
        let port = try FreePort.next(), tlsPort = try FreePort.next(), wsPort = try FreePort.next()
        let process = Process()
        process.executableURL = AuthPlugin.repositoryRoot.appendingPathComponent("scripts/broker.sh")
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("FLARE_") }
        environment["FLARE_DATA_DIR"] = data.path
        environment["FLARE_MQTT_PORT"] = String(port)
        environment["FLARE_MQTT_TLS_PORT"] = String(tlsPort)
        environment["FLARE_MQTT_WS_PORT"] = String(wsPort)
        environment["FLARE_BROKER_PLUGIN"] = try AuthPlugin.path()
        process.environment = environment
        let log = data.appendingPathComponent("script.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: log)
        process.standardOutput = FileHandle.nullDevice
        try process.runUnmasked()
        defer { process.terminate(within: .seconds(30), what: "scripts/broker.sh") }  // it exec'd mosquitto: SIGTERM to the broker
        let listening = FreePort.waitUntilAccepting(port: port, timeout: .seconds(20))
            && FreePort.waitUntilAccepting(port: tlsPort, timeout: .seconds(5))
            && FreePort.waitUntilAccepting(port: wsPort, timeout: .seconds(5))
        let scriptLog = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        try #require(listening, "broker.sh did not start: \(scriptLog)")

        for file in ["token.key", "broker/flared.password", "broker/passwd", "broker/tls/key.pem"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: data.appendingPathComponent(file).path)
            #expect((attributes[.posixPermissions] as? Int) == 0o600, "\(file) is readable by others")
        }
        let password = try String(contentsOf: data.appendingPathComponent("broker/flared.password"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!(try String(contentsOf: data.appendingPathComponent("broker/passwd"), encoding: .utf8)).contains(password))
        let keyText = try String(contentsOf: data.appendingPathComponent("token.key"), encoding: .utf8)
        let key = try #require(Base64URL.decode(keyText.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(key.count == 32)

        // Plain listener: anonymous refused, flared's generated password accepted.
        #expect(try Client(port: port, username: nil, password: nil, clientID: "script-test-anonymous").waitForOutcome() == .refused)
        #expect(try Client(port: port, username: "flared", password: password, clientID: "flared").waitForOutcome() == .connected)

        // TLS listener with the self-signed certificate: a device token signed with the script's key works, a
        // forged one does not.
        let id = ShareID.generate()
        let now = Int64(Date().timeIntervalSince1970)
        let token = ShareToken(shareID: id, role: .device, issuedAt: now, expiresAt: now + 600).signed(with: key)
        let forged = ShareToken(shareID: id, role: .device, issuedAt: now, expiresAt: now + 600).signed(with: Crypto.randomBytes(32))
        let cafile = data.appendingPathComponent("broker/tls/cert.pem").path
        func publishOverTLS(_ password: String) throws -> CommandResult {
            try runCommand("/usr/bin/mosquitto_pub", ["-V", "5", "-h", "localhost", "-p", String(tlsPort), "--cafile", cafile,
                                                      "-u", id.rawValue, "-P", password, "-i", ClientIDs.device(id), "-t", Topics.location(id), "-q", "1", "-m", "{}"])
        }
        #expect(try publishOverTLS(token).status == 0)
        #expect(try publishOverTLS(forged).status != 0)

        // WebSockets listener: answers the MQTT-over-WebSockets upgrade.
        let connection = try Connection(port: wsPort, timeoutSeconds: 5)
        try connection.send(Array(("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n").utf8))
        let answer = String(decoding: connection.receive() ?? [], as: UTF8.self)
        #expect(answer.hasPrefix("HTTP/1.1 101"))
    }
}
