import FlareCore
import FlareStore
import FlareSystem
import FlareWire
import Synchronization
import FlareCodec

/// What the ingest reports once fixes are stored: viewers and trackers hear of them, fixes that came over HTTP are
/// published on the share's topic (kept in memory while the broker is away), and flared's own positions that came
/// back through a bridge are checked against the newest stored, so that the broker's retained position is the newest.
final class PositionPublication: Sendable {
    enum Job: Hashable, Sendable {
        /// See whether a position flared published is still the share's newest (see `ownPositionCameBack`).
        case check(ShareID)
    }

    private let directory: ShareDirectory
    private let trackers: Trackers
    private let announcer: BrokerAnnouncer
    private let deadlines: Deadlines
    private let clock: any Clock
    private let metrics: Metrics
    private let logger: Logger
    private let state = Mutex(State())
    private let awayLog = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 3), maximumKeys: 4)

    init(directory: ShareDirectory, trackers: Trackers, announcer: BrokerAnnouncer, deadlines: Deadlines, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.directory = directory
        self.trackers = trackers
        self.announcer = announcer
        self.deadlines = deadlines
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        deadlines.on(Job.self) { [weak self] job in
            switch job {
            case .check(let id): self?.checkRetainedPosition(id)
            }
        }
    }

    private struct State {
        /// Fixes that came over HTTP while the broker was away, oldest first, waiting in memory (see
        /// `publishHTTPFixes`).
        var unpublishedHTTPFixes: [(share: ShareID, fix: Fix)] = []
        /// The time (`tst`) of the last position flared published per share that came back through a bridge, until
        /// it is checked against the newest stored (see `ownPositionCameBack`).
        var echoedPositions: [ShareID: Int64] = [:]
    }

    /// Stored fixes (new ones, with when and how their trackers were heard) and the replies to "locate now" among
    /// the messages of the batch (new or not: an iOS phone answers with its cached position, already stored), from the
    /// ingest's writer after the commit. Viewers hear of the fixes at once; the tracker changes they make are
    /// recorded on the scheduler's thread, off the writer's.
    func stored(_ fixes: [ShareRegistry.HeardFix], locateReplies: [(share: ShareID, at: UnixMillis)]) {
        trackers.heard(directory.record(fixes), locateReplies: locateReplies)
    }

    /// Fixes that came over HTTP, just stored: published to their shares' location topics, retained as a phone's
    /// are, so integrators and the retained last position see them too (from the writer's thread, after the commit).
    /// A share that ended meanwhile gets nothing: its retained position is cleared and must stay so.
    func publishHTTPFixes(_ fixes: [(share: ShareID, fix: Fix)]) {
        for (id, fix) in fixes where directory.snapshot(id)?.share.isActive == true {
            // Behind fixes still waiting, so that integrators get them in order.
            if state.withLock({ $0.unpublishedHTTPFixes.isEmpty }), announcer.publishOwnPosition(topic: Topics.location(id), payload: fix.ownTracksJSON) {
                continue
            }
            // Stored and shown to viewers all the same; the broker gets it when it is back.
            metrics.increment(FlareMetrics.httpFixesUnpublished)
            let dropped = state.withLock { state in
                state.unpublishedHTTPFixes.append((id, fix))
                guard state.unpublishedHTTPFixes.count > Self.unpublishedHTTPFixesCapacity else { return false }
                state.unpublishedHTTPFixes.removeFirst()
                return true
            }
            if dropped { metrics.increment(FlareMetrics.httpFixesDropped) }
            if awayLog.take("http", nowMillis: clock.monotonicMillis()) == nil {
                logger.warning("share \(id): broker unavailable; fixes received over HTTP are stored and wait in memory (\(state.withLock { $0.unpublishedHTTPFixes.count })) to be published on reconnect")
            }
        }
    }

    /// A position in clear reached an end-to-end encrypted share (refused, `not_encrypted`): the broker retains it and
    /// would hand it to every watcher until the share ends, so it is replaced at once with the last sealed position
    /// (flared's own, marked) or, when there is none, cleared (a zero-length retained publish). What the phone keeps
    /// sending in clear is replaced the same way each time; nothing of it is stored.
    func clearRefusedClearPosition(_ id: ShareID, lastSealed: Fix?) {
        let topic = Topics.location(id)
        if let lastSealed, lastSealed.isSealed {
            if !announcer.publishOwnPosition(topic: topic, payload: lastSealed.ownTracksJSON) {
                announcer.retain(topic: topic, payload: [], expiry: nil)
            }
        } else {
            announcer.retain(topic: topic, payload: [], expiry: nil)
        }
        metrics.increment(FlareMetrics.clearPositionsCleared)
    }

    /// HTTP fixes kept for the broker while it is away, in memory: a fix is stored before it gets here, so an instance
    /// that dies loses only the integrators' copy (the broker's retained last position is restored from the store
    /// if the broker lost it). Beyond this many the oldest go, counted: the retained position needs only the newest.
    static let unpublishedHTTPFixesCapacity = 10_000

    /// Publishes the waiting HTTP fixes, oldest first, until the broker stops taking messages.
    func flush() {
        while let (id, fix) = state.withLock({ $0.unpublishedHTTPFixes.first }) {
            if directory.snapshot(id)?.share.isActive == true,
               !announcer.publishOwnPosition(topic: Topics.location(id), payload: fix.ownTracksJSON) { return }
            state.withLock { if !$0.unpublishedHTTPFixes.isEmpty { $0.unpublishedHTTPFixes.removeFirst() } }
        }
    }

    /// A position flared published (an HTTP fix, a restored last position) came back through the bridge: the broker
    /// has retained it. A fix the tracker sent just before may have reached the broker first and been overtaken (the
    /// broker keeps whichever it processed last), so a moment later, once that fix is stored, the newest stored
    /// position is published again if it is newer. From the MQTT thread: it only notes the time.
    func ownPositionCameBack(topic: String, payload: [UInt8]) {
        guard let id = Topics.shareID(fromLocationTopic: topic),
              let tst = (try? JSONValue.parse(payload))?["tst"]?.doubleValue.flatMap({ Int64(exactly: $0) }) else { return }
        let first = state.withLock { state in
            defer { state.echoedPositions[id] = tst }
            return state.echoedPositions[id] == nil
        }
        if first { deadlines.schedule(Job.check(id), at: clock.now() + Self.positionCheckDelayMillis) }
    }

    /// A copy of a position flared published came back long after (`OwnPositionMark`: someone published it again):
    /// the share's newest stored position is published over it at once.
    func ownPositionReplayed(topic: String) {
        guard let id = Topics.shareID(fromLocationTopic: topic) else { return }
        state.withLock { $0.echoedPositions[id] = Int64.min }
        deadlines.schedule(Job.check(id), at: clock.now())
    }

    /// Longer than a fix takes from the broker to the store, even in a batch.
    static let positionCheckDelayMillis: Int64 = 2_000

    private func checkRetainedPosition(_ id: ShareID) {
        guard let echoed = state.withLock({ $0.echoedPositions.removeValue(forKey: id) }),
              let snapshot = directory.snapshot(id), snapshot.share.isActive,
              let last = snapshot.last, last.timestamp > echoed else { return }
        _ = announcer.publishOwnPosition(topic: Topics.location(id), payload: last.ownTracksJSON)
    }
}
