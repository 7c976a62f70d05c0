public import FlareCore
public import FlareCrypto
public import FlareStore

/// What a push service answered: its status and the `Retry-After` it asked for, or why there was no answer.
public enum PushResponse: Sendable, Equatable {
    case status(Int, retryAfterSeconds: Int?)
    case failed(String)
}

/// Sends one Web Push request (RFC 8030 §5) to a push service, as `WebhookPosting` sends a webhook: to the addresses
/// checked, never following a redirect.
public protocol PushPosting: Sendable {
    func post(_ url: WebhookURL, connectingTo addresses: [IPAddress], headers: [(name: String, value: String)], body: [UInt8],
              timeout: Duration) -> PushResponse
}

/// The notification for one subscription, as the composer makes it at the moment of sending (from the store: the
/// link's URL is never in the outbox), or why there is nothing to send.
public enum PushNotice: Sendable, Equatable {
    /// The JSON the service worker turns into a notification: small, and without a coordinate (a lock screen is seen
    /// by others).
    case send(payload: [UInt8])
    case nothing(reason: String)
}

/// Writes the notification telling a subscription's browser of an event.
public protocol PushComposing: Sendable {
    func notice(for event: ShareEvent, to subscription: PushSubscription) throws(StoreError) -> PushNotice
}

/// What the deliverer needs to push: the server's VAPID key and contact (RFC 8292), the writer of each notification,
/// and whether a push service may be on this machine (tests only).
public struct WebPushing: Sendable {
    public let key: VAPIDKey
    /// `mailto:` or `https:`: whom a push service's operator contacts about this server (`FLARE_VAPID_SUBJECT`).
    public let subject: String
    public let composer: any PushComposing
    /// `FLARE_PUSH_ALLOW_LOOPBACK`: an `http://127.0.0.1` endpoint is let through (a test's receiver). Off, an endpoint
    /// must be `https` on a public address.
    public let allowsLoopback: Bool

    public init(key: VAPIDKey, subject: String, composer: any PushComposing, allowsLoopback: Bool = false) {
        self.key = key
        self.subject = subject
        self.composer = composer
        self.allowsLoopback = allowsLoopback
    }

    /// Whether a subscription's endpoint may be stored and posted to: `https` (or, with `allowsLoopback`, `http` to a
    /// loopback literal), no user or password, within `PushSubscriptionRules.maximumEndpointLength`. Its addresses
    /// are checked again at each delivery (`publicOnly` unless loopback is allowed).
    public func acceptsEndpoint(_ text: String) -> WebhookURL? { Self.acceptsEndpoint(text, allowsLoopback: allowsLoopback) }

    /// `acceptsEndpoint` for a given rule (the gateway checks a subscription with it before storing it).
    public static func acceptsEndpoint(_ text: String, allowsLoopback: Bool) -> WebhookURL? {
        guard text.utf8.count <= PushSubscriptionRules.maximumEndpointLength, let url = try? WebhookURL(text) else { return nil }
        if url.isTLS { return url }
        guard allowsLoopback, let address = url.hostAddress, address.isLoopback else { return nil }
        return url
    }

    /// The endpoint's origin (`scheme://host[:port]`): the VAPID token's audience (RFC 8292 §2).
    public static func origin(of url: WebhookURL) -> String {
        let scheme = url.isTLS ? "https" : "http"
        let standard = url.isTLS ? 443 : 80
        let host = url.host.contains(":") ? "[\(url.host)]" : url.host
        return url.port == standard ? "\(scheme)://\(host)" : "\(scheme)://\(host):\(url.port)"
    }
}

extension WebPushing {
    public struct KeyProblem: Error, CustomStringConvertible {
        public let description: String
    }

    /// The name of the VAPID key's row in the store (`PushRecords.serverSecret`).
    static let keyName = "vapid-p256-v1"

    /// The server's VAPID key: the one in the store, or a new one stored now if there is none. Kept in the store so
    /// that every instance signs with the same key (a browser subscribes with one public key, and a push service
    /// refuses a notification signed by another); sealed with a key derived from the token key (AES-256-GCM), so that
    /// a copy of the store alone cannot push to anyone. `created` says whether this call made it.
    public static func key(in store: any PushRecords, tokenKey: [UInt8]) throws -> (key: VAPIDKey, created: Bool) {
        let sealing = Crypto.hmacSHA256(key: tokenKey, message: Array("flare vapid key v1".utf8))
        let candidate = VAPIDKey.generate()
        guard let sealed = Crypto.seal(candidate.privateKey, key: sealing, context: Array(keyName.utf8)) else {
            throw KeyProblem(description: "cannot seal a new VAPID key")
        }
        let stored = try store.serverSecret(keyName, storingIfAbsent: sealed)
        guard let privateKey = Crypto.open(stored, key: sealing, context: Array(keyName.utf8)), let key = VAPIDKey(privateKey: privateKey) else {
            throw KeyProblem(description: "the VAPID key in the store was sealed with another token key (token.key changed?); browsers subscribed with it cannot be reached. Delete the row 'vapid-p256-v1' of the table server_secrets to make a new one: every browser then subscribes again")
        }
        return (key, stored == sealed)
    }
}
