/// One received PUBLISH, copied out of libmosquitto's buffers inside the callback.
public struct MQTTMessage: Sendable {
    public let topic: String
    public let payload: [UInt8]
    public let qos: Int
    /// True when the broker sent a stored retained message (e.g. right after SUBSCRIBE), false for live traffic.
    public let retain: Bool
    /// MQTT v5 user properties, in the order sent (empty for v3.1.1 and for most messages).
    public let userProperties: [MQTTUserProperty]

    public init(topic: String, payload: [UInt8], qos: Int, retain: Bool, userProperties: [MQTTUserProperty] = []) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.userProperties = userProperties
    }

    public func userProperty(_ name: String) -> String? {
        userProperties.first { $0.name == name }?.value
    }
}

/// An MQTT v5 user property: a name and a value, both UTF-8, carried with a message (and kept with a retained one).
public struct MQTTUserProperty: Sendable, Equatable {
    public let name: String
    public let value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

public enum MQTTConnectionEvent: Sendable {
    /// CONNACK accepted. `sessionPresent` says the broker resumed a persistent session (queued messages follow).
    case connected(sessionPresent: Bool)
    /// The connection ended or could not be made; libmosquitto keeps retrying unless `disconnect()` was called.
    case disconnected(reason: String)
    /// The broker answered CONNACK with a refusal (bad credentials, not authorised, ...). The client then stops
    /// trying; `disconnect()` and `connect()` start over.
    case refused(reason: String)
}
