import FlareCore
import FlareMQTT
import Foundation
import Synchronization

/// `flare track`: a simulated tracker. Publishes OwnTracks `location` messages along the built-in route over
/// MQTT, QoS 1 and retained, with the share's device token, and stops when the share's status says it ended.
struct Tracker {
    let shareID: ShareID
    let token: String
    let broker: MQTTURL
    let intervalSeconds: Double
    let speed: Double
    let count: Int?
    let quiet: Bool

    init(options: CommonOptions) throws {
        var id = options.flags["--share-id"]
        var token = options.flags["--token"]
        var mqttURL = options.flags["--mqtt-url"]
        if let file = options.flags["--share-file"] {
            guard let data = FileManager.default.contents(atPath: file),
                  let json = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
                throw CLIError("cannot read \(file): expected the JSON printed by `flare share create --json`")
            }
            id = id ?? json["share_id"] as? String
            token = token ?? json["device_token"] as? String
            mqttURL = mqttURL ?? json["mqtt_url"] as? String
        }
        guard let idText = id, let shareID = ShareID(idText) else { throw CLIError("track needs --share-file FILE or --share-id ID") }
        guard let token, !token.isEmpty else { throw CLIError("track needs the share's device token (--token or --share-file)") }
        let urlText = mqttURL ?? options.environment["FLARE_MQTT_URL"] ?? "mqtt://127.0.0.1:\(options.environment["FLARE_MQTT_PORT"] ?? "1884")"
        guard let broker = MQTTURL(urlText), !broker.tls else { throw CLIError("--mqtt-url must be mqtt://host:port (got \(urlText))") }
        self.shareID = shareID
        self.token = token
        self.broker = broker
        self.intervalSeconds = try options.double("--interval") ?? 2
        guard intervalSeconds >= 0.01 else { throw CLIError("--interval must be at least 0.01 seconds") }
        self.speed = try options.double("--speed") ?? 1.5
        self.count = try options.double("--count").map { Int($0) }
        self.quiet = options.switches.contains("--quiet")
    }

    func run() throws -> Int32 {
        var mqttOptions = MQTTClient.Options(clientID: "flare-track-\(shareID.rawValue.prefix(8))-\(UInt32.random(in: 0...UInt32.max))")
        mqttOptions.host = broker.host
        mqttOptions.port = broker.port
        mqttOptions.username = shareID.rawValue
        mqttOptions.password = token
        let client = try MQTTClient(options: mqttOptions)
        let ended = Mutex<String?>(nil)
        client.setMessageHandler { message in
            guard let status = try? JSONValue.parse(message.payload), status["state"]?.stringValue == "ended" else { return }
            ended.withLock { $0 = status["reason"]?.stringValue ?? "ended" }
        }
        client.setConnectionHandler { event in
            switch event {
            case .connected: log("connected to \(broker.host):\(broker.port)")
            case .disconnected(let reason): log("disconnected (\(reason)); reconnecting")
            case .refused(let reason): log("broker refused the connection: \(reason)")
            }
        }
        try client.subscribe(Topics.status(shareID), qos: 1)
        try client.connect()
        if !client.waitUntilConnected(timeout: .seconds(10)) {
            log("still not connected to \(broker.host):\(broker.port); will keep trying")
        }
        log("tracking share \(shareID) every \(intervalSeconds) s at \(speed) m/s; Ctrl-C stops")
        var sent = 0
        var battery = 87.0
        while count.map({ sent < $0 }) ?? true {
            if let reason = ended.withLock({ $0 }) {
                log("the share has ended (\(reason)); stopping after \(sent) fixes")
                client.disconnect()
                return 0
            }
            let metres = Double(sent) * speed * intervalSeconds
            let position = Route.position(afterMetres: metres)
            var fix = Fix(latitude: position.lat, longitude: position.lon, timestamp: Int64(Date().timeIntervalSince1970))
            fix.accuracy = 8
            fix.velocity = (speed * 3.6).rounded()
            fix.course = position.course
            fix.battery = Int(battery)
            fix.trackerID = "ft"
            battery = max(5, battery - 0.02)
            let started = ContinuousClock.now
            do {
                try client.publishAndWait(topic: Topics.location(shareID), payload: fix.ownTracksJSON, qos: 1, retain: true, timeout: .seconds(5))
                sent += 1
                if !quiet {
                    let elapsed = ContinuousClock.now - started
                    log("fix \(sent) acknowledged in \(elapsed.components.attoseconds / 1_000_000_000_000_000 + elapsed.components.seconds * 1000) ms")
                }
            } catch {
                log("fix not acknowledged (\(error)); will retry")
            }
            Thread.sleep(forTimeInterval: intervalSeconds)
        }
        client.disconnect()
        log("sent \(sent) fixes")
        return 0
    }
}

func log(_ message: String) {
    FileHandle.standardError.write(Data("flare track: \(message)\n".utf8))
}
