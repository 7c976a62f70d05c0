import FlareCrypto
import FlareHTTP
import FlareTestSupport
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A webhook receiver on loopback, as an integrator runs one: it checks every delivery's Standard Webhooks signature
/// itself (HMAC-SHA256 over "id.timestamp.body", keyed with the base64 bytes after `whsec_`), and keeps what it got.
final class WebhookReceiver: @unchecked Sendable {
    struct Delivery: Sendable {
        let id: String
        let timestamp: Int64
        let signatureValid: Bool
        let body: [UInt8]
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:] }
        var type: String { json["type"] as? String ?? "" }
    }

    let port: Int
    private let secret: [UInt8]
    private let received = Mutex<[Delivery]>([])
    private var server: HTTPServer?

    init(port: Int, secret: String) throws {
        self.port = port
        self.secret = try #require(Data(base64Encoded: String(secret.dropFirst("whsec_".count)))).map { $0 }
    }

    func start() throws {
        let server = HTTPServer(configuration: .init(host: "127.0.0.1", port: port)) { [self] request in
            let id = request.header("webhook-id") ?? ""
            let timestamp = Int64(request.header("webhook-timestamp") ?? "") ?? 0
            let signed = Array("\(id).\(timestamp).".utf8) + request.body
            let expected = "v1," + Data(Crypto.hmacSHA256(key: secret, message: signed)).base64EncodedString()
            let valid = (request.header("webhook-signature") ?? "").split(separator: " ").contains { $0 == expected }
                && abs(Int64(Date().timeIntervalSince1970) - timestamp) <= 300
            let delivery = Delivery(id: id, timestamp: timestamp, signatureValid: valid, body: request.body)
            received.withLock { $0.append(delivery) }
            return HTTPResponse(status: valid ? 204 : 401)
        }
        try server.start()
        self.server = server
    }

    func stop() {
        server?.stop()
        server = nil
    }

    var deliveries: [Delivery] { received.withLock { $0 } }
    func types(of share: String) -> [String] { deliveries.filter { $0.json["share_id"] as? String == share }.map(\.type) }
    /// Each event once, as a receiver that drops repeats by `webhook-id` keeps them, in order of first arrival.
    func distinctTypes(of share: String) -> [String] {
        var seen = Set<String>()
        return deliveries.filter { $0.json["share_id"] as? String == share && seen.insert($0.id).inserted }.map(\.type)
    }

    deinit { stop() }
}

/// Lifecycle events on the MQTT events topic and to webhooks, from the built `flared`, against a real mosquitto and
/// a real HTTP receiver.
@Suite(.serialized) struct EventDeliveryTests {
    static let secret = "whsec_" + Data((0..<32).map { UInt8($0 * 7 & 0xFF) }).base64EncodedString()

