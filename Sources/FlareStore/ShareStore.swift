public import FlareCore

/// How far a confirming tracker's mark moves: from `through`, over every number in `handled` (ascending) that
/// continues the run without a gap.
public func contiguousEnd(from through: Int64, over handled: [Int64]) -> Int64 {
    var end = through
    for number in handled where number > end {
        guard number == end + 1 else { break }
        end = number
    }
    return end
}

extension ShareStore {
    public func listShares(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int) throws(StoreError) -> [StoredShare] {
        try listShares(state: state, after: position, limit: limit, owner: nil)
    }

    /// Whether a current (not revoked) key with this hash exists.
    public func ownerKeyExists(hash: SecretHash) throws(StoreError) -> Bool {
        try ownerKey(hash: hash).map { !$0.isRevoked } ?? false
    }

    public func eventDelivered(row: Int64, destination: EventDestination) throws(StoreError) {
        try eventsDelivered([(row, destination)])
    }

    // Without an event: as tests and tools that record none call them.
    @discardableResult
    public func insertShare(_ share: Share) throws(StoreError) -> Int64 { try insertShare(share, event: nil) }
    public func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis) throws(StoreError) -> Result<Int64, QuotaRefusal> {
        try insertShare(share, limits: limits, now: now, event: nil)
    }
    public func updateExpiry(row: Int64, expiresAt: UnixMillis) throws(StoreError) { try updateExpiry(row: row, expiresAt: expiresAt, event: nil) }
    @discardableResult
    public func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason) throws(StoreError) -> Bool {
        try markEnded(row: row, at: endedAt, reason: reason, event: nil)
    }
    public func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition) throws(StoreError) -> Bool {
        try recordTracker(row: row, record, condition: condition, event: nil)
    }
    public func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64) throws(StoreError) -> Bool {
        try requestLocate(row: row, at: now, minimumIntervalMillis: minimumIntervalMillis, event: nil)
    }
    public func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis) throws(StoreError) -> Answer? {
        try insertAnswer(row: row, kind: kind, name: name, at: at, event: { _ in nil })
    }
    @discardableResult
    public func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis) throws(StoreError) -> Bool {
        try noteViewer(row: row, viewer: viewer, at: at, firstViewEvent: nil)
    }

    /// An admin key with no limits (the kind every key was before keys owned shares).
    @discardableResult
    public func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis) throws(StoreError) -> Int64 {
        try insertOwnerKey(hash: hash, label: label, createdAt: createdAt, admin: true, limits: .none)
    }
}

/// A share row and its store key.
public struct StoredShare: Sendable, Equatable {
    public let row: Int64
    public var share: Share

    public init(row: Int64, share: Share) {
        self.row = row
        self.share = share
    }
}

/// A validated fix waiting to be written.
public struct PendingFix: Sendable {
    public let shareRow: Int64
    public let fix: Fix
    public let receivedAt: UnixMillis

    public init(shareRow: Int64, fix: Fix, receivedAt: UnixMillis) {
        self.shareRow = shareRow
        self.fix = fix
        self.receivedAt = receivedAt
    }
}

/// Which shares a listing returns.
public enum ShareStateFilter: String, Sendable, CaseIterable {
    case active, ended
}

/// Where a listing continues: the last share of the previous page, newest first by (created_at, row).
public struct ShareListPosition: Sendable, Equatable {
    public let createdAt: UnixMillis
    public let row: Int64

    public init(createdAt: UnixMillis, row: Int64) {
        self.createdAt = createdAt
        self.row = row
    }
}

/// When a tracker state may be recorded (see `ShareStore.recordTracker`).
public struct TrackerCondition: Sendable, Equatable {
    /// Only over this recorded state (or none recorded yet); nil: over any other.
    public var from: TrackerState?
    /// Only if no fix of the share was received after this time: a will or a silence that a fix stored meanwhile
    /// (by another instance) has already made untrue is not recorded.
    public var noFixReceivedAfter: UnixMillis?

    public init(from: TrackerState? = nil, noFixReceivedAfter: UnixMillis? = nil) {
        self.from = from
        self.noFixReceivedAfter = noFixReceivedAfter
    }
}

