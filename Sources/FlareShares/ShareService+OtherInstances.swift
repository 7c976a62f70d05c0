import FlareAPI
import FlareCore
import FlareStore
import FlareEvents
import FlareSystem
import Synchronization

extension ShareService {
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
    func sweepExpired() {
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
    func resync() {
        do {
            let open = try store.loadOpenShares()
            let openIDs = Set(open.map(\.share.id))
            for stored in open {
                try adopt(stored)
                registry.replaceFixes(stored.share.id, with: try store.recentFixes(of: stored, limit: registry.trailLength))
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
            scheduler.withLock { $0?.cancel(.purge(share.id)) }  // its expiry job finds it gone (`expireIfDue`)
            return .historyDeleted(share)
        }
        guard let current = registry.snapshot(share.id) else {
            let trail = try store.recentFixes(of: stored, limit: registry.trailLength)
            let answers = share.lastAnswerID == nil ? [] : try store.answers(row: stored.row, after: 0, limit: Self.answersPerShare)
            let links = try store.links(shareRow: stored.row)
            registry.insert(stored, recentFixes: trail)
            registry.addAnswers(share.id, Array(answers.suffix(ShareRegistry.answersKept)))
            registry.setLinks(share.id, links)
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
            scheduleNext(for: share)
        } else if current.share.isActive, share.isActive, current.share.expiresAt != share.expiresAt {
            registry.updateExpiry(share.id, expiresAt: share.expiresAt)
            scheduleNext(for: share)
        }
        registry.updateTracker(from: share)
        // A link added or withdrawn on another instance (the store marks the share changed for it).
        do { registry.setLinks(share.id, try store.links(shareRow: stored.row)) } catch {
            warnStore("share \(share.id): cannot read its personal links (\(error))")
        }
        return registry.snapshot(share.id).map(ShareLookup.live) ?? .historyDeleted(share)
    }

    /// `adopt` off the request paths (the change feed, sweeps, the scheduler's jobs): a share that cannot be read now
    /// is read again at its next change, sweep or request, so a failure is only said.
    func follow(_ stored: StoredShare?) {
        guard let stored else { return }
        do { try adopt(stored) } catch { warnStore("share \(stored.share.id): cannot read it from the store (\(error)); memory follows at its next change") }
    }

    /// A store failure off the request paths, said at most a few times a minute.
    func warnStore(_ message: @autoclosure () -> String) {
        if storeWarnings.take("store", nowMillis: clock.monotonicMillis()) == nil { logger.warning(message()) }
    }

    /// An active share's expiry; an ended one's purge.
    func scheduleNext(for share: Share) {
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
    func lookUpInStore(_ read: () throws(StoreError) -> StoredShare?, missKey: String) throws(StoreError) -> ShareLookup? {
        let now = clock.monotonicMillis()
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
    static let missMemoryMillis: Int64 = 5_000
}
