import FlareAPI
import FlareCore
import FlareStore
import FlareSystem
import Synchronization

/// Who has seen the link: viewers noted in the store (so that every instance's count), the first opening as
/// `share.opened`, live streams kept counted as watching by a heartbeat, and the audience retained on `…/audience`
/// for the phone when it changes.
final class ShareAudience: Sendable {
    enum Job: Hashable, Sendable {
        /// Say in the store that the viewers with a live stream here are still watching (see `watching`).
        case heartbeat
    }

    private let store: any AudienceRecords
    private let directory: ShareDirectory
    private let announcer: BrokerAnnouncer
    private let deadlines: Deadlines
    private let outbox: EventOutbox
    private let clock: any Clock
    private let state = Mutex(State())

    init(store: any AudienceRecords, directory: ShareDirectory, announcer: BrokerAnnouncer, deadlines: Deadlines, outbox: EventOutbox, clock: any Clock) {
        self.store = store
        self.directory = directory
        self.announcer = announcer
        self.deadlines = deadlines
        self.outbox = outbox
        self.clock = clock
        deadlines.on(Job.self) { [weak self] _ in self?.heartbeat() }
    }

    private struct State {
        /// Viewers with a live stream on this instance, per share (hash → streams), for the heartbeat in the store.
        var watchers: [ShareID: [SecretHash: Int]] = [:]
        /// When each viewer was last written to the store.
        var seen: [SecretHash: Int64] = [:]
        /// Which viewer hashes each address added per share (the cap).
        var byAddress: [String: Set<SecretHash>] = [:]
        /// The audience last published per share, so that an unchanged one is not published again.
        var published: [ShareID: Audience] = [:]
    }

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
    /// Through a personal link (`link`), its first opening is recorded too, with or without a viewer id.
    func viewerSeen(_ snapshot: ShareSnapshot, viewer: String?, address: String, link: ShareLink?) {
        guard snapshot.share.isActive, let viewer, Self.isViewerID(viewer) else { return }
        let hash = Self.viewerHash(snapshot.share.id, viewer: viewer)
        let now = clock.monotonicMillis()
        let due: Bool = state.withLock { notes in
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
        do { isNew = try store.noteViewer(row: snapshot.row, viewer: hash, link: link?.id, at: at, firstViewEvent: opened.map { outbox.pending($0) }) } catch {
            // The page is answered all the same (it asked for the position, not to be counted); the viewer is noted
            // at its next request instead.
            state.withLock { _ = $0.seen.removeValue(forKey: hash) }
            directory.warnStore("share \(snapshot.share.id): cannot note a viewer (\(error)); noted at its next request")
            return
        }
        guard isNew else { return }
        publish(snapshot)
        outbox.recorded()
    }

    /// A live stream with this viewer id opened (true) or closed: while open, the viewer counts as watching, on
    /// every instance, through the heartbeat this instance writes to the store.
    func watching(_ snapshot: ShareSnapshot, viewer: String, open: Bool) {
        guard Self.isViewerID(viewer) else { return }
        let hash = Self.viewerHash(snapshot.share.id, viewer: viewer)
        let first = state.withLock { state -> Bool in
            let wasEmpty = state.watchers.isEmpty
            var streams = state.watchers[snapshot.share.id] ?? [:]
            streams[hash, default: 0] += open ? 1 : -1
            if streams[hash] ?? 0 <= 0 { streams[hash] = nil }
            state.watchers[snapshot.share.id] = streams.isEmpty ? nil : streams
            return wasEmpty && open
        }
        if first { deadlines.schedule(Job.heartbeat, at: clock.now() + Self.heartbeatMillis) }
        if !open { publish(snapshot) }
    }

    private func heartbeat() {
        let watched = state.withLock { $0.watchers }
        guard !watched.isEmpty else { return }
        let now = clock.now()
        for (id, streams) in watched {
            guard let snapshot = directory.snapshot(id), snapshot.share.isActive else { continue }
            do {
                for hash in streams.keys { _ = try store.noteViewer(row: snapshot.row, viewer: hash, at: now) }
            } catch {
                // The next heartbeat says it again, well within the watching window.
                directory.warnStore("cannot note the live viewers of share \(id) (\(error))")
            }
            publish(snapshot)
        }
        deadlines.schedule(Job.heartbeat, at: now + Self.heartbeatMillis)
    }

    /// The share's audience, from the store (so every instance's viewers count).
    func audience(of snapshot: ShareSnapshot) throws(StoreError) -> Audience {
        try store.audience(row: snapshot.row, watchingSince: clock.now() - Self.watchingWindowMillis)
    }

    /// The audience, retained on `…/audience` for the phone (its device token reads it), when it changed.
    func publish(_ snapshot: ShareSnapshot) {
        guard snapshot.share.isActive else { return }
        let audience: Audience
        do { audience = try self.audience(of: snapshot) } catch {
            // Published at the next change or heartbeat.
            directory.warnStore("share \(snapshot.share.id): cannot read its audience (\(error))")
            return
        }
        let changed = state.withLock { state in
            guard state.published[snapshot.share.id] != audience else { return false }
            if state.published.count >= 100_000 { state.published.removeAll(keepingCapacity: true) }
            state.published[snapshot.share.id] = audience
            return true
        }
        guard changed else { return }
        announcer.retain(topic: Topics.audience(snapshot.share.id), payload: audience.json,
                expiry: UInt32(clamping: max(1, (snapshot.share.expiresAt - clock.now()) / 1000)))
    }
}