/// An event to record in the outbox with the change it reports, in the same transaction, and only if the change is
/// made: an event is never announced for a change that did not happen, nor lost for one that did. Besides
/// `destinations`, the store adds the webhook of the key that owns the share, if that key has one.
public struct PendingEvent: Sendable {
    public let event: ShareEvent
    public let destinations: [EventDestination]

    public init(_ event: ShareEvent, destinations: [EventDestination]) {
        self.event = event
        self.destinations = destinations
    }
}

/// One event waiting for one destination in the outbox.
public struct OutboxDelivery: Sendable, Equatable {
    /// The event's row in the store.
    public let row: Int64
    public let destination: EventDestination
    /// Failed attempts so far.
    public let attempts: Int
    public let event: ShareEvent

    public init(row: Int64, destination: EventDestination, attempts: Int, event: ShareEvent) {
        self.row = row
        self.destination = destination
        self.attempts = attempts
        self.event = event
    }
}

/// How many events wait for a destination, and since when the oldest.
public struct OutboxBacklog: Sendable, Equatable {
    public let destination: EventDestination
    public let waiting: Int
    public let oldestAt: UnixMillis

    public init(destination: EventDestination, waiting: Int, oldestAt: UnixMillis) {
        self.destination = destination
        self.waiting = waiting
        self.oldestAt = oldestAt
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

/// What another instance changed in a shared store, as the store reports it after the change is committed.
public enum StoreChange: Sendable {
    /// A share was created, extended, ended or purged: read it again.
    case share(ShareID)
    /// An owner key was revoked: forget what is remembered of it.
    case ownerKey(Int64)
    /// Fixes another instance stored (by share row; tracker ids left out), in commit order.
    case fixes([(shareRow: Int64, fix: Fix)])
    /// The feed was interrupted (the database restarted, the connection dropped): changes may have been missed, so
    /// everything in memory is to be read again.
    case resync
}

/// Flare's durable state: shares, their fixes and owner keys. Every conformance keeps the same guarantees, which
/// `FlareStoreTests` checks for each:
///
/// - a fix is stored once: the same (share, tst, lat, lon) written again, by a redelivery or by another
///   instance, is reported as not new and changes nothing;
/// - `insertFixes` commits the whole batch or nothing, and returns only after the commit is durable, so the bridge
///   may acknowledge the batch to the broker when it returns;
/// - a share's end is recorded once (`markEnded` on an ended share changes nothing), and an ended share is never
///   extended;
/// - errors never carry bound values (they may be positions or secrets' hashes).
///
/// Calls may block (disk, network); every method is safe to call from any thread.
public protocol ShareStore: Sendable {
    // MARK: Shares
    /// Inserts a share (owned by `share.ownerKeyID`) without looking at any limit.
    @discardableResult
    func insertShare(_ share: Share, event: PendingEvent?) throws(StoreError) -> Int64
    /// Inserts a share for a key with limits, in one transaction with the checks, so that the limits hold across
    /// instances: at most `maxLive` live shares and `createsPerHour` creations in any hour (the creation is recorded
    /// for the next check). The refusal says which limit and how long to wait.
    func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis, event: PendingEvent?) throws(StoreError) -> Result<Int64, QuotaRefusal>
    func updateExpiry(row: Int64, expiresAt: UnixMillis, event: PendingEvent?) throws(StoreError)
    /// Records the share's end. True only for the call that ended it: with several instances, exactly one of them
    /// announces the end (ended status, retained clear, revocation).
    @discardableResult
    func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason, event: PendingEvent?) throws(StoreError) -> Bool
    /// Deletes an ended share's positions and its name; the row keeps only that it existed and when. True only for
    /// the call that purged it.
    @discardableResult
    func purgeHistory(row: Int64) throws(StoreError) -> Bool
    /// Every share whose history still exists: the active ones and those ended but not yet purged.
    func loadOpenShares() throws(StoreError) -> [StoredShare]
    func share(id: ShareID) throws(StoreError) -> StoredShare?
    /// The share whose view token has this hash (compared in constant time).
    func share(viewTokenHash: SecretHash) throws(StoreError) -> StoredShare?
    /// Up to `limit` shares, newest first, starting after `position` (nil: from the newest).
    /// `owner`: only that key's shares (nil: everyone's).
    func listShares(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64?) throws(StoreError) -> [StoredShare]

