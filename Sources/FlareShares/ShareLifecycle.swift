import FlareAPI
import FlareCore
import FlareStore
import FlareSystem
import Synchronization

/// A share's life: created with its capabilities, extended, ended by expiry or by a stop, and its history deleted
/// after the retention time. Every transition is written to the store first, then to memory (`ShareDirectory`), then
/// announced on the broker (`BrokerAnnouncer`: retained status; the retained location cleared at the end).
final class ShareLifecycle: Sendable {
    enum Job: Hashable, Sendable {
        case expire(ShareID)
        case purge(ShareID)
    }

    let store: any ShareRecords & FixRecords & LinkRecords & EventRecords
    let policy: SharePolicy
    let tokenKey: [UInt8]
    private let directory: ShareDirectory
    private let announcer: BrokerAnnouncer
    let deadlines: Deadlines
    private let outbox: EventOutbox
    private let links: PersonalLinks
    private let keys: OwnerKeyService
    private let confirmations: ConfirmingTrackers
    let clock: any Clock
    let metrics: Metrics
    let logger: Logger
    /// Clears what tokens left retained below an ended share's location topic (`RetainedSweeper`).
    private let sweepRetained: @Sendable (ShareID) -> Void

    init(store: any ShareRecords & FixRecords & LinkRecords & EventRecords, policy: SharePolicy, tokenKey: [UInt8], directory: ShareDirectory,
         announcer: BrokerAnnouncer, deadlines: Deadlines, outbox: EventOutbox, links: PersonalLinks, keys: OwnerKeyService,
         confirmations: ConfirmingTrackers, clock: any Clock, metrics: Metrics, logger: Logger, sweepRetained: @escaping @Sendable (ShareID) -> Void) {
        self.store = store
        self.policy = policy
        self.tokenKey = tokenKey
        self.directory = directory
        self.announcer = announcer
        self.deadlines = deadlines
        self.outbox = outbox
        self.links = links
        self.keys = keys
        self.confirmations = confirmations
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        self.sweepRetained = sweepRetained
        deadlines.on(Job.self) { [weak self] job in
            switch job {
            case .expire(let id): self?.expireIfDue(id)
            case .purge(let id): self?.purge(id)
            }
        }
    }

    // MARK: Start-up

    /// Loads every share that still has history into memory, ends those that expired while Flare was down,
    /// deletes history whose retention has passed, and schedules the rest.
    func recover() throws(StoreError) {
        let now = clock.now()
        var ended = 0, purged = 0
        for stored in try store.loadOpenShares() {
            let trail = try store.recentFixes(of: stored, limit: directory.trailLength)
            directory.insert(stored, recentFixes: trail)
            if stored.share.lastAnswerID != nil { try directory.takeAnswers(stored.share.id, row: stored.row) }
            let share = stored.share
            if share.isActive {
                if share.expiresAt <= now {
                    end(share.id, reason: .expired)
                    ended += 1
                } else {
                    directory.scheduleNext(for: share)
                }
            } else if let endedAt = share.endedAt {
                // A stop the broker may not have heard of (flared died before sending it): say it again at the
                // first connection; the broker's plugin treats a repeated revocation as one.
                if share.endReason == .stopped, share.expiresAt > now {
                    announcer.keepRevocation(share.id, until: BrokerAnnouncer.revocationEnd(share))
                }
                if endedAt + policy.historyRetentionSeconds * 1000 <= now {
                    purge(share.id)
                    purged += 1
                } else {
                    directory.scheduleNext(for: share)
                }
            }
        }
        var shareIDs: [Int64: ShareID] = [:]
        let stored = try store.openLinks()
        for row in Set(stored.map(\.shareRow)) { shareIDs[row] = directory.shareID(ofRow: row) }
        for (row, rekeyed) in Dictionary(grouping: try links.rekeyLinks(stored, shareIDs: shareIDs), by: \.shareRow) {
            if let id = shareIDs[row] { directory.setLinks(id, rekeyed.sorted { $0.createdAt < $1.createdAt }) }
        }
        logger.info("loaded \(directory.shareCount) shares (\(directory.activeShareCount) active); ended \(ended) that expired while down, purged \(purged)")
    }

    // MARK: Transitions

    /// See `ShareService.create`.
    func create(name: String?, durationSeconds: Double?, owner: OwnerKeyRecord?, contacts: [ContactID], endToEnd: Bool) throws(ShareError) -> ShareService.Created {
        if endToEnd && !contacts.isEmpty { throw PersonalLinks.endToEndTakesNoContacts }
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
        let linkContacts = try links.contactsForLinks(contacts, owner: owner, existing: 0)
        let now = clock.now()
        let viewToken = Secret.generate()
        let share = Share(id: ShareID.generate(), viewTokenHash: viewToken.hash, name: cleanName,
                          createdAt: now, expiresAt: now + duration * 1000, ownerKeyID: owner?.id, endToEnd: endToEnd)
        let created = try record(share, viewToken: viewToken, linkContacts: linkContacts, owner: owner) { started throws(ShareError) -> Int64? in
            let inserted: Result<Int64, QuotaRefusal>
            do throws(StoreError) {
                inserted = limits.maxLive != nil || limits.createsPerHour != nil
                    ? try store.insertShare(share, limits: limits, now: now, event: started)
                    : .success(try store.insertShare(share, event: started))
            } catch { throw .storage(error.description) }
            switch inserted {
            case .success(let row): return row
            case .failure(let refusal): throw refused(refusal)
            }
        }
        guard let created else { throw .storage("the share was not stored") }  // not reached: the insertion above stores or throws
        return created
    }

