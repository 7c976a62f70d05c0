import FlareAPI
public import FlareCore
public import FlareStore
public import FlareEvents
import FlareSystem
import Synchronization

public enum ShareError: Error, Equatable, CustomStringConvertible {
    case notFound
    case ended
    case invalid(String)
    case storage(String)
    /// Over one of the owning key's limits.
    case quota(QuotaRefusal)

    public var description: String {
        switch self {
        case .notFound: "no such share"
        case .ended: "the share has ended"
        case .invalid(let message): message
        case .storage(let message): "store error: \(message)"
        case .quota(let refusal): refusal.message
        }
    }
}

/// What the service knows of a share.
public enum ShareLookup: Sendable {
    /// Its history still exists: state, last position, trail and viewers, from memory.
    case live(ShareSnapshot)
    /// Ended and its history deleted: only the row remains, which says that it existed and when.
    case historyDeleted(Share)

    public var share: Share {
        switch self {
        case .live(let snapshot): snapshot.share
        case .historyDeleted(let share): share
        }
    }
}

/// A rendered view document (`FlareAPI.ViewDocument`) without its closing `server_time`, which changes every second.
public struct RenderedView: Sendable {
    public let share: Share
    public let body: [UInt8]
}

/// The one door to share state. A share's life: created with its capabilities, extended, ended by expiry or by a
/// stop, and its history deleted after the retention time. Every transition is written to the store first, then to
/// memory, then announced on the broker (retained status; the retained location cleared at the end). Readers (the
/// gateway) look shares up, check owner keys, subscribe to live events and get view documents here too, never from
/// the store or the in-memory registry directly.
public final class ShareService: Sendable {
    public enum Job: Hashable, Sendable {
        case expire(ShareID)
        case purge(ShareID)
        /// With a shared store: end the expired shares no instance has ended (see `sweepExpired`).
        case sweep
        /// Record a share's tracker state as the rules give it now (a fix ended a silence or a lost connection).
        case tracker(ShareID)
        /// A tracker's last will arrived at this time: record it offline.
        case trackerLost(ShareID, UnixMillis)
        /// The tracker answered "locate now" at this time.
        case locateAnswered(ShareID, UnixMillis)
        /// Record the silences that grew past the stale limit (see `sweepTrackers`).
        case trackerSweep
        /// See whether a position flared published is still the share's newest (see `ownPositionCameBack`).
        case positionCheck(ShareID)
        /// Record the confirming trackers' messages that were refused (see `refused(_:row:share:)`).
        case refusedSequences
        /// Publish a confirming tracker's mark held back by the once-a-second limit.
        case trackerMark(ShareID)
        /// Say in the store that the viewers with a live stream here are still watching (see `watching`).
        case audienceHeartbeat
        /// Count a share's stored fixes, which memory does not know yet (see `fixLimitReached`).
        case countFixes(ShareID)
        /// Read everything again after the change feed was interrupted (see `resync`).
        case resync
    }

    public struct Created: Sendable {
        public let share: Share
        public let viewToken: String
        public let deviceToken: String
    }

