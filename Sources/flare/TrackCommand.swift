import FlareAPI
import FlareCore
import FlareMQTT
import FlareSystem
import FlareWire
import FlareSodium
import Foundation
import Synchronization
import FlareCodec

/// `flare track`: a tracker for a share. Takes positions from a source — the built-in route (a simulation),
/// a GPX file replay, or a live gpsd receiver — and publishes each as an OwnTracks `location` message over MQTT,
/// QoS 1 and retained, with the share's device token. It stops when the share's status says it ended.
///
/// Delivery: fixes wait in an ordered send queue until Flare says they are stored. Each carries its place in this run's
/// stream (`seq_stream`, `seq`); Flare publishes, on the share's `…/stored` topic, the number through which every
/// fix is stored (or refused), and a fix leaves the send queue only once that mark passes it. The broker's PUBACK only
/// paces the sending: a broker that crashes after acknowledging forgets what it had not handed on, so after every
/// reconnection the fixes not confirmed yet are sent again (the store keeps each once). While the broker is
/// unreachable fixes stay queued (bounded; the oldest never sent are dropped beyond `--queue`, and counted). `--no-confirm`
/// behaves like the OwnTracks apps: a fix is done at PUBACK.
struct TrackCommand {
    enum SourceKind {
        case route(speed: Double)
        case gpx(path: String, speedFactor: Double)
        case gpsd(address: String)
    }

    let shareID: ShareID
    let token: String
    let broker: MQTTURL
    let intervalSeconds: Double
    let source: SourceKind
    let count: Int?
    let queueLimit: Int
    let statusEverySeconds: Double
    let quiet: Bool
    /// MQTT 3.1.1 instead of 5 (`--mqtt311`): a NATS cluster speaks only 3.1.1.
    let mqtt311: Bool
    /// Keep each fix until Flare confirms it stored (false: until the broker's PUBACK, as the OwnTracks apps do).
    let confirm: Bool
    /// At the end, how long to wait for the last confirmations.
    let confirmTimeoutSeconds: Double

    /// An end-to-end encrypted share's secretbox key (`--e2e`): each fix is sealed before it is published.
    let sealingKey: [UInt8]?

    static let shareFile = OptionSpec.value("--share-file", "FILE", "the JSON `flare share create --json` printed: the share's id, device token and broker")
    static let shareID = OptionSpec.value("--share-id", "ID", "the share, without --share-file")
    static let token = OptionSpec.value("--token", "TOKEN", "its device token, without --share-file")
    static let mqttURL = OptionSpec.value("--mqtt-url", "mqtt://HOST:PORT",
                                          "the broker (default: --share-file's, else env FLARE_MQTT_URL, else 127.0.0.1 and FLARE_MQTT_PORT)")
    static let interval = OptionSpec.value("--interval", "SECONDS", "time between fixes (default 2; with --gpsd 1, and 0 passes on every report)")
    static let count = OptionSpec.value("--count", "N", "stop after this many fixes (default: until the share ends or Ctrl-C)")
    static let speed = OptionSpec.value("--speed", "M/S", "the built-in route (the default source), walked at this speed (default 1.5)")
    static let gpx = OptionSpec.value("--gpx", "FILE", "replay a GPX track instead, its points as far apart in time as recorded")
    static let speedFactor = OptionSpec.value("--speed-factor", "N", "replay the GPX track N times faster (default 1)")
    static let gpsd = OptionSpec.value("--gpsd", "HOST:PORT", "a live GPS receiver through gpsd instead (gpsd listens on 127.0.0.1:2947)")
    static let queue = OptionSpec.value("--queue", "N",
                                        "fixes kept while the broker is unreachable; beyond, the oldest never sent are dropped (default 10000)")
    static let statusEvery = OptionSpec.value("--status-every", "SECONDS", "the status line's period (default 10; 0: none)")
    static let quiet = OptionSpec.switch("--quiet", "no line per acknowledged fix")
    static let mqtt311 = OptionSpec.switch("--mqtt311", "MQTT 3.1.1 (a NATS cluster: it has no MQTT 5)")
    static let endToEnd = OptionSpec.switch("--e2e", "seal each fix for an end-to-end encrypted share (its key: --e2e-key, "
                                                + "or the file share create --e2e wrote)")
    static let confirmTimeout = OptionSpec.value("--confirm-timeout", "SECONDS",
                                                 "at the end, how long to wait for Flare to confirm the last fixes stored (default 60)")
    static let noConfirm = OptionSpec.switch("--no-confirm", "a fix is done at the broker's PUBACK, as in the OwnTracks apps "
                                                 + "(default: when Flare confirms it stored)")

