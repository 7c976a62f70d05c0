public import FlareCore
public import FlareStore
import FlareEvents
import FlareSystem
import Synchronization

/// The one door to owner keys: making them (the key is returned once and only its hash kept), listing, revoking,
/// and checking the one a request carries.
///
/// A check costs one hash and one indexed lookup. On a database server that is a round trip, and an app creating
/// shares would pay it on every request, so a key found is remembered for `memoryMillis`. With a shared store a
/// revocation reaches every instance through the store's change feed and is forgotten at once. With SQLite a
/// lookup is a read transaction of its own (its locks as system calls, as much as a share's insert), so a key found
/// is remembered only while the store's `ownerKeysMark` stays the same: the mark is read before the lookup and
/// moves with any key's change by any process, so a key revoked from the command line still stops working at the
/// next request. A store with neither (no mark, not shared) looks the key up every time.
public final class OwnerKeyService: Sendable {
    let store: any KeyRecords & ChangeFeed
    private let clock: any Clock
    private let metrics: Metrics
    private let logger: Logger
    /// Keys found, until when, and at which `ownerKeysMark` (nil with a shared store).
    private let known = Mutex<[SecretHash: (key: OwnerKeyRecord, until: Int64, mark: UInt64?)]>([:])
    /// When each key's last use was written (at most once a minute per key).
    private let usedNoted = Mutex<[Int64: Int64]>([:])
    static let memoryMillis: Int64 = 10_000
    static let usedNoteMillis: Int64 = 60_000
    private let sealer: WebhookSecretSealer
    /// Webhook changes per key: each may resolve a host name, and a key has no reason to change it often.
    private let webhookChanges = RateLimiter(rule: .init(ratePerSecond: 1.0 / 60, burst: 10), maximumKeys: 10_000)
    /// Where setting a limited key's webhook looks its host name up: off the HTTP request thread.
    private let lookups: HostLookups
    /// How long setting a webhook waits for its host name's lookup before answering "retry" (`lookupRetrySeconds`
    /// later): a lookup takes milliseconds when DNS answers, and one that does not must not hold one of the few HTTP
    /// threads for the resolver's own timeouts (10 s and more).
    static let lookupWait: Duration = .seconds(2)
    static let lookupRetrySeconds = 5

    init(store: any KeyRecords & ChangeFeed, sealer: WebhookSecretSealer, resolver: any HostResolving, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.store = store
        self.sealer = sealer
        self.lookups = HostLookups(resolver: resolver, clock: clock)
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
    }

    /// The current (not revoked) key `text` is, if any. Throws when the store cannot say: a key that cannot be looked
    /// up is not a wrong key.
    public func key(_ text: String) throws(StoreError) -> OwnerKeyRecord? {
        guard OwnerKey.isWellFormed(text) else { return nil }
        let hash = SecretHash(of: text)
        let now = clock.monotonicMillis()
        // Read before the lookup: a change committed after the lookup moves it (see the type's comment).
        let mark = store.isShared ? nil : store.ownerKeysMark
        let remembers = store.isShared || mark != nil
        if remembers, let remembered = known.withLock({ $0[hash] }), now < remembered.until, remembered.mark == mark {
            noteUse(remembered.key.id, now: now)
            return remembered.key
        }
        guard let found = try store.ownerKey(hash: hash), !found.isRevoked else { return nil }
        if remembers {
            known.withLock { known in
                if known.count >= 1_000 { known.removeAll(keepingCapacity: true) }
                known[hash] = (found, now + Self.memoryMillis, mark)
            }
        }
        noteUse(found.id, now: now)
        return found
    }

    private func noteUse(_ id: Int64, now: Int64) {
        let due = usedNoted.withLock { noted in
            guard now - (noted[id] ?? Int64.min / 2) >= Self.usedNoteMillis else { return false }
            noted[id] = now
            return true
        }
        // Only `flare keys list`'s "last used": not written now, it is at the key's next use after a minute.
        guard due else { return }
        do { try store.noteOwnerKeyUsed(id: id, at: clock.now()) } catch { usedNoted.withLock { _ = $0.removeValue(forKey: id) } }
    }

    /// The limits of the key that owns a share (nil: no owner, or no such key). Throws when the store cannot say, so
    /// that a limit is never skipped for want of reading it.
    func limits(ofOwner id: Int64?) throws(StoreError) -> KeyLimits? {
        guard let id else { return nil }
        return try store.ownerKey(id: id)?.limits
    }

