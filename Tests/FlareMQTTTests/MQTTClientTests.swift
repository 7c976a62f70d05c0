import FlareMQTT
import FlareTestSupport
import Foundation
import Synchronization
import Testing

/// Every test runs against its own real mosquitto (TestBroker) on a free port.
@Suite(.timeLimit(.minutes(2)))
struct MQTTClientTests {
    static let versions: [MQTTClient.ProtocolVersion] = [.v5, .v311]

    @Test(arguments: versions)
    func qos1RoundTripAndRetainFlag(version: MQTTClient.ProtocolVersion) throws {
        let broker = try TestBroker()
        let publisher = try connectedClient(broker, version: version)
        let live = Recorder()
        let subscriber = try makeClient(broker, version: version, recorder: live)
        try subscribeAndConnect(subscriber, "flare/v1/shares/+/location")

        let topic = "flare/v1/shares/abc/location"
        let payload = bytes(#"{"_type":"location","lat":52.5,"lon":13.4,"tst":1700000000}"#)
        try publisher.publishAndWait(topic: topic, payload: payload, qos: 1, retain: true, timeout: .seconds(10))

        #expect(eventually { live.messages(on: topic).count == 1 })
        let seen = try #require(live.messages(on: topic).first)
        #expect(seen.payload == payload)
        #expect(seen.qos == 1)
        #expect(seen.retain == false, "live delivery to an existing subscription is not flagged retained")

        let late = Recorder()
        let lateSubscriber = try makeClient(broker, version: version, recorder: late)
        try subscribeAndConnect(lateSubscriber, topic)
        #expect(eventually { late.messages(on: topic).count == 1 })
        let stored = try #require(late.messages(on: topic).first)
        #expect(stored.payload == payload)
        #expect(stored.qos == 1)
        #expect(stored.retain == true)
    }

    @Test
    func zeroLengthRetainedPublishClearsTheRetainedMessage() throws {
        let broker = try TestBroker()
        let publisher = try connectedClient(broker)
        let topic = "flare/v1/shares/gone/location"
        try publisher.publishAndWait(topic: topic, payload: bytes("last fix"), qos: 1, retain: true, timeout: .seconds(10))

        let first = Recorder()
        let firstSubscriber = try makeClient(broker, recorder: first)
        try subscribeAndConnect(firstSubscriber, topic)
        #expect(eventually { first.messages(on: topic).map(\.payload) == [bytes("last fix")] })
        #expect(first.messages.first?.retain == true)

        try publisher.publishAndWait(topic: topic, payload: [], qos: 1, retain: true, timeout: .seconds(10))
        #expect(eventually { first.messages(on: topic).count == 2 })
        #expect(first.messages(on: topic).last?.payload == [])

        // A later subscriber gets no retained message. The broker sends retained messages right after the
        // SUBACK, before any later publish on the topic, so a marker arriving alone proves there was none.
        let second = Recorder()
        let secondSubscriber = try makeClient(broker, recorder: second)
        try subscribeAndConnect(secondSubscriber, topic)
        try publisher.publishAndWait(topic: topic, payload: bytes("marker"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { !second.messages.isEmpty })
        #expect(second.messages.map(\.payload) == [bytes("marker")])
    }

    @Test
    func retainedMessageExpiresWithMessageExpiryInterval() async throws {
        let broker = try TestBroker()
        let publisher = try connectedClient(broker)
        let topic = "flare/v1/shares/short/location"
        try publisher.publishAndWait(topic: topic, payload: bytes("fix"), qos: 1, retain: true, messageExpirySeconds: 1, timeout: .seconds(10))
        try await Task.sleep(for: .seconds(2.5))

        let late = Recorder()
        let subscriber = try makeClient(broker, recorder: late)
        try subscribeAndConnect(subscriber, topic)
        try publisher.publishAndWait(topic: topic, payload: bytes("marker"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { !late.messages.isEmpty })
        #expect(late.messages.map(\.payload) == [bytes("marker")])
    }

    /// flared marks the positions it publishes itself (`Topics.originProperty`): the mark reaches subscribers live and
    /// stays with the retained copy.
    @Test
    func userPropertiesArriveLiveAndWithTheRetainedCopy() throws {
        let broker = try TestBroker()
        let live = Recorder()
        let subscriber = try makeClient(broker, recorder: live)
        let topic = "flare/v1/shares/marked/location"
        try subscribeAndConnect(subscriber, topic)
        let publisher = try connectedClient(broker)
        let mark = MQTTUserProperty(name: "flare-origin", value: "flared")
        try publisher.publishAndWait(topic: topic, payload: bytes("fix"), qos: 1, retain: true, userProperties: [mark], timeout: .seconds(10))
        try publisher.publishAndWait(topic: topic + "/2", payload: bytes("plain"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { live.messages.count == 1 })
        #expect(live.messages.first?.userProperties == [mark] && live.messages.first?.userProperty("flare-origin") == "flared")

        let late = Recorder()
        let lateSubscriber = try makeClient(broker, recorder: late)
        try subscribeAndConnect(lateSubscriber, "flare/v1/shares/marked/#")
        try publisher.publishAndWait(topic: topic + "/2", payload: bytes("plain"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { late.messages.count == 2 })
        #expect(late.messages.first?.retain == true && late.messages.first?.userProperties == [mark])
        #expect(late.messages.last?.userProperties == [])
    }

    @Test(arguments: versions)
    func persistentSessionReceivesWhatWasPublishedWhileAway(version: MQTTClient.ProtocolVersion) throws {
        let broker = try TestBroker()
        let id = "bridge-\(UUID().uuidString.prefix(8))"
        let topic = "flare/v1/shares/away/location"
        let first = try makeClient(broker, id: id, version: version) { $0.cleanSession = false }
        try subscribeAndConnect(first, topic)
        first.disconnect()

        let publisher = try connectedClient(broker, version: version)
        for n in 1...3 {
            try publisher.publishAndWait(topic: topic, payload: bytes("fix \(n)"), qos: 1, retain: false, timeout: .seconds(10))
        }

        // A new client object with the same id, as after a process restart; it does not need to subscribe.
        let recorder = Recorder()
        let second = try makeClient(broker, id: id, version: version, recorder: recorder) { $0.cleanSession = false }
        try second.connect()
        #expect(eventually { recorder.messages.count == 3 })
        #expect(recorder.messages.map(\.payload) == (1...3).map { bytes("fix \($0)") })
        #expect(recorder.sessionPresentFlags.first == true)
    }

    /// The bridge relies on this for "nothing lost": a QoS 1 message is acknowledged only once the gate says it is
    /// safe. A gate that says it never can be keeps it unacknowledged, so the broker delivers it again.
    @Test(arguments: versions)
    func messagesAreAcknowledgedOnlyOnceTheGateAllows(version: MQTTClient.ProtocolVersion) throws {
        let broker = try TestBroker()
        let id = "gated-\(UUID().uuidString.prefix(8))"
        let topic = "flare/v1/shares/gated/location"
        let recorder = Recorder()
        let client = try makeClient(broker, id: id, version: version, recorder: recorder) { $0.cleanSession = false }
        let allow = Atomic<Bool>(false)
        let gateCalls = Atomic<Int>(0)
        client.setAcknowledgementGate {
            gateCalls.add(1, ordering: .relaxed)
            return allow.load(ordering: .relaxed)
        }
        try subscribeAndConnect(client, "flare/v1/shares/+/location")
        let publisher = try connectedClient(broker, version: version)
        try publisher.publishAndWait(topic: topic, payload: bytes("fix"), qos: 1, retain: false, timeout: .seconds(10))

        // Refused by the gate: the connection is dropped unacknowledged and the broker delivers it again.
        #expect(eventually(timeout: .seconds(20)) { recorder.messages(on: topic).count >= 2 })
        #expect(recorder.messages(on: topic).dropFirst().allSatisfy { $0.payload == bytes("fix") })
        #expect(!recorder.disconnections.isEmpty)

        allow.store(true, ordering: .relaxed)
        #expect(eventually(timeout: .seconds(20)) { client.isConnected && recorder.messages(on: topic).count >= 3 })
        #expect(try client.waitUntilSubscribed(timeout: .seconds(10)))
        // Now acknowledged: after a clean reconnect only the marker arrives, not the fix again.
        client.disconnect()
        let delivered = recorder.messages(on: topic).count
        try client.connect()
        #expect(client.waitUntilConnected(timeout: .seconds(10)))
        try publisher.publishAndWait(topic: topic, payload: bytes("marker"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { recorder.messages(on: topic).last?.payload == bytes("marker") })
        #expect(recorder.messages(on: topic).count == delivered + 1)

        // QoS 0 deliveries need no acknowledgement and never ask the gate.
        let plainGateCalls = Atomic<Int>(0)
        let plain = Recorder()
        let plainClient = try makeClient(broker, version: version, recorder: plain)
        plainClient.setAcknowledgementGate {
            plainGateCalls.add(1, ordering: .relaxed)
            return false
        }
        try subscribeAndConnect(plainClient, topic, qos: 0)
        try publisher.publishAndWait(topic: topic, payload: bytes("qos 0"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { plain.messages(on: topic).map(\.payload) == [bytes("qos 0")] })
        #expect(plainGateCalls.load(ordering: .relaxed) == 0)
        #expect(plainClient.isConnected)
        #expect(gateCalls.load(ordering: .relaxed) >= 3)
    }

    @Test(arguments: versions)
    func reconnectsAfterBrokerRestartAndResubscribes(version: MQTTClient.ProtocolVersion) throws {
        let broker = try TestBroker(persistence: true)
        let id = "bridge-\(UUID().uuidString.prefix(8))"
        let topic = "flare/v1/shares/restart/location"
        let recorder = Recorder()
        let client = try makeClient(broker, id: id, version: version, recorder: recorder) { $0.cleanSession = false }
        try subscribeAndConnect(client, "flare/v1/shares/+/location")

        broker.stop()
        #expect(eventually { !client.isConnected })
        try broker.start()
        #expect(eventually(timeout: .seconds(30)) { client.isConnected })
        #expect(try client.waitUntilSubscribed(timeout: .seconds(10)))
        #expect(recorder.sessionPresentFlags == [false, true], "the broker restored the persisted session")

        let publisher = try connectedClient(broker, version: version)
        try publisher.publishAndWait(topic: topic, payload: bytes("after restart"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { recorder.messages(on: topic).map(\.payload) == [bytes("after restart")] })

        // The automatic reconnect must have asked for a persistent session again (for v5: the session-expiry
        // property is in every CONNECT), so what is published after this client leaves still waits for it.
        client.disconnect()
        try publisher.publishAndWait(topic: topic, payload: bytes("while away"), qos: 1, retain: false, timeout: .seconds(10))
        let laterRecorder = Recorder()
        let later = try makeClient(broker, id: id, version: version, recorder: laterRecorder) { $0.cleanSession = false }
        try later.connect()
        #expect(eventually { laterRecorder.messages(on: topic).map(\.payload) == [bytes("while away")] })
    }

    @Test
    func connectAgainAfterDisconnectOnTheSameClient() throws {
        let broker = try TestBroker()
        let recorder = Recorder()
        let client = try makeClient(broker, recorder: recorder)
        try subscribeAndConnect(client, "again/#")
        client.disconnect()
        client.disconnect()  // idempotent
        #expect(!client.isConnected)

        try client.connect()
        #expect(try client.waitUntilSubscribed(timeout: .seconds(10)))
        let publisher = try connectedClient(broker)
        try publisher.publishAndWait(topic: "again/1", payload: bytes("hello"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(eventually { recorder.messages.count == 1 })

        // The restarted network thread still reconnects on its own.
        broker.kill()
        #expect(eventually { !client.isConnected })
        try broker.start()
        #expect(eventually(timeout: .seconds(30)) { client.isConnected })
    }

    @Test(arguments: versions)
    func wrongCredentialsAreRefused(version: MQTTClient.ProtocolVersion) throws {
        let (broker, _) = try passwordBroker()

        let recorder = Recorder()
        let client = try makeClient(broker, version: version, recorder: recorder) {
            $0.username = "flare"
            $0.password = "wrong-battery-staple"
        }
        try client.connect()
        #expect(eventually { !recorder.refusals.isEmpty })
        #expect(!client.isConnected)
        #expect(!client.waitUntilConnected(timeout: .milliseconds(200)))
        let reason = try #require(recorder.refusals.first)
        #expect(!reason.isEmpty)
        #expect(!reason.contains("wrong-battery-staple"))
        // It stops trying after a refusal; disconnect() + connect() tries again.
        client.disconnect()
        try client.connect()
        #expect(eventually { recorder.refusals.count == 2 })
        client.disconnect()

        let good = try makeClient(broker, version: version) {
            $0.username = "flare"
            $0.password = "correct-horse"
        }
        try good.connect()
        #expect(good.waitUntilConnected(timeout: .seconds(10)))
    }

    /// A broker whose refusals can pass (a NATS cluster whose auth callout timed out in a failover): told so, the client
    /// keeps trying on its own, and gets in once the broker accepts the login.
    @Test(arguments: versions)
    func aClientToldThatRefusalsPassKeepsTryingUntilItGetsIn(version: MQTTClient.ProtocolVersion) throws {
        let (broker, passwordFile) = try passwordBroker()
        let recorder = Recorder()
        let client = try makeClient(broker, version: version, recorder: recorder) {
            $0.username = "flare"
            $0.password = "battery-staple"
            $0.retriesAfterRefusal = true
            $0.reconnectDelay = (1, 1)
        }
        try client.connect()
        #expect(eventually { recorder.refusals.count >= 2 })   // no disconnect() and connect() in between
        #expect(!client.isConnected)
        // The broker now takes the password (mosquitto reads its password file again on SIGHUP).
        try runTool("/usr/bin/mosquitto_passwd", ["-b", passwordFile.path, "flare", "battery-staple"])
        kill(try #require(broker.processIdentifier), SIGHUP)
        #expect(client.waitUntilConnected(timeout: .seconds(20)))
        client.disconnect()
    }

    @Test(arguments: versions)
    func refusedSubscriptionIsReported(version: MQTTClient.ProtocolVersion) throws {
        // mosquitto's acl_file grants every SUBACK and filters on delivery; the dynamic-security plugin refuses
        // at SUBSCRIBE time (by default nobody but its admin may subscribe).
        let directory = try TempDirectory.make(prefix: "flare-mqtt-dynsec")
        let dynsec = directory.appendingPathComponent("dynsec.json")
        try runTool("/usr/bin/mosquitto_ctrl", ["dynsec", "init", dynsec.path, "admin", "admin-password"])
        let broker = try TestBroker(directory: directory, extraConfig: [
            "plugin /usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so",
            "plugin_opt_config_file \(dynsec.path)",
        ])

        let client = try makeClient(broker, version: version)
        try client.subscribe("secret/#", qos: 1)
        try client.connect()
        let error = try #require(throws: MQTTError.self) { _ = try client.waitUntilSubscribed(timeout: .seconds(10)) }
        #expect(error.code >= 0x80)
        #expect(client.isConnected, "a refused subscription does not end the connection")
    }

    @Test
    func unreachableBrokerIsReportedNotAwaited() throws {
        let (refusing, port) = try FreePort.refusing()  // bound, never listening: refused for the whole test
        defer { close(refusing) }
        let recorder = Recorder()
        var options = MQTTClient.Options(clientID: "nobody-home")
        options.port = port
        let client = try MQTTClient(options: options)
        recorder.attach(to: client)
        try client.connect()
        #expect(!client.waitUntilConnected(timeout: .seconds(1)))
        #expect(eventually { !recorder.disconnections.isEmpty })
        #expect(recorder.disconnections.allSatisfy { !$0.isEmpty })
        // libmosquitto refuses a message while it has no connection, but takes it while a reconnect attempt is under
        // way (its socket is open, the connect still pending); the wait then ends saying it is not connected. Either
        // way the caller learns, within the wait, that nothing got through.
        for qos in [0, 1] {
            let error = try #require(throws: MQTTError.self) {
                try client.publishAndWait(topic: "t", payload: bytes("x"), qos: qos, retain: false, timeout: .seconds(2))
            }
            #expect(!error.isTimeout || error.description.contains("not connected"), "\(error)")
        }
        client.disconnect()
    }

    @Test(arguments: versions)
    func publishAndWaitFailsClearlyWhenTheBrokerIsGone(version: MQTTClient.ProtocolVersion) throws {
        let broker = try TestBroker()
        let client = try connectedClient(broker, version: version)

        // A broker that stopped answering while the connection still looks fine: the wait times out.
        let pid = try #require(broker.processIdentifier)
        kill(pid, SIGSTOP)
        let silent = try #require(throws: MQTTError.self) {
            try client.publishAndWait(topic: "t", payload: bytes("x"), qos: 1, retain: true, timeout: .milliseconds(500))
        }
        kill(pid, SIGCONT)
        #expect(silent.isTimeout)
        #expect(silent.description.contains("no acknowledgement"))

        // A broker that is gone: libmosquitto 2.0 does not even take the message (QoS 0 or 1). While the network
        // thread is in the middle of a reconnect attempt libmosquitto may take it after all; the wait then ends in a
        // timeout that says the client is not connected. Either way the caller learns the broker is gone.
        broker.kill()
        #expect(eventually { !client.isConnected })
        for qos in [0, 1] {
            let gone = try #require(throws: MQTTError.self) {
                try client.publishAndWait(topic: "t", payload: bytes("x"), qos: qos, retain: false, timeout: .seconds(5))
            }
            #expect(gone.code == MQTTError.notConnectedCode
                    || (gone.isTimeout && gone.description.contains("not connected to the broker")), "\(gone)")
        }
    }

    @Test
    func disconnectAndReleaseWhileMessagesArrive() throws {
        let broker = try TestBroker()
        let publisher = try connectedClient(broker)
        for round in 0..<5 {
            let recorder = Recorder()
            let subscriber = try makeClient(broker, recorder: recorder)
            try subscribeAndConnect(subscriber, "flood/#", qos: 0)
            for n in 0..<2_000 {
                try publisher.publish(topic: "flood/\(n % 10)", payload: bytes("m\(n)"), qos: 0, retain: false)
                if n == 200 {
                    #expect(eventually { !recorder.messages.isEmpty })
                    // Even rounds: explicit disconnect racing the callbacks. Odd rounds: dropped while running.
                    if round % 2 == 0 { subscriber.disconnect() }
                }
            }
        }
        #expect(try connectedClient(broker).isConnected)
    }

    @Test
    func lastReferenceDroppedInsideItsOwnCallback() throws {
        final class WeakClient: @unchecked Sendable { weak var client: MQTTClient? }
        let broker = try TestBroker()
        let weak = WeakClient()
        let holding = DispatchSemaphore(value: 0), dropped = DispatchSemaphore(value: 0)
        let first = Mutex(true)
        var client: MQTTClient? = try makeClient(broker)
        weak.client = client
        client?.setMessageHandler { _ in
            let isFirst = first.withLock { isFirst in
                let was = isFirst
                isFirst = false
                return was
            }
            guard isFirst, let strong = weak.client else { return }
            holding.signal()
            dropped.wait()
            withExtendedLifetime(strong) {}  // the last reference goes away here, on the network thread
        }
        try subscribeAndConnect(try #require(client), "self/#")
        try connectedClient(broker).publishAndWait(topic: "self/1", payload: bytes("x"), qos: 1, retain: false, timeout: .seconds(10))
        #expect(holding.wait(timeout: .now() + 10) == .success)
        client = nil
        dropped.signal()
        #expect(eventually { weak.client == nil })
        #expect(try connectedClient(broker).isConnected, "still alive, nothing crashed")
    }

    @Test
    func invalidArgumentsAreRejected() throws {
        #expect(throws: MQTTError.self) { try MQTTClient(options: .init(clientID: "")) }
        let client = try MQTTClient(options: .init(clientID: "args"))
        #expect(throws: MQTTError.self) { try client.subscribe("a/#/b", qos: 1) }
        #expect(throws: MQTTError.self) { try client.subscribe("a/b", qos: 3) }
        #expect(throws: MQTTError.self) { try client.publish(topic: "a/+", payload: [], qos: 0, retain: false) }
        var options = MQTTClient.Options(clientID: "delay")
        options.reconnectDelay = (0, 1)
        #expect(throws: MQTTError.self) { try MQTTClient(options: options) }
        options.password = "hunter2"
        #expect(!String(describing: options).contains("hunter2"))
    }

    @Test
    func topicMatching() {
        #expect(MQTTClient.topicMatches(filter: "flare/v1/shares/+/location", topic: "flare/v1/shares/abc/location"))
        #expect(MQTTClient.topicMatches(filter: "flare/v1/shares/#", topic: "flare/v1/shares/abc/status"))
        #expect(MQTTClient.topicMatches(filter: "flare/#", topic: "flare"))
        #expect(!MQTTClient.topicMatches(filter: "flare/v1/shares/+/location", topic: "flare/v1/shares/abc/status"))
        #expect(!MQTTClient.topicMatches(filter: "#", topic: "$SYS/broker/uptime"))
        #expect(!MQTTClient.topicMatches(filter: "a/#/b", topic: "a/x/b"), "invalid filter")
    }
}

/// A broker that takes one login, `flare` with `correct-horse`, from a mosquitto password file: returned too, for a
/// test that changes it (the broker reads it again on SIGHUP).
private func passwordBroker() throws -> (broker: TestBroker, passwordFile: URL) {
    let directory = try TempDirectory.make(prefix: "flare-mqtt-auth")
    let passwordFile = directory.appendingPathComponent("passwords")
    try runTool("/usr/bin/mosquitto_passwd", ["-c", "-b", passwordFile.path, "flare", "correct-horse"])
    let broker = try TestBroker(directory: directory, extraConfig: ["allow_anonymous false", "password_file \(passwordFile.path)"])
    return (broker, passwordFile)
}

private func runTool(_ path: String, _ arguments: [String]) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw TestSupportError("\(path) failed") }
}
