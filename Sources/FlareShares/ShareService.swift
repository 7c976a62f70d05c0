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
    /// Bad input with a code of its own (`unknown_contact`, `too_many_links`).
    case refusedInput(code: String, message: String)
    case storage(String)
    /// Over one of the owning key's limits.
    case quota(QuotaRefusal)

    public var description: String {
        switch self {
        case .notFound: "no such share"
        case .ended: "the share has ended"
        case .invalid(let message): message
        case .refusedInput(_, let message): message
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
        /// A personal link per contact asked for, with its view token (empty without contacts).
        public let links: [(link: ShareLink, token: String)]
        /// Whether each link's contact is mailed (none for a contact Flare does not mail: no address, no SMTP server).
        public let mailing: [LinkID: LinkMailing]
    }

    let store: any ShareStore
    /// The owner keys: who may create, read and control which shares.
    public let keys: OwnerKeyService
    /// The contacts: whom a key's shares may tell.
    public let contacts: ContactService
    /// Memory's copy of every share that still has history; the bridge's ingest records fixes into it.
    package let registry: ShareRegistry
    let publisher: any BrokerPublisher
    let tokenKey: [UInt8]
    public let policy: SharePolicy
    let clock: any Clock
    let metrics: Metrics
    let logger: Logger
    let scheduler = Mutex<DeadlineScheduler<Job>?>(nil)
    // Each concern's state, in a small type of its own declared beside the concern (ShareService+<Concern>.swift).
    /// What the broker could not be handed while it was away (`Unsent`, ShareService+Announcements.swift).
    let unsent = Mutex(Unsent())
    /// HTTP fixes waiting for the broker and flared's own positions that came back (`Publication`, +Ingest).
    let publication = Mutex(Publication())
    /// Who watches, who was noted, what was published (`AudienceState`, +Audience).
    let audienceState = Mutex(AudienceState())
    /// Confirming trackers' refused messages and their marks (`Confirmations`, +Confirmations).
    let confirmations = Mutex(Confirmations())
    let unpublishedLogLimiter = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 3), maximumKeys: 4)
    let storeWarnings = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 5), maximumKeys: 4)
    /// Where every event goes besides the owning key's webhook (`EventDeliverer.destinations`).
    let eventDestinations: [EventDestination]
    /// Whether a personal link's contact with an address is mailed (`EventDeliverer.mailsContacts`).
    let mailsContacts: Bool
    /// Which of them are: one mail an address a share, within the key's budget.
    let mailPlanner: MailPlanner
    /// Stops what revoked keys left running (`KeyRevocations`).
    public var revocations: KeyRevocations {
        KeyRevocations(shares: self, store: store, clock: clock, metrics: metrics, logger: logger)
    }
    /// Told after an event is committed to the outbox (the deliverer wakes). A `let`: a closure kept in a `Mutex` is
    /// re-wrapped by every `withLock`, and calling it then costs as many calls as it was ever read.
    let eventRecorded: @Sendable () -> Void
    /// Clears what tokens left retained below an ended share's location topic (`RetainedSweeper`).
    let sweepRetained: @Sendable (ShareID) -> Void
    /// Ids and token hashes the store did not know, with when it was asked (see `lookUpInStore`).
    let recentMisses = Mutex<[String: Int64]>([:])

    /// - Parameters:
    ///   - trailLength: recent positions kept in memory per share for the viewer's trail.
    ///   - hostResolver: where setting a limited key's webhook looks its host name up (a test's resolver in tests).
    public init(store: any ShareStore, trailLength: Int, publisher: any BrokerPublisher, tokenKey: [UInt8],
                policy: SharePolicy, trackerRules: TrackerRules, clock: any Clock, metrics: Metrics, logger: Logger,
                eventDestinations: [EventDestination] = [.mqtt], mailsContacts: Bool = false, mailPerKeyPerHour: Int = 60,
                eventRecorded: @escaping @Sendable () -> Void = {},
                sweepRetained: @escaping @Sendable (ShareID) -> Void = { _ in }, hostResolver: any HostResolving = SystemHostResolver()) {
        let registry = ShareRegistry(trailLength: trailLength, trackerRules: trackerRules)
        self.store = store
        self.keys = OwnerKeyService(store: store, sealer: WebhookSecretSealer(tokenKey: tokenKey), resolver: hostResolver, clock: clock,
                                    metrics: metrics, logger: logger)
        self.contacts = ContactService(store: store, clock: clock, logger: logger.with(label: "contacts"))
        self.registry = registry
        self.publisher = publisher
        self.tokenKey = tokenKey
        self.policy = policy
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        self.eventDestinations = eventDestinations
        self.mailsContacts = mailsContacts
        self.mailPlanner = MailPlanner(store: store, perKeyPerHour: mailPerKeyPerHour, metrics: metrics)
        self.eventRecorded = eventRecorded
        self.sweepRetained = sweepRetained
        metrics.register(FlareMetrics.sharesCreated, FlareMetrics.quotaRefusals, FlareMetrics.answers, FlareMetrics.sharesEnded, FlareMetrics.trackerChanges, FlareMetrics.locateRequests, FlareMetrics.httpFixesUnpublished, FlareMetrics.httpFixesDropped, FlareMetrics.clearPositionsCleared)
        metrics.registerGauge(FlareMetrics.sharesActive) { [registry] in Double(registry.activeShareCount) }
        let scheduler = DeadlineScheduler<Job>(clock: clock) { [weak self] job in self?.run(job) }
        self.scheduler.withLock { $0 = scheduler }
    }

    /// The event as the store records it with its change.
    func pending(_ event: ShareEvent) -> PendingEvent { PendingEvent(event, destinations: eventDestinations) }

    /// `link.created`, also to the contact's mail when this instance mails contacts and the contact has an address.
    /// `link.created`, and the link's mail if `mailed` (`MailPlanner`).
    func linkCreated(_ share: ShareID, _ link: ShareLink, mailed: Bool) -> PendingEvent {
        PendingEvent(.linkCreated(share, link: link), destinations: mailed ? eventDestinations + [.mail(link.id)] : eventDestinations)
    }

    /// Which of `links` are mailed, within the owner's budget and one mail per address of the share (`MailPlanner`).
    func planMail(_ links: [(link: ShareLink, token: String, contact: Contact)], share: ShareID, owner: Int64?, now: UnixMillis)
        throws(ShareError) -> [LinkID: LinkMailing] {
        guard mailsContacts, links.contains(where: { $0.contact.email != nil }) else { return [:] }
        do {
            var mailed = Set<String>()
            for earlier in registry.links(share) where !earlier.isWithdrawn {
                if let id = earlier.contactID, let address = try store.contact(id: id)?.email { mailed.insert(MailPlanner.normalized(address)) }
            }
            return try mailPlanner.plan(links.map { ($0.link.id, $0.contact.email) }, mailedAddresses: mailed, owner: owner, now: now)
        } catch { throw .storage(error.description) }
    }

    func schedule(_ job: Job, at deadline: UnixMillis) {
        scheduler.withLock { scheduler in
            // Every live share has an expiry job: untracked, it costs its heap item alone, and `expireIfDue` checks
            // the share's current end, so a job left from before an extension or an end does nothing.
            if case .expire = job { scheduler?.scheduleUntracked(job, at: deadline) } else { scheduler?.schedule(job, at: deadline) }
        }
    }

    /// An expiry job: ends the share if it is still active and its end has come (it may have been extended since the
    /// job was scheduled, or ended otherwise).
    func expireIfDue(_ id: ShareID) {
        guard let share = registry.snapshot(id)?.share, share.isActive, share.expiresAt <= clock.now() else { return }
        end(id, reason: .expired)
    }

    func run(_ job: Job) {
        switch job {
        case .expire(let id): expireIfDue(id)
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
            let trail = try store.recentFixes(of: stored, limit: registry.trailLength)
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
                    unsent.withLock { $0.revocations[share.id] = Self.revocationEnd(share) }
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
        var shareIDs: [Int64: ShareID] = [:]
        let stored = try store.openLinks()
        for row in Set(stored.map(\.shareRow)) { shareIDs[row] = registry.shareID(ofRow: row) }
        for (row, links) in Dictionary(grouping: try rekeyLinks(stored, shareIDs: shareIDs), by: \.shareRow) {
            if let id = shareIDs[row] { registry.setLinks(id, links.sorted { $0.createdAt < $1.createdAt }) }
        }
        logger.info("loaded \(registry.shareCount) shares (\(registry.activeShareCount) active); ended \(ended) that expired while down, purged \(purged)")
        schedule(.trackerSweep, at: now + Self.trackerSweepMillis)
    }

    // MARK: Transitions

    /// - Parameter owner: the key creating it, which will own it (nil: no key, as in tests and the demo); its limits
    ///   apply, across instances.
    /// - Parameter contacts: a personal link each (`ShareService+Links.swift`); they must be `owner`'s contacts.
    /// - Parameter endToEnd: the phone encrypts every position with a passphrase the server never gets (see
    ///   `Share.endToEnd`). Such a share takes no contacts: the server could give them a link but never its key.
    public func create(name: String?, durationSeconds: Double?, owner: OwnerKeyRecord? = nil, contacts: [ContactID] = [],
                       endToEnd: Bool = false) throws(ShareError) -> Created {
        if endToEnd && !contacts.isEmpty { throw Self.endToEndTakesNoContacts }
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
        // Checked before anything is stored: a share whose links could not be made is not made.
        let linkContacts = try contactsForLinks(contacts, owner: owner, existing: 0)
        let now = clock.now()
        let viewToken = Secret.generate()
        let share = Share(id: ShareID.generate(), viewTokenHash: viewToken.hash, name: cleanName,
                          createdAt: now, expiresAt: now + duration * 1000, ownerKeyID: owner?.id, endToEnd: endToEnd)
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
        let links = makeLinks(for: linkContacts, share: share.id, row: row, at: now)
        var mailing: [LinkID: LinkMailing] = [:]
        if !links.isEmpty {
            do throws(StoreError) {
                do throws(ShareError) { mailing = try planMail(links, share: share.id, owner: owner?.id, now: now) } catch {
                    throw StoreError(operation: "takeMailBudget", code: 0, message: error.description, engine: "flare")
                }
                guard try store.insertLinks(links.map(\.link), events: links.map { linkCreated(share.id, $0.link, mailed: mailing[$0.link.id] == .queued) }) else {
                    throw StoreError(operation: "insertLinks", code: 0, message: "the share ended at once", engine: "flare")
                }
            } catch {
                // No share without the links it was asked for: its creator hears a failure and asks again, and the
                // share nobody got the link of is ended (or, if the store cannot say even that, expires unseen).
                do throws(StoreError) { _ = try store.markEnded(row: row, at: now, reason: .stopped, event: nil) } catch {
                    warnStore("share \(share.id): its links could not be stored, nor its end (\(error)); it expires unused")
                }
                throw .storage(error.description)
            }
        }
        if !links.isEmpty { eventRecorded() }
        registry.insert(StoredShare(row: row, share: share), storedFixes: 0)
        if !links.isEmpty { registry.addLinks(share.id, links.map(\.link)) }
        schedule(.expire(share.id), at: share.expiresAt)
        publishStatus(of: share)
        metrics.increment(FlareMetrics.sharesCreated)
        logger.info("share \(share.id) created\(endToEnd ? " (end-to-end encrypted)" : ""), expires in \(duration) s\(links.isEmpty ? "" : ", \(links.count) personal links")")
        return Created(share: share, viewToken: viewToken.text, deviceToken: deviceToken(for: share), links: links.map { ($0.link, $0.token) },
                       mailing: mailing)
    }

    /// Personal links are mailed by the server, which has no key to put in them; the sharer sends the link instead.
    static let endToEndTakesNoContacts = ShareError.refusedInput(
        code: "e2e_contacts", message: "an end-to-end encrypted share takes no contacts: the server never has the key their links need; send the link with its #k= yourself")

    func refused(_ refusal: QuotaRefusal) -> ShareError {
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
    func endRecorded(_ id: ShareID, reason: EndReason, orInMemory: Bool = false) throws(StoreError) -> Share? {
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
        registry.markEnded(id, reason: reason, at: now)  // its expiry job, if still waiting, then does nothing
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
        confirmations.withLock { _ = $0.marks.removeValue(forKey: id) }
        // Nothing of the share stays on the broker either.
        publish(topic: Topics.status(id), payload: [], expiry: nil)
        publish(topic: Topics.stored(id), payload: [], expiry: nil)
        publish(topic: Topics.audience(id), payload: [], expiry: nil)
        // Again, in case the instance that ended it went before it could.
        sweepRetained(id)
        logger.info("share \(id): history deleted")
    }
}
