import FlareCore
import FlareMQTT
import FlareSystem
import Foundation
import Synchronization

/// `flare bench publish|count`: the MQTT load generator and the bare reference subscriber that scripts/bench
/// drives. Both are thin over libmosquitto (FlareMQTT), so the reference is as fast as the broker delivers.
/// Loopback only: they refuse any broker host that is not 127.0.0.1, ::1 or localhost.
enum Bench {
    static let mqttURL = OptionSpec.value("--mqtt-url", "mqtt://127.0.0.1:PORT",
                                          "the broker, on loopback (default 127.0.0.1 and env FLARE_MQTT_PORT, else 1883)")
    static let mqtt311 = OptionSpec.switch("--mqtt311", "a NATS cluster: MQTT 3.1.1, as flared's service login (its password in DATA_DIR/nats/password)")
    static let qos = OptionSpec.value("--qos", "0|1|2", "the MQTT QoS (default 1)")
    static let inflight = OptionSpec.value("--inflight", "N", "messages in flight at once (default 1000)")
    static let sharesFile = OptionSpec.value("--shares-file", "FILE", "the share ids to publish to, one a line")
    static let prefix = OptionSpec.value("--prefix", "TOPIC", "topics are PREFIX/ID/location (default flare/v1/shares)")
    static let publishCount = OptionSpec.value("--count", "N", "how many fixes, round-robin over the shares (default one each)")
    static let rate = OptionSpec.value("--rate", "N", "fixes a second (default 0: as fast as the broker takes them)")
    static let offset = OptionSpec.value("--offset", "N", "start this far into the round-robin (each round moves the fixes by 1e-6°)")
    static let acked = OptionSpec.value("--acked", "FILE", "write the numbers of the fixes the broker acknowledged, one a line")
    static let pattern = OptionSpec.value("--pattern", "TOPIC", "the subscription (default bench/v1/shares/+/location)")
    static let expect = OptionSpec.value("--expect", "N", "stop once this many arrived (default 1; exit status 3 if fewer came)")
    static let timeout = OptionSpec.value("--timeout", "SECONDS", "stop after this long at the latest (default 120)")
    static let reportEvery = OptionSpec.value("--report-every", "N", "print a progress line every N messages (default 0: none)")
    static let receiveMaximum = OptionSpec.value("--inflight", "N", "the receive maximum, as flared's bridge has it (default 1000)")

    static let all: [CommandSpec] = [
        CommandSpec("bench publish", summary: "publish fixes as fast as the broker takes them (or at --rate); prints one JSON line",
                    details: "The load generator of `make bench` (scripts/bench/bench.py); loopback brokers only. It logs in as the bench "
                        + "service account where its password file exists ($FLARE_BENCH_PASSWORD_FILE, else DATA_DIR/broker/bench.password).",
                    options: [mqttURL, mqtt311, sharesFile, prefix, publishCount, qos, rate, offset, inflight, acked, SharedOptions.dataDirectory],
                    run: publish),
        CommandSpec("bench count", summary: "count the messages on a subscription until --expect arrived; prints one JSON line",
                    details: "The bare reference subscriber of `make bench`: it says \"ready\" on stderr once subscribed. Loopback brokers only.",
                    options: [mqttURL, mqtt311, pattern, qos, expect, timeout, reportEvery, receiveMaximum, SharedOptions.dataDirectory],
                    run: count),
        CommandSpec("bench store-create", summary: "the store alone making shares, as flared's creations do; prints one JSON line",
                    options: [StoreBench.storeDirectory, StoreBench.live, StoreBench.count], run: StoreBench.create),
    ]

    static func broker(_ invocation: Invocation) throws -> MQTTURL {
        let text = invocation.value(mqttURL) ?? "mqtt://127.0.0.1:\(invocation.environment["FLARE_MQTT_PORT"] ?? "1883")"
        guard let url = MQTTURL(text), !url.tls, ["127.0.0.1", "::1", "localhost"].contains(url.host) else {
            throw CLIError("bench talks only to a broker on loopback (mqtt://127.0.0.1:PORT), got \(text)")
        }
        return url
    }

