import FlareCore
import FlareMQTT
import FlareSystem
import FlareCodec

/// What flared publishes, on the NATS cluster: over an MQTT 3.1.1 connection (NATS keeps retained messages for MQTT
/// subscribers only when an MQTT client published them), with what MQTT 5 gave on mosquitto answered another way:
/// - flared's own positions carry an `OwnPositionMark` instead of the `flare-origin` user property;
/// - a revocation (`Topics.brokerControl`) is not published: the share's connections are ended through the system
///   account here (the callout refuses its tokens from then on, as the store says the share ended);
/// - message expiry does not exist: a retained status stays until flared replaces or clears it.
public final class NATSPublisher: BrokerPublisher {
    private let client: MQTTClient
    private let mark: OwnPositionMark
    private let sessions: NATSSessions
    private let names: NATSAuthCallout.LoginNames
    private let clock: any Clock
    private let logger: Logger

    public init(client: MQTTClient, mark: OwnPositionMark, sessions: NATSSessions, names: NATSAuthCallout.LoginNames, clock: any Clock, logger: Logger) {
        self.client = client
        self.mark = mark
        self.clock = clock
        self.sessions = sessions
        self.names = names
        self.logger = logger
    }

    public func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool {
        if topic == Topics.brokerControl { return revoke(payload) }
        return client.publish(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: nil)
    }

    public func publishOwnPosition(topic: String, payload: [UInt8]) -> Bool {
        client.publish(topic: topic, payload: mark.marked(payload, topic: topic, at: clock.now()), qos: 1, retain: true, expirySeconds: nil)
    }

    public func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?, timeout: Duration) -> Bool {
        if topic == Topics.brokerControl { return revoke(payload) }
        return client.publishAndWait(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: nil, timeout: timeout)
    }

    /// `{"op":"revoke","share_id":…}`: the share's connections on every node, ended, off the caller's thread (asking
    /// every node takes half a second; the caller may be answering an HTTP request). Tried three times; from the
    /// moment the store says the share ended, the callout refuses its tokens whatever happens here.
    private func revoke(_ payload: [UInt8]) -> Bool {
        guard let request = try? JSONValue.parse(payload), request["op"]?.stringValue == "revoke",
              let id = request["share_id"]?.stringValue.flatMap(ShareID.init) else { return true }
        let sessions = self.sessions, logger = self.logger, name = self.names.name(id)
        _ = NamedThread.start(name: "flare-revoke") {
            for attempt in 1...3 {
                do {
                    let ended = try sessions.end(user: name)
                    logger.info("share \(id.rawValue) ended: \(ended) of its connections closed")
                    return
                } catch {
                    logger.warning("could not close the connections of share \(id.rawValue) (attempt \(attempt) of 3): \(error)")
                    sleepMillis(1_000)
                }
            }
        }
        return true
    }
}