    // MARK: Trackers and commands
    /// Records the share's tracker state, if the share is active, the state differs from the recorded one and
    /// `condition` holds. True only for the call that recorded it: with several instances, the one that announces it.
    func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition, event: PendingEvent?) throws(StoreError) -> Bool
    /// Records that the phone's battery is low (`lowSince` set) or no longer so (nil), if the share is active and that
    /// differs from what is recorded. True only for the call that recorded it.
    func recordBatteryLow(row: Int64, lowSince: UnixMillis?, event: PendingEvent?) throws(StoreError) -> Bool
    /// A link holder asks the phone for a fresh position: recorded, if the share is active and no request was
    /// recorded in the last `minimumIntervalMillis`, which holds across instances. False when refused.
    func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64, event: PendingEvent?) throws(StoreError) -> Bool
    /// The phone answered the last request, at `at`. True only for the first answer to a request.
    func recordLocateAnswer(row: Int64, at: UnixMillis) throws(StoreError) -> Bool
    /// For phones that report over HTTP: true once per request (made in the last `validForMillis`), for the call
    /// that is to hand the command out; any instance may.
    func takeLocateCommand(row: Int64, now: UnixMillis, validForMillis: Int64) throws(StoreError) -> Bool

    // MARK: Answers
    /// Stores a family member's answer, if the share is active, and marks the share changed (its `lastAnswerID`), so
    /// that every instance's viewers hear of it. Nil when the share is not active.
    func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis, event: @Sendable (Answer) -> PendingEvent?) throws(StoreError) -> Answer?
    /// A share's answers with an id above `after`, oldest first, at most `limit`.
    func answers(row: Int64, after: Int64, limit: Int) throws(StoreError) -> [Answer]

    // MARK: Audience
    /// Records that a viewer (the hash of share and viewer id) has the link open now. True when it is new to the share;
    /// `firstViewEvent` is recorded when it is the share's first viewer.
    func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool
    /// The share's audience: first opened, distinct viewers, and those seen since `watchingSince`.
    func audience(row: Int64, watchingSince: UnixMillis) throws(StoreError) -> Audience

    // MARK: Fixes
    /// Writes a batch in one transaction. Returns, per fix, whether it was new (false: already stored).
    func insertFixes(_ fixes: [PendingFix]) throws(StoreError) -> [Bool]
    /// The newest `limit` fixes of a share, oldest first.
    func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix]
    func fixCount(row: Int64) throws(StoreError) -> Int

    /// Records that these messages of confirming trackers are handled (their fixes committed, or refused for good),
    /// and moves each share's mark to the highest `seq` through which every message of its newest stream is handled
    /// (a newer stream starts the count again; an older one's messages are ignored). Holds across instances: the
    /// messages of one stream may be handled by several. Returns the mark of every share concerned (moved or not: a
    /// tracker that sends again what it was not told of must hear the mark again) that has one.
    func recordHandledSequences(_ handled: [(shareRow: Int64, sequence: TrackerSequence)]) throws(StoreError) -> [(shareRow: Int64, mark: TrackerSequence)]

    // MARK: Owner keys
    /// Stores a key's hash, kind and limits; returns its id.
    @discardableResult
    func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis, admin: Bool, limits: KeyLimits) throws(StoreError) -> Int64
    /// The key with this hash (compared in constant time), revoked or not.
    func ownerKey(hash: SecretHash) throws(StoreError) -> OwnerKeyRecord?
    func ownerKey(id: Int64) throws(StoreError) -> OwnerKeyRecord?
    /// Every key, oldest first, each with how many live shares it owns.
    func ownerKeys() throws(StoreError) -> [OwnerKeyRecord]
    /// Revokes a key: it stops working; its shares run on. True only for the call that revoked it.
    @discardableResult
    func revokeOwnerKey(id: Int64, at: UnixMillis) throws(StoreError) -> Bool
    /// Records when a key was last used (the caller calls it at most now and then per key).
    func noteOwnerKeyUsed(id: Int64, at: UnixMillis) throws(StoreError)
    func ownerKeyCount() throws(StoreError) -> Int
    /// The schema version the store had when this process opened it, if it was older than today's (an upgrade ran).
    var upgradedFromSchema: Int? { get }

    // MARK: Events
    /// Events due for delivery (`next attempt <= now`), oldest first, at most `limit` for each destination: a
    /// destination with a backlog (a receiver that is slow or was down) never hides the others' events.
    func dueEvents(now: UnixMillis, limit: Int) throws(StoreError) -> [OutboxDelivery]
    /// The destinations have these events: they leave the outbox (and each event with its last destination), in one
    /// transaction.
    func eventsDelivered(_ deliveries: [(row: Int64, destination: EventDestination)]) throws(StoreError)
    /// The destination has the event with this id (sent by the instance that made it, ahead of the outbox).
    func eventDelivered(id: String, destination: EventDestination) throws(StoreError)
    /// An attempt failed: try again at `retryAt`, or give up (nil) and drop it.
    func eventFailed(row: Int64, destination: EventDestination, attempts: Int, retryAt: UnixMillis?) throws(StoreError)
    /// What waits in the outbox, per destination.
    func outboxBacklog() throws(StoreError) -> [OutboxBacklog]
    /// Sets (or, with nil, removes) a key's webhook; setting one again makes the old secret the previous one.
    /// False when there is no such key.
    func setKeyWebhook(id: Int64, url: String?, sealedSecret: [UInt8]?, at: UnixMillis) throws(StoreError) -> Bool
    /// Seals every key's webhook secrets (current and previous) anew, all in one transaction, for a new token key:
    /// `reseal` returns the secret sealed under the new key, or nil when it cannot open it, which changes nothing
    /// (a `StoreError` is thrown). Returns how many keys' secrets were sealed anew.
    func resealWebhookSecrets(_ reseal: @Sendable (_ keyID: Int64, _ sealed: [UInt8]) -> [UInt8]?) throws(StoreError) -> Int
    func keyWebhook(id: Int64) throws(StoreError) -> KeyWebhook?

    // MARK: Several instances
    /// Records that `process` runs as the instance with MQTT client id `clientID` (its persistent session on the
    /// broker). False when another process holds that id and was seen less than `staleAfter` ms ago: two processes
    /// with one client id would take the session from each other.
    func registerInstance(_ clientID: String, process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> Bool
    /// The process that holds `clientID`, if any.
    func instanceProcess(_ clientID: String) throws(StoreError) -> String?
    /// Says the instance is still alive; false if another process has taken its client id over meanwhile.
    @discardableResult
    func heartbeat(_ clientID: String, process: String, now: UnixMillis) throws(StoreError) -> Bool
    /// Claims one instance, other than `process`'s own, not seen for `staleAfter` ms (its process died): its client
    /// id, now held by `process`, whose job is to drain and end that session. Nil when there is none. Two callers
    /// never get the same one.
    func claimStaleInstance(process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> String?
    /// Forgets the instance once its session is ended.
    func removeInstance(_ clientID: String, process: String) throws(StoreError)

    /// Holds, or renews, the lease `name` for `holder` until `now + durationMillis`, unless another holder's lease
    /// runs past `now`: one instance at a time does a job (keeping the broker's retained state). Returns the value
    /// recorded with the lease (0 for a new one) when `holder` holds it, nil when another does.
    func holdLease(_ name: String, holder: String, now: UnixMillis, durationMillis: Int64) throws(StoreError) -> Int64?
    /// Records `value` with the lease if `holder` still holds it; false when it no longer does.
    @discardableResult
    func setLeaseValue(_ name: String, holder: String, value: Int64) throws(StoreError) -> Bool
    /// Lets the lease go (at shutdown), keeping its value, so another instance may take it at once.
    func releaseLease(_ name: String, holder: String) throws(StoreError)

    /// Whether several instances may share this store (and so change it behind each other's back).
    var isShared: Bool { get }
    /// Active shares whose expiry has passed: with several instances, those that no instance ended (their creator
    /// died, and no other had been asked for them).
    func expiredActiveShares(now: UnixMillis, limit: Int) throws(StoreError) -> [StoredShare]

    /// Starts reporting what other instances change (`StoreChange`), on a thread of the store's own, in commit
    /// order, until `stopWatching`. A store that only one instance uses (SQLite) never reports anything.
    func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void)
    func stopWatching()

    // MARK: After a failed write
    /// What the store can say about why writes fail, beyond its own error (e.g. "Read-only file system"); nil if
    /// it knows nothing more.
    func writeProblem() -> String?
    /// Called once after a failed write, before the write is retried: the store may reset what a failure left
    /// behind (SQLite: checkpoint and truncate its WAL).
    func recoverAfterFailedWrite()
}
