/// One received PUBLISH, copied out of libmosquitto's buffers inside the callback.
public struct MQTTMessage: Sendable {
    public let topic: String
    public let payload: [UInt8]
    public let qos: Int
    /// True when the broker sent a stored retained message (e.g. right after SUBSCRIBE), false for live traffic.
    public let retain: Bool

    public init(topic: String, payload: [UInt8], qos: Int, retain: Bool) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
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