    private let store: any ShareStore
    /// The owner keys: who may create, read and control which shares.
    public let keys: OwnerKeyService
    /// Memory's copy of every share that still has history; the bridge's ingest records fixes into it.
    package let registry: ShareRegistry
    private let publisher: any BrokerPublisher
    private let tokenKey: [UInt8]
    public let policy: SharePolicy
    private let clock: any WallClock
    private let metrics: Metrics
    private let logger: Logger
    private let scheduler = Mutex<DeadlineScheduler<Job>?>(nil)
    /// Broker messages that could not be handed over (broker down); re-sent on reconnect, newest per topic.
    private let unsent = Mutex<[String: (payload: [UInt8], expiry: UInt32?)]>([:])
    /// Revocations the broker has not been handed yet (share → token expiry, Unix s); re-sent on reconnect.
    private let unsentRevocations = Mutex<[ShareID: Int64]>([:])
    /// The time (`tst`) of the last position flared published per share that came back through a bridge, until it is
    /// checked against the newest stored (see `ownPositionCameBack`).
    private let echoedPositions = Mutex<[ShareID: Int64]>([:])
    /// Fixes that came over HTTP while the broker was away, oldest first (see `publishHTTPFixes`).
    private let httpOutbox = Mutex<[(share: ShareID, fix: Fix)]>([])
    /// Viewers with a live stream on this instance, per share (hash → streams), for the heartbeat in the store.
    private let watchers = Mutex<[ShareID: [SecretHash: Int]]>([:])
    /// When each viewer was last written to the store, and which viewer hashes each address added per share (the cap).
    private let viewerNotes = Mutex<(seen: [SecretHash: Int64], byAddress: [String: Set<SecretHash>])>(([:], [:]))
    /// The audience last published per share, so that an unchanged one is not published again.
    private let publishedAudience = Mutex<[ShareID: Audience]>([:])
    /// Confirming trackers' messages that were refused, until recorded (see `refused(_:row:share:)`).
    private let refusedSequences = Mutex<[(share: ShareID, row: Int64, sequence: TrackerSequence)]>([])
    /// Per share: when its tracker's mark was last published (monotonic ms), and a newer one held back meanwhile.
    private let trackerMarks = Mutex<[ShareID: (publishedAt: Int64, held: TrackerSequence?)]>([:])
    /// "Locate now" requests the broker could not take, by when they were asked: sent on reconnect while still valid.
    private let unsentLocateRequests = Mutex<[ShareID: UnixMillis]>([:])
    private let unpublishedLogLimiter = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 3), maximumKeys: 4)
    private let storeWarnings = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 5), maximumKeys: 4)
    /// Where every event goes besides the owning key's webhook (`EventDeliverer.destinations`).
    private let eventDestinations: [EventDestination]
    /// Told after an event is committed to the outbox (the deliverer wakes). A `let`: a closure kept in a `Mutex` is
    /// re-wrapped by every `withLock`, and calling it then costs as many calls as it was ever read.
    private let eventRecorded: @Sendable () -> Void
    /// Clears what tokens left retained below an ended share's location topic (`RetainedSweeper`).
    private let sweepRetained: @Sendable (ShareID) -> Void
    /// Ids and token hashes the store did not know, with when it was asked (see `lookUpInStore`).
    private let recentMisses = Mutex<[String: Int64]>([:])

    /// - Parameters:
    ///   - trailLength: recent positions kept in memory per share for the viewer's trail.
    ///   - hostResolver: where setting a limited key's webhook looks its host name up (a test's resolver in tests).
    public init(store: any ShareStore, trailLength: Int, publisher: any BrokerPublisher, tokenKey: [UInt8],
                policy: SharePolicy, trackerRules: TrackerRules, clock: any WallClock, metrics: Metrics, logger: Logger,
                eventDestinations: [EventDestination] = [.mqtt], eventRecorded: @escaping @Sendable () -> Void = {},
                sweepRetained: @escaping @Sendable (ShareID) -> Void = { _ in }, hostResolver: any HostResolving = SystemHostResolver()) {
        let registry = ShareRegistry(trailLength: trailLength, trackerRules: trackerRules)
        self.store = store
        self.keys = OwnerKeyService(store: store, sealer: WebhookSecretSealer(tokenKey: tokenKey), resolver: hostResolver, clock: clock,
                                    metrics: metrics, logger: logger)
        self.registry = registry
        self.publisher = publisher
        self.tokenKey = tokenKey
        self.policy = policy
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        self.eventDestinations = eventDestinations
        self.eventRecorded = eventRecorded
        self.sweepRetained = sweepRetained
        metrics.register(FlareMetrics.sharesCreated)
        metrics.register(FlareMetrics.quotaRefusals)
        metrics.register(FlareMetrics.answers)
        metrics.register(FlareMetrics.sharesEnded)
        metrics.register(FlareMetrics.trackerChanges)
        metrics.register(FlareMetrics.locateRequests)
        metrics.register(FlareMetrics.httpFixesUnpublished)
        metrics.register(FlareMetrics.httpOutboxDropped)
        metrics.registerGauge(FlareMetrics.sharesActive) { [registry] in Double(registry.activeShareCount) }
        let scheduler = DeadlineScheduler<Job>(clock: clock) { [weak self] job in self?.run(job) }
        self.scheduler.withLock { $0 = scheduler }
    }

    /// The event as the store records it with its change.
    private func pending(_ event: ShareEvent) -> PendingEvent { PendingEvent(event, destinations: eventDestinations) }

    private func schedule(_ job: Job, at deadline: UnixMillis) {
        scheduler.withLock { $0?.schedule(job, at: deadline) }
    }

    private func run(_ job: Job) {
        switch job {
        case .expire(let id): end(id, reason: .expired)
        case .purge(let id): purge(id)
        case .sweep: sweepExpired()
        case .tracker(let id): updateTracker(id, now: clock.now())
        case .trackerLost(let id, let at): trackerLost(id, at: at)
        case .locateAnswered(let id, let at): locateAnswered(id, at: at)
        case .trackerSweep: sweepTrackers()
        case .positionCheck(let id): checkRetainedPosition(id)
        case .refusedSequences: recordRefusedSequences()
        case .trackerMark(let id): publishHeldMark(id)
        case .audienceHeartbeat: audienceHeartbeat()
        case .countFixes(let id): countFixes(id)
        case .resync: resync()
        }
    }

    public func stopScheduler() {
        scheduler.withLock { $0?.stop(); $0 = nil }
    }

    // MARK: Start-up

    /// Loads every share that still has history into memory, ends those that expired while Flare was down,
    /// deletes history whose retention has passed, and schedules the rest.
    public func recover() throws(StoreError) {
        let now = clock.now()
        var ended = 0, purged = 0
        for stored in try store.loadOpenShares() {
            let trail = try store.recentFixes(row: stored.row, limit: registry.trailLength)
            registry.insert(stored, recentFixes: trail)
            if stored.share.lastAnswerID != nil { try takeAnswers(stored.share.id, row: stored.row) }
            let share = stored.share
            if share.isActive {
                if share.expiresAt <= now {
                    end(share.id, reason: .expired)
                    ended += 1
                } else {
                    schedule(.expire(share.id), at: share.expiresAt)
                }
            } else if let endedAt = share.endedAt {
                // A stop the broker may not have heard of (flared died before sending it): say it again at the
                // first connection; the broker's plugin treats a repeated revocation as one.
                if share.endReason == .stopped, share.expiresAt > now {
                    unsentRevocations.withLock { $0[share.id] = Self.revocationEnd(share) }
                }
                let purgeAt = endedAt + policy.historyRetentionSeconds * 1000
                if purgeAt <= now {
                    purge(share.id)
                    purged += 1
                } else {
                    schedule(.purge(share.id), at: purgeAt)
                }
            }
        }
        logger.info("loaded \(registry.shareCount) shares (\(registry.activeShareCount) active); ended \(ended) that expired while down, purged \(purged)")
        schedule(.trackerSweep, at: now + Self.trackerSweepMillis)
    }

    // MARK: Transitions

    /// - Parameter owner: the key creating it, which will own it (nil: no key, as in tests and the demo); its limits
    ///   apply, across instances.
    public func create(name: String?, durationSeconds: Double?, owner: OwnerKeyRecord? = nil) throws(ShareError) -> Created {
        var duration: Int64
        let cleanName: String
        do {
            duration = try policy.duration(requested: durationSeconds)
            cleanName = try policy.validName(name)
        } catch { throw .invalid(error.description) }
        let limits = owner?.limits ?? .none
        if let maximum = limits.maxDurationSeconds, duration > maximum {
            // The server's default is shortened to the key's bound; a duration asked for is refused.
            guard durationSeconds == nil else { throw refused(QuotaRefusal(limit: .maxDuration, value: maximum, retryAfterSeconds: nil)) }
            duration = maximum
        }
        let now = clock.now()
        let viewToken = Secret.generate()
        let share = Share(id: ShareID.generate(), viewTokenHash: viewToken.hash, name: cleanName,
                          createdAt: now, expiresAt: now + duration * 1000, ownerKeyID: owner?.id)
        let inserted: Result<Int64, QuotaRefusal>
        let started = ShareEvent.started(share)
        do {
            inserted = limits.maxLive != nil || limits.createsPerHour != nil
                ? try store.insertShare(share, limits: limits, now: now, event: pending(started))
                : .success(try store.insertShare(share, event: pending(started)))
        } catch { throw .storage(error.description) }
        let row: Int64
        switch inserted {
        case .success(let inserted): row = inserted
        case .failure(let refusal): throw refused(refusal)
        }
        eventRecorded()
        registry.insert(StoredShare(row: row, share: share), storedFixes: 0)
        schedule(.expire(share.id), at: share.expiresAt)
        publishStatus(of: share)
        metrics.increment(FlareMetrics.sharesCreated)
        logger.info("share \(share.id) created, expires in \(duration) s")
        return Created(share: share, viewToken: viewToken.text, deviceToken: deviceToken(for: share))
    }

    private func refused(_ refusal: QuotaRefusal) -> ShareError {
        metrics.increment(FlareMetrics.quotaRefusals, labels: [("limit", refusal.limit.rawValue)])
        return .quota(refusal)
    }

    /// Ends an active share now. Ending an ended share is not an error: the answer is its current state. A stop the
    /// store could not record is refused (`.storage`), and nothing changes: the caller asks again, and a stop
    /// recorded in memory alone would be undone by the next start and unknown to the other instances.
    @discardableResult
    public func stop(_ id: ShareID) throws(ShareError) -> Share {
        guard let snapshot = registry.snapshot(id) else { throw .notFound }
        // Returned from `end` rather than read again: with no retention the share may already be purged.
        do { return try endRecorded(id, reason: .stopped) ?? registry.snapshot(id)?.share ?? snapshot.share } catch {
            throw .storage(error.description)
        }
    }

    /// Moves an active share's end to now + duration. The link stays the same; a new device token (with the new
    /// `exp`) is returned for brokers that check `exp` themselves.
    public func extend(_ id: ShareID, durationSeconds: Double?) throws(ShareError) -> (share: Share, deviceToken: String) {
        guard let snapshot = registry.snapshot(id) else { throw .notFound }
        guard snapshot.share.isActive else { throw .ended }
        let duration: Int64
        do { duration = try policy.duration(requested: durationSeconds) } catch { throw .invalid(error.description) }
        let expiresAt = clock.now() + duration * 1000
        // The owning key's bound holds for the share's whole length, whoever extends it (the phone may). A key that
        // cannot be read is no reason to let the share run past it: the extension waits for the store.
        let limits: KeyLimits?
        do { limits = try keys.limits(ofOwner: snapshot.share.ownerKeyID) } catch { throw .storage(error.description) }
        if let maximum = limits?.maxDurationSeconds, expiresAt - snapshot.share.createdAt > maximum * 1000 {
            throw refused(QuotaRefusal(limit: .maxDuration, value: maximum, retryAfterSeconds: nil))
        }
        let extended = ShareEvent.extended(id, at: clock.now(), expiresAt: expiresAt)
        do { try store.updateExpiry(row: snapshot.row, expiresAt: expiresAt, event: pending(extended)) } catch { throw .storage(error.description) }
        eventRecorded()
        registry.updateExpiry(id, expiresAt: expiresAt)
        schedule(.expire(id), at: expiresAt)
        guard let updated = registry.snapshot(id)?.share, updated.isActive else { throw .ended }
        publishStatus(of: updated)
        logger.info("share \(id) extended by \(duration) s")
        return (updated, deviceToken(for: updated))
    }

    /// An expiry: the single place where a share ends on its own. Returns the ended share, or nil if it was not active.
    @discardableResult
    func end(_ id: ShareID, reason: EndReason) -> Share? {
        do { return try endRecorded(id, reason: reason, orInMemory: true) } catch {
            return nil  // not reached: with `orInMemory` a failing store ends the share in memory
        }
    }

    /// Ends a share, whichever the cause. Returns the ended share, or nil if it was not active (or another instance
    /// ended it first). When the store cannot record the end, throws, unless `orInMemory`: then memory and broker
    /// end it anyway (an expiry: refusing fixes matters more than the row, which is ended again at the next start-up
    /// or sweep, since its expiry will have passed by then).
    private func endRecorded(_ id: ShareID, reason: EndReason, orInMemory: Bool = false) throws(StoreError) -> Share? {
        guard let snapshot = registry.snapshot(id), snapshot.share.isActive else { return nil }
        let now = clock.now()
        let endedEvent = ShareEvent.ended(id, at: now, reason: reason)
        let recorded: Bool
        do { recorded = try store.markEnded(row: snapshot.row, at: now, reason: reason, event: pending(endedEvent)) } catch {
            guard orInMemory else { throw error }
            logger.error("share \(id): cannot record its end (\(error)); ending it in memory")
            recorded = true
        }
        guard recorded else {
            // Another instance ended it first (its expiry fired there too, or it was stopped there): that one
            // announces the end; here memory follows the store (at its next change, if it cannot be read now).
            do { follow(try store.share(id: id)) } catch { warnStore("share \(id): cannot read its end (\(error))") }
            return nil
        }
        registry.markEnded(id, reason: reason, at: now)
        scheduler.withLock { $0?.cancel(.expire(id)) }
        publish(topic: Topics.location(id), payload: [], expiry: nil)
        sweepRetained(id)
        var ended = snapshot.share
        ended.endedAt = now
        ended.endReason = reason
        publishStatus(of: ended)
        // A share stopped before its expiry still has tokens whose `exp` has not passed: the broker must refuse
        // them from now on (and cut off a connected device). An expired share's tokens refuse themselves.
        if reason == .stopped {
            // First, while its token still reads the command topic, tell an OwnTracks phone to stop reporting (quiet
            // mode); the broker sends it ahead of the revocation, which comes after it on flared's connection. After
            // an expiry the broker refuses the phone already, so it cannot be told (docs/owntracks.md says what to do).
            _ = publisher.publish(topic: Topics.command(id), payload: OwnTracksConfiguration.stopReporting, qos: 1, retain: false,
                                  expirySeconds: 60)
            // The same for `share.ended` on the events topic: an integrator reading it with a watch token hears of the
            // end before the revocation cuts it off. Sent here, it leaves the outbox's topic delivery done; a broker
            // that did not take it gets it from the outbox later, as every other event.
            if publisher.publish(topic: Topics.events(id), payload: endedEvent.body, qos: 1, retain: false, expirySeconds: nil) {
                // Not recorded, the outbox publishes it again: at least once, as every event.
                try? store.eventDelivered(id: endedEvent.id, destination: .mqtt)
                metrics.increment(FlareMetrics.eventDeliveries, labels: [("destination", EventDestination.mqtt.name), ("result", "delivered")])
            }
            revoke(ended)
        }
        eventRecorded()
        metrics.increment(FlareMetrics.sharesEnded, labels: [("reason", reason.rawValue)])
        logger.info("share \(id) ended: \(reason.rawValue)")
        schedule(.purge(id), at: now + policy.historyRetentionSeconds * 1000)
        return ended
    }

    func purge(_ id: ShareID) {
        guard let snapshot = registry.snapshot(id), !snapshot.share.isActive else { return }
        do {
            guard try store.purgeHistory(row: snapshot.row) else {
                registry.remove(id)  // another instance purged it, and cleared the broker's copy
                return
            }
        } catch {
            logger.error("share \(id): cannot delete its history (\(error)); retrying in 60 s")
            schedule(.purge(id), at: clock.now() + 60_000)
            return
        }
        registry.remove(id)
        trackerMarks.withLock { _ = $0.removeValue(forKey: id) }
        // Nothing of the share stays on the broker either.
        publish(topic: Topics.status(id), payload: [], expiry: nil)
        publish(topic: Topics.stored(id), payload: [], expiry: nil)
        publish(topic: Topics.audience(id), payload: [], expiry: nil)
        // Again, in case the instance that ended it went before it could.
        sweepRetained(id)
        logger.info("share \(id): history deleted")
    }

    // MARK: Several instances

    /// Follows what other instances change in a shared store (`ShareStore.watchChanges`): their ends, extensions and
    /// purges, and the fixes they stored, so that this instance's links, live viewers and expiry timers agree with
    /// the store. Call once, before `recover`, so that nothing committed between the two is missed.
    public func followOtherInstances() {
        store.watchChanges { [weak self] change in self?.apply(change) }
        if store.isShared { schedule(.sweep, at: clock.now() + Self.sweepMillis) }
    }

    /// How often an instance looks for expired shares that no instance ended.
    static let sweepMillis: Int64 = 10_000

    /// A share's expiry is scheduled on every instance that knows it, but a share created on an instance that died
    /// before its expiry may be known to no other: every instance looks for such shares now and then, and whichever
    /// ends one first announces it (the store's `markEnded` says who).
    private func sweepExpired() {
        defer { schedule(.sweep, at: clock.now() + Self.sweepMillis) }
        let expired: [StoredShare]
        do { expired = try store.expiredActiveShares(now: clock.now(), limit: 1000) } catch {
            warnStore("cannot look for expired shares (\(error)); looking again in \(Self.sweepMillis / 1000) s")
            return
        }
        for stored in expired {
            follow(stored)  // schedules its expiry, which has passed: the scheduler runs it at once
        }
    }

    public func stopFollowing() { store.stopWatching() }

    func apply(_ change: StoreChange) {
        switch change {
        case .share(let id):
            // Unread now, it is read when a request asks for it, or at the next resynchronisation.
            do { follow(try store.share(id: id)) } catch { warnStore("cannot read a share another instance changed (\(error))") }
        case .fixes(let fixes):
            let now = clock.now()
            for id in registry.record(rows: fixes, heardAt: now) { schedule(.tracker(id), at: now) }
        case .ownerKey(let id):
            keys.forget(id)
        case .resync:
            // On the scheduler's thread, where a resynchronisation that fails is tried again.
            schedule(.resync, at: clock.now())
        }
    }

    static let resyncRetryMillis: Int64 = 5_000

    /// After the change feed was interrupted: everything read again, trails included. Live viewers stay subscribed.
    private func resync() {
        do {
            let open = try store.loadOpenShares()
            let openIDs = Set(open.map(\.share.id))
            for stored in open {
                try adopt(stored)
                registry.replaceFixes(stored.share.id, with: try store.recentFixes(row: stored.row, limit: registry.trailLength))
            }
            for id in registry.shareIDs where !openIDs.contains(id) {
                if let stored = try store.share(id: id) { try adopt(stored) }
            }
            logger.info("resynchronised with the store: \(open.count) shares with history")
        } catch {
            // Memory may hold what another instance changed meanwhile: tried again until it succeeds.
            warnStore("cannot resynchronise with the store (\(error)); trying again in \(Self.resyncRetryMillis / 1000) s")
            schedule(.resync, at: clock.now() + Self.resyncRetryMillis)
        }
    }

    /// Brings memory in line with a share's row as the store has it: taken in (with its recent fixes and answers) if
    /// it is new here, ended, extended or forgotten as the row says, its timers set to match. Announces nothing:
    /// whoever changed the row announced it. Returns what is now known. Throws when a share new here cannot have its
    /// fixes or answers read: it is then not taken in at all (known with an empty trail, it would show no position).
    @discardableResult
    func adopt(_ stored: StoredShare) throws(StoreError) -> ShareLookup {
        let share = stored.share
        if share.historyPurged {
            registry.remove(share.id)
            scheduler.withLock { $0?.cancel(.expire(share.id)); $0?.cancel(.purge(share.id)) }
            return .historyDeleted(share)
        }
        guard let current = registry.snapshot(share.id) else {
            let trail = try store.recentFixes(row: stored.row, limit: registry.trailLength)
            let answers = share.lastAnswerID == nil ? [] : try store.answers(row: stored.row, after: 0, limit: Self.answersPerShare)
            registry.insert(stored, recentFixes: trail)
            registry.addAnswers(share.id, Array(answers.suffix(ShareRegistry.answersKept)))
            scheduleNext(for: share)
            return registry.snapshot(share.id).map(ShareLookup.live) ?? .historyDeleted(share)
        }
        // An answer stored by another instance: its viewers here hear of it too (or at the next change, if the store
        // cannot be read now).
        if let newest = share.lastAnswerID, newest > registry.lastAnswerID(share.id) {
            do { try takeAnswers(share.id, row: stored.row) } catch { warnStore("share \(share.id): cannot read its answers (\(error))") }
        }
        if current.share.isActive, let reason = share.endReason, let endedAt = share.endedAt {
            registry.markEnded(share.id, reason: reason, at: endedAt)
            scheduler.withLock { $0?.cancel(.expire(share.id)) }
            scheduleNext(for: share)
        } else if current.share.isActive, share.isActive, current.share.expiresAt != share.expiresAt {
            registry.updateExpiry(share.id, expiresAt: share.expiresAt)
            scheduleNext(for: share)
        }
        registry.updateTracker(from: share)
        return registry.snapshot(share.id).map(ShareLookup.live) ?? .historyDeleted(share)
    }

    /// `adopt` off the request paths (the change feed, sweeps, the scheduler's jobs): a share that cannot be read now
    /// is read again at its next change, sweep or request, so a failure is only said.
    private func follow(_ stored: StoredShare?) {
        guard let stored else { return }
        do { try adopt(stored) } catch { warnStore("share \(stored.share.id): cannot read it from the store (\(error)); memory follows at its next change") }
    }

    /// A store failure off the request paths, said at most a few times a minute.
    private func warnStore(_ message: @autoclosure () -> String) {
        if storeWarnings.take("store", nowMillis: monotonicMillis()) == nil { logger.warning(message()) }
    }

    /// An active share's expiry; an ended one's purge.
    private func scheduleNext(for share: Share) {
        if share.isActive {
            schedule(.expire(share.id), at: share.expiresAt)
        } else if let endedAt = share.endedAt {
            schedule(.purge(share.id), at: endedAt + policy.historyRetentionSeconds * 1000)
        }
    }

    /// Shares another instance created a moment ago may not have reached this one's memory yet: a lookup that misses
    /// memory asks the store. Ids the store did not know are not asked about again for a while, so a stream of
    /// messages for an unknown share costs one query, not one each. A store that cannot answer is no answer: it is
    /// thrown, never remembered as a miss.
    private func lookUpInStore(_ read: () throws(StoreError) -> StoredShare?, missKey: String) throws(StoreError) -> ShareLookup? {
        let now = monotonicMillis()
        if let missedAt = recentMisses.withLock({ $0[missKey] }), now - missedAt < Self.missMemoryMillis { return nil }
        guard let stored = try read() else {
            recentMisses.withLock { misses in
                if misses.count >= 10_000 { misses.removeAll(keepingCapacity: true) }
                misses[missKey] = now
            }
            return nil
        }
        return try adopt(stored)
    }
    private static let missMemoryMillis: Int64 = 5_000

    // MARK: Trackers

    /// How often the silences that grew past the stale limit are looked for: a tracker is reported stale at most
    /// this long after the limit.
    static let trackerSweepMillis: Int64 = 5_000

    /// Stored fixes (new ones, with when and how their trackers were heard) and the answers to "locate now" among
    /// the messages of the batch (new or not: an iOS phone answers with its cached position, already stored), from the
    /// ingest's writer after the commit. Viewers hear of the fixes at once; the tracker changes they make are
    /// recorded on the scheduler's thread, off the writer's.
    package func stored(_ fixes: [ShareRegistry.HeardFix], answers: [(share: ShareID, at: UnixMillis)]) {
        let now = clock.now()
        for id in registry.record(fixes) { schedule(.tracker(id), at: now) }
        for answer in answers { schedule(.locateAnswered(answer.share, answer.at), at: now) }
    }

    /// Fixes that came over HTTP, just stored: published to their shares' location topics, retained as a phone's
    /// are, so integrators and the retained last position see them too (from the writer's thread, after the commit).
    /// A share that ended meanwhile gets nothing: its retained position is cleared and must stay so.
    package func publishHTTPFixes(_ fixes: [(share: ShareID, fix: Fix)]) {
        for (id, fix) in fixes where registry.snapshot(id)?.share.isActive == true {
            // Behind fixes still waiting in the outbox, so that integrators get them in order.
            if httpOutbox.withLock({ $0.isEmpty }), publisher.publishOwnPosition(topic: Topics.location(id), payload: fix.ownTracksJSON) {
                continue
            }
            // Stored and shown to viewers all the same; the broker gets it when it is back.
            metrics.increment(FlareMetrics.httpFixesUnpublished)
            let dropped = httpOutbox.withLock { outbox in
                outbox.append((id, fix))
                guard outbox.count > Self.httpOutboxCapacity else { return false }
                outbox.removeFirst()
                return true
            }
            if dropped { metrics.increment(FlareMetrics.httpOutboxDropped) }
            if unpublishedLogLimiter.take("http", nowMillis: monotonicMillis()) == nil {
                logger.warning("share \(id): broker unavailable; fixes received over HTTP are stored and wait in the outbox (\(httpOutbox.withLock { $0.count })) to be published on reconnect")
            }
        }
    }

    /// HTTP fixes kept for the broker while it is away, in memory: a fix is stored before it gets here, so an instance
    /// that dies loses only the integrators' copy (the broker's retained last position is restored from the store
    /// if the broker lost it). Beyond this many the oldest go, counted: the retained position needs only the newest.
    static let httpOutboxCapacity = 10_000

    /// Publishes the outbox, oldest first, until the broker stops taking messages.
    private func flushHTTPOutbox() {
        while let (id, fix) = httpOutbox.withLock({ $0.first }) {
            if registry.snapshot(id)?.share.isActive == true,
               !publisher.publishOwnPosition(topic: Topics.location(id), payload: fix.ownTracksJSON) { return }
            httpOutbox.withLock { outbox in if !outbox.isEmpty { outbox.removeFirst() } }
        }
    }

    /// A position flared published (an HTTP fix, a restored last position) came back through the bridge: the broker
    /// has retained it. A fix the tracker sent just before may have reached the broker first and been overtaken (the
    /// broker keeps whichever it processed last), so a moment later, once that fix is stored, the newest stored
    /// position is published again if it is newer. From the MQTT thread: it only notes the time.
    package func ownPositionCameBack(topic: String, payload: [UInt8]) {
        guard let id = Topics.shareID(fromLocationTopic: topic),
              let tst = (try? JSONValue.parse(payload))?["tst"]?.doubleValue.flatMap({ Int64(exactly: $0) }) else { return }
        let first = echoedPositions.withLock { echoed in
            defer { echoed[id] = tst }
            return echoed[id] == nil
        }
        if first { schedule(.positionCheck(id), at: clock.now() + Self.positionCheckDelayMillis) }
    }

    /// Longer than a fix takes from the broker to the store, even in a batch.
    static let positionCheckDelayMillis: Int64 = 2_000

    private func checkRetainedPosition(_ id: ShareID) {
        guard let echoed = echoedPositions.withLock({ $0.removeValue(forKey: id) }),
              let snapshot = registry.snapshot(id), snapshot.share.isActive,
              let last = snapshot.last, last.timestamp > echoed else { return }
        _ = publisher.publishOwnPosition(topic: Topics.location(id), payload: last.ownTracksJSON)
    }

    /// For a tracker that reports over HTTP (it cannot hear the command topic): whether a "locate now" request is
    /// waiting for it. True once per request, for whichever instance hands it out first (the store decides). Memory
    /// says first whether a request is open, so a steady stream of HTTP fixes costs no write; a request made on
    /// another instance reaches memory through the store's change feed within a moment.
    public func takeLocateRequest(_ snapshot: ShareSnapshot) -> Bool {
        let now = clock.now()
        guard snapshot.share.isActive, let requestedAt = snapshot.share.locateRequestedAt,
              now - requestedAt < Self.locateCommandValidityMillis,
              (snapshot.share.locateAnsweredAt ?? 0) < requestedAt else { return false }
        do {
            return try store.takeLocateCommand(row: snapshot.row, now: now, validForMillis: Self.locateCommandValidityMillis)
        } catch {
            logger.warning("share \(snapshot.share.id): cannot read its waiting commands (\(error))")
            return false
        }
    }

    /// The broker delivered the tracker's last will (from the MQTT thread): recorded on the scheduler's thread.
    package func lastWillArrived(_ id: ShareID, at: UnixMillis) {
        schedule(.trackerLost(id, at), at: at)
    }

    /// Records the tracker state the rules give now, if it differs from the recorded one. With several instances
    /// each may see the same change; the store says which one records and announces it, the others take its row.
    /// False when the store could not be written.
    @discardableResult
    func updateTracker(_ id: ShareID, now: UnixMillis) -> Bool {
        updateBattery(id, now: now)
        guard let tracker = registry.currentTracker(id, now: now), tracker.isActive, tracker.current != tracker.recorded else { return true }
        let condition = tracker.current.state == .stale
            ? TrackerCondition(from: .live, noFixReceivedAfter: tracker.lastHeardAt)
            : TrackerCondition()
        return recordTracker(id, row: tracker.row, tracker.current, condition: condition)
    }

    private func trackerLost(_ id: ShareID, at: UnixMillis) {
        guard let tracker = registry.currentTracker(id, now: at), tracker.isActive else { return }
        // A fix heard after the will (the phone reconnected at once) already says more.
        guard tracker.lastHeardAt <= at else { return }
        let offline = TrackerRecord(state: .offline, since: at, reason: TrackerRecord.connectionLost, transport: .mqtt)
        recordTracker(id, row: tracker.row, offline, condition: TrackerCondition(noFixReceivedAfter: at))
    }

    /// Records that the battery became low (with `tracker.battery_low`) or recovered, when the newest fix says so.
    private func updateBattery(_ id: ShareID, now: UnixMillis) {
        guard let change = registry.batteryChange(id) else { return }
        let event = change.low ? ShareEvent.batteryLow(id, at: now, level: change.level) : nil
        do {
            guard try store.recordBatteryLow(row: change.row, lowSince: change.low ? now : nil, event: event.map(pending)) else {
                follow(try store.share(id: id))
                return
            }
        } catch {
            logger.warning("share \(id): cannot record its battery state (\(error))")
            return
        }
        registry.updateTracker(id) { $0.batteryLowAt = change.low ? now : nil }
        if let event {
            eventRecorded()
            logger.info("share \(id): battery low")
        }
    }

    @discardableResult
    private func recordTracker(_ id: ShareID, row: Int64, _ record: TrackerRecord, condition: TrackerCondition) -> Bool {
        let recorded: Bool
        let event = ShareEvent.tracker(id, record: record, before: registry.snapshot(id)?.share.tracker?.state)
        do {
            recorded = try store.recordTracker(row: row, record, condition: condition, event: event.map(pending))
        } catch {
            // Tried again by the next fix or sweep.
            logger.warning("share \(id): cannot record its tracker state (\(error))")
            return false
        }
        guard recorded else {
            // Another instance recorded this change (or a fix it stored says otherwise): memory follows the store.
            do { follow(try store.share(id: id)) } catch { warnStore("share \(id): cannot read its tracker state (\(error))") }
            return true
        }
        registry.updateTracker(id) { $0.tracker = record }
        if event != nil { eventRecorded() }
        guard let share = registry.snapshot(id)?.share else { return true }
        publishStatus(of: share)
        metrics.increment(FlareMetrics.trackerChanges, labels: [("state", record.state.rawValue)])
        logger.info("share \(id): tracker \(record.state.rawValue)\(record.reason.map { " (\($0))" } ?? "")")
        return true
    }

    private func sweepTrackers() {
        defer { schedule(.trackerSweep, at: clock.now() + Self.trackerSweepMillis) }
        let now = clock.now()
        // While the store cannot be written, one failure per sweep is enough to say so (and to try again).
        for id in registry.trackersOutOfDate(now: now) where !updateTracker(id, now: now) { break }
    }

    // MARK: Locate now

    public enum LocateRefusal: Error, Equatable {
        case ended
        /// The tracker is live: its next fix is on its way anyway.
        case trackerLive
        /// Asked less than `locateIntervalMillis` ago (by anyone, on any instance).
        case tooSoon(retryAfterSeconds: Int)
        case storage(String)
    }

    /// At most one "locate now" per share in this time, across instances.
    public static let locateIntervalMillis: Int64 = 30_000
    /// How long a request stays worth answering: the command's expiry on the broker, for a phone that is away.
    public static let locateCommandValidityMillis: Int64 = 600_000

    /// Asks the share's tracker for a fresh position: recorded in the store (which enforces the interval across
    /// instances), then the OwnTracks command `{"_type":"cmd","action":"reportLocation"}` is published to the
    /// command topic (QoS 1, not retained). Returns when it was asked.
    public func requestLocate(_ snapshot: ShareSnapshot) throws(LocateRefusal) -> UnixMillis {
        let id = snapshot.share.id
        guard snapshot.share.isActive else { throw .ended }
        let now = clock.now()
        if let tracker = registry.currentTracker(id, now: now), tracker.current.state == .live { throw .trackerLive }
        let accepted: Bool
        let event = ShareEvent.locateRequested(id, at: now)
        do {
            accepted = try store.requestLocate(row: snapshot.row, at: now, minimumIntervalMillis: Self.locateIntervalMillis, event: pending(event))
        } catch { throw .storage(error.description) }
        guard accepted else {
            let stored: StoredShare?
            do {
                stored = try store.share(id: id)
                if let stored { try adopt(stored) }
            } catch { throw .storage(error.description) }
            guard let share = stored?.share, share.isActive else { throw .ended }
            let waitMillis = (share.locateRequestedAt ?? now) + Self.locateIntervalMillis - now
            throw .tooSoon(retryAfterSeconds: Int(max(1, (waitMillis + 999) / 1000)))
        }
        registry.updateTracker(id) { $0.locateRequestedAt = now }
        eventRecorded()
        if !sendLocateRequest(id, askedAt: now) {
            unsentLocateRequests.withLock { $0[id] = now }
            logger.warning("share \(id): broker unavailable; the location request is kept and will be sent on reconnect")
        }
        metrics.increment(FlareMetrics.locateRequests)
        logger.info("share \(id): asked the tracker for a fresh position")
        return now
    }

    /// Publishes the command, with the broker holding it for a phone that is away only as long as it stays worth
    /// answering. True if the broker took it, or if it is no longer worth sending.
    private func sendLocateRequest(_ id: ShareID, askedAt: UnixMillis) -> Bool {
        let remainingMillis = askedAt + Self.locateCommandValidityMillis - clock.now()
        guard remainingMillis > 0, registry.snapshot(id)?.share.isActive == true else { return true }
        return publisher.publish(topic: Topics.command(id), payload: Self.reportLocationCommand, qos: 1, retain: false,
                                 expirySeconds: UInt32(clamping: (remainingMillis + 999) / 1000))
    }

    /// The OwnTracks "report location" command (both apps obey it with `cmd` on; iOS also needs `allowRemoteLocation`).
    public static let reportLocationCommand = Array(#"{"_type":"cmd","action":"reportLocation"}"#.utf8)

    /// An answer is a message from the phone, whatever position it carries: the tracker was heard from, and the
    /// request it answers is marked answered (once, by whichever instance got the answer).
    private func locateAnswered(_ id: ShareID, at: UnixMillis) {
        if registry.heard(id, at: at, transport: nil) { updateTracker(id, now: clock.now()) }
        guard let snapshot = registry.snapshot(id), snapshot.share.isActive,
              let requestedAt = snapshot.share.locateRequestedAt, at >= requestedAt,
              (snapshot.share.locateAnsweredAt ?? 0) < requestedAt else { return }
        let recorded: Bool
        do { recorded = try store.recordLocateAnswer(row: snapshot.row, at: at) } catch {
            // The next answer, or another instance's, records it; the request stays open meanwhile.
            warnStore("share \(id): cannot record the answer to the location request (\(error))")
            return
        }
        guard recorded else {
            do { follow(try store.share(id: id)) } catch { warnStore("share \(id): cannot read it from the store (\(error))") }
            return
        }
        registry.updateTracker(id) { $0.locateAnsweredAt = at }
        logger.info("share \(id): the tracker answered the location request")
    }

    // MARK: Reading

    /// The share with this id: from memory, or else from the store (a share another instance just created, or one
    /// whose history is deleted). Nil if unknown; throws when memory does not know it and the store cannot say.
    public func share(_ id: ShareID) throws(StoreError) -> ShareLookup? {
        if let snapshot = registry.snapshot(id) { return .live(snapshot) }
        return try lookUpInStore({ () throws(StoreError) in try store.share(id: id) }, missKey: id.rawValue)
    }

    /// The share whose view token hashes to `hash`; see `share(_:)`.
    public func share(viewTokenHash hash: SecretHash) throws(StoreError) -> ShareLookup? {
        if let snapshot = registry.snapshot(viewTokenHash: hash) { return .live(snapshot) }
        return try lookUpInStore({ () throws(StoreError) in try store.share(viewTokenHash: hash) }, missKey: Base64URL.encode(hash.bytes))
    }

    /// Whether a share holds as many fixes as a share may (`SharePolicy.maximumFixesPerShare`): its next fixes are
    /// refused, `fix_limit_reached`. Memory counts what it records; a share it has not counted yet (loaded from the
    /// store, or another instance's) is counted on the scheduler's thread, and taken in the meantime.
    package func fixLimitReached(_ context: ShareRegistry.IngestContext, of id: ShareID) -> Bool {
        guard let stored = context.storedFixes else {
            // Once per share: a share loaded at start-up would otherwise schedule a count for each of its fixes.
            if registry.askFixCount(id) { schedule(.countFixes(id), at: clock.now()) }
            return false
        }
        return stored >= policy.maximumFixesPerShare
    }

    /// For the HTTP paths, a share already looked up (see the other `fixLimitReached`).
    public func fixLimitReached(_ id: ShareID) -> Bool {
        registry.ingestContext(id).map { fixLimitReached($0, of: id) } ?? false
    }

    private func countFixes(_ id: ShareID) {
        guard let context = registry.ingestContext(id), context.storedFixes == nil else { return }
        do { registry.setStoredFixes(id, try store.fixCount(row: context.row)) } catch {
            warnStore("share \(id): cannot count its fixes (\(error)); counting again in 10 s")
            schedule(.countFixes(id), at: clock.now() + 10_000)
        }
    }

    /// What the ingest path needs for a fix of `id`, looking in the store when memory does not know the share.
    package func ingestContext(_ id: ShareID) throws(StoreError) -> ShareRegistry.IngestContext? {
        if let context = registry.ingestContext(id) { return context }
        guard case .live = try share(id) else { return nil }
        return registry.ingestContext(id)
    }

    /// Shares newest first, after `position` (see `ShareStore.listShares`); `owner`: only that key's.
    public func list(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64? = nil) throws(ShareError) -> [(row: Int64, lookup: ShareLookup)] {
        let rows: [StoredShare]
        do { rows = try store.listShares(state: state, after: position, limit: limit, owner: owner) } catch { throw .storage(error.description) }
        return rows.map { stored in
            (stored.row, registry.snapshot(stored.share.id).map(ShareLookup.live) ?? .historyDeleted(stored.share))
        }
    }

    /// The view document of a share with history, rendered once per change of the share and then served from
    /// memory: rendering the trail's numbers dominated the view endpoint's CPU time, and a share changes far less
    /// often than its link is polled.
    public func view(of snapshot: ShareSnapshot) -> RenderedView {
        if let cached = snapshot.cachedView { return RenderedView(share: snapshot.share, body: cached) }
        let body = ViewDocumentRenderer.body(share: snapshot.share, last: snapshot.last, trail: snapshot.trail, answers: snapshot.answers)
        registry.cacheView(snapshot.share.id, version: snapshot.version, bytes: body)
        return RenderedView(share: snapshot.share, body: body)
    }

    /// The view document of any share found by `share(viewTokenHash:)`.
    public func view(of lookup: ShareLookup) -> RenderedView {
        switch lookup {
        case .live(let snapshot): view(of: snapshot)
        case .historyDeleted(let share): RenderedView(share: share, body: ViewDocumentRenderer.body(share: share, last: nil, trail: []))
        }
    }

    /// Adds a live viewer to an active share; nil if it is unknown or has ended. Events arrive on the thread that
    /// caused them (the store writer for fixes); the subscriber must not block.
    public func subscribe(_ id: ShareID, _ subscriber: @escaping LiveSubscriber) -> Int? {
        registry.subscribe(id, subscriber)
    }

    public func unsubscribe(_ id: ShareID, subscription: Int) {
        registry.unsubscribe(id, subscription: subscription)
    }

    // MARK: Tokens
    // Issued "at" the share's creation, so a share's token is the same string until its expiry changes: the
    // OwnTracks link, file and QR code fetched a second apart carry the same password.

    public func deviceToken(for share: Share) -> String {
        ShareToken(shareID: share.id, role: .device, issuedAt: share.createdAt / 1000, expiresAt: share.expiresAt / 1000).signed(with: tokenKey)
    }

    public func watchToken(for share: Share) -> String {
        ShareToken(shareID: share.id, role: .watch, issuedAt: share.createdAt / 1000, expiresAt: share.expiresAt / 1000).signed(with: tokenKey)
    }

    /// A device token for `id` that verifies, for HTTP calls. The share's own state decides whether it still
    /// works (an extended share keeps accepting the token it was created with; an ended one refuses all).
    public func authorizeDevice(token: String, for id: ShareID) throws(StoreError) -> Bool {
        guard isDeviceToken(token, of: id), case .live(let snapshot) = try share(id), snapshot.share.isActive else { return false }
        return true
    }

    /// Whether `token` is a device token Flare signed for `id`, whatever the share's state: an ended share still
    /// knows its own phone, to tell it to stop (OwnTracks HTTP mode).
    public func isDeviceToken(_ token: String, of id: ShareID) -> Bool {
        guard let verified = try? ShareToken.verify(token, key: tokenKey, nowSeconds: Int64.min, expectedShare: id) else { return false }
        return verified.role == .device
    }

    // MARK: Who has seen the link

    /// A viewer is watching while its page was seen within this long (its live stream's heartbeat is half of it).
    static let watchingWindowMillis: Int64 = 75_000
    static let heartbeatMillis: Int64 = 30_000
    /// How many distinct viewer ids one address may add to one share (per instance): a script cannot inflate the count
    /// and falsely reassure the person who shared.
    static let viewersPerAddress = 5

    /// The page's random viewer id (kept in its browser), well-formed: 16–64 base64url characters.
    static func isViewerID(_ text: String) -> Bool {
        (16...64).contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
    }

    /// The hash the store keeps: of share and viewer id together, so that one browser cannot be linked across shares.
    static func viewerHash(_ id: ShareID, viewer: String) -> SecretHash { SecretHash(of: id.rawValue + ":" + viewer) }

    /// A page with viewer id `viewer` opened or polled the link (from `address`, used only for the cap and never
    /// kept). Written to the store at most every `heartbeatMillis` per viewer; a new viewer publishes the audience.
    public func viewerSeen(_ snapshot: ShareSnapshot, viewer: String, address: String) {
        guard snapshot.share.isActive, Self.isViewerID(viewer) else { return }
        let hash = Self.viewerHash(snapshot.share.id, viewer: viewer)
        let now = monotonicMillis()
        let due: Bool = viewerNotes.withLock { notes in
            if let last = notes.seen[hash], now - last < Self.heartbeatMillis { return false }
            let key = address + " " + snapshot.share.id.rawValue
            var added = notes.byAddress[key] ?? []
            if !added.contains(hash) {
                guard added.count < Self.viewersPerAddress else { return false }
                added.insert(hash)
                if notes.byAddress.count >= 100_000 { notes.byAddress.removeAll(keepingCapacity: true) }
                notes.byAddress[key] = added
            }
            if notes.seen.count >= 100_000 { notes.seen.removeAll(keepingCapacity: true) }
            notes.seen[hash] = now
            return true
        }
        guard due else { return }
        let at = clock.now()
        // The first viewer of all (on any instance) is `share.opened`: the store records it in the same transaction.
        let opened = snapshot.share.isActive ? ShareEvent.opened(snapshot.share.id, at: at) : nil
        let isNew: Bool
        do { isNew = try store.noteViewer(row: snapshot.row, viewer: hash, at: at, firstViewEvent: opened.map(pending)) } catch {
            // The page is answered all the same (it asked for the position, not to be counted); the viewer is noted
            // at its next request instead.
            viewerNotes.withLock { _ = $0.seen.removeValue(forKey: hash) }
            warnStore("share \(snapshot.share.id): cannot note a viewer (\(error)); noted at its next request")
            return
        }
        guard isNew else { return }
        publishAudience(snapshot)
        eventRecorded()
    }

    /// A live stream with this viewer id opened (true) or closed: while open, the viewer counts as watching, on
    /// every instance, through the heartbeat this instance writes to the store.
    public func watching(_ snapshot: ShareSnapshot, viewer: String, open: Bool) {
        guard Self.isViewerID(viewer) else { return }
        let hash = Self.viewerHash(snapshot.share.id, viewer: viewer)
        let first = watchers.withLock { watchers -> Bool in
            let wasEmpty = watchers.isEmpty
            var streams = watchers[snapshot.share.id] ?? [:]
            streams[hash, default: 0] += open ? 1 : -1
            if streams[hash] ?? 0 <= 0 { streams[hash] = nil }
            watchers[snapshot.share.id] = streams.isEmpty ? nil : streams
            return wasEmpty && open
        }
        if first { schedule(.audienceHeartbeat, at: clock.now() + Self.heartbeatMillis) }
        if !open { publishAudience(snapshot) }
    }

    private func audienceHeartbeat() {
        let watched = watchers.withLock { $0 }
        guard !watched.isEmpty else { return }
        let now = clock.now()
        for (id, streams) in watched {
            guard let snapshot = registry.snapshot(id), snapshot.share.isActive else { continue }
            do {
                for hash in streams.keys { _ = try store.noteViewer(row: snapshot.row, viewer: hash, at: now) }
            } catch {
                // The next heartbeat says it again, well within the watching window.
                warnStore("cannot note the live viewers of share \(id) (\(error))")
            }
            publishAudience(snapshot)
        }
        schedule(.audienceHeartbeat, at: now + Self.heartbeatMillis)
    }

    /// The share's audience, from the store (so every instance's viewers count).
    public func audience(of snapshot: ShareSnapshot) throws(StoreError) -> Audience {
        try store.audience(row: snapshot.row, watchingSince: clock.now() - Self.watchingWindowMillis)
    }

    /// The audience, retained on `…/audience` for the phone (its device token reads it), when it changed.
    private func publishAudience(_ snapshot: ShareSnapshot) {
        guard snapshot.share.isActive else { return }
        let audience: Audience
        do { audience = try self.audience(of: snapshot) } catch {
            // Published at the next change or heartbeat.
            warnStore("share \(snapshot.share.id): cannot read its audience (\(error))")
            return
        }
        let changed = publishedAudience.withLock { published in
            guard published[snapshot.share.id] != audience else { return false }
            if published.count >= 100_000 { published.removeAll(keepingCapacity: true) }
            published[snapshot.share.id] = audience
            return true
        }
        guard changed else { return }
        publish(topic: Topics.audience(snapshot.share.id), payload: audience.json,
                expiry: UInt32(clamping: max(1, (snapshot.share.expiresAt - clock.now()) / 1000)))
    }

    // MARK: The family's answers

    public enum AnswerRefusal: Error, Equatable {
        case ended
        /// The share holds `answersPerShare` answers already: a refusal for good, not a failure to retry.
        case full
        case storage(String)
    }

    /// How many answers a share takes at most: a family answers a few times; a script that got the link does not
    /// get to fill the store (the gateway limits the rate too).
    public static let answersPerShare = 200

    /// A family member answers (`name` already validated, `Answer.validName`): stored with the share, shown to every
    /// viewer of it on every instance (view document and live event), and sent to the phone on `…/answers` (QoS 1,
    /// not retained). The broker keeps nothing for a device that is not connected (the auth plugin checks each
    /// delivery against a connected client's token), so a phone that was away asks `GET …/answers?after=<last id>`.
    public func answer(_ snapshot: ShareSnapshot, kind: AnswerKind, name: String) throws(AnswerRefusal) -> Answer {
        guard snapshot.share.isActive else { throw .ended }
        let stored: Answer?
        do {
            guard try store.answers(row: snapshot.row, after: 0, limit: Self.answersPerShare).count < Self.answersPerShare else {
                throw AnswerRefusal.full
            }
            let id = snapshot.share.id
            stored = try store.insertAnswer(row: snapshot.row, kind: kind, name: name, at: clock.now()) { [self] answer in
                pending(ShareEvent.answered(id, answer: answer))
            }
        } catch let refusal as AnswerRefusal {
            throw refusal
        } catch {
            throw .storage("\(error)")
        }
        guard let answer = stored else { throw .ended }
        registry.addAnswers(snapshot.share.id, [answer])
        eventRecorded()
        let remaining = max(1, (snapshot.share.expiresAt - clock.now()) / 1000)
        if !publisher.publish(topic: Topics.answers(snapshot.share.id), payload: answer.json, qos: 1, retain: false,
                              expirySeconds: UInt32(clamping: remaining)) {
            logger.warning("share \(snapshot.share.id): broker unavailable; an answer is stored and shown, and the phone gets it over HTTP")
        }
        metrics.increment(FlareMetrics.answers, labels: [("kind", kind.rawValue)])
        logger.info("share \(snapshot.share.id): answered (\(kind.rawValue))")
        return answer
    }

    /// A share's answers after `after`, oldest first, from the store (for the phone over HTTP).
    public func answers(of row: Int64, after: Int64, limit: Int) throws(ShareError) -> [Answer] {
        do { return try store.answers(row: row, after: after, limit: limit) } catch { throw .storage(error.description) }
    }

    private func takeAnswers(_ id: ShareID, row: Int64) throws(StoreError) {
        let found = try store.answers(row: row, after: registry.lastAnswerID(id), limit: Self.answersPerShare)
        registry.addAnswers(id, Array(found.suffix(ShareRegistry.answersKept)))
    }

    // MARK: Confirming trackers

    /// A confirming tracker's messages whose fixes were just committed (from the writer, after the commit), or that
    /// were refused: recorded in the store, which moves each share's mark over what is handled without a gap, and the
    /// marks published on `…/stored`, retained, at most once a second per share. False when the store could not be
    /// written (the tracker sends those messages again, and they are recorded then).
    @discardableResult
    package func handled(_ sequences: [(share: ShareID, row: Int64, sequence: TrackerSequence)]) -> Bool {
        guard !sequences.isEmpty else { return true }
        let shareOfRow = Dictionary(sequences.map { ($0.row, $0.share) }, uniquingKeysWith: { first, _ in first })
        let marks: [(shareRow: Int64, mark: TrackerSequence)]
        do { marks = try store.recordHandledSequences(sequences.map { ($0.row, $0.sequence) }) } catch {
            logger.warning("cannot record what confirming trackers sent (\(error)); they send it again")
            return false
        }
        for (row, mark) in marks {
            if let id = shareOfRow[row] { publishMark(mark, of: id) }
        }
        return true
    }

    /// A confirming tracker's message was refused (from the MQTT thread): its mark must move past it, or the tracker
    /// would keep it, and send it again, for ever. Recorded on the scheduler's thread.
    package func refused(_ sequence: TrackerSequence, row: Int64, share: ShareID) {
        let first = refusedSequences.withLock { refused in
            guard refused.count < 10_000 else { return false }  // a flood: the rest is sent again, and recorded then
            refused.append((share, row, sequence))
            return refused.count == 1
        }
        if first { schedule(.refusedSequences, at: clock.now()) }
    }

    private func recordRefusedSequences() {
        let refused = refusedSequences.withLock { refused in
            defer { refused = [] }
            return refused
        }
        handled(refused)
    }

    static let trackerMarkIntervalMillis: Int64 = 1_000

    private func publishMark(_ mark: TrackerSequence, of id: ShareID) {
        let now = monotonicMillis()
        let sendNow: Bool = trackerMarks.withLock { marks in
            let entry = marks[id]
            guard let entry, now - entry.publishedAt < Self.trackerMarkIntervalMillis else {
                marks[id] = (now, nil)
                return true
            }
            if entry.held == nil {
                schedule(.trackerMark(id), at: clock.now() + Self.trackerMarkIntervalMillis - (now - entry.publishedAt))
            }
            if entry.held.map({ ($0.stream, $0.number) < (mark.stream, mark.number) }) ?? true { marks[id]?.held = mark }
            return false
        }
        if sendNow { sendMark(mark, of: id) }
    }

    private func publishHeldMark(_ id: ShareID) {
        let held: TrackerSequence? = trackerMarks.withLock { marks in
            guard let mark = marks[id]?.held else { return nil }
            marks[id] = (monotonicMillis(), nil)
            return mark
        }
        if let held { sendMark(held, of: id) }
    }

    private func sendMark(_ mark: TrackerSequence, of id: ShareID) {
        guard let share = registry.snapshot(id)?.share, share.isActive else { return }
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("seq_stream", mark.stream)
        writer.field("seq", mark.number)
        writer.endObject()
        publish(topic: Topics.stored(id), payload: writer.bytes, expiry: UInt32(clamping: max(1, (share.expiresAt - clock.now()) / 1000)))
    }

    // MARK: After the broker forgot

    /// What a restore republished, for `confirmRestore`: the shares announced active, with the time of the last
    /// position sent for each.
    public struct RestoredState: Sendable {
        public fileprivate(set) var shares = 0
        public fileprivate(set) var messages = 0
        fileprivate var announcedActive: [ShareID: UnixMillis?] = [:]
    }

    /// Publishes again, from the store, what the broker should hold for every share that still has history: an active
    /// share's retained status and the last position stored, an ended one's ended status and an empty location (the
    /// broker may have gone back to a copy saved while it was active). Shares whose history is deleted are not
    /// touched. Paced by the broker: every `window`-th message waits for its acknowledgement, so that no more than a
    /// window is queued ahead of the acknowledgements the bridge sends for fixes on the same connection. Nil when the
    /// store could not be read or the broker went away meanwhile: the restore is to be done again.
    public func restoreBrokerState(window: Int, timeout: Duration) -> RestoredState? {
        let open: [StoredShare]
        do { open = try store.loadOpenShares() } catch {
            logger.warning("cannot read the shares to restore on the broker (\(error)); trying again")
            return nil
        }
        var restored = RestoredState()
        var sinceWait = 0
        for stored in open {
            // Memory follows the store first (and takes in shares another instance created).
            let lookup: ShareLookup
            do { lookup = try adopt(stored) } catch {
                logger.warning("cannot read share \(stored.share.id) to restore it on the broker (\(error)); trying again")
                return nil
            }
            guard case .live(let snapshot) = lookup else { continue }
            let share = snapshot.share
            let status = statusMessage(of: share)
            let statusSent: Bool
            if sinceWait >= window {
                statusSent = publisher.publishAndWait(topic: Topics.status(share.id), payload: status.payload, qos: 1, retain: true,
                                                      expirySeconds: status.expiry, timeout: timeout)
                sinceWait = 0
            } else {
                statusSent = publisher.publish(topic: Topics.status(share.id), payload: status.payload, qos: 1, retain: true,
                                               expirySeconds: status.expiry)
            }
            let locationSent: Bool
            if share.isActive {
                if let last = snapshot.last {
                    locationSent = publisher.publishOwnPosition(topic: Topics.location(share.id), payload: last.ownTracksJSON)
                    restored.messages += 1
                } else {
                    locationSent = true
                }
                restored.announcedActive[share.id] = snapshot.last?.timestamp
            } else {
                locationSent = publisher.publish(topic: Topics.location(share.id), payload: [], qos: 1, retain: true, expirySeconds: nil)
                restored.messages += 1
            }
            guard statusSent, locationSent else { return nil }
            restored.shares += 1
            restored.messages += 1
            sinceWait += 2
        }
        return restored
    }

    /// The second half of a restore, once the broker has acknowledged a message published after it (which it
    /// processed after everything the restore sent): a share that ended, or whose history was deleted, while its
    /// active state was being republished (here or by another instance) may have had its end overtaken on the broker,
    /// so its end is announced again; a share whose tracker sent a newer fix meanwhile gets that one, in case the
    /// restored position overtook it. Returns how many shares were corrected.
    @discardableResult
    public func confirmRestore(_ restored: RestoredState) -> Int {
        guard !restored.announcedActive.isEmpty else { return 0 }
        let open: [StoredShare]
        do { open = try store.loadOpenShares() } catch {
            // What a restore may have overtaken stays so until the next restore; said, since it is rare and matters.
            logger.warning("cannot read the shares to confirm a broker restore (\(error))")
            return 0
        }
        let now = Dictionary(open.map { ($0.share.id, $0) }, uniquingKeysWith: { first, _ in first })
        var corrected = 0
        for (id, sentTst) in restored.announcedActive {
            guard let stored = now[id] else {
                // Deleted meanwhile: nothing of it stays on the broker.
                publish(topic: Topics.location(id), payload: [], expiry: nil)
                publish(topic: Topics.status(id), payload: [], expiry: nil)
                corrected += 1
                continue
            }
            let lookup: ShareLookup
            do { lookup = try adopt(stored) } catch {
                warnStore("cannot read share \(id) to confirm a broker restore (\(error))")
                continue
            }
            guard case .live(let snapshot) = lookup else { continue }
            if !snapshot.share.isActive {
                publish(topic: Topics.location(id), payload: [], expiry: nil)
                publishStatus(of: snapshot.share)
                corrected += 1
            } else if let last = snapshot.last, last.timestamp > (sentTst ?? Int64.min) {
                _ = publisher.publishOwnPosition(topic: Topics.location(id), payload: last.ownTracksJSON)
                corrected += 1
            }
        }
        return corrected
    }

    // MARK: Broker announcements

    private func publishStatus(of share: Share) {
        let status = statusMessage(of: share)
        publish(topic: Topics.status(share.id), payload: status.payload, expiry: status.expiry)
    }

    /// The retained status of a share, and how long the broker is to keep it.
    private func statusMessage(of share: Share) -> (payload: [UInt8], expiry: UInt32) {
        var writer = JSONWriter()
        writer.beginObject()
        let expiry: UInt32
        let retention = max(policy.historyRetentionSeconds, 3600)
        if let reason = share.endReason, let endedAt = share.endedAt {
            writer.field("state", "ended")
            writer.field("reason", reason.rawValue)
            writer.field("ended_at", RFC3339.format(millis: endedAt))
            expiry = UInt32(clamping: retention)
        } else {
            writer.field("state", "active")
            writer.field("expires_at", RFC3339.format(millis: share.expiresAt))
            writer.key("tracker")
            writer.beginObject()
            TrackerSummary(share: share, last: nil).writeStateFields(into: &writer)
            writer.endObject()
            // The retained status must not outlive the share on a broker that Flare stops talking to.
            expiry = UInt32(clamping: max(1, (share.expiresAt - clock.now()) / 1000) + retention)
        }
        writer.endObject()
        return (writer.bytes, expiry)
    }

    private func publish(topic: String, payload: [UInt8], expiry: UInt32?) {
        if !publisher.publish(topic: topic, payload: payload, qos: 1, retain: true, expirySeconds: expiry) {
            unsent.withLock { $0[topic] = (payload, expiry) }
            logger.warning("broker unavailable; a status update is kept and will be sent on reconnect")
        }
    }

    /// Tells the broker's auth plugin (`$CONTROL/flare/v1`) to refuse the share's device and watch tokens until
    /// they expire and to disconnect its clients now. Not retained: the plugin keeps its own list on disk.
    private func revoke(_ share: Share) {
        let until = Self.revocationEnd(share)
        if !sendRevocation(share.id, until: until) {
            unsentRevocations.withLock { $0[share.id] = until }
            logger.warning("broker unavailable; a revocation is kept and will be sent on reconnect")
        }
    }

    /// Unix seconds, rounded up: no token of the share has an `exp` later than its current expiry.
    private static func revocationEnd(_ share: Share) -> Int64 { (share.expiresAt + 999) / 1000 }

    private func sendRevocation(_ id: ShareID, until: Int64) -> Bool {
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
        flushHTTPOutbox()
        let pending = unsent.withLock { unsent in
            defer { unsent = [:] }
            return unsent
        }
        for (topic, message) in pending { publish(topic: topic, payload: message.payload, expiry: message.expiry) }
        let revocations = unsentRevocations.withLock { pending in
            defer { pending = [:] }
            return pending
        }
        for (id, until) in revocations where !sendRevocation(id, until: until) {
            unsentRevocations.withLock { $0[id] = until }
        }
        let locateRequests = unsentLocateRequests.withLock { pending in
            defer { pending = [:] }
            return pending
        }
        for (id, askedAt) in locateRequests where !sendLocateRequest(id, askedAt: askedAt) {
            unsentLocateRequests.withLock { $0[id] = askedAt }
        }
    }
}
