import FlareAPI
import FlareCore
import FlareStore
import FlareEvents
import FlareSystem
import FlareWire
import Synchronization

extension ShareService {
    // MARK: What the ingest reports

    struct Publication {
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
    package func stored(_ fixes: [ShareRegistry.HeardFix], locateReplies: [(share: ShareID, at: UnixMillis)]) {
        let now = clock.now()
        for id in registry.record(fixes) { schedule(.tracker(id), at: now) }
        for reply in locateReplies { schedule(.locateAnswered(reply.share, reply.at), at: now) }
    }

    /// Fixes that came over HTTP, just stored: published to their shares' location topics, retained as a phone's
    /// are, so integrators and the retained last position see them too (from the writer's thread, after the commit).
    /// A share that ended meanwhile gets nothing: its retained position is cleared and must stay so.
    package func publishHTTPFixes(_ fixes: [(share: ShareID, fix: Fix)]) {
        for (id, fix) in fixes where registry.snapshot(id)?.share.isActive == true {
            // Behind fixes still waiting, so that integrators get them in order.
            if publication.withLock({ $0.unpublishedHTTPFixes.isEmpty }), publisher.publishOwnPosition(topic: Topics.location(id), payload: fix.ownTracksJSON) {
                continue
            }
            // Stored and shown to viewers all the same; the broker gets it when it is back.
            metrics.increment(FlareMetrics.httpFixesUnpublished)
            let dropped = publication.withLock { publication in
                publication.unpublishedHTTPFixes.append((id, fix))
                guard publication.unpublishedHTTPFixes.count > Self.unpublishedHTTPFixesCapacity else { return false }
                publication.unpublishedHTTPFixes.removeFirst()
                return true
            }
            if dropped { metrics.increment(FlareMetrics.httpFixesDropped) }
            if unpublishedLogLimiter.take("http", nowMillis: clock.monotonicMillis()) == nil {
                logger.warning("share \(id): broker unavailable; fixes received over HTTP are stored and wait in memory (\(publication.withLock { $0.unpublishedHTTPFixes.count })) to be published on reconnect")
            }
        }
    }

    /// A position in clear reached an end-to-end encrypted share (refused, `not_encrypted`): the broker retains it and
    /// would hand it to every watcher until the share ends, so it is replaced at once with the last sealed position
    /// (flared's own, marked) or, when there is none, cleared (a zero-length retained publish). What the phone keeps
    /// sending in clear is replaced the same way each time; nothing of it is stored.
    package func clearRefusedClearPosition(_ id: ShareID, lastSealed: Fix?) {
        let topic = Topics.location(id)
        if let lastSealed, lastSealed.isSealed {
            if !publisher.publishOwnPosition(topic: topic, payload: lastSealed.ownTracksJSON) {
                publish(topic: topic, payload: [], expiry: nil)
            }
        } else {
            publish(topic: topic, payload: [], expiry: nil)
        }
        metrics.increment(FlareMetrics.clearPositionsCleared)
    }

    /// HTTP fixes kept for the broker while it is away, in memory: a fix is stored before it gets here, so an instance
    /// that dies loses only the integrators' copy (the broker's retained last position is restored from the store
    /// if the broker lost it). Beyond this many the oldest go, counted: the retained position needs only the newest.
    static let unpublishedHTTPFixesCapacity = 10_000

    /// Publishes the waiting HTTP fixes, oldest first, until the broker stops taking messages.
    func flushUnpublishedHTTPFixes() {
        while let (id, fix) = publication.withLock({ $0.unpublishedHTTPFixes.first }) {
            if registry.snapshot(id)?.share.isActive == true,
               !publisher.publishOwnPosition(topic: Topics.location(id), payload: fix.ownTracksJSON) { return }
            publication.withLock { if !$0.unpublishedHTTPFixes.isEmpty { $0.unpublishedHTTPFixes.removeFirst() } }
        }
    }

    /// A position flared published (an HTTP fix, a restored last position) came back through the bridge: the broker
    /// has retained it. A fix the tracker sent just before may have reached the broker first and been overtaken (the
    /// broker keeps whichever it processed last), so a moment later, once that fix is stored, the newest stored
    /// position is published again if it is newer. From the MQTT thread: it only notes the time.
    package func ownPositionCameBack(topic: String, payload: [UInt8]) {
        guard let id = Topics.shareID(fromLocationTopic: topic),
              let tst = (try? JSONValue.parse(payload))?["tst"]?.doubleValue.flatMap({ Int64(exactly: $0) }) else { return }
        let first = publication.withLock { publication in
            defer { publication.echoedPositions[id] = tst }
            return publication.echoedPositions[id] == nil
        }
        if first { schedule(.positionCheck(id), at: clock.now() + Self.positionCheckDelayMillis) }
    }

    /// A copy of a position flared published came back long after (`OwnPositionMark`: someone published it again):
    /// the share's newest stored position is published over it at once.
    package func ownPositionReplayed(topic: String) {
        guard let id = Topics.shareID(fromLocationTopic: topic) else { return }
        publication.withLock { $0.echoedPositions[id] = Int64.min }
        schedule(.positionCheck(id), at: clock.now())
    }

    /// Longer than a fix takes from the broker to the store, even in a batch.
    static let positionCheckDelayMillis: Int64 = 2_000

    func checkRetainedPosition(_ id: ShareID) {
        guard let echoed = publication.withLock({ $0.echoedPositions.removeValue(forKey: id) }),
              let snapshot = registry.snapshot(id), snapshot.share.isActive,
              let last = snapshot.last, last.timestamp > echoed else { return }
        _ = publisher.publishOwnPosition(topic: Topics.location(id), payload: last.ownTracksJSON)
    }
}
