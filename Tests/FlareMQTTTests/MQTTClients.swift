import FlareMQTT
import FlareTestSupport
import Foundation
import Synchronization

/// Collects what a client's handlers see, for assertions from the test thread.
final class Recorder: Sendable {
    private let messageLog = Mutex<[MQTTMessage]>([])
    private let eventLog = Mutex<[MQTTConnectionEvent]>([])

    func attach(to client: MQTTClient) {
        client.setMessageHandler { message in self.messageLog.withLock { $0.append(message) } }
        client.setConnectionHandler { event in self.eventLog.withLock { $0.append(event) } }
    }

    var messages: [MQTTMessage] { messageLog.withLock { $0 } }
    var events: [MQTTConnectionEvent] { eventLog.withLock { $0 } }

    func messages(on topic: String) -> [MQTTMessage] { messages.filter { $0.topic == topic } }

    var refusals: [String] {
        events.compactMap { if case .refused(let reason) = $0 { reason } else { nil } }
    }

    var disconnections: [String] {
        events.compactMap { if case .disconnected(let reason) = $0 { reason } else { nil } }
    }

    var sessionPresentFlags: [Bool] {
        events.compactMap { if case .connected(let present) = $0 { present } else { nil } }
    }
}

extension MQTTClient.ProtocolVersion: CustomStringConvertible {
    public var description: String { self == .v5 ? "MQTT 5" : "MQTT 3.1.1" }
}

/// A client for `broker` with a unique id and fast reconnects; `recorder` is attached before anything else.
func makeClient(
    _ broker: TestBroker,
    id: String = "test-\(UUID().uuidString.prefix(8))",
    version: MQTTClient.ProtocolVersion = .v5,
    recorder: Recorder? = nil,
    configure: (inout MQTTClient.Options) -> Void = { _ in }
) throws -> MQTTClient {
    var options = MQTTClient.Options(clientID: id)
    options.port = broker.port
    options.protocolVersion = version
    options.reconnectDelay = (1, 2)
    configure(&options)
    let client = try MQTTClient(options: options)
    recorder?.attach(to: client)
    return client
}

/// A connected client, for publishing test traffic.
func connectedClient(_ broker: TestBroker, version: MQTTClient.ProtocolVersion = .v5) throws -> MQTTClient {
    let client = try makeClient(broker, version: version)
    try client.connect()
    guard client.waitUntilConnected(timeout: .seconds(10)) else { throw TestSupportError("publisher did not connect") }
    return client
}

/// Subscribes `client`, connects it and waits for the SUBACK.
func subscribeAndConnect(_ client: MQTTClient, _ pattern: String, qos: Int = 1) throws {
    try client.subscribe(pattern, qos: qos)
    try client.connect()
    guard try client.waitUntilSubscribed(timeout: .seconds(10)) else { throw TestSupportError("subscription not acknowledged") }
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