    /// Every event of a share, with the same id, reaches the events topic and the signed webhook, directly: not through
    /// a proxy named in flared's environment.
    @Test func aSharesEventsReachTheTopicAndTheSignedWebhook() throws {
        let broker = try TestBroker()
        let receiver = try WebhookReceiver(port: try FreePort.next(), secret: Self.secret)
        try receiver.start()
        let proxy = try RecordingReceiver(status: 204)
        defer { proxy.stop() }
        let flared = try FlaredProcess(broker: broker, extraEnvironment: [
            "FLARE_WEBHOOK_URL": "http://127.0.0.1:\(receiver.port)/flare", "FLARE_WEBHOOK_SECRET": Self.secret,
            "http_proxy": "http://127.0.0.1:\(proxy.port)", "HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"])
        let topic = TopicListener(port: broker.port, topic: "flare/v1/shares/+/events")
        try topic.start()
        defer { topic.stop() }

        let created = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: flared.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        let view = try #require((created.json?["share_url"] as? String)?.split(separator: "/").last.map(String.init))
        let now = Int(Date().timeIntervalSince1970)
        _ = try MosquittoClients.publish(port: broker.port, topic: "flare/v1/shares/\(id)/location",
                                         payload: #"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(now),"batt":9,"bs":1}"#)
        #expect(eventually(timeout: .seconds(10)) { receiver.types(of: id).contains("tracker.battery_low") })
        let viewer = String(repeating: "ab", count: 16)
        #expect(try flared.request("GET", "/api/v1/view/\(view)?v=\(viewer)").status == 200)
        #expect(try flared.request("POST", "/api/v1/view/\(view)/answers", body: #"{"kind":"on_my_way","name":"Mum"}"#).status == 201)
        #expect(try flared.request("POST", "/api/v1/shares/\(id)/extend", body: #"{"duration_s":7200}"#, bearer: flared.ownerKey).status == 200)
        #expect(try flared.request("POST", "/api/v1/shares/\(id)/stop", bearer: flared.ownerKey).status == 200)

        let expected: Set = ["share.started", "tracker.battery_low", "share.opened", "share.answered", "share.extended", "share.ended"]
        #expect(eventually(timeout: .seconds(15)) { Set(receiver.types(of: id)) == expected }, "\(receiver.types(of: id))\n\(flared.log)")
        let deliveries = receiver.deliveries.filter { $0.json["share_id"] as? String == id }
        #expect(proxy.requests.isEmpty)
        #expect(deliveries.allSatisfy { $0.signatureValid })
        #expect(deliveries.count == expected.count, "\(deliveries.map(\.type))")  // nothing twice while nothing failed
        // Ordered as they happened; the answer says who and what; no token or coordinate anywhere.
        #expect(deliveries.first?.type == "share.started" && deliveries.last?.type == "share.ended")
        let answer = try #require(deliveries.first { $0.type == "share.answered" }?.json["answer"] as? [String: Any])
        #expect(answer["kind"] as? String == "on_my_way" && answer["name"] as? String == "Mum")
        #expect(deliveries.first { $0.type == "share.ended" }?.json["reason"] as? String == "stopped")
        for delivery in deliveries {
            let text = String(decoding: try JSONSerialization.data(withJSONObject: delivery.json), as: UTF8.self)
            #expect(!text.contains(view) && !text.contains("48.1") && !text.contains("token"), "\(text)")
            #expect(delivery.json["id"] as? String == delivery.id)
        }

        // The same events, with the same ids, on the topic.
        #expect(eventually(timeout: .seconds(10)) { topic.events(of: id).count == expected.count }, "\(topic.events(of: id))")
        #expect(Set(topic.events(of: id).compactMap { $0["id"] as? String }) == Set(deliveries.map(\.id)))
        // Counted once recorded in the store, a moment after the receiver has them.
        #expect(eventually(timeout: .seconds(5)) {
            let metrics = (try? flared.metrics()) ?? ""
            return metrics.contains(#"flare_event_deliveries_total{destination="server",result="delivered"} 6"#)
                && metrics.contains(#"flare_event_deliveries_total{destination="mqtt",result="delivered"} 6"#)
        }, "\((try? flared.metrics()) ?? "")")
    }

    /// The receiver is down: the event waits in the store's outbox through a SIGKILL of flared, and is delivered, with
    /// its id, once the receiver is back; a receiver that stays down never holds up ingest.
    @Test func anEventWaitsForADownReceiverThroughASigkill() throws {
        let broker = try TestBroker()
        let refusing = try FreePort.refusing()
        let receiver = try WebhookReceiver(port: refusing.port, secret: Self.secret)
        let flared = try FlaredProcess(broker: broker, extraEnvironment: [
            "FLARE_WEBHOOK_URL": "http://127.0.0.1:\(receiver.port)/flare", "FLARE_WEBHOOK_SECRET": Self.secret])
        let topic = TopicListener(port: broker.port, topic: "flare/v1/shares/+/events")
        try topic.start()
        defer { topic.stop() }

        let created = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: flared.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        #expect(eventually(timeout: .seconds(10)) { flared.log.contains("event share.started to server: connection refused; attempt 1") }, "\(flared.log)")
        // Ingest goes on meanwhile: fixes are stored and shown.
        let now = Int(Date().timeIntervalSince1970)
        for offset in 0..<5 {
            _ = try MosquittoClients.publish(port: broker.port, topic: "flare/v1/shares/\(id)/location",
                                             payload: #"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(now + offset)}"#)
        }
        #expect(eventually(timeout: .seconds(10)) { (try? flared.request("GET", "/api/v1/shares/\(id)", bearer: flared.ownerKey))?.json?["last"] != nil })
        let metrics = try flared.metrics()
        #expect(metrics.contains(#"flare_events_waiting{destination="server"}"#) || metrics.contains(#"result="failed""#), "\(metrics)")
        let onTopic = try #require(topic.events(of: id).first { $0["type"] as? String == "share.started" }?["id"] as? String)

        flared.kill()
        close(refusing.socket)
        try receiver.start()
        defer { receiver.stop() }
        try flared.start()
        #expect(eventually(timeout: .seconds(30)) { receiver.types(of: id).contains("share.started") }, "\(flared.log)")
        let started = try #require(receiver.deliveries.first { $0.type == "share.started" })
        #expect(started.id == onTopic && started.signatureValid)
        #expect(try flared.request("POST", "/api/v1/shares/\(id)/stop", bearer: flared.ownerKey).status == 200)
        #expect(eventually(timeout: .seconds(10)) { receiver.types(of: id) == ["share.started", "share.ended"] }, "\(receiver.types(of: id))")
    }

    /// Keys set their own webhooks: a limited key only to public addresses, an admin key anywhere; the secret is shown
    /// once and the key's shares' events arrive signed with it. Others' keys answer 404, bad bodies 400.
    @Test func keysSetTheirOwnWebhooksWithinTheAddressRule() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let limited = try flared.request("POST", "/api/v1/keys", body: #"{"label":"phone"}"#, bearer: flared.ownerKey)
        let limitedKey = try #require(limited.json?["key"] as? String)
        let limitedID = try #require((limited.json?["info"] as? [String: Any])?["id"] as? String)
        let other = try flared.request("POST", "/api/v1/keys", body: #"{"label":"other"}"#, bearer: flared.ownerKey)
        let otherID = try #require((other.json?["info"] as? [String: Any])?["id"] as? String)

        for inside in ["http://127.0.0.1:9/h", "http://localhost/h", "http://10.0.0.1/h", "http://169.254.169.254/latest", "http://[::1]/h",
                       "http://[::ffff:127.0.0.1]/h", "http://192.168.0.10/h"] {
            let refused = try flared.request("PUT", "/api/v1/keys/\(limitedID)/webhook", body: #"{"url":"\#(inside)"}"#, bearer: limitedKey)
            #expect(refused.status == 400 && refused.json?["error"] as? String == "webhook_not_public", "\(inside): \(refused.status) \(refused.text)")
        }
        for bad in [#"{"url":"ftp://example.org/"}"#, #"{"url":"https://u:p@example.org/"}"#, #"{"url":5}"#, #"{}"#, "not json", #"{"url":"https://example.org/","x":1}"#] {
            let refused = try flared.request("PUT", "/api/v1/keys/\(limitedID)/webhook", body: bad, bearer: limitedKey)
            #expect(refused.status == 400, "\(bad): \(refused.text)")
        }
        #expect(try flared.request("PUT", "/api/v1/keys/\(otherID)/webhook", body: #"{"url":"https://example.org/"}"#, bearer: limitedKey).status == 404)
        #expect(try flared.request("DELETE", "/api/v1/keys/\(otherID)/webhook", bearer: limitedKey).status == 404)
        #expect(try flared.request("PUT", "/api/v1/keys/\(limitedID)/webhook", body: #"{"url":"https://example.org/"}"#).status == 401)
        #expect(try flared.request("GET", "/api/v1/keys/\(limitedID)/webhook", bearer: limitedKey).status == 405)

        // The admin key points the limited key's webhook at a receiver on loopback (the operator's own network).
        let receiverPort = try FreePort.next()
        let set = try flared.request("PUT", "/api/v1/keys/\(limitedID)/webhook", body: #"{"url":"http://127.0.0.1:\#(receiverPort)/k"}"#,
                                     bearer: flared.ownerKey)
        // Refused all the same: the rule follows the key whose shares' events go there, whoever sets it.
        #expect(set.status == 400, "\(set.text)")
        let adminInfo = try #require((try flared.request("GET", "/api/v1/keys", bearer: flared.ownerKey).json?["keys"] as? [[String: Any]])?.first)
        let adminID = try #require(adminInfo["id"] as? String)
        let adminSet = try flared.request("PUT", "/api/v1/keys/\(adminID)/webhook", body: #"{"url":"http://127.0.0.1:\#(receiverPort)/k"}"#,
                                          bearer: flared.ownerKey)
        #expect(adminSet.status == 200, "\(adminSet.text)")
        let secret = try #require(adminSet.json?["secret"] as? String)
        #expect(secret.hasPrefix("whsec_") && adminSet.json?["previous_secret_valid_s"] == nil)
        #expect(!flared.log.contains(secret))
        let listed = try #require((try flared.request("GET", "/api/v1/keys", bearer: flared.ownerKey).json?["keys"] as? [[String: Any]])?.first)
        #expect(listed["webhook_url"] as? String == "http://127.0.0.1:\(receiverPort)/k")
        #expect(!(try flared.request("GET", "/api/v1/keys", bearer: flared.ownerKey).text.contains(secret)))

        let receiver = try WebhookReceiver(port: receiverPort, secret: secret)
        try receiver.start()
        defer { receiver.stop() }
        let created = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: flared.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        #expect(eventually(timeout: .seconds(10)) { receiver.types(of: id) == ["share.started"] })
        #expect(receiver.deliveries.allSatisfy { $0.signatureValid })
        // A share of the limited key (no webhook) goes to nobody's webhook.
        let mine = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: limitedKey)
        let mineID = try #require(mine.json?["share_id"] as? String)
        usleep(1_500_000)
        #expect(receiver.types(of: mineID).isEmpty)

        // Set again: a new secret, the old one still signing beside it; removed: nothing more.
        let again = try flared.request("PUT", "/api/v1/keys/\(adminID)/webhook", body: #"{"url":"http://127.0.0.1:\#(receiverPort)/k"}"#,
                                       bearer: flared.ownerKey)
        #expect(again.status == 200 && again.json?["previous_secret_valid_s"] as? Int == 86_400 && again.json?["secret"] as? String != secret)
        #expect(try flared.request("POST", "/api/v1/shares/\(id)/stop", bearer: flared.ownerKey).status == 200)
        #expect(eventually(timeout: .seconds(10)) { receiver.types(of: id) == ["share.started", "share.ended"] })
        #expect(receiver.deliveries.allSatisfy { $0.signatureValid })  // the old secret's signature is among them
        // The same from the command line: set (the secret printed once), then removed.
        let cli = try flared.flare(["keys", "webhook", adminID, "http://127.0.0.1:\(receiverPort)/cli"])
        #expect(cli.status == 0 && cli.stdout.contains("signing secret (shown once") && cli.stdout.contains("whsec_"), "\(cli.stdout)\(cli.stderr)")
        #expect(cli.stdout.contains("the previous secret keeps signing too for 24 h"))
        let refused = try flared.flare(["keys", "webhook", adminID, "ftp://example.org/"])
        #expect(refused.status != 0 && refused.stderr.contains("http:// or https://"), "\(refused.stderr)")
        let made = try flared.flare(["webhook-secret"])
        #expect(made.status == 0 && made.stdout.hasPrefix("whsec_") && Data(base64Encoded: String(made.stdout.dropFirst(6)).trimmingCharacters(in: .whitespacesAndNewlines))?.count == 32)
        #expect(try flared.request("DELETE", "/api/v1/keys/\(adminID)/webhook", bearer: flared.ownerKey).status == 204)
        let last = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: flared.ownerKey)
        let lastID = try #require(last.json?["share_id"] as? String)
        usleep(1_500_000)
        #expect(receiver.types(of: lastID).isEmpty)
    }
}

/// `mosquitto_sub` on a topic filter at QoS 1, keeping each JSON message.
final class TopicListener: @unchecked Sendable {
    private let process = Process()
    private let output = Pipe()
    private let text = Mutex("")

    init(port: Int, topic: String) {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_sub")
        process.arguments = ["-h", "127.0.0.1", "-p", String(port), "-t", topic, "-q", "1", "-W", "120"]
        process.standardOutput = output
    }

    func start() throws {
        output.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let chunk = String(decoding: handle.availableData, as: UTF8.self)
            self?.text.withLock { $0 += chunk }
        }
        try process.runUnmasked()
        usleep(300_000)  // subscribed before the test publishes
    }

    func events(of share: String) -> [[String: Any]] {
        text.withLock { $0 }.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }.filter { $0["share_id"] as? String == share }
    }

    func stop() {
        output.fileHandleForReading.readabilityHandler = nil
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