    static func client(_ invocation: Invocation, name: String, inflight: Int, receiveMaximum: Int = 20) throws -> MQTTClient {
        let url = try broker(invocation)
        var mqttOptions = MQTTClient.Options(clientID: "flare-bench-\(name)-\(UInt32.random(in: 0...UInt32.max))")
        mqttOptions.host = url.host
        mqttOptions.port = url.port
        mqttOptions.maxInflightMessages = inflight
        mqttOptions.receiveMaximum = receiveMaximum
        mqttOptions.reconnectDelay = (1, 2)
        if invocation.isSet(mqtt311) {
            // A NATS cluster: MQTT 3.1.1, flared's service login (its password in DATA_DIR/nats/password), and a session
            // that outlives a reconnection to another node, so that what was in flight is sent again there.
            mqttOptions.protocolVersion = .v311
            mqttOptions.cleanSession = false
            mqttOptions.retriesAfterRefusal = true
            let passwordFile = invocation.dataDirectory + "/nats/password"
            guard let password = try? String(contentsOfFile: passwordFile, encoding: .utf8) else {
                throw CLIError("--mqtt311 logs in as the NATS cluster's service login: no password at \(passwordFile) (pass --data-dir)")
            }
            mqttOptions.username = "flared"
            mqttOptions.password = password.trimmingCharacters(in: .whitespacesAndNewlines)
            return try MQTTClient(options: mqttOptions)
        }
        // The broker admits no one anonymously: the load tools log in as the `bench` service account, which
        // exists only where a benchmark or fault run created its password file.
        let passwordFile = invocation.environment["FLARE_BENCH_PASSWORD_FILE"] ?? invocation.dataDirectory + "/broker/bench.password"
        if let password = try? String(contentsOfFile: passwordFile, encoding: .utf8) {
            mqttOptions.username = "bench"
            mqttOptions.password = password.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return try MQTTClient(options: mqttOptions)
    }

    static func integer(_ invocation: Invocation, _ option: OptionSpec, default fallback: Int) throws -> Int {
        guard let text = invocation.value(option) else { return fallback }
        guard let value = Int(text), value >= 0 else { throw CLIError("\(option.name) needs a whole number, got \(text)") }
        return value
    }

    static func nowNanos() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
    }

    /// Publishes `--count` fixes round-robin over the share ids in `--shares-file` (one a line) to
    /// `<--prefix>/<id>/location`, at `--qos`, retained, as fast as the broker takes them or at `--rate` per second.
    /// Every fix differs from the others of its share (coordinates step by 1e-6°), so each is a new row.
    /// Prints one JSON line: start and end wall-clock times (ns) and how many were handed over.
    static func publish(_ invocation: Invocation) throws -> Int32 {
        guard let file = invocation.value(sharesFile), let text = try? String(contentsOfFile: file, encoding: .utf8) else {
            throw CLIError("bench publish needs --shares-file FILE (one share id a line)")
        }
        let prefix = invocation.value(Self.prefix) ?? "flare/v1/shares"
        let ids = text.split(whereSeparator: \.isNewline).map(String.init)
        guard !ids.isEmpty else { throw CLIError("\(file) names no share") }
        let total = try integer(invocation, publishCount, default: ids.count)
        let qos = try integer(invocation, Self.qos, default: 1)
        let rate = try integer(invocation, Self.rate, default: 0)
        let offset = try integer(invocation, Self.offset, default: 0)
        let inflight = try integer(invocation, Self.inflight, default: 1000)
        let topics = ids.map { "\(prefix)/\($0)/location" }
        let client = try client(invocation, name: "pub", inflight: max(1, inflight))
        // --acked FILE: the fixes the broker acknowledged (their numbers, one a line), for a fault test that checks each
        // of them was stored. A PUBACK may come before `publish` has returned the message id: both sides are noted.
        // A NATS cluster acknowledges out of order: the last message's PUBACK does not mean the others are in, so there
        // the publisher waits for every one of them before it says it is done.
        let ackedFile = invocation.value(acked)
        let tracksAcknowledgements = ackedFile != nil || invocation.isSet(mqtt311)
        let acknowledgements = Mutex<(byMessage: [Int32: Int], early: Set<Int32>, acked: [Int])>(([:], [], []))
        if tracksAcknowledgements {
            client.setPublishAcknowledgedHandler { mid, code in
                guard code < 0x80 else { return }
                acknowledgements.withLock { state in
                    if let number = state.byMessage.removeValue(forKey: mid) { state.acked.append(number) } else { state.early.insert(mid) }
                }
            }
        }
        try client.connect()
        guard client.waitUntilConnected(timeout: .seconds(10)) else { throw CLIError("cannot reach the broker") }
        let tst = Int64(Date().timeIntervalSince1970)
        let started = nowNanos()
        var sent = 0
        var index = 0
        while index < total {
            let round = (index + offset) / ids.count
            let step = Double(round % 1_000_000) * 1e-6
            let payload = Array("{\"_type\":\"location\",\"lat\":\(47.0 + step),\"lon\":\(8.0 + step),\"tst\":\(tst),\"acc\":5,\"tid\":\"bn\"}".utf8)
            if rate > 0 {
                let due = started + Int64(index) * 1_000_000_000 / Int64(rate)
                let wait = due - nowNanos()
                if wait > 0 { usleep(UInt32(wait / 1000)) }
            }
            do {
                // Past the inflight window libmosquitto queues in memory: the broker's PUBACKs pace the stream.
                let mid = try client.publish(topic: topics[(index + offset) % ids.count], payload: payload, qos: qos, retain: true)
                if tracksAcknowledgements {
                    acknowledgements.withLock { state in
                        if state.early.remove(mid) != nil { state.acked.append(index + offset) } else { state.byMessage[mid] = index + offset }
                    }
                }
                sent += 1
                index += 1
            } catch {
                usleep(1000)  // reconnecting: try the same fix again
            }
        }
        var ackedCount = -1
        if tracksAcknowledgements {
            // What is still in flight gets its acknowledgement (or is sent again after a reconnection) within two minutes.
            let deadline = monotonicMillis() + 120_000
            while acknowledgements.withLock({ !$0.byMessage.isEmpty }) && monotonicMillis() < deadline { usleep(10_000) }
            let acked = acknowledgements.withLock { $0.acked }
            ackedCount = acked.count
            if let ackedFile, !FileManager.default.createFile(atPath: ackedFile, contents: Data(acked.map { "\($0)\n" }.joined().utf8)) {
                throw CLIError("cannot write \(ackedFile)")
            }
        } else {
            // The last one with an acknowledgement: when it is back, mosquitto has taken everything before it (in order).
            try? client.publishAndWait(topic: "\(prefix)/bench-done/location", payload: [], qos: 1, retain: false, timeout: .seconds(120))
        }
        let finished = nowNanos()
        client.disconnect()
        print("{\"published\":\(sent),\"acked\":\(ackedCount),\"start_ns\":\(started),\"end_ns\":\(finished)}")
        return 0
    }

