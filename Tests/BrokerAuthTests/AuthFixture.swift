import FlareCore
import FlareCrypto
import FlareMQTT
import FlareTestSupport
import Foundation
import Synchronization
import Testing
import FlareCodec

/// A broker with the flare_auth plugin and the flared service account, and a key to mint share tokens with.
struct AuthFixture {
    let directory: URL
    let key: [UInt8]
    let keyPath: String
    let flaredPassword = Base64URL.encode(Crypto.randomBytes(24))
    let adminPassword = Base64URL.encode(Crypto.randomBytes(24))
    let broker: TestBroker

    /// `directory` is laid out like FLARE_DATA_DIR after scripts/broker.sh ran: token.key and
    /// broker/flared.password, so a `flared` started on it finds both by default.
    init(fixRate: String? = nil) throws {
        directory = try TempDirectory.make(prefix: "flare-auth")
        key = Crypto.randomBytes(32)
        keyPath = directory.appendingPathComponent("token.key").path
        try (Base64URL.encode(key) + "\n").write(toFile: keyPath, atomically: true, encoding: .utf8)
        let brokerFiles = directory.appendingPathComponent("broker")
        try FileManager.default.createDirectory(at: brokerFiles, withIntermediateDirectories: true)
        try (flaredPassword + "\n").write(to: brokerFiles.appendingPathComponent("flared.password"), atomically: true, encoding: .utf8)
        broker = try TestBroker(auth: BrokerAuth(tokenKeyPath: keyPath,
                                                 serviceAccounts: ["flared": flaredPassword, "admin": adminPassword], fixRate: fixRate))
    }

    func token(_ share: ShareID, _ role: ShareToken.Role, expiresIn seconds: Int64 = 3600) -> String {
        let now = Int64(Date().timeIntervalSince1970)
        return ShareToken(shareID: share, role: role, issuedAt: now, expiresAt: now + seconds).signed(with: key)
    }

    /// A client as Flare's own connect: with the client id its token may use (the plugin binds them), unless told.
    func client(_ username: String?, _ password: String?, clientID: String? = nil, cleanSession: Bool = true) throws -> Client {
        try Client(port: broker.port, username: username, password: password,
                   clientID: clientID ?? allowedClientID(username: username, password: password), cleanSession: cleanSession)
    }

    /// A watcher's id for a watch token (`flare-<share>-watch-<suffix>`), the phone's (`flare-<share>-<suffix>`) for
    /// any other password given with a share id, and an id of no share for the service accounts.
    func allowedClientID(username: String?, password: String?) -> String {
        let suffix = UUID().uuidString.prefix(12)
        guard let username, ShareID(username) != nil else { return "auth-test-\(suffix)" }
        if let password, let token = try? ShareToken.verify(password, key: key, nowSeconds: Int64.min), token.role == .watch {
            return "flare-\(username)-watch-\(suffix)"
        }
        return "flare-\(username)-\(suffix)"
    }

    func flared(clientID: String? = nil) throws -> Client { try client("flared", flaredPassword, clientID: clientID) }

