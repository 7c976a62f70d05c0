import FlareMQTT
import FlareTestSupport
import Foundation
import Synchronization

/// What a new subscriber finds retained on a topic: the message text, or nil if nothing is retained.
enum Retained {
    static func message(port: Int, topic: String, wait: Duration = .milliseconds(700)) throws -> String? {
        var options = MQTTClient.Options(clientID: "probe-\(UUID().uuidString.prefix(8))")
        options.port = port
        let client = try MQTTClient(options: options)
        let received = Mutex<String?>(nil)
        client.setMessageHandler { message in
            if message.retain { received.withLock { $0 = String(decoding: message.payload, as: UTF8.self) } }
        }
        try client.subscribe(topic, qos: 1)
        try client.connect()
        defer { client.disconnect() }
        guard client.waitUntilConnected(timeout: .seconds(5)) else { throw TestSupportError("probe cannot connect") }
        let deadline = ContinuousClock.now + wait
        while ContinuousClock.now < deadline {
            if let text = received.withLock({ $0 }) { return text }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return received.withLock { $0 }
    }
}
