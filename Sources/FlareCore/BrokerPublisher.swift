/// Publishes to the broker. `MQTTClient` is the real one; the protocol keeps share logic testable in memory.
public protocol BrokerPublisher: Sendable {
    /// Queues a message for the broker; false if it could not be handed over (e.g. not connected).
    func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool
    /// Queues a position for a share's location topic (QoS 1, retained) marked as flared's own
    /// (`Topics.originProperty`), so that the bridges do not take it for a new fix.
    func publishOwnPosition(topic: String, payload: [UInt8]) -> Bool
    /// Publishes and waits until the broker acknowledges it, which also means that it has processed everything
    /// handed over before on this connection. False on timeout, refusal or while not connected.
    func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?, timeout: Duration) -> Bool
}