    /// A device token as a release before exact topics signed it: publish `…/location/#` (it stays valid, with those
    /// rules, until its `exp`).
    func legacyDeviceToken(_ share: ShareID, expiresAt: Int64) -> String {
        let now = Int64(Date().timeIntervalSince1970)
        let claims = #"{"sub":"\#(share.rawValue)","role":"device","iat":\#(now),"exp":\#(expiresAt),"acl":["#
            + #"{"permission":"deny","action":"publish","topic":"\#(Topics.command(share))"},"#
            + #"{"permission":"allow","action":"publish","topic":"\#(Topics.location(share))/#"},"#
            + #"{"permission":"allow","action":"subscribe","topic":"\#(Topics.command(share))"},"#
            + #"{"permission":"allow","action":"subscribe","topic":"\#(Topics.status(share))"}]}"#
        let input = Base64URL.encode(#"{"alg":"HS256","typ":"JWT"}"#) + "." + Base64URL.encode(Array(claims.utf8))
        return input + "." + Base64URL.encode(Crypto.hmacSHA256(key: key, message: Array(input.utf8)))
    }

    /// The retained messages the broker holds below `filter`, as a new subscriber gets them (payload not empty).
    func retained(below filter: String) throws -> [String: Int] {
        let reader = try flared(clientID: "retained-reader-\(UUID().uuidString.prefix(8))")
        guard reader.waitForOutcome() == .connected, try reader.subscribe(filter) else { throw TestSupportError("cannot read retained messages") }
        // A marker after the subscription: once it is back, every retained message has arrived before it.
        let marker = "flare/v1/test-marker/\(UUID().uuidString)"
        guard try reader.subscribe(marker), try reader.publish(marker, "m") == nil,
              eventually(timeout: .seconds(10), { reader.messages.contains { $0.topic == marker } }) else {
            throw TestSupportError("the marker did not come back")
        }
        var found: [String: Int] = [:]
        for message in reader.messages where message.retain && !message.payload.isEmpty && message.topic != marker {
            found[message.topic] = message.payload.count
        }
        return found
    }
}

extension FlaredProcess {
    /// A share made with the owner key (`body`: the create request; ten minutes by default): its id and the creation's
    /// answer (strings only).
    func createShare(_ body: String = #"{"duration_s":600}"#, sourceLocation: SourceLocation = #_sourceLocation) throws -> (id: ShareID, answer: [String: String]) {
        let created = try request("POST", "/api/v1/shares", body: body, bearer: ownerKey)
        #expect(created.status == 201, "\(created.text)", sourceLocation: sourceLocation)
        let answer = try #require(created.json as? [String: String], sourceLocation: sourceLocation)
        return (try #require(answer["share_id"].flatMap { ShareID($0) }, sourceLocation: sourceLocation), answer)
    }

    /// A watch token for the share, made with the owner key.
    func watchToken(_ id: ShareID, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let issued = try request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens", bearer: ownerKey)
        #expect(issued.status == 201, "\(issued.text)", sourceLocation: sourceLocation)
        return try #require(issued.json?["watch_token"] as? String, sourceLocation: sourceLocation)
    }
}

/// An MQTT client (the real libmosquitto one; v5 unless told) that records its connection events and messages.
final class Client: Sendable {
    enum Outcome: Equatable { case connected, refused, pending }

    let mqtt: MQTTClient
    /// A class around the Mutex, so the handlers can hold it without holding the client.
    private final class Recorder: Sendable {
        let state = Mutex<(events: [MQTTConnectionEvent], messages: [MQTTMessage])>(([], []))
    }
    private let recorder = Recorder()

    init(port: Int, username: String?, password: String?, clientID: String, cleanSession: Bool = true,
         protocolVersion: MQTTClient.ProtocolVersion = .v5) throws {
        var options = MQTTClient.Options(clientID: clientID)
        options.protocolVersion = protocolVersion
        options.cleanSession = cleanSession
        options.port = port
        options.username = username
        options.password = password
        options.reconnectDelay = (1, 1)
        mqtt = try MQTTClient(options: options)
        mqtt.setConnectionHandler { [recorder] event in recorder.state.withLock { $0.events.append(event) } }
        mqtt.setMessageHandler { [recorder] message in recorder.state.withLock { $0.messages.append(message) } }
        try mqtt.connect()
    }

    deinit { mqtt.disconnect() }

    var events: [MQTTConnectionEvent] { recorder.state.withLock { $0.events } }
    var messages: [MQTTMessage] { recorder.state.withLock { $0.messages } }

    var outcome: Outcome {
        for event in events {
            switch event {
            case .connected: return .connected
            case .refused: return .refused
            case .disconnected: continue
            }
        }
        return .pending
    }

    /// Waits for the first CONNACK (either way).
    func waitForOutcome() -> Outcome {
        _ = eventually(timeout: .seconds(10)) { outcome != .pending }
        return outcome
    }

    var disconnectCount: Int {
        events.filter { if case .disconnected = $0 { return true } else { return false } }.count
    }

    var refusedCount: Int {
        events.filter { if case .refused = $0 { return true } else { return false } }.count
    }

    /// QoS 1 publish; nil when the broker acknowledged it as accepted, else the MQTT v5 reason code (MQTT 3.1.1 has none:
    /// a refused publish is acknowledged there too).
    func publish(_ topic: String, _ payload: String, retain: Bool = false, userProperties: [MQTTUserProperty] = []) throws -> Int32? {
        do {
            try mqtt.publishAndWait(topic: topic, payload: Array(payload.utf8), qos: 1, retain: retain, userProperties: userProperties,
                                    timeout: .seconds(10))
            return nil
        } catch let error as MQTTError where error.code >= 0x80 {
            return error.code
        }
    }

    /// True if the broker granted the subscription, false if it refused it.
    func subscribe(_ filter: String) throws -> Bool {
        try mqtt.subscribe(filter, qos: 1)
        do {
            guard try mqtt.waitUntilSubscribed(timeout: .seconds(10)) else { throw TestSupportError("no SUBACK for \(filter)") }
            return true
        } catch let error as MQTTError where error.code >= 0x80 {
            return false
        }
    }
}

let notAuthorized: Int32 = 0x87