    static let spec = CommandSpec(
        "track", summary: "publish positions into a share over MQTT, as a phone would: the built-in route, a GPX replay, or a gpsd receiver",
        details: "Each fix is kept (and sent again after a reconnection) until Flare confirms it stored. It stops when the share ends; "
            + "exit status 130 after Ctrl-C, 1 when the broker refuses the device token or fixes stay unconfirmed.",
        options: [shareFile, shareID, token, mqttURL, interval, count, speed, gpx, speedFactor, gpsd, queue, statusEvery, quiet, mqtt311,
                  endToEnd, SharedOptions.e2eKey, confirmTimeout, noConfirm, SharedOptions.dataDirectory],
        run: { invocation in try TrackCommand(invocation).run() })

    init(_ invocation: Invocation) throws {
        var id = invocation.value(Self.shareID)
        var token = invocation.value(Self.token)
        var mqttURL = invocation.value(Self.mqttURL)
        if let file = invocation.value(Self.shareFile) {
            guard let data = FileManager.default.contents(atPath: file),
                  let share = try? APIJSON.decode(CreatedShare.self, from: data) else {
                throw CLIError("cannot read \(file): expected the JSON printed by `flare share create --json`")
            }
            id = id ?? share.shareID
            token = token ?? share.deviceToken
            mqttURL = mqttURL ?? share.mqttURL
        }
        guard let idText = id, let shareID = ShareID(idText) else { throw CLIError("track needs --share-file FILE or --share-id ID") }
        guard let token, !token.isEmpty else { throw CLIError("track needs the share's device token (--token or --share-file)") }
        let urlText = mqttURL ?? invocation.environment["FLARE_MQTT_URL"] ?? "mqtt://127.0.0.1:\(invocation.shared("FLARE_MQTT_PORT"))"
        guard let broker = MQTTURL(urlText), !broker.tls else { throw CLIError("--mqtt-url must be mqtt://host:port (got \(urlText))") }
        self.shareID = shareID
        self.token = token
        self.broker = broker
        let gpx = invocation.value(Self.gpx), gpsd = invocation.value(Self.gpsd)
        guard gpx == nil || gpsd == nil else { throw CLIError("--gpx and --gpsd are two different sources: pick one") }
        // gpsd reports once a second; by default pass each one on. The route and a GPX file without times use 2 s.
        self.intervalSeconds = try invocation.number(Self.interval) ?? (gpsd != nil ? 1 : 2)
        guard intervalSeconds >= 0.01 || (gpsd != nil && intervalSeconds >= 0) else { throw CLIError("--interval must be at least 0.01 seconds") }
        if let gpx {
            self.source = .gpx(path: gpx, speedFactor: try invocation.number(Self.speedFactor) ?? 1)
        } else if let gpsd {
            self.source = .gpsd(address: gpsd)
        } else {
            self.source = .route(speed: try invocation.number(Self.speed) ?? 1.5)
        }
        self.count = try invocation.number(Self.count).map { Int($0) }
        self.queueLimit = max(1, Int(try invocation.number(Self.queue) ?? 10_000))
        self.statusEverySeconds = try invocation.number(Self.statusEvery) ?? 10
        self.quiet = invocation.isSet(Self.quiet)
        self.mqtt311 = invocation.isSet(Self.mqtt311)
        self.confirm = !invocation.isSet(Self.noConfirm)
        self.confirmTimeoutSeconds = try invocation.number(Self.confirmTimeout) ?? 60
        guard confirmTimeoutSeconds >= 0 else { throw CLIError("--confirm-timeout must be 0 or more seconds") }
        self.sealingKey = invocation.isSet(Self.endToEnd) ? E2EPassphrase.key(try invocation.passphrase(of: shareID.rawValue)) : nil
    }

