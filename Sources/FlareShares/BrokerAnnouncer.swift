public import FlareCore
import FlareStore
import FlareSystem
import FlareWire
import Synchronization
import FlareCodec

/// What flared says on the broker about its shares, and what it could not say while the broker was away: the one
/// holder of the publisher. Retained messages (a share's status, audience, marks, a cleared position) are kept, newest
/// per topic, until the broker is back; so are revocations and commands that are still worth sending (`keep`).
/// Everything else (events, answers) goes out at once or is the outbox's to send again.
public final class BrokerAnnouncer: BrokerPublisher {
    /// What could not be handed over, sent on reconnect (`flush`).
    private struct Unsent {
        /// Retained messages, newest per topic.
        var messages: [String: (payload: [UInt8], expiry: UInt32?)] = [:]
        /// Revocations (share → token expiry, Unix s).
        var revocations: [ShareID: Int64] = [:]
        /// Other messages, newest per key, each with how to send it again; its `send` says true once the broker took
        /// it or it is no longer worth sending.
        var later: [String: @Sendable () -> Bool] = [:]
    }

    private let publisher: any BrokerPublisher
    private let unsent = Mutex(Unsent())
    private let policy: SharePolicy
    private let clock: any Clock
    private let logger: Logger
    /// "Broker unavailable" said a few times a minute, not once a message while it is away.
    private let awayLog = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 5), maximumKeys: 4)

    public init(publisher: any BrokerPublisher, policy: SharePolicy, clock: any Clock, logger: Logger) {
        self.publisher = publisher
        self.policy = policy
        self.clock = clock
        self.logger = logger
    }

    // MARK: Straight to the broker

    public func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?) -> Bool {
        publisher.publish(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: expirySeconds)
    }

    public func publishOwnPosition(topic: String, payload: [UInt8]) -> Bool {
        publisher.publishOwnPosition(topic: topic, payload: payload)
    }

    public func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, expirySeconds: UInt32?, timeout: Duration) -> Bool {
        publisher.publishAndWait(topic: topic, payload: payload, qos: qos, retain: retain, expirySeconds: expirySeconds, timeout: timeout)
    }

    // MARK: Kept until the broker takes them

    /// A retained message (QoS 1); kept, newest per topic, while the broker is away.
    func retain(topic: String, payload: [UInt8], expiry: UInt32?) {
        if !publisher.publish(topic: topic, payload: payload, qos: 1, retain: true, expirySeconds: expiry) {
            unsent.withLock { $0.messages[topic] = (payload, expiry) }
            warnAway("a status update is kept and will be sent on reconnect")
        }
    }

    func publishStatus(of share: Share) {
        let status = statusMessage(of: share)
        retain(topic: Topics.status(share.id), payload: status.payload, expiry: status.expiry)
    }

    /// The retained status of a share, and how long the broker is to keep it.
    func statusMessage(of share: Share) -> (payload: [UInt8], expiry: UInt32) {
        let retention = max(policy.historyRetentionSeconds, 3600)
        // An ended share's status stays for the retention time; an active one's must not outlive the share on a
        // broker that Flare stops talking to.
        let expiry = share.endReason != nil && share.endedAt != nil
            ? UInt32(clamping: retention)
            : UInt32(clamping: max(1, (share.expiresAt - clock.now()) / 1000) + retention)
        return (share.statusMessage, expiry)
    }

    /// Tells the broker's auth plugin (`$CONTROL/flare/v1`) to refuse the share's device and watch tokens until
    /// they expire and to disconnect its clients now. Not retained: the plugin keeps its own list on disk.
    func revoke(_ share: Share) {
        let until = Self.revocationEnd(share)
        if !sendRevocation(share.id, until: until) {
            keepRevocation(share.id, until: until)
            warnAway("a revocation is kept and will be sent on reconnect")
        }
    }

    /// A revocation to say at the next connection (one the broker may not have heard before a restart).
    func keepRevocation(_ id: ShareID, until: Int64) {
        unsent.withLock { $0.revocations[id] = until }
    }

    /// Unix seconds, rounded up: no token of the share has an `exp` later than its current expiry.
    static func revocationEnd(_ share: Share) -> Int64 { (share.expiresAt + 999) / 1000 }

    private func sendRevocation(_ id: ShareID, until: Int64) -> Bool {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("op", "revoke")
        writer.field("share_id", id.rawValue)
        writer.field("until", until)
        writer.endObject()
        return publisher.publish(topic: Topics.brokerControl, payload: writer.bytes, qos: 1, retain: false, expirySeconds: nil)
    }

    /// Sends now with `send`, or, when the broker does not take it, again at each reconnect until `send` says true
    /// (taken, or no longer worth sending). A newer message under the same `key` replaces one kept.
    func sendOrKeep(_ key: String, what: String, _ send: @escaping @Sendable () -> Bool) {
        guard !send() else { return }
        unsent.withLock { $0.later[key] = send }
        warnAway("\(what) is kept and will be sent on reconnect")
    }

    /// Sends again what could not be sent while the broker was away. Called on every (re)connect.
    func flush() {
        let pending = unsent.withLock { unsent in
            defer { unsent = Unsent() }
            return unsent
        }
        for (topic, message) in pending.messages { retain(topic: topic, payload: message.payload, expiry: message.expiry) }
        for (id, until) in pending.revocations where !sendRevocation(id, until: until) { keepRevocation(id, until: until) }
        for (key, send) in pending.later where !send() {
            unsent.withLock { $0.later[key] = $0.later[key] ?? send }
        }
    }

    private func warnAway(_ what: String) {
        if awayLog.take("away", nowMillis: clock.monotonicMillis()) == nil { logger.warning("broker unavailable; \(what)") }
    }
}
