public import FlareCore
public import FlareStore
import FlareCrypto
import FlareSystem

/// A browser's Web Push subscription as its page hands it over (`PushSubscription.toJSON()`), checked: an endpoint the
/// deliverer may post to, a P-256 key on the curve and a 16-byte auth secret.
public struct BrowserSubscription: Sendable, Equatable {
    public let endpoint: String
    public let p256dh: [UInt8]
    public let auth: [UInt8]
    public let language: ContactLanguage

    /// Nil when the keys are not what RFC 8291 takes (the endpoint is checked by the caller, which knows the rule).
    public init?(endpoint: String, p256dh: [UInt8], auth: [UInt8], language: ContactLanguage) {
        guard P256.isValidPublicKey(p256dh), auth.count == PushSubscriptionRules.authSecretLength else { return nil }
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
        self.language = language
    }
}

/// Who gets Web Push notifications: the viewers of a link who asked ("Notify me about Anna"), and contacts who asked
/// ahead of any SOS on their alerts page (`/alerts#c=<secret>`). Subscriptions live in the store, so any instance
/// takes them and the delivering one sends to them; what is sent, and when, is the outbox's (`EventDeliverer`).
public final class PushAlerts: Sendable {
    public enum Refusal: Error, Equatable {
        /// The link, or the contact's alerts, has `PushSubscriptionRules.maximumPerLink` subscriptions already.
        case full
        case ended
        case storage(String)
    }

    private let store: any PushRecords & ContactRecords
    private let tokenKey: [UInt8]
    private let clock: any Clock
    private let logger: Logger

    init(store: any PushRecords & ContactRecords, tokenKey: [UInt8], clock: any Clock, logger: Logger) {
        self.store = store
        self.tokenKey = tokenKey
        self.clock = clock
        self.logger = logger
    }

    /// Subscribes a viewer of `snapshot`'s link (`link` nil: the share's own). True when it is new, false when the
    /// same browser subscribed again (its keys are the new ones).
    public func subscribe(_ subscription: BrowserSubscription, to snapshot: ShareSnapshot, link: ShareLink?) throws(Refusal) -> Bool {
        guard snapshot.share.isActive else { throw .ended }
        return try add(subscription, for: .link(shareRow: snapshot.row, link: link?.id), what: "share \(snapshot.share.id)")
    }

    /// False when the link had no subscription with this endpoint.
    public func unsubscribe(endpoint: String, from snapshot: ShareSnapshot, link: ShareLink?) throws(Refusal) -> Bool {
        do { return try store.removePushSubscription(.link(shareRow: snapshot.row, link: link?.id), endpoint: endpoint) } catch {
            throw .storage(error.description)
        }
    }

    /// Subscribes the contact's browser to their alerts: every alarm of a share that gives them a link.
    public func subscribe(_ subscription: BrowserSubscription, alertsOf contact: Contact) throws(Refusal) -> Bool {
        try add(subscription, for: .contact(contact.id), what: "contact \(contact.id)'s alerts")
    }

    public func unsubscribe(endpoint: String, alertsOf contact: Contact) throws(Refusal) -> Bool {
        do { return try store.removePushSubscription(.contact(contact.id), endpoint: endpoint) } catch { throw .storage(error.description) }
    }

    private func add(_ subscription: BrowserSubscription, for subscriber: PushSubscriber, what: String) throws(Refusal) -> Bool {
        let outcome: PushSubscribing
        do {
            outcome = try store.addPushSubscription(subscriber, endpoint: subscription.endpoint, p256dh: subscription.p256dh, auth: subscription.auth,
                                                    language: subscription.language, at: clock.now(), limit: PushSubscriptionRules.maximumPerLink)
        } catch { throw .storage(error.description) }
        switch outcome {
        case .added:
            logger.info("\(what): a browser subscribed to push notifications")
            return true
        case .renewed: return false
        case .full: throw .full
        }
    }

    // MARK: The contacts' alerts secret

    /// The alerts secret of `contact` (`ContactAlerts.secret`), its hash recorded so that the page's requests find the
    /// contact.
    public func issueAlertsSecret(of contact: ContactID) throws(StoreError) -> String {
        try Self.issueAlertsSecret(of: contact, tokenKey: tokenKey, store: store)
    }

    /// The same for a caller with the token key and the store (the mail that carries the link).
    static func issueAlertsSecret(of contact: ContactID, tokenKey: [UInt8], store: any PushRecords) throws(StoreError) -> String {
        let secret = ContactAlerts.secret(tokenKey: tokenKey, contact: contact)
        try store.setAlertsHash(contact: contact, hash: SecretHash(of: secret))
        return secret
    }

    /// The contact this alerts secret is for; nil when it is malformed or nobody's (the contact was deleted).
    public func contact(alertsSecret secret: some StringProtocol) throws(StoreError) -> Contact? {
        guard Secret.isWellFormed(secret) else { return nil }
        return try store.contact(alertsHash: SecretHash(of: String(secret)))
    }
}