    /// What is published for `fix`: its OwnTracks location, or for an end-to-end encrypted share that location sealed
    /// as the OwnTracks apps seal it, with `seq_stream` and `seq` beside the ciphertext so that Flare can confirm it
    /// stored without reading it. Sealed once per fix (`sealed`): a fix sent again is the same bytes, which the
    /// store recognises as a repeat.
    func payload(for number: Int64, _ fix: Fix, sealed: inout [Int64: [UInt8]]) -> [UInt8] {
        guard let sealingKey else { return fix.ownTracksJSON }
        if let done = sealed[number] { return done }
        var inner = fix
        inner.sequence = nil
        var outer = Fix.sealed(Data(SecretBox.seal(inner.ownTracksJSON, key: sealingKey)).base64EncodedString(), receivedAt: 0)
        outer.sequence = fix.sequence
        let payload = outer.ownTracksJSON
        // Only what may be sent again is kept: the queue's fixes, newest numbers last.
        if sealed.count >= 2 * queueLimit, let oldest = sealed.keys.min() { sealed[oldest] = nil }
        sealed[number] = payload
        return payload
    }

    /// After a reconnection, how long to wait for the retained mark before sending again what it does not cover.
    static let resendGraceSeconds = 3.0
    /// With no reconnection, what was sent is sent again if the mark has not moved for this long while fixes wait for
    /// it (a message lost on its way, a refusal that could not be recorded), and then after twice as long, and so on
    /// up to `longestStallSeconds`. The mark comes about once a second; a repeat costs a few hundred bytes, which the
    /// store recognises.
    static let stalledMarkSeconds = 10.0
    static let longestStallSeconds = 160.0

    func makeSource() throws -> any FixSource {
        switch source {
        case .route(let speed): return RouteSource(interval: intervalSeconds, speed: speed)
        case .gpx(let path, let speedFactor): return try GPXSource(path: path, speedFactor: speedFactor, fallbackInterval: intervalSeconds)
        case .gpsd(let address): return try GPSDSource(address: address, interval: intervalSeconds, log: log)
        }
    }

