import FlareAPI
import FlareCore
import FlareStore
import FlareEvents
import FlareSystem
import Synchronization

extension ShareService {
    // MARK: Locate now

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
            unsent.withLock { $0.locateRequests[id] = now }
            logger.warning("share \(id): broker unavailable; the location request is kept and will be sent on reconnect")
        }
        metrics.increment(FlareMetrics.locateRequests)
        logger.info("share \(id): asked the tracker for a fresh position")
        return now
    }

    /// Publishes the command, with the broker holding it for a phone that is away only as long as it stays worth
    /// answering. True if the broker took it, or if it is no longer worth sending.
    func sendLocateRequest(_ id: ShareID, askedAt: UnixMillis) -> Bool {
        let remainingMillis = askedAt + Self.locateCommandValidityMillis - clock.now()
        guard remainingMillis > 0, registry.snapshot(id)?.share.isActive == true else { return true }
        return publisher.publish(topic: Topics.command(id), payload: Self.reportLocationCommand, qos: 1, retain: false,
                                 expirySeconds: UInt32(clamping: (remainingMillis + 999) / 1000))
    }

    /// The OwnTracks "report location" command (both apps obey it with `cmd` on; iOS also needs `allowRemoteLocation`).
    public static let reportLocationCommand = Array(#"{"_type":"cmd","action":"reportLocation"}"#.utf8)

    /// A reply is a message from the phone, whatever position it carries: the tracker was heard from, and the
    /// request it replies to is marked answered (once, by whichever instance got the reply).
    func locateAnswered(_ id: ShareID, at: UnixMillis) {
        if registry.heard(id, at: at, transport: nil) { updateTracker(id, now: clock.now()) }
        guard let snapshot = registry.snapshot(id), snapshot.share.isActive,
              let requestedAt = snapshot.share.locateRequestedAt, at >= requestedAt,
              (snapshot.share.locateAnsweredAt ?? 0) < requestedAt else { return }
        let recorded: Bool
        do { recorded = try store.recordLocateAnswer(row: snapshot.row, at: at) } catch {
            // The next reply, or another instance's, records it; the request stays open meanwhile.
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
}