    /// The part of a creation after its checks, the same for every way a share is made (`create`, a device's SOS):
    /// `insert` stores the share with its `share.started` event and returns its row (nil: it did not store it, for
    /// a reason the caller knows); then its personal links are stored and mailed, with `withLinks` (events that need
    /// the links to exist when they are delivered: a device's `sos.started`, whose push goes to the contacts of the
    /// links), and memory and the broker told.
    func record(_ share: Share, viewToken: Secret, linkContacts: [Contact], owner: OwnerKeyRecord?, withLinks: [ShareEvent] = [],
                insert: (PendingEvent) throws(ShareError) -> Int64?) throws(ShareError) -> ShareService.Created? {
        guard let row = try insert(outbox.pending(ShareEvent.started(share))) else { return nil }
        outbox.recorded()
        let now = share.createdAt
        let made = links.makeLinks(for: linkContacts, share: share.id, row: row, at: now)
        var mailing: [LinkID: LinkMailing] = [:]
        if !made.isEmpty {
            do throws(StoreError) {
                do throws(ShareError) { mailing = try links.planMail(made, share: share.id, owner: owner?.id, now: now) } catch {
                    throw StoreError(operation: "takeMailBudget", code: 0, message: error.description, engine: "flare")
                }
                let events = made.map { outbox.linkCreated(share.id, $0.link, mailed: mailing[$0.link.id] == .queued) } + withLinks.map { outbox.pending($0) }
                guard try store.insertLinks(made.map(\.link), events: events) else {
                    throw StoreError(operation: "insertLinks", code: 0, message: "the share ended at once", engine: "flare")
                }
            } catch {
                // No share without the links it was asked for: its creator hears a failure and asks again, and the
                // share nobody got the link of is ended (or, if the store cannot say even that, expires unseen).
                do throws(StoreError) { _ = try store.markEnded(row: row, at: now, reason: .stopped, event: nil) } catch {
                    directory.warnStore("share \(share.id): its links could not be stored, nor its end (\(error)); it expires unused")
                }
                throw .storage(error.description)
            }
        }
        if made.isEmpty && !withLinks.isEmpty {
            do throws(StoreError) { for event in withLinks { try store.recordEvent(outbox.pending(event), shareRow: row) } } catch {
                directory.warnStore("share \(share.id): an event of its start could not be recorded (\(error))")
            }
        }
        if !made.isEmpty || !withLinks.isEmpty { outbox.recorded() }
        directory.insert(StoredShare(row: row, share: share), storedFixes: 0)
        if !made.isEmpty { directory.addLinks(share.id, made.map(\.link)) }
        directory.scheduleNext(for: share)
        announcer.publishStatus(of: share)
        metrics.increment(FlareMetrics.sharesCreated)
        let duration = (share.expiresAt - share.createdAt) / 1000
        logger.info("share \(share.id) created\(share.endToEnd ? " (end-to-end encrypted)" : ""), expires in \(duration) s\(made.isEmpty ? "" : ", \(made.count) personal links")")
        return ShareService.Created(share: share, viewToken: viewToken.text, deviceToken: deviceToken(for: share), links: made.map { ($0.link, $0.token) },
                                    mailing: mailing)
    }

    func refused(_ refusal: QuotaRefusal) -> ShareError {
        metrics.increment(FlareMetrics.quotaRefusals, labels: [("limit", refusal.limit.rawValue)])
        return .quota(refusal)
    }

    /// See `ShareService.stop`.
    func stop(_ id: ShareID) throws(ShareError) -> Share {
        guard let snapshot = directory.snapshot(id) else { throw .notFound }
        // Returned from `end` rather than read again: with no retention the share may already be purged.
        do { return try endRecorded(id, reason: .stopped) ?? directory.snapshot(id)?.share ?? snapshot.share } catch {
            throw .storage(error.description)
        }
    }

    /// See `ShareService.extend`.
    func extend(_ id: ShareID, durationSeconds: Double?) throws(ShareError) -> (share: Share, deviceToken: String) {
        guard let snapshot = directory.snapshot(id) else { throw .notFound }
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
        do { try store.updateExpiry(row: snapshot.row, expiresAt: expiresAt, event: outbox.pending(extended)) } catch { throw .storage(error.description) }
        outbox.recorded()
        directory.updateExpiry(id, expiresAt: expiresAt)
        guard let updated = directory.snapshot(id)?.share, updated.isActive else { throw .ended }
        directory.scheduleNext(for: updated)
        announcer.publishStatus(of: updated)
        logger.info("share \(id) extended by \(duration) s")
        return (updated, deviceToken(for: updated))
    }