    func run() throws -> Int32 {
        let fixSource = SourceBox(try makeSource())
        var mqttOptions = MQTTClient.Options(clientID: ClientIDs.device(shareID, suffix: "track-" + ClientIDs.randomSuffix()))
        mqttOptions.host = broker.host
        mqttOptions.port = broker.port
        mqttOptions.username = shareID.rawValue
        mqttOptions.password = token
        if mqtt311 { mqttOptions.protocolVersion = .v311 }
        // A tracker wants its backlog out soon after the broker is back.
        mqttOptions.reconnectDelay = (1, 5)
        // As the OwnTracks iOS app does: if the connection is lost, the broker tells Flare, and the page says the
        // phone went offline (until the next fix).
        mqttOptions.lastWill = MQTTClient.LastWill(topic: Topics.location(shareID),
                                                   payload: Array(#"{"_type":"lwt","tst":\#(Int64(Date().timeIntervalSince1970))}"#.utf8), qos: 1)
        let client = try MQTTClient(options: mqttOptions)
        let ended = Mutex<String?>(nil)
        let connection = Mutex("connecting")
        let finishing = Atomic<Bool>(false)
        let refused = Mutex<String?>(nil)
        // "Locate now": the next fix the source gives is sent as the answer (OwnTracks `t: "r"`).
        let answerNext = Atomic<Bool>(false)
        let commandTopic = Topics.command(shareID), storedTopic = Topics.stored(shareID)
        let confirm = self.confirm
        // This run's stream: numbers from 1, named by the start time, so that a later run's stream is newer.
        let sendQueue = Mutex(SendQueue(capacity: queueLimit, stream: confirm ? Int64(Date().timeIntervalSince1970 * 1000) : nil))
        client.setMessageHandler { message in
            guard let object = try? JSONValue.parse(message.payload) else { return }
            if message.topic == storedTopic {
                guard let stream = object["seq_stream"]?.doubleValue.flatMap({ Int64(exactly: $0) }),
                      let through = object["seq"]?.doubleValue.flatMap({ Int64(exactly: $0) }) else { return }
                sendQueue.withLock { $0.confirm(stream: stream, through: through) }
                return
            }
            if message.topic == commandTopic {
                guard object["_type"]?.stringValue == "cmd", object["action"]?.stringValue == "reportLocation" else { return }
                answerNext.store(true, ordering: .relaxed)
                log("asked for a fresh position; the next fix answers")
                return
            }
            guard object["state"]?.stringValue == "ended" else { return }
            ended.withLock { $0 = object["reason"]?.stringValue ?? "ended" }
        }
        let broker = self.broker
        // After a reconnection, what is not confirmed is sent again (once the retained mark has had time to arrive).
        let resendAt = Mutex<ContinuousClock.Instant?>(nil)
        let connections = Atomic<Int>(0)
        client.setConnectionHandler { event in
            switch event {
            case .connected:
                connection.withLock { $0 = "connected" }
                let reconnection = connections.add(1, ordering: .relaxed).newValue > 1
                if confirm && reconnection { resendAt.withLock { $0 = .now + .milliseconds(Int64(Self.resendGraceSeconds * 1000)) } }
                log("connected to \(broker.host):\(broker.port)")
            case .disconnected(let reason):
                connection.withLock { $0 = "disconnected" }
                if !finishing.load(ordering: .relaxed) { log("disconnected (\(reason)); reconnecting, fixes wait in the send queue") }
            case .refused(let reason):
                connection.withLock { $0 = "refused" }
                refused.withLock { $0 = reason }
            }
        }
        try client.subscribe(Topics.status(shareID), qos: 1)
        try client.subscribe(commandTopic, qos: 1)
        if confirm { try client.subscribe(storedTopic, qos: 1) }
        try client.connect()
        let connectDeadline = ContinuousClock.now + .seconds(10)
        while !client.waitUntilConnected(timeout: .milliseconds(100)), refused.withLock({ $0 }) == nil {
            guard ContinuousClock.now < connectDeadline else {
                log("still not connected to \(broker.host):\(broker.port); will keep trying")
                break
            }
        }
        log("tracking share \(shareID) with \(fixSource.source.summary); Ctrl-C stops")

        // The source blocks (sleeps, socket reads) on its own thread; this thread only sends.
        let stopProducing = Atomic<Bool>(false)
        let limit = count
        NamedThread.start(name: "flare-source") {
            var produced = 0
            while !stopProducing.load(ordering: .relaxed), limit.map({ produced < $0 }) ?? true {
                let next: Fix?
                do { next = try fixSource.source.next() } catch {
                    log("source failed: \(error)")
                    break
                }
                guard var fix = next else { break }
                if answerNext.exchange(false, ordering: .relaxed) { fix.trigger = Fix.responseTrigger }
                sendQueue.withLock { $0.append(fix) }
                produced += 1
            }
            sendQueue.withLock { $0.producerDone = true }
        }

        // Ctrl-C or SIGTERM: say what was sent and what was not, then leave.
        let interrupted = Atomic<Bool>(false)
        var signalSources: [any DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { @Sendable in interrupted.store(true, ordering: .relaxed) }
            source.resume()
            signalSources.append(source)
        }
        defer { signalSources.forEach { $0.cancel() } }

        var stats = Statistics()
        var lastStatus = ContinuousClock.now
        var failureLogged = false
        var sealedPayloads: [Int64: [UInt8]] = [:]
        func status(_ prefix: String = "status") {
            let (queued, awaiting, confirmed, dropped) = sendQueue.withLock { ($0.unsent, $0.awaitingConfirmation, $0.confirmed, $0.dropped) }
            let ack = stats.lastAck.map { RFC3339.format(seconds: Int64($0.timeIntervalSince1970)) } ?? "none yet"
            let stored = confirm ? ", \(confirmed) confirmed stored, \(awaiting) awaiting confirmation" : ""
            let again = stats.sentAgain > 0 ? " (\(stats.sentAgain) sent again)" : ""
            log("\(prefix): \(connection.withLock { $0 }), \(stats.sent) fixes sent\(again), \(queued) queued, \(dropped) dropped\(stored), last ack \(ack)")
        }
        var lastProgress = ContinuousClock.now, lastConfirmed = 0
        var stalledAfter = Self.stalledMarkSeconds
        var finishedAt: ContinuousClock.Instant?
        while true {
            if let reason = ended.withLock({ $0 }) {
                stopProducing.store(true, ordering: .relaxed)
                log("the share has ended (\(reason)); stopping after \(stats.sent) fixes")
                finishing.store(true, ordering: .relaxed)
                client.disconnect()
                return 0
            }
            if let reason = refused.withLock({ $0 }) {
                // libmosquitto does not retry a refusal: wrong credentials, or a share whose token the broker no
                // longer accepts because it ended.
                stopProducing.store(true, ordering: .relaxed)
                log("the broker refused the device token (\(reason)); has the share ended? stopping after \(stats.sent) fixes")
                finishing.store(true, ordering: .relaxed)
                client.disconnect()
                return 1
            }
            if interrupted.load(ordering: .relaxed) {
                stopProducing.store(true, ordering: .relaxed)
                status("interrupted")
                let unsent = sendQueue.withLock { $0.entries.count }
                if unsent > 0 { log("\(unsent) fixes were not \(confirm ? "confirmed stored" : "acknowledged") and are not sent") }
                finishing.store(true, ordering: .relaxed)
                client.disconnect()
                return 130
            }
            if statusEverySeconds > 0, ContinuousClock.now - lastStatus >= .milliseconds(Int64(statusEverySeconds * 1000)) {
                status()
                lastStatus = ContinuousClock.now
            }
            // What the mark confirmed since the last round, and whether it is time to send again what it has not.
            let (confirmedNow, waiting) = sendQueue.withLock { ($0.confirmed, $0.awaitingConfirmation) }
            if confirmedNow != lastConfirmed || waiting == 0 {
                lastConfirmed = confirmedNow
                lastProgress = .now
                stalledAfter = Self.stalledMarkSeconds
            }
            let reconnected = resendAt.withLock { at -> Bool in
                guard let due = at, ContinuousClock.now >= due else { return false }
                at = nil
                return true
            }
            let stalled = confirm && ContinuousClock.now - lastProgress >= .milliseconds(Int64(stalledAfter * 1000))
            if reconnected || stalled {
                let again = sendQueue.withLock { $0.sendAgain() }
                if again > 0 { log("sending again \(again) fixes Flare has not confirmed stored\(reconnected ? " (after a reconnection)" : "")") }
                if stalled {
                    lastProgress = .now
                    stalledAfter = min(stalledAfter * 2, Self.longestStallSeconds)
                }
            }
            let (next, finished, awaiting) = sendQueue.withLock { ($0.takeNext(), $0.producerDone, $0.awaitingConfirmation) }
            guard let head = next, let number = head.number else {
                // Nothing to take and nothing awaiting the mark: the queue is empty.
                if finished && awaiting == 0 { break }
                if finished {
                    // Everything is sent: wait for the last confirmations, but not for ever.
                    let since = finishedAt ?? .now
                    finishedAt = since
                    if ContinuousClock.now - since >= .milliseconds(Int64(confirmTimeoutSeconds * 1000)) {
                        status("done")
                        log("\(awaiting) of the fixes sent were not confirmed stored by Flare within \(Int(confirmTimeoutSeconds)) s (\(confirmTimeoutSeconds == 0 ? "--confirm-timeout 0" : "is flared running? does it publish …/stored? --no-confirm skips the wait"))")
                        finishing.store(true, ordering: .relaxed)
                        client.disconnect()
                        log("sent \(stats.sent) fixes")
                        return 1
                    }
                }
                Thread.sleep(forTimeInterval: 0.02)
                continue
            }
            guard client.isConnected else {
                Thread.sleep(forTimeInterval: 0.1)
                continue
            }
            let started = ContinuousClock.now
            do {
                try client.publishAndWait(topic: Topics.location(shareID), payload: payload(for: number, head.fix, sealed: &sealedPayloads),
                                          qos: 1, retain: true, timeout: .seconds(5))
                sendQueue.withLock { $0.sent(number, keep: confirm) }
                if number > stats.highestSent {
                    stats.sent += 1
                    stats.highestSent = number
                } else {
                    stats.sentAgain += 1
                }
                stats.lastAck = Date()
                failureLogged = false
                if !quiet {
                    let elapsed = ContinuousClock.now - started
                    log("fix \(stats.sent) acknowledged in \(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000) ms")
                }
            } catch {
                // Not acknowledged (the connection dropped, or the broker is slow): it stays first in line.
                if !failureLogged { log("fix not acknowledged (\(error)); it stays queued and is sent again") }
                failureLogged = true
                Thread.sleep(forTimeInterval: 0.2)
            }
        }
        status("done")
        finishing.store(true, ordering: .relaxed)
        client.disconnect()
        // A fix the library sent again by itself after a reconnection reached Flare as well: it counts as sent.
        log("sent \(stats.sent + sendQueue.withLock { $0.confirmedUnacknowledged }) fixes\(confirm ? ", all confirmed stored by Flare" : "")")
        return 0
    }

    struct Statistics {
        /// Distinct fixes sent; `sentAgain` counts the repeats.
        var sent = 0
        var sentAgain = 0
        var highestSent: Int64 = 0
        var lastAck: Date?
    }
}

/// The source moves to the producer thread and is used only there: the box just carries it across.
final class SourceBox: @unchecked Sendable {
    var source: any FixSource
    init(_ source: any FixSource) { self.source = source }
}

func log(_ message: String) {
    FileHandle.standardError.write(Data("flare track: \(message)\n".utf8))
}
