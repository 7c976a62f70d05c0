public import FlareCore
public import FlareSystem

/// Owner keys (their hashes, kinds and limits) and the keys' webhooks.
public protocol KeyRecords: Sendable {
    /// Stores a key's hash, kind and limits; returns its id.
    @discardableResult
    func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis, admin: Bool, limits: KeyLimits) throws(StoreError) -> Int64
    /// The key with this hash (compared in constant time), revoked or not.
    func ownerKey(hash: SecretHash) throws(StoreError) -> OwnerKeyRecord?
    func ownerKey(id: Int64) throws(StoreError) -> OwnerKeyRecord?
    /// Every key, oldest first, each with how many live shares it owns.
    func ownerKeys() throws(StoreError) -> [OwnerKeyRecord]
    /// Revokes a key: it stops working at once; what it left running is stopped by `KeyRevocations` (see
    /// `keysWithWorkToStop`). True only for the call that revoked it.
    @discardableResult
    func revokeOwnerKey(id: Int64, at: UnixMillis) throws(StoreError) -> Bool
    /// Records when a key was last used (the caller calls it at most now and then per key).
    func noteOwnerKeyUsed(id: Int64, at: UnixMillis) throws(StoreError)
    func ownerKeyCount() throws(StoreError) -> Int

    /// Sets (or, with nil, removes) a key's webhook; setting one again makes the old secret the previous one.
    /// False when there is no such key.
    func setKeyWebhook(id: Int64, url: String?, sealedSecret: [UInt8]?, at: UnixMillis) throws(StoreError) -> Bool
    /// Seals every key's webhook secrets (current and previous) anew, all in one transaction, for a new token key:
    /// `reseal` returns the secret sealed under the new key, or nil when it cannot open it, which changes nothing
    /// (a `StoreError` is thrown). Returns how many keys' secrets were sealed anew.
    func resealWebhookSecrets(_ reseal: @Sendable (_ keyID: Int64, _ sealed: [UInt8]) -> [UInt8]?) throws(StoreError) -> Int
    func keyWebhook(id: Int64) throws(StoreError) -> KeyWebhook?
    /// Revoked keys whose running work (live shares, armed check-ins, queued mail) has not been stopped yet, in the
    /// order they were revoked.
    func keysWithWorkToStop() throws(StoreError) -> [Int64]
    /// What revoked key `key` left queued, stopped in one transaction: its armed check-ins are cancelled (nobody is
    /// told at their deadline) and the mail waiting for its shares' contacts is dropped. Returns how many of each. Its
    /// shares are ended by the caller, through the share service (memory, broker, viewers).
    func cancelQueuedWork(ofKey key: Int64, at: UnixMillis) throws(StoreError) -> (checkins: Int, mails: Int)
    /// The key's work is stopped: `keysWithWorkToStop` leaves it out from now on.
    func noteKeyWorkStopped(_ key: Int64, at: UnixMillis) throws(StoreError)
    /// Takes up to `count` mails from key `key`'s budget of `perHour` mails an hour (a bucket that refills evenly, full
    /// at first), counted here so that every instance shares it; returns how many it may send (0 to `count`).
    func takeMailBudget(key: Int64, count: Int, perHour: Int, now: UnixMillis) throws(StoreError) -> Int
    /// A number that moves whenever any process makes, revokes or changes an owner key, read without asking the
    /// database; nil when the store has none. A key looked up after the mark was read is current for as long as the
    /// mark stays the same, so a daemon may remember it without missing a revocation made from the command line.
    var ownerKeysMark: UInt64? { get }
}

extension KeyRecords {
    /// Whether a current (not revoked) key with this hash exists.
    public func ownerKeyExists(hash: SecretHash) throws(StoreError) -> Bool {
        try ownerKey(hash: hash).map { !$0.isRevoked } ?? false
    }

    /// An admin key with no limits (the kind every key was before keys owned shares).
    @discardableResult
    public func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis) throws(StoreError) -> Int64 {
        try insertOwnerKey(hash: hash, label: label, createdAt: createdAt, admin: true, limits: .none)
    }
}

/// A key's webhook: its URL and signing secrets, sealed (the store never holds a secret in clear; see
/// `WebhookSecretSealer`). After a rotation the previous secret keeps signing for a while, next to the new one.
public struct KeyWebhook: Sendable, Equatable {
    public let url: String
    public let sealedSecret: [UInt8]
    public let previousSealedSecret: [UInt8]?
    public let rotatedAt: UnixMillis?

    public init(url: String, sealedSecret: [UInt8], previousSealedSecret: [UInt8]?, rotatedAt: UnixMillis?) {
        self.url = url
        self.sealedSecret = sealedSecret
        self.previousSealedSecret = previousSealedSecret
        self.rotatedAt = rotatedAt
    }
}

/// The arithmetic of a key's mail budget, the same in both engines: a bucket of `perHour` mails that refills evenly
/// over the hour, full at first.
public enum MailBudget {
    /// Takes up to `count` from a bucket that held `tokens` at `at` (nil: a key that never took any): how many it may
    /// send, and what the bucket holds after, as of `now` (never earlier than `at`).
    public static func take(count: Int, from held: (tokens: Double, at: UnixMillis)?, now: UnixMillis, perHour: Int)
        -> (granted: Int, tokens: Double, at: UnixMillis) {
        let tokens = held.map { min(Double(perHour), $0.tokens + Double(max(0, now - $0.at)) * Double(perHour) / 3_600_000) } ?? Double(perHour)
        let granted = max(0, min(count, Int(tokens.rounded(.down))))
        return (granted, tokens - Double(granted), max(now, held?.at ?? now))
    }
}