    /// An expiry job: ends the share if it is still active and its end has come (it may have been extended since the
    /// job was scheduled, or ended otherwise).
    private func expireIfDue(_ id: ShareID) {
        guard let share = directory.snapshot(id)?.share, share.isActive, share.expiresAt <= clock.now() else { return }
        end(id, reason: .expired)
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
        guard let snapshot = directory.snapshot(id), snapshot.share.isActive else { return nil }
        let now = clock.now()
        let endedEvent = ShareEvent.ended(id, at: now, reason: reason)
        let recorded: Bool
        do { recorded = try store.markEnded(row: snapshot.row, at: now, reason: reason, event: outbox.pending(endedEvent)) } catch {
            guard orInMemory else { throw error }
            logger.error("share \(id): cannot record its end (\(error)); ending it in memory")
            recorded = true
        }
        guard recorded else {
            // Another instance ended it first (its expiry fired there too, or it was stopped there): that one
            // announces the end; here memory follows the store (at its next change, if it cannot be read now).
            directory.followStored(id, "its end")
            return nil
        }
        directory.markEnded(id, reason: reason, at: now)  // its expiry job, if still waiting, then does nothing
        announcer.retain(topic: Topics.location(id), payload: [], expiry: nil)
        sweepRetained(id)
        var ended = snapshot.share
        ended.endedAt = now
        ended.endReason = reason
        announcer.publishStatus(of: ended)
        // A share stopped before its expiry still has tokens whose `exp` has not passed: the broker must refuse
        // them from now on (and cut off a connected device). An expired share's tokens refuse themselves.
        if reason == .stopped {
            // First, while its token still reads the command topic, tell an OwnTracks phone to stop reporting (quiet
            // mode); the broker sends it ahead of the revocation, which comes after it on flared's connection. After
            // an expiry the broker refuses the phone already, so it cannot be told (docs/owntracks.md says what to do).
            _ = announcer.publish(topic: Topics.command(id), payload: OwnTracksConfiguration.stopReporting, qos: 1, retain: false,
                                  expirySeconds: 60)
            // The same for `share.ended` on the events topic: an integrator reading it with a watch token hears of the
            // end before the revocation cuts it off. Sent here, it leaves the outbox's topic delivery done; a broker
            // that did not take it gets it from the outbox later, as every other event.
            if announcer.publish(topic: Topics.events(id), payload: endedEvent.body, qos: 1, retain: false, expirySeconds: nil) {
                // Not recorded, the outbox publishes it again: at least once, as every event.
                try? store.eventDelivered(id: endedEvent.id, destination: .mqtt)
                metrics.increment(FlareMetrics.eventDeliveries, labels: [("destination", EventDestination.mqtt.name), ("result", "delivered")])
            }
            announcer.revoke(ended)
        }
        outbox.recorded()
        metrics.increment(FlareMetrics.sharesEnded, labels: [("reason", reason.rawValue)])
        logger.info("share \(id) ended: \(reason.rawValue)")
        directory.scheduleNext(for: ended)
        return ended
    }

    private func purge(_ id: ShareID) {
        guard let snapshot = directory.snapshot(id), !snapshot.share.isActive else { return }
        do {
            guard try store.purgeHistory(row: snapshot.row) else {
                directory.remove(id)  // another instance purged it, and cleared the broker's copy
                return
            }
        } catch {
            logger.error("share \(id): cannot delete its history (\(error)); retrying in 60 s")
            deadlines.schedule(Job.purge(id), at: clock.now() + 60_000)
            return
        }
        directory.remove(id)
        confirmations.forget(id)
        // Nothing of the share stays on the broker either.
        announcer.retain(topic: Topics.status(id), payload: [], expiry: nil)
        announcer.retain(topic: Topics.stored(id), payload: [], expiry: nil)
        announcer.retain(topic: Topics.audience(id), payload: [], expiry: nil)
        // Again, in case the instance that ended it went before it could.
        sweepRetained(id)
        logger.info("share \(id): history deleted")
    }

    // MARK: Tokens
    // Issued "at" the share's creation, so a share's token is the same string until its expiry changes: the
    // OwnTracks link, file and QR code fetched a second apart carry the same password.

    func deviceToken(for share: Share) -> String {
        ShareToken(shareID: share.id, role: .device, issuedAt: share.createdAt / 1000, expiresAt: share.expiresAt / 1000).signed(with: tokenKey)
    }

    func watchToken(for share: Share) -> String {
        ShareToken(shareID: share.id, role: .watch, issuedAt: share.createdAt / 1000, expiresAt: share.expiresAt / 1000).signed(with: tokenKey)
    }
}