    /// Subscribes to `--pattern` at `--qos` with a clean session and counts messages until `--expect` arrived or
    /// `--timeout` seconds passed. Prints "ready" once subscribed (stderr), then one JSON line at the end.
    static func count(_ invocation: Invocation) throws -> Int32 {
        let pattern = invocation.value(Self.pattern) ?? "bench/v1/shares/+/location"
        let qos = try integer(invocation, Self.qos, default: 1)
        let expect = try integer(invocation, Self.expect, default: 1)
        let timeout = try integer(invocation, Self.timeout, default: 120)
        let every = try integer(invocation, reportEvery, default: 0)
        struct Tally { var count = 0; var first: Int64 = 0; var last: Int64 = 0 }
        let tally = Mutex(Tally())
        let done = DispatchSemaphore(value: 0)
        // The same receive maximum as flared's bridge, so both get the same flow control from the broker.
        let client = try client(invocation, name: "count", inflight: 100, receiveMaximum: max(1, try integer(invocation, receiveMaximum, default: 1000)))
        client.setMessageHandler { message in
            guard !message.payload.isEmpty else { return }
            let now = nowNanos()
            let (reached, count) = tally.withLock { tally -> (Bool, Int) in
                if tally.count == 0 { tally.first = now }
                tally.count += 1
                tally.last = now
                return (tally.count == expect, tally.count)
            }
            // Progress for a driver that sends the next burst when this one has arrived.
            if every > 0, count % every == 0 { FileHandle.standardOutput.write(Data("{\"received\":\(count),\"at_ns\":\(now)}\n".utf8)) }
            if reached { done.signal() }
        }
        try client.subscribe(pattern, qos: qos)
        try client.connect()
        guard try client.waitUntilSubscribed(timeout: .seconds(10)) else { throw CLIError("cannot subscribe") }
        FileHandle.standardError.write(Data("ready\n".utf8))
        _ = done.wait(timeout: .now() + .seconds(timeout))
        let result = tally.withLock { $0 }
        client.disconnect()
        print("{\"received\":\(result.count),\"first_ns\":\(result.first),\"last_ns\":\(result.last)}")
        return result.count >= expect ? 0 : 3
    }
}
