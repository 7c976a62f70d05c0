public import FlareCore
import FlareStore
import Synchronization
public import FlareSystem

/// What a live viewer is told.
public enum LiveEvent: Sendable, Equatable {
    case fix(Fix)
    case extended(expiresAt: UnixMillis)
    case ended(reason: EndReason, at: UnixMillis)
    /// The tracker state, the battery it reports or a "locate now" request changed.
    case tracker(TrackerSummary)
    /// A family member answered.
    case answer(Answer)
    /// A personal link was withdrawn: the streams opened through it end; the others go on.
    case linkWithdrawn(LinkID)
}

/// Receives a share's live events, on the thread that caused them; must not block.
public typealias LiveSubscriber = @Sendable (LiveEvent) -> Void

/// A consistent copy of one share's live state, taken under the registry's lock.
public struct ShareSnapshot: Sendable {
    public let row: Int64
    public let share: Share
    public let last: Fix?
    public let trail: [TrailPoint]
    /// An end-to-end encrypted share's newest ciphertexts, oldest first (its `trail` is empty).
    public let sealed: [Fix]
    public let viewers: Int
    /// When the share last heard from its tracker (a fix, a reply to "locate now"), or its creation.
    public let lastHeardAt: UnixMillis
    /// The family's latest answers, oldest first (at most `ShareRegistry.answersKept`).
    public let answers: [Answer]
    /// Changes whenever anything above changes; the key for `cachedView`.
    let version: UInt64
    /// The view document rendered for this version, if it was (see `ShareService.view(of:)`).
    let cachedView: [UInt8]?
}

