public import FlareCore
public import FlareSystem

/// Whom a Web Push subscription belongs to, and so when it ends.
public enum PushSubscriber: Sendable, Equatable, Hashable {
    /// A viewer of one of a share's links (`link` nil: the share's own link): it ends with the link (withdrawn), the
    /// share (after the notification that it ended) or its history.
    case link(shareRow: Int64, link: LinkID?)
    /// A contact who asked, on the alerts page, for alerts before any SOS: it ends when they stop them or the contact is
    /// deleted.
    case contact(ContactID)
}

/// A browser's Web Push subscription (RFC 8030 endpoint, RFC 8291 keys), as stored.
public struct PushSubscription: Sendable, Equatable {
    public let row: Int64
    public let subscriber: PushSubscriber
    /// The push service's URL for this browser: itself a capability (whoever has it can push), so never logged.
    public let endpoint: String
    /// The browser's P-256 public key, 65 bytes uncompressed.
    public let p256dh: [UInt8]
    /// The 16-byte authentication secret.
    public let auth: [UInt8]
    /// The language of the notifications' text: the page's when it subscribed.
    public let language: ContactLanguage
    public let createdAt: UnixMillis

    public init(row: Int64, subscriber: PushSubscriber, endpoint: String, p256dh: [UInt8], auth: [UInt8], language: ContactLanguage, createdAt: UnixMillis) {
        self.row = row
        self.subscriber = subscriber
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
        self.language = language
        self.createdAt = createdAt
    }
}

/// What became of a request to subscribe.
public enum PushSubscribing: Sendable, Equatable {
    case added(row: Int64)
    /// The same browser subscribed again (the same endpoint): its keys are the new ones.
    case renewed(row: Int64)
    /// The subscriber has as many subscriptions as it may.
    case full
}

/// Web Push subscriptions, the fan-out of an event to them, the server's sealed VAPID key, and the hashes of the
/// contacts' alert secrets.
public protocol PushRecords: Sendable {
    /// Stores a subscription, or renews the one with the same endpoint; `.full` when the subscriber has `limit`.
    func addPushSubscription(_ subscriber: PushSubscriber, endpoint: String, p256dh: [UInt8], auth: [UInt8], language: ContactLanguage,
                             at: UnixMillis, limit: Int) throws(StoreError) -> PushSubscribing
    /// Removes the subscriber's subscription with this endpoint; false when there was none.
    func removePushSubscription(_ subscriber: PushSubscriber, endpoint: String) throws(StoreError) -> Bool
    func pushSubscription(row: Int64) throws(StoreError) -> PushSubscription?
    /// The push service said the subscription is gone (404, 410), or its share ended and was announced.
    func deletePushSubscription(row: Int64) throws(StoreError)
    /// Replaces the event's `push` delivery with one `push:<row>` delivery per subscription it goes to now, in one
    /// transaction: those of the share's links that are not withdrawn, and (`alerts`) the alerts of every contact with a
    /// personal link on the share that is not withdrawn. Subscriptions of the share's withdrawn links are deleted
    /// on the way. Returns how many deliveries it made (0: the `push` delivery was done already, or nobody subscribed).
    func fanOutPush(eventRow: Int64, alerts: Bool) throws(StoreError) -> Int
    /// Every stored subscription, for the gauge.
    func pushSubscriptionCount() throws(StoreError) -> Int
    /// The stored value named `name` (a server key, sealed); when there is none, `candidate` is stored and answered:
    /// every instance gets the same, whichever stored it first.
    func serverSecret(_ name: String, storingIfAbsent candidate: [UInt8]) throws(StoreError) -> [UInt8]
    /// Records the hash of the contact's alerts secret (derived, so the same every time: storing it again changes nothing).
    func setAlertsHash(contact: ContactID, hash: SecretHash) throws(StoreError)
    /// The contact whose alerts secret has this hash.
    func contact(alertsHash: SecretHash) throws(StoreError) -> Contact?
}
