import FlareMQTT
import FlareTestSupport
import Foundation
import Synchronization

/// What a new subscriber finds retained on a topic: the message text, or nil if nothing is retained.
enum Retained {
    /// True only when the probe ran and found nothing retained (a failed probe is not "empty").
    static func isEmpty(port: Int, topic: String) -> Bool {
        do { return try message(port: port, topic: topic) == nil } catch { return false }
    }

    /// Exact, not timed: after subscribing, the probe publishes a marker to a topic of its own. The broker
    /// delivers on one connection in order, so once the marker is back, any retained message has arrived.
    static func message(port: Int, topic: String) throws -> String? {
        let probeID = UUID().uuidString.prefix(8)
        let markerTopic = "flare-test/probe/\(probeID)"
        var options = MQTTClient.Options(clientID: "probe-\(probeID)")
        options.port = port
        let client = try MQTTClient(options: options)
        let state = Mutex<(retained: String?, markerSeen: Bool)>((nil, false))
        client.setMessageHandler { message in
            state.withLock { state in
                if message.topic == markerTopic { state.markerSeen = true }
                else if message.retain { state.retained = String(decoding: message.payload, as: UTF8.self) }
            }
        }
        try client.subscribe(topic, qos: 1)
        try client.subscribe(markerTopic, qos: 1)
        try client.connect()
        defer { client.disconnect() }
        guard try client.waitUntilSubscribed(timeout: .seconds(10)) else { throw TestSupportError("probe cannot subscribe") }
        try client.publishAndWait(topic: markerTopic, payload: Array("marker".utf8), qos: 1, retain: false, timeout: .seconds(10))
        guard eventually(timeout: .seconds(10), { state.withLock { $0.markerSeen } }) else { throw TestSupportError("probe marker never came back") }
        return state.withLock { $0.retained }
    }
}