/// The bridge's in-memory view of every share that still has history: state, expiry, last fix and a short
/// trail. Reached only through `ShareService`, which answers the gateway from here and live viewers subscribe here.
package final class ShareRegistry: Sendable {
    package typealias Subscriber = LiveSubscriber

    /// A class, not a struct: the entries dictionary keeps a reference per bucket instead of the whole entry (about
    /// 500 bytes), and a dictionary's buckets are up to half empty after it grows, so inline entries cost some 1,280
    /// bytes a share at 100,000 shares (docs/performance.md, "Where the memory goes"). Reached only under the
    /// registry's lock.
    private final class Entry: @unchecked Sendable {
        var row: Int64
        var share: Share
        var last: Fix?
        var trail: [TrailPoint] = []
        /// An end-to-end encrypted share's trail: its newest ciphertexts (`Fix.sealed`), oldest first.
        var sealed: [Fix] = []
        var lastHeardAt: UnixMillis
        var transport: TrackerTransport?
        var subscribers: [Int: Subscriber] = [:]
        var answers: [Answer] = []
        /// How many fixes the store holds for the share, as far as this instance knows: counted from the store once
        /// (nil until then), then by every fix recorded here, this instance's and the others'.
        var storedFixes: Int?
        /// Whether counting them from the store has been asked for (once).
        var fixCountAsked = false
        var version: UInt64 = 0
        /// The link holders' rendering of this version: rendering the trail's numbers dominated the view
        /// endpoint's CPU time, and a share changes far less often than its link is polled.
        var cachedView: (version: UInt64, bytes: [UInt8])?

        init(row: Int64, share: Share, lastHeardAt: UnixMillis) {
            self.row = row
            self.share = share
            self.lastHeardAt = lastHeardAt
        }

        /// Every change goes through here, so a cached rendering can never outlive the state it shows.
        func changed() {
            version &+= 1
            cachedView = nil
        }
    }

    private struct State {
        var entries: [ShareID: Entry] = [:]
        /// By the view-token hash's first eight bytes, the entry itself: a bucket of 16 B for every share (the whole
        /// hash, held inline, and the id would take 56). A lookup still compares the entry's whole hash in constant time;
        /// two shares whose hashes begin alike (about one chance in 10^9 with a million shares) leave the older one
        /// to be read from the store.
        var byViewHash: [UInt64: Entry] = [:]
        var byRow: [Int64: Entry] = [:]
        /// Each share's personal links, apart from its entry (which a reload replaces whole).
        var links: [ShareID: [ShareLink]] = [:]
        var byLinkHash: [SecretHash: (share: ShareID, link: LinkID)] = [:]
        var nextSubscriberID = 1
        var activeCount = 0
        var viewerCount = 0
    }

    private let state = Mutex(State())
    package let trailLength: Int
    let trackerRules: TrackerRules

    init(trailLength: Int, trackerRules: TrackerRules) {
        self.trailLength = max(1, trailLength)
        self.trackerRules = trackerRules
    }

    /// - Parameter storedFixes: how many fixes the store holds for it, if known (0 for a share just created).
    package func insert(_ stored: StoredShare, recentFixes: [Fix] = [], storedFixes: Int? = nil) {
        let entry = Entry(row: stored.row, share: stored.share, lastHeardAt: stored.share.createdAt)
        entry.storedFixes = storedFixes
        for fix in recentFixes { Self.append(fix, to: entry, trailLength: trailLength) }
        // What the store knows: the newest fix (its time stands in for when it came), the recorded state.
        if let last = entry.last { entry.lastHeardAt = max(entry.lastHeardAt, last.timestamp * 1000) }
        Self.takeHeardTimes(from: stored.share, into: entry)
        state.withLock { state in
            if let old = state.entries[stored.share.id], old.share.isActive { state.activeCount -= 1 }
            state.entries[stored.share.id] = entry
            state.byViewHash[stored.share.viewTokenHash.indexKey] = entry
            state.byRow[stored.row] = entry
            if stored.share.isActive { state.activeCount += 1 }
        }
    }

    /// Forgets a share whose history has been purged.
    package func remove(_ id: ShareID) {
        state.withLock { state in
            guard let entry = state.entries.removeValue(forKey: id) else { return }
            if state.byViewHash[entry.share.viewTokenHash.indexKey] === entry { state.byViewHash[entry.share.viewTokenHash.indexKey] = nil }
            if state.byRow[entry.row] === entry { state.byRow[entry.row] = nil }
            for link in state.links.removeValue(forKey: id) ?? [] { state.byLinkHash[link.viewTokenHash] = nil }
            if entry.share.isActive { state.activeCount -= 1 }
            state.viewerCount -= entry.subscribers.count
        }
    }

    package func snapshot(_ id: ShareID) -> ShareSnapshot? {
        state.withLock { state in state.entries[id].map(Self.snapshot) }
    }

    package func snapshot(viewTokenHash: SecretHash) -> ShareSnapshot? {
        state.withLock { Self.entry(viewTokenHash: viewTokenHash, in: $0).map(Self.snapshot) }
    }

    /// The name of the share whose own view token hashes to `viewTokenHash`: all its page needs of it.
    package func name(viewTokenHash: SecretHash) -> String? {
        state.withLock { Self.entry(viewTokenHash: viewTokenHash, in: $0)?.share.name }
    }

    /// The rendered view document of the share whose own view token hashes to `viewTokenHash`, and whether it is
    /// active, when that rendering is current: all that most link requests need, read where the entry is stored
    /// (a snapshot retains the share's every field, and the lock is held meanwhile by every request of every link).
    package func cachedView(viewTokenHash: SecretHash) -> (isActive: Bool, body: [UInt8])? {
        state.withLock { state in
            guard let entry = Self.entry(viewTokenHash: viewTokenHash, in: state), let cached = entry.cachedView,
                  cached.version == entry.version else { return nil }
            return (entry.share.isActive, cached.bytes)
        }
    }

    /// The entry of the share whose own view token hashes to `viewTokenHash` (compared in constant time).
    private static func entry(viewTokenHash: SecretHash, in state: borrowing State) -> Entry? {
        guard let entry = state.byViewHash[viewTokenHash.indexKey], entry.share.viewTokenHash.matches(viewTokenHash) else { return nil }
        return entry
    }

    /// The share and the personal link whose view token hashes to `viewTokenHash` (withdrawn or not).
    package func snapshot(linkHash viewTokenHash: SecretHash) -> (snapshot: ShareSnapshot, link: ShareLink)? {
        state.withLock { state in
            guard let found = state.byLinkHash[viewTokenHash], let entry = state.entries[found.share],
                  let link = state.links[found.share]?.first(where: { $0.id == found.link }), link.viewTokenHash.matches(viewTokenHash) else { return nil }
            return (Self.snapshot(entry), link)
        }
    }

    package func shareID(ofRow row: Int64) -> ShareID? {
        state.withLock { $0.byRow[row]?.share.id }
    }

    /// The share's personal links, oldest first.
    package func links(_ id: ShareID) -> [ShareLink] {
        state.withLock { $0.links[id] ?? [] }
    }

    /// Takes the store's copy of a share's links. The streams of links withdrawn meanwhile (on another instance) end.
    package func setLinks(_ id: ShareID, _ links: [ShareLink]) {
        let (withdrawn, subscribers): ([LinkID], [Subscriber]) = state.withLock { state in
            let before = Dictionary((state.links[id] ?? []).map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for link in state.links[id] ?? [] { state.byLinkHash[link.viewTokenHash] = nil }
            state.links[id] = links.isEmpty ? nil : links
            for link in links { state.byLinkHash[link.viewTokenHash] = (id, link.id) }
            let withdrawn = links.filter { $0.isWithdrawn && before[$0.id].map { !$0.isWithdrawn } ?? false }.map(\.id)
            return (withdrawn, withdrawn.isEmpty ? [] : state.entries[id].map { Array($0.subscribers.values) } ?? [])
        }
        for link in withdrawn { for subscriber in subscribers { subscriber(.linkWithdrawn(link)) } }
    }

    /// Adds links made here (the store has them).
    package func addLinks(_ id: ShareID, _ links: [ShareLink]) {
        setLinks(id, self.links(id) + links)
    }

    /// Records a link's withdrawal here; its streams end.
    package func withdraw(_ id: ShareID, link linkID: LinkID, at: UnixMillis) {
        setLinks(id, links(id).map { link in
            guard link.id == linkID, !link.isWithdrawn else { return link }
            var withdrawn = link
            withdrawn.withdrawnAt = at
            return withdrawn
        })
    }

    /// Records a link's first opening here.
    package func noteLinkOpened(_ id: ShareID, link linkID: LinkID, at: UnixMillis) {
        state.withLock { state in
            guard let index = state.links[id]?.firstIndex(where: { $0.id == linkID }), state.links[id]![index].firstOpenedAt == nil else { return }
            state.links[id]![index].firstOpenedAt = at
        }
    }

    private static func snapshot(_ entry: Entry) -> ShareSnapshot {
        ShareSnapshot(row: entry.row, share: entry.share, last: entry.last, trail: entry.trail, sealed: entry.sealed, viewers: entry.subscribers.count,
                      lastHeardAt: entry.lastHeardAt, answers: entry.answers, version: entry.version, cachedView: entry.cachedView.flatMap { $0.version == entry.version ? $0.bytes : nil })
    }

    /// Keeps the gateway's rendering of a snapshot, unless the share changed since that snapshot was taken.
    package func cacheView(_ id: ShareID, version: UInt64, bytes: [UInt8]) {
        state.withLock { state in
            guard state.entries[id]?.version == version else { return }
            state.entries[id]!.cachedView = (version, bytes)
        }
    }

    /// What the ingest path needs to validate a fix, in one short lock.
    package struct IngestContext: Sendable {
        package let row: Int64
        package let createdAt: UnixMillis
        package let isActive: Bool
        package let last: Fix?
        package let endToEnd: Bool
        /// See `Entry.storedFixes`.
        package let storedFixes: Int?
    }

    package func ingestContext(_ id: ShareID) -> IngestContext? {
        state.withLock { state in
            state.entries[id].map { IngestContext(row: $0.row, createdAt: $0.share.createdAt, isActive: $0.share.isActive, last: $0.last,
                                                  endToEnd: $0.share.endToEnd, storedFixes: $0.storedFixes) }
        }
    }

    /// True the first time it is asked for a share whose fixes memory has not counted: the caller counts them.
    func askFixCount(_ id: ShareID) -> Bool {
        state.withLock { state in
            guard let index = state.entries.index(forKey: id), state.entries.values[index].storedFixes == nil,
                  !state.entries.values[index].fixCountAsked else { return false }
            state.entries.values[index].fixCountAsked = true
            return true
        }
    }

    /// The store's count of a share's fixes, read when memory did not know it (fixes recorded meanwhile may be counted
    /// twice or not at all: the bound it serves is far from any real share).
    func setStoredFixes(_ id: ShareID, _ count: Int) {
        state.withLock { state in
            guard let index = state.entries.index(forKey: id) else { return }
            state.entries.values[index].storedFixes = count
        }
    }

    /// A stored fix and when and how its tracker was heard sending it.
    package struct HeardFix: Sendable {
        package let share: ShareID
        package let fix: Fix
        package let heardAt: UnixMillis
        package let transport: TrackerTransport?

        package init(share: ShareID, fix: Fix, heardAt: UnixMillis, transport: TrackerTransport?) {
            self.share = share
            self.fix = fix
            self.heardAt = heardAt
            self.transport = transport
        }
    }

    /// Records fixes another instance stored, named by share row; fixes of shares not in memory are skipped (they
    /// are read from the store when the share is first asked for).
    func record(rows fixes: [(shareRow: Int64, fix: Fix)], heardAt: UnixMillis) -> [ShareID] {
        let named: [HeardFix] = state.withLock { state in
            fixes.compactMap { entry in state.byRow[entry.shareRow].map { HeardFix(share: $0.share.id, fix: entry.fix, heardAt: heardAt, transport: nil) } }
        }
        return record(named)
    }

    /// Records a batch of stored fixes, in order, under one lock; viewers are told after it is released. A fix
    /// becomes the last position unless a newer one is already known (a tracker may deliver fixes it buffered while
    /// offline); viewers hear only about a new last position. Returns the shares whose tracker state these fixes
    /// change (an ended silence, a connection back), for the caller to record.
    @discardableResult
    package func record(_ fixes: [HeardFix]) -> [ShareID] {
        var notifications: [(Subscriber, Fix)] = []
        var changed: [ShareID] = []
        state.withLock { state in
            for heard in fixes {
                guard let entry = state.entries[heard.share] else { continue }
                if let count = entry.storedFixes { entry.storedFixes = count + 1 }
                let isNewest = Self.record(heard.fix, into: entry, trailLength: trailLength)
                Self.heard(at: heard.heardAt, transport: heard.transport, into: entry)
                if isNewest && entry.share.isActive && !entry.subscribers.isEmpty {
                    for subscriber in entry.subscribers.values { notifications.append((subscriber, heard.fix)) }
                }
                if entry.share.isActive, changed.last != heard.share,
                   trackerOutOfDate(entry, now: heard.heardAt) || Self.batteryFlagChange(entry) != nil { changed.append(heard.share) }
            }
        }
        for (subscriber, fix) in notifications { subscriber(.fix(fix)) }
        return changed
    }

    /// The tracker was heard from without a new fix (a reply to "locate now" with a position already stored).
    func heard(_ id: ShareID, at: UnixMillis, transport: TrackerTransport?) -> Bool {
        state.withLock { state in
            guard let entry = state.entries[id] else { return false }
            Self.heard(at: at, transport: transport, into: entry)
            return trackerOutOfDate(entry, now: at)
        }
    }

    private static func heard(at: UnixMillis, transport: TrackerTransport?, into entry: Entry) {
        if at >= entry.lastHeardAt {
            entry.lastHeardAt = at
            if let transport { entry.transport = transport }
        }
    }

    /// What a share's row says of when its tracker was last heard from: a recorded `live` began with a fix, an
    /// answer is a message from the phone.
    private static func takeHeardTimes(from share: Share, into entry: Entry) {
        if let tracker = share.tracker, tracker.state == .live { entry.lastHeardAt = max(entry.lastHeardAt, tracker.since) }
        if let answered = share.locateAnsweredAt { entry.lastHeardAt = max(entry.lastHeardAt, answered) }
    }

    /// The state the rules give now, and whether it differs from the recorded one (none recorded counts as live
    /// since the share's creation).
    private func trackerOutOfDate(_ entry: Entry, now: UnixMillis) -> Bool {
        let recorded = entry.share.trackerRecord
        return trackerRules.current(recorded: recorded, lastHeardAt: entry.lastHeardAt, transport: entry.transport, now: now) != recorded
    }

    private static func batteryFlagChange(_ entry: Entry) -> Bool? {
        TrackerRules.batteryFlagChange(level: entry.last?.battery, status: entry.last?.batteryStatus, recordedLow: entry.share.batteryLowAt != nil)
    }

    /// Whether the battery the share's newest fix reports is to change its recorded flag: the new flag, with the level.
    func batteryChange(_ id: ShareID) -> (row: Int64, low: Bool, level: Int)? {
        state.withLock { state in
            guard let entry = state.entries[id], entry.share.isActive, let low = Self.batteryFlagChange(entry), let level = entry.last?.battery else { return nil }
            return (entry.row, low, level)
        }
    }

    /// A share's recorded tracker state and the one the rules give now.
    struct TrackerStates {
        let row: Int64
        let recorded: TrackerRecord
        let current: TrackerRecord
        let lastHeardAt: UnixMillis
        let isActive: Bool
    }

    func currentTracker(_ id: ShareID, now: UnixMillis) -> TrackerStates? {
        state.withLock { state in
            guard let entry = state.entries[id] else { return nil }
            let recorded = entry.share.trackerRecord
            return TrackerStates(row: entry.row, recorded: recorded,
                                 current: trackerRules.current(recorded: recorded, lastHeardAt: entry.lastHeardAt, transport: entry.transport, now: now),
                                 lastHeardAt: entry.lastHeardAt, isActive: entry.share.isActive)
        }
    }

    /// Active shares whose tracker state has changed by the rules (a silence grew past the stale limit) but is not
    /// recorded yet.
    func trackersOutOfDate(now: UnixMillis) -> [ShareID] {
        // A slice at a time, each under its own short hold of the lock: walking 100,000 entries in one go held every
        // creation, fix and view back for the whole walk, every 5 s. Taking the ids is one pass over the keys; a share
        // removed meanwhile is skipped, one added meanwhile waits for the next sweep.
        let ids: [ShareID] = state.withLock { Array($0.entries.keys) }
        var found: [ShareID] = []
        var start = ids.startIndex
        while start < ids.endIndex {
            let end = min(ids.endIndex, start + Self.sweepSlice)
            state.withLock { state in
                for id in ids[start..<end] {
                    guard let entry = state.entries[id], entry.share.isActive, trackerOutOfDate(entry, now: now) else { continue }
                    found.append(id)
                }
            }
            start = end
        }
        return found
    }

    /// Entries the tracker sweep reads per hold of the lock (about 0.1 ms).
    static let sweepSlice = 1_000

    /// Takes a share's tracker and "locate now" fields as the store has them, and tells its viewers if they changed.
    func updateTracker(from share: Share) {
        updateTracker(share.id) { current in
            current.tracker = share.tracker
            current.locateRequestedAt = share.locateRequestedAt
            current.locateAnsweredAt = share.locateAnsweredAt
            current.batteryLowAt = share.batteryLowAt
            current.missedCheckinDueAt = share.missedCheckinDueAt
            current.underDuress = share.underDuress
        }
    }

    /// Changes a share's tracker or "locate now" fields in place, and tells its viewers if they changed.
    func updateTracker(_ id: ShareID, _ change: (inout Share) -> Void) {
        let (subscribers, summary): ([Subscriber], TrackerSummary?) = state.withLock { state in
            guard let index = state.entries.index(forKey: id) else { return ([], nil) }
            let before = state.entries.values[index].share
            change(&state.entries.values[index].share)
            let after = state.entries.values[index].share
            guard before.tracker != after.tracker || before.locateRequestedAt != after.locateRequestedAt
                    || before.locateAnsweredAt != after.locateAnsweredAt || before.missedCheckinDueAt != after.missedCheckinDueAt
                    || before.underDuress != after.underDuress else { return ([], nil) }
            Self.takeHeardTimes(from: after, into: state.entries.values[index])
            state.entries.values[index].changed()
            let entry = state.entries.values[index]
            guard entry.share.isActive else { return ([], nil) }
            return (Array(entry.subscribers.values), TrackerSummary(share: entry.share, last: entry.last))
        }
        if let summary { for subscriber in subscribers { subscriber(.tracker(summary)) } }
    }

    /// Returns whether the fix is the share's newest.
    private static func record(_ fix: Fix, into entry: Entry, trailLength: Int) -> Bool {
        let isNewest = entry.last.map { fix.timestamp >= $0.timestamp } ?? true
        append(fix, to: entry, trailLength: trailLength)
        entry.changed()
        return isNewest
    }

    private static func append(_ fix: Fix, to entry: Entry, trailLength: Int) {
        // A ciphertext is placed by when it arrived, which is always the newest.
        if fix.isSealed {
            entry.last = fix
            entry.sealed.append(fix)
            if entry.sealed.count > trailLength { entry.sealed.removeFirst(entry.sealed.count - trailLength) }
            return
        }
        let point = TrailPoint(latitude: fix.latitude, longitude: fix.longitude, timestamp: fix.timestamp)
        if let last = entry.last, fix.timestamp < last.timestamp {
            let index = entry.trail.lastIndex { $0.timestamp <= fix.timestamp }.map { $0 + 1 } ?? 0
            if index == 0 && entry.trail.count >= trailLength { return }  // older than the whole trail
            entry.trail.insert(point, at: index)
        } else {
            entry.last = fix
            entry.trail.append(point)
        }
        if entry.trail.count > trailLength { entry.trail.removeFirst(entry.trail.count - trailLength) }
    }

    /// How many answers a share keeps in memory for its view document.
    static let answersKept = 20

    /// Takes in answers the store has (any order, any repeats); viewers hear of each new one. Returns the new ones.
    @discardableResult
    func addAnswers(_ id: ShareID, _ answers: [Answer]) -> [Answer] {
        let (fresh, subscribers): ([Answer], [Subscriber]) = state.withLock { state in
            guard let entry = state.entries[id] else { return ([], []) }
            let known = entry.answers.last?.id ?? 0
            let fresh = answers.filter { $0.id > known }.sorted { $0.id < $1.id }
            guard !fresh.isEmpty else { return ([], []) }
            entry.answers = Array((entry.answers + fresh).suffix(Self.answersKept))
            entry.changed()
            state.entries[id] = entry
            return (fresh, entry.share.isActive ? Array(entry.subscribers.values) : [])
        }
        for answer in fresh { for subscriber in subscribers { subscriber(.answer(answer)) } }
        return fresh
    }

    /// The id of the newest answer memory has for the share (0: none).
    func lastAnswerID(_ id: ShareID) -> Int64 {
        state.withLock { $0.entries[id]?.answers.last?.id ?? 0 }
    }

    package func updateExpiry(_ id: ShareID, expiresAt: UnixMillis) {
        let subscribers: [Subscriber] = state.withLock { state in
            guard state.entries[id]?.share.isActive == true else { return [] }
            state.entries[id]!.share.expiresAt = expiresAt
            state.entries[id]!.changed()
            return Array(state.entries[id]!.subscribers.values)
        }
        for subscriber in subscribers { subscriber(.extended(expiresAt: expiresAt)) }
    }

    /// Marks the share ended and tells its viewers, who are then dropped.
    package func markEnded(_ id: ShareID, reason: EndReason, at endedAt: UnixMillis) {
        let subscribers: [Subscriber] = state.withLock { state in
            guard let entry = state.entries[id], entry.share.isActive else { return [] }
            entry.share.endedAt = endedAt
            entry.share.endReason = reason
            entry.changed()
            let subscribers = Array(entry.subscribers.values)
            state.viewerCount -= entry.subscribers.count
            entry.subscribers = [:]
            state.entries[id] = entry
            state.activeCount -= 1
            return subscribers
        }
        for subscriber in subscribers { subscriber(.ended(reason: reason, at: endedAt)) }
    }

    /// Adds a live viewer to an active share. Returns nil if the share is unknown or has ended.
    package func subscribe(_ id: ShareID, _ subscriber: @escaping Subscriber) -> Int? {
        state.withLock { state in
            guard state.entries[id]?.share.isActive == true else { return nil }
            let subscriptionID = state.nextSubscriberID
            state.nextSubscriberID += 1
            state.entries[id]!.subscribers[subscriptionID] = subscriber
            state.viewerCount += 1
            return subscriptionID
        }
    }

    package func unsubscribe(_ id: ShareID, subscription: Int) {
        state.withLock { state in
            if state.entries[id]?.subscribers.removeValue(forKey: subscription) != nil { state.viewerCount -= 1 }
        }
    }

    /// Replaces a share's last position and trail with what the store has (after the change feed missed some).
    func replaceFixes(_ id: ShareID, with fixes: [Fix]) {
        state.withLock { state in
            guard let index = state.entries.index(forKey: id) else { return }
            state.entries.values[index].last = nil
            state.entries.values[index].trail = []
            state.entries.values[index].sealed = []
            for fix in fixes { Self.append(fix, to: state.entries.values[index], trailLength: trailLength) }
            state.entries.values[index].changed()
        }
    }

    var shareIDs: [ShareID] { state.withLock { Array($0.entries.keys) } }

    package var activeShareCount: Int { state.withLock { $0.activeCount } }
    package var viewerCount: Int { state.withLock { $0.viewerCount } }
    package var shareCount: Int { state.withLock { $0.entries.count } }
}
