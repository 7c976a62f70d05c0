import FlareAPI
import FlareCore
import FlareStore
import FlareSystem
import FlareWire
import Synchronization

/// Where every share is found: memory's copy of each share that still has history (`ShareRegistry`, which only this
/// type holds), and the store behind it for what memory does not know yet (a share another instance just made, one
/// whose history is deleted). It keeps memory in line with the store: the change feed of a shared store (other
/// instances' ends, extensions, fixes, links), resynchronisation after the feed was cut, and the sweep for expired
/// shares nobody ended. The concerns change a share's state in memory through it, after the store took the change.
public final class ShareDirectory: Sendable {
    /// Memory's copy: read and changed through the directory (the tests read it directly).
    package let registry: ShareRegistry
    private let store: any ShareRecords & FixRecords & AnswerRecords & LinkRecords & ChangeFeed
    private let deadlines: Deadlines
    private let policy: SharePolicy
    private let clock: any Clock
    private let logger: Logger
    /// An owner key changed on another instance: what this one remembers of it is forgotten.
    private let ownerKeyChanged: @Sendable (Int64) -> Void
    /// Ids and token hashes the store did not know, with when it was asked (see `lookUpInStore`).
    private let recentMisses = Mutex<[String: Int64]>([:])
    private let storeWarnings = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 5), maximumKeys: 4)

    enum Job: Hashable, Sendable {
        /// With a shared store: end the expired shares no instance has ended (see `sweepExpired`).
        case sweep
        /// Read everything again after the change feed was interrupted (see `resync`).
        case resync
        /// Count a share's stored fixes, which memory does not know yet (see `fixLimitReached`).
        case countFixes(ShareID)
    }

    init(store: any ShareRecords & FixRecords & AnswerRecords & LinkRecords & ChangeFeed, trailLength: Int, trackerRules: TrackerRules,
         deadlines: Deadlines, policy: SharePolicy, clock: any Clock, logger: Logger, ownerKeyChanged: @escaping @Sendable (Int64) -> Void) {
        registry = ShareRegistry(trailLength: trailLength, trackerRules: trackerRules)
        self.store = store
        self.deadlines = deadlines
        self.policy = policy
        self.clock = clock
        self.logger = logger
        self.ownerKeyChanged = ownerKeyChanged
        deadlines.on(Job.self) { [weak self] job in
            switch job {
            case .sweep: self?.sweepExpired()
            case .resync: self?.resync()
            case .countFixes(let id): self?.countFixes(id)
            }
        }
    }

    // MARK: Lookups

    /// The share with this id: from memory, or else from the store (a share another instance just created, or one
    /// whose history is deleted). Nil if unknown; throws when memory does not know it and the store cannot say.
    func share(_ id: ShareID) throws(StoreError) -> ShareLookup? {
        if let snapshot = registry.snapshot(id) { return .live(snapshot) }
        return try lookUpInStore({ () throws(StoreError) in try store.share(id: id) }, missKey: id.rawValue)
    }

    /// The share whose view token hashes to `hash`; see `share(_:)`.
    func share(viewTokenHash hash: SecretHash) throws(StoreError) -> ShareLookup? {
        if let snapshot = registry.snapshot(viewTokenHash: hash) { return .live(snapshot) }
        return try lookUpInStore({ () throws(StoreError) in try store.share(viewTokenHash: hash) }, missKey: hash.base64URL)
    }

    /// The share and personal link a link holder's token hashes to: memory first, then the store (a share or link
    /// another instance just made). Nil if unknown; throws when memory does not know it and the store cannot say.
    func link(viewTokenHash hash: SecretHash) throws(StoreError) -> ShareService.LinkLookup? {
        if let snapshot = registry.snapshot(viewTokenHash: hash) { return .init(lookup: .live(snapshot), link: nil) }
        if let found = registry.snapshot(linkHash: hash) { return .init(lookup: .live(found.snapshot), link: found.link) }
        // Not in memory: the store, for the share's own token or a personal link's, in one lookup whose miss is
        // remembered as every token's is (so an unknown token costs the store one read, not two, and then none).
        var link: ShareLink?
        guard let lookup = try lookUpInStore({ () throws(StoreError) -> StoredShare? in
            if let stored = try store.share(viewTokenHash: hash) { return stored }
            guard let found = try store.link(viewTokenHash: hash), found.viewTokenHash.matches(hash) else { return nil }
            link = found
            return try store.share(row: found.shareRow)
        }, missKey: hash.base64URL) else { return nil }
        guard let link else { return .init(lookup: lookup, link: nil) }
        return .init(lookup: lookup, link: registry.links(lookup.share.id).first { $0.id == link.id } ?? link)
    }

    /// What the ingest path needs for a fix of `id`, looking in the store when memory does not know the share.
    func ingestContext(_ id: ShareID) throws(StoreError) -> ShareRegistry.IngestContext? {
        if let context = registry.ingestContext(id) { return context }
        guard case .live = try share(id) else { return nil }
        return registry.ingestContext(id)
    }

    /// Shares newest first, after `position` (see `ShareStore.listShares`); `owner`: only that key's.
    func list(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64?) throws(ShareError) -> [(row: Int64, lookup: ShareLookup)] {
        let rows: [StoredShare]
        do { rows = try store.listShares(state: state, after: position, limit: limit, owner: owner) } catch { throw .storage(error.description) }
        return rows.map { stored in
            (stored.row, registry.snapshot(stored.share.id).map(ShareLookup.live) ?? .historyDeleted(stored.share))
        }
    }

    /// Shares another instance created a moment ago may not have reached this one's memory yet: a lookup that misses
    /// memory asks the store. Ids the store did not know are not asked about again for a while, so a stream of
    /// messages for an unknown share costs one query, not one each. A store that cannot answer is no answer: it is
    /// thrown, never remembered as a miss.
    private func lookUpInStore(_ read: () throws(StoreError) -> StoredShare?, missKey: String) throws(StoreError) -> ShareLookup? {
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

    // MARK: The view document

    /// The view document of a share with history, rendered once per change of the share and then served from
    /// memory: rendering the trail's numbers dominated the view endpoint's CPU time, and a share changes far less
    /// often than its link is polled.
    func view(of snapshot: ShareSnapshot) -> RenderedView {
        if let cached = snapshot.cachedView { return RenderedView(share: snapshot.share, body: cached) }
        let body = ViewDocumentRenderer.body(share: snapshot.share, last: snapshot.last, trail: snapshot.trail, sealed: snapshot.sealed,
                                             answers: snapshot.answers)
        registry.cacheView(snapshot.share.id, version: snapshot.version, bytes: body)
        return RenderedView(share: snapshot.share, body: body)
    }

    func cachedView(viewTokenHash: SecretHash) -> (isActive: Bool, body: [UInt8])? { registry.cachedView(viewTokenHash: viewTokenHash) }
    func name(viewTokenHash: SecretHash) -> String? { registry.name(viewTokenHash: viewTokenHash) }
    func subscribe(_ id: ShareID, _ subscriber: @escaping LiveSubscriber) -> Int? { registry.subscribe(id, subscriber) }
    func unsubscribe(_ id: ShareID, subscription: Int) { registry.unsubscribe(id, subscription: subscription) }

    // MARK: Fix counts

    /// Whether a share holds as many fixes as a share may (`SharePolicy.maximumFixesPerShare`): its next fixes are
    /// refused, `fix_limit_reached`. Memory counts what it records; a share it has not counted yet (loaded from the
    /// store, or another instance's) is counted on the scheduler's thread, and taken in the meantime.
    func fixLimitReached(_ context: ShareRegistry.IngestContext, of id: ShareID) -> Bool {
        guard let stored = context.storedFixes else {
            // Once per share: a share loaded at start-up would otherwise schedule a count for each of its fixes.
            if registry.askFixCount(id) { deadlines.schedule(Job.countFixes(id), at: clock.now()) }
            return false
        }
        return stored >= policy.maximumFixesPerShare
    }

    /// For the HTTP paths, a share already looked up (see the other `fixLimitReached`).
    func fixLimitReached(_ id: ShareID) -> Bool {
        registry.ingestContext(id).map { fixLimitReached($0, of: id) } ?? false
    }

    private func countFixes(_ id: ShareID) {
        guard let context = registry.ingestContext(id), context.storedFixes == nil else { return }
        do { registry.setStoredFixes(id, try store.fixCount(row: context.row)) } catch {
            warnStore("share \(id): cannot count its fixes (\(error)); counting again in 10 s")
            deadlines.schedule(Job.countFixes(id), at: clock.now() + 10_000)
        }
    }

    // MARK: Memory, changed after the store

    func snapshot(_ id: ShareID) -> ShareSnapshot? { registry.snapshot(id) }
    func shareID(ofRow row: Int64) -> ShareID? { registry.shareID(ofRow: row) }
    func links(_ id: ShareID) -> [ShareLink] { registry.links(id) }
    var trailLength: Int { registry.trailLength }
    var shareCount: Int { registry.shareCount }
    var activeShareCount: Int { registry.activeShareCount }

    func insert(_ stored: StoredShare, recentFixes: [Fix] = [], storedFixes: Int? = nil) {
        registry.insert(stored, recentFixes: recentFixes, storedFixes: storedFixes)
    }
    func markEnded(_ id: ShareID, reason: EndReason, at: UnixMillis) { registry.markEnded(id, reason: reason, at: at) }
    func updateExpiry(_ id: ShareID, expiresAt: UnixMillis) { registry.updateExpiry(id, expiresAt: expiresAt) }
    func remove(_ id: ShareID) { registry.remove(id) }
    func setLinks(_ id: ShareID, _ links: [ShareLink]) { registry.setLinks(id, links) }
    func addLinks(_ id: ShareID, _ links: [ShareLink]) { registry.addLinks(id, links) }
    func withdraw(_ id: ShareID, link: LinkID, at: UnixMillis) { registry.withdraw(id, link: link, at: at) }
    func noteLinkOpened(_ id: ShareID, link: LinkID, at: UnixMillis) { registry.noteLinkOpened(id, link: link, at: at) }
    func updateTracker(_ id: ShareID, _ change: (inout Share) -> Void) { registry.updateTracker(id, change) }
    func currentTracker(_ id: ShareID, now: UnixMillis) -> ShareRegistry.TrackerStates? { registry.currentTracker(id, now: now) }
    func trackersOutOfDate(now: UnixMillis) -> [ShareID] { registry.trackersOutOfDate(now: now) }
    func batteryChange(_ id: ShareID) -> (row: Int64, low: Bool, level: Int)? { registry.batteryChange(id) }
    func heard(_ id: ShareID, at: UnixMillis, transport: TrackerTransport?) -> Bool { registry.heard(id, at: at, transport: transport) }
    /// Fixes stored here; the shares whose tracker state the rules may now see differently.
    func record(_ fixes: [ShareRegistry.HeardFix]) -> [ShareID] { registry.record(fixes) }
    func addAnswers(_ id: ShareID, _ answers: [Answer]) { _ = registry.addAnswers(id, answers) }

    /// Answers newer than memory's, from the store (stored by another instance, or before a restart).
    func takeAnswers(_ id: ShareID, row: Int64) throws(StoreError) {
        let found = try store.answers(row: row, after: registry.lastAnswerID(id), limit: ShareService.answersPerShare)
        registry.addAnswers(id, Array(found.suffix(ShareRegistry.answersKept)))
    }

    // MARK: Following the store

    /// Follows what other instances change in a shared store (`ShareStore.watchChanges`): their ends, extensions and
    /// purges, and the fixes they stored, so that this instance's links, live viewers and expiry timers agree with
    /// the store. Call once, before `recover`, so that nothing committed between the two is missed.
    func followOtherInstances() {
        store.watchChanges { [weak self] change in self?.apply(change) }
        if store.isShared { deadlines.schedule(Job.sweep, at: clock.now() + Self.sweepMillis) }
    }

    func stopFollowing() { store.stopWatching() }

    /// How often an instance looks for expired shares that no instance ended.
    static let sweepMillis: Int64 = 10_000

    /// A share's expiry is scheduled on every instance that knows it, but a share created on an instance that died
    /// before its expiry may be known to no other: every instance looks for such shares now and then, and whichever
    /// ends one first announces it (the store's `markEnded` says who).
    private func sweepExpired() {
        defer { deadlines.schedule(Job.sweep, at: clock.now() + Self.sweepMillis) }
        let expired: [StoredShare]
        do { expired = try store.expiredActiveShares(now: clock.now(), limit: 1000) } catch {
            warnStore("cannot look for expired shares (\(error)); looking again in \(Self.sweepMillis / 1000) s")
            return
        }
        for stored in expired {
            follow(stored)  // schedules its expiry, which has passed: the scheduler runs it at once
        }
    }

    private func apply(_ change: StoreChange) {
        switch change {
        case .share(let id):
            // Unread now, it is read when a request asks for it, or at the next resynchronisation.
            do { follow(try store.share(id: id)) } catch { warnStore("cannot read a share another instance changed (\(error))") }
        case .fixes(let fixes):
            let now = clock.now()
            for id in registry.record(rows: fixes, heardAt: now) { deadlines.schedule(Trackers.Job.update(id), at: now) }
        case .ownerKey(let id):
            ownerKeyChanged(id)
        case .resync:
            // On the scheduler's thread, where a resynchronisation that fails is tried again.
            deadlines.schedule(Job.resync, at: clock.now())
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
                registry.replaceFixes(stored.share.id, with: try store.recentFixes(of: stored, limit: registry.trailLength))
            }
            for id in registry.shareIDs where !openIDs.contains(id) {
                if let stored = try store.share(id: id) { try adopt(stored) }
            }
            logger.info("resynchronised with the store: \(open.count) shares with history")
        } catch {
            // Memory may hold what another instance changed meanwhile: tried again until it succeeds.
            warnStore("cannot resynchronise with the store (\(error)); trying again in \(Self.resyncRetryMillis / 1000) s")
            deadlines.schedule(Job.resync, at: clock.now() + Self.resyncRetryMillis)
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
            deadlines.cancel(ShareLifecycle.Job.purge(share.id))  // its expiry job finds it gone (`expireIfDue`)
            return .historyDeleted(share)
        }
        guard let current = registry.snapshot(share.id) else {
            let trail = try store.recentFixes(of: stored, limit: registry.trailLength)
            let answers = share.lastAnswerID == nil ? [] : try store.answers(row: stored.row, after: 0, limit: ShareService.answersPerShare)
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

    /// A share's row as the store has it now, followed (see `follow`); a store that cannot say is only said.
    func followStored(_ id: ShareID, _ what: String) {
        do { follow(try store.share(id: id)) } catch { warnStore("share \(id): cannot read \(what) (\(error))") }
    }

    /// An active share's expiry; an ended one's purge.
    func scheduleNext(for share: Share) {
        if share.isActive {
            deadlines.scheduleUntracked(ShareLifecycle.Job.expire(share.id), at: share.expiresAt)
        } else if let endedAt = share.endedAt {
            deadlines.schedule(ShareLifecycle.Job.purge(share.id), at: endedAt + policy.historyRetentionSeconds * 1000)
        }
    }

    /// A store failure off the request paths, said at most a few times a minute.
    func warnStore(_ message: @autoclosure () -> String) {
        if storeWarnings.take("store", nowMillis: clock.monotonicMillis()) == nil { logger.warning(message()) }
    }
}