    /// Makes a key. Returns it (shown once) and its record.
    public func create(label: String, admin: Bool, limits: KeyLimits) throws(StoreError) -> (key: String, record: OwnerKeyRecord) {
        let key = OwnerKey.generate()
        let now = clock.now()
        let id = try store.insertOwnerKey(hash: SecretHash(of: key), label: label, createdAt: now, admin: admin, limits: limits)
        logger.info("owner key \(id) created (\(admin ? "admin" : "limited"), label \"\(label)\")")
        return (key, OwnerKeyRecord(id: id, label: label, isAdmin: admin, limits: limits, createdAt: now))
    }

    public func list() throws(StoreError) -> [OwnerKeyRecord] { try store.ownerKeys() }

    public func find(id: Int64) throws(StoreError) -> OwnerKeyRecord? { try store.ownerKey(id: id) }

    /// Revokes a key at once (on every instance: see the type's comment). What it left running is stopped by
    /// `KeyRevocations`.
    @discardableResult
    public func revoke(id: Int64) throws(StoreError) -> Bool {
        let revoked = try store.revokeOwnerKey(id: id, at: clock.now())
        forget(id)
        if revoked { logger.info("owner key \(id) revoked; its live shares, armed check-ins and queued mail are being stopped") }
        return revoked
    }

    /// Another instance revoked the key (the store's change feed).
    func forget(_ id: Int64) {
        known.withLock { known in known = known.filter { $0.value.key.id != id } }
    }
}

// MARK: Webhooks

extension OwnerKeyService {
    public enum WebhookRefusal: Error, Equatable {
        case invalid(WebhookURL.Problem)
        case tooOften(retryAfterSeconds: Int)
        /// The host name's lookup did not answer in time (it goes on meanwhile): try again then.
        case lookupUnfinished(retryAfterSeconds: Int)
        case noSuchKey
        case storage(String)
    }

    /// Sets the webhook of key `id` (asked by `caller`: the key itself or an admin), with a new secret returned this
    /// once and kept sealed.
    ///
    /// The address rule follows the key whose shares' events go there: a limited key's URL must resolve to public
    /// addresses only; an admin key's may point anywhere. It is checked here, so that the caller learns at once of an
    /// address that will never do, and again at every delivery, which connects only to the addresses it checked. The
    /// lookup here runs on a thread of its own (`HostLookups`): a name whose DNS does not answer within `lookupWait`
    /// is refused with `.lookupUnfinished`, and a retry finds the lookup's answer.
    public func setWebhook(id: Int64, url text: String) throws(WebhookRefusal) -> (url: WebhookURL, secret: WebhookSecret, replaced: Bool) {
        let url: WebhookURL
        do { url = try WebhookURL(text) } catch { throw .invalid(error) }
        if let wait = webhookChanges.take("\(id)", nowMillis: clock.monotonicMillis()) { throw .tooOften(retryAfterSeconds: wait) }
        let key: OwnerKeyRecord?
        do { key = try store.ownerKey(id: id) } catch { throw .storage(error.description) }
        guard let key, !key.isRevoked else { throw .noSuchKey }
        if !key.isAdmin {
            let answers: [IPAddress]
            if let literal = url.hostAddress {
                answers = [literal]
            } else {
                switch lookups.addresses(of: url.host, timeout: Self.lookupWait) {
                case .addresses(let found): answers = found
                case .unfinished: throw .lookupUnfinished(retryAfterSeconds: Self.lookupRetrySeconds)
                }
            }
            do { _ = try url.permittedAddresses(answers, publicOnly: true) } catch { throw .invalid(error) }
        }
        let secret = WebhookSecret.generate()
        guard let sealed = sealer.seal(secret, ownerKey: id) else { throw .storage("cannot seal the secret") }
        do {
            guard try store.setKeyWebhook(id: id, url: url.text, sealedSecret: sealed, at: clock.now()) else { throw WebhookRefusal.noSuchKey }
        } catch let refusal as WebhookRefusal {
            throw refusal
        } catch {
            throw .storage("\(error)")
        }
        logger.info("owner key \(id): webhook set (host \(url.host))\(key.webhookURL == nil ? "" : "; the previous secret signs too for 24 h")")
        return (url, secret, key.webhookURL != nil)
    }

    /// Removes key `id`'s webhook; events already waiting for it are dropped at their next attempt.
    public func removeWebhook(id: Int64) throws(WebhookRefusal) {
        do {
            guard try store.setKeyWebhook(id: id, url: nil, sealedSecret: nil, at: clock.now()) else { throw WebhookRefusal.noSuchKey }
        } catch let refusal as WebhookRefusal {
            throw refusal
        } catch {
            throw .storage("\(error)")
        }
        logger.info("owner key \(id): webhook removed")
    }
}
