import FlareAPI
import FlareCore
import FlareStore
import FlareEvents
import FlareSystem
import FlareWire
import Synchronization

extension ShareService {
    // MARK: Broker announcements

    /// What the broker could not be handed while it was away, sent on reconnect (`flushUnsent`).
    struct Unsent {
        /// Messages, newest per topic.
        var messages: [String: (payload: [UInt8], expiry: UInt32?)] = [:]
        /// Revocations (share → token expiry, Unix s).
        var revocations: [ShareID: Int64] = [:]
        /// "Locate now" requests, by when they were asked: sent while still valid.
        var locateRequests: [ShareID: UnixMillis] = [:]
    }

    func publishStatus(of share: Share) {
        let status = statusMessage(of: share)
        publish(topic: Topics.status(share.id), payload: status.payload, expiry: status.expiry)
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

    func publish(topic: String, payload: [UInt8], expiry: UInt32?) {
        if !publisher.publish(topic: topic, payload: payload, qos: 1, retain: true, expirySeconds: expiry) {
            unsent.withLock { $0.messages[topic] = (payload, expiry) }
            logger.warning("broker unavailable; a status update is kept and will be sent on reconnect")
        }
    }

    /// Tells the broker's auth plugin (`$CONTROL/flare/v1`) to refuse the share's device and watch tokens until
    /// they expire and to disconnect its clients now. Not retained: the plugin keeps its own list on disk.
    func revoke(_ share: Share) {
        let until = Self.revocationEnd(share)
        if !sendRevocation(share.id, until: until) {
            unsent.withLock { $0.revocations[share.id] = until }
            logger.warning("broker unavailable; a revocation is kept and will be sent on reconnect")
        }
    }

    /// Unix seconds, rounded up: no token of the share has an `exp` later than its current expiry.
    static func revocationEnd(_ share: Share) -> Int64 { (share.expiresAt + 999) / 1000 }

    func sendRevocation(_ id: ShareID, until: Int64) -> Bool {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("op", "revoke")
        writer.field("share_id", id.rawValue)
        writer.field("until", until)
        writer.endObject()
        return publisher.publish(topic: Topics.brokerControl, payload: writer.bytes, qos: 1, retain: false, expirySeconds: nil)
    }

    /// Re-sends what could not be published while the broker was away. Called on every (re)connect.
    public func flushUnsent() {
        flushUnpublishedHTTPFixes()
        let pending = unsent.withLock { unsent in
            defer { unsent = Unsent() }
            return unsent
        }
        for (topic, message) in pending.messages { publish(topic: topic, payload: message.payload, expiry: message.expiry) }
        for (id, until) in pending.revocations where !sendRevocation(id, until: until) {
            unsent.withLock { $0.revocations[id] = until }
        }
        let locateRequests = pending.locateRequests
        for (id, askedAt) in locateRequests where !sendLocateRequest(id, askedAt: askedAt) {
            unsent.withLock { $0.locateRequests[id] = askedAt }
        }
    }
}
