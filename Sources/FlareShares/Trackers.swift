import FlareAPI
import FlareCore
import FlareStore
import FlareSystem
import Synchronization

/// What a share's tracker is doing (live, stale, offline, its battery) as the rules give it from what was heard, and
/// "locate now": each change recorded in the store (which says which instance records it) with its event, then in
/// memory and on the broker's retained status.
final class Trackers: Sendable {
    enum Job: Hashable, Sendable {
        /// Record a share's tracker state as the rules give it now (a fix ended a silence or a lost connection).
        case update(ShareID)
        /// A tracker's last will arrived at this time: record it offline.
        case lost(ShareID, UnixMillis)
        /// The tracker answered "locate now" at this time.
        case locateAnswered(ShareID, UnixMillis)
        /// Record the silences that grew past the stale limit (see `sweep`).
        case sweep
    }

    private let store: any TrackerRecords & ShareRecords
    private let directory: ShareDirectory
    private let announcer: BrokerAnnouncer
    private let deadlines: Deadlines
    private let outbox: EventOutbox
    private let clock: any Clock
    private let metrics: Metrics
    private let logger: Logger

    init(store: any TrackerRecords & ShareRecords, directory: ShareDirectory, announcer: BrokerAnnouncer, deadlines: Deadlines, outbox: EventOutbox,
         clock: any Clock, metrics: Metrics, logger: Logger) {
        self.store = store
        self.directory = directory
        self.announcer = announcer
        self.deadlines = deadlines
        self.outbox = outbox
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        deadlines.on(Job.self) { [weak self] job in
            guard let self else { return }
            switch job {
            case .update(let id): updateTracker(id, now: clock.now())
            case .lost(let id, let at): trackerLost(id, at: at)
            case .locateAnswered(let id, let at): locateAnswered(id, at: at)
            case .sweep: sweep()
            }
        }
    }

    /// Starts looking for silences that grew past the stale limit, every `trackerSweepMillis`.
    func startSweeping() {
        deadlines.schedule(Job.sweep, at: clock.now() + Self.trackerSweepMillis)
    }

    /// Fixes stored (`ids`: the shares whose tracker state they may change) and replies to "locate now": recorded on
    /// the scheduler's thread, off the writer's.
    func heard(_ ids: [ShareID], locateReplies: [(share: ShareID, at: UnixMillis)]) {
        let now = clock.now()
        for id in ids { deadlines.schedule(Job.update(id), at: now) }
        for reply in locateReplies { deadlines.schedule(Job.locateAnswered(reply.share, reply.at), at: now) }
    }

    /// How often the silences that grew past the stale limit are looked for: a tracker is reported stale at most
    /// this long after the limit.
    static let trackerSweepMillis: Int64 = 5_000

    /// The broker delivered the tracker's last will (from the MQTT thread): recorded on the scheduler's thread.
    func lastWillArrived(_ id: ShareID, at: UnixMillis) {
        deadlines.schedule(Job.lost(id, at), at: at)
    }

    /// Records the tracker state the rules give now, if it differs from the recorded one. With several instances
    /// each may see the same change; the store says which one records and announces it, the others take its row.
    /// False when the store could not be written.
    @discardableResult
    func updateTracker(_ id: ShareID, now: UnixMillis) -> Bool {
        updateBattery(id, now: now)
        guard let tracker = directory.currentTracker(id, now: now), tracker.isActive, tracker.current != tracker.recorded else { return true }
        let condition = tracker.current.state == .stale
            ? TrackerCondition(from: .live, noFixReceivedAfter: tracker.lastHeardAt)
            : TrackerCondition()
        return recordTracker(id, row: tracker.row, tracker.current, condition: condition)
    }

    private func trackerLost(_ id: ShareID, at: UnixMillis) {
        guard let tracker = directory.currentTracker(id, now: at), tracker.isActive else { return }
        // A fix heard after the will (the phone reconnected at once) already says more.
        guard tracker.lastHeardAt <= at else { return }
        let offline = TrackerRecord(state: .offline, since: at, reason: TrackerRecord.connectionLost, transport: .mqtt)
        recordTracker(id, row: tracker.row, offline, condition: TrackerCondition(noFixReceivedAfter: at))
    }

    /// Records that the battery became low (with `tracker.battery_low`) or recovered, when the newest fix says so.
    private func updateBattery(_ id: ShareID, now: UnixMillis) {
        guard let change = directory.batteryChange(id) else { return }
        let event = change.low ? ShareEvent.batteryLow(id, at: now, level: change.level) : nil
        do {
            guard try store.recordBatteryLow(row: change.row, lowSince: change.low ? now : nil, event: event.map { outbox.pending($0) }) else {
                directory.follow(try store.share(id: id))
                return
            }
        } catch {
            logger.warning("share \(id): cannot record its battery state (\(error))")
            return
        }
        directory.updateTracker(id) { $0.batteryLowAt = change.low ? now : nil }
        if event != nil {
            outbox.recorded()
            logger.info("share \(id): battery low")
        }
    }

    @discardableResult
    private func recordTracker(_ id: ShareID, row: Int64, _ record: TrackerRecord, condition: TrackerCondition) -> Bool {
        let recorded: Bool
        let event = ShareEvent.tracker(id, record: record, before: directory.snapshot(id)?.share.tracker?.state)
        do {
            recorded = try store.recordTracker(row: row, record, condition: condition, event: event.map { outbox.pending($0) })
        } catch {
            // Tried again by the next fix or sweep.
            logger.warning("share \(id): cannot record its tracker state (\(error))")
            return false
        }
        guard recorded else {
            // Another instance recorded this change (or a fix it stored says otherwise): memory follows the store.
            directory.followStored(id, "its tracker state")
            return true
        }
        directory.updateTracker(id) { $0.tracker = record }
        if event != nil { outbox.recorded() }
        guard let share = directory.snapshot(id)?.share else { return true }
        announcer.publishStatus(of: share)
        metrics.increment(FlareMetrics.trackerChanges, labels: [("state", record.state.rawValue)])
        logger.info("share \(id): tracker \(record.state.rawValue)\(record.reason.map { " (\($0))" } ?? "")")
        return true
    }

    private func sweep() {
        defer { deadlines.schedule(Job.sweep, at: clock.now() + Self.trackerSweepMillis) }
        let now = clock.now()
        // While the store cannot be written, one failure per sweep is enough to say so (and to try again).
        for id in directory.trackersOutOfDate(now: now) where !updateTracker(id, now: now) { break }
    }

    // MARK: Locate now

    /// For a tracker that reports over HTTP (it cannot hear the command topic): whether a "locate now" request is
    /// waiting for it. True once per request, for whichever instance hands it out first (the store decides). Memory
    /// says first whether a request is open, so a steady stream of HTTP fixes costs no write; a request made on
    /// another instance reaches memory through the store's change feed within a moment.
    func takeLocateRequest(_ snapshot: ShareSnapshot) -> Bool {
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

    /// At most one "locate now" per share in this time, across instances.
    static let locateIntervalMillis: Int64 = 30_000
    /// How long a request stays worth answering: the command's expiry on the broker, for a phone that is away.
    static let locateCommandValidityMillis: Int64 = 600_000

    /// Asks the share's tracker for a fresh position: recorded in the store (which enforces the interval across
    /// instances), then the OwnTracks command `{"_type":"cmd","action":"reportLocation"}` is published to the
    /// command topic (QoS 1, not retained). Returns when it was asked.
    func requestLocate(_ snapshot: ShareSnapshot) throws(ShareService.LocateRefusal) -> UnixMillis {
        let id = snapshot.share.id
        guard snapshot.share.isActive else { throw .ended }
        let now = clock.now()
        if let tracker = directory.currentTracker(id, now: now), tracker.current.state == .live { throw .trackerLive }
        let accepted: Bool
        let event = ShareEvent.locateRequested(id, at: now)
        do {
            accepted = try store.requestLocate(row: snapshot.row, at: now, minimumIntervalMillis: Self.locateIntervalMillis, event: outbox.pending(event))
        } catch { throw .storage(error.description) }
        guard accepted else {
            let stored: StoredShare?
            do {
                stored = try store.share(id: id)
                if let stored { try directory.adopt(stored) }
            } catch { throw .storage(error.description) }
            guard let share = stored?.share, share.isActive else { throw .ended }
            let waitMillis = (share.locateRequestedAt ?? now) + Self.locateIntervalMillis - now
            throw .tooSoon(retryAfterSeconds: Int(max(1, (waitMillis + 999) / 1000)))
        }
        directory.updateTracker(id) { $0.locateRequestedAt = now }
        outbox.recorded()
        announcer.sendOrKeep("locate \(id.rawValue)", what: "a location request") { [self] in sendLocateRequest(id, askedAt: now) }
        metrics.increment(FlareMetrics.locateRequests)
        logger.info("share \(id): asked the tracker for a fresh position")
        return now
    }

    /// Publishes the command, with the broker holding it for a phone that is away only as long as it stays worth
    /// answering. True if the broker took it, or if it is no longer worth sending.
    private func sendLocateRequest(_ id: ShareID, askedAt: UnixMillis) -> Bool {
        let remainingMillis = askedAt + Self.locateCommandValidityMillis - clock.now()
        guard remainingMillis > 0, directory.snapshot(id)?.share.isActive == true else { return true }
        return announcer.publish(topic: Topics.command(id), payload: Self.reportLocationCommand, qos: 1, retain: false,
                                 expirySeconds: UInt32(clamping: (remainingMillis + 999) / 1000))
    }

    /// The OwnTracks "report location" command (both apps obey it with `cmd` on; iOS also needs `allowRemoteLocation`).
    static let reportLocationCommand = Array(#"{"_type":"cmd","action":"reportLocation"}"#.utf8)

    /// A reply is a message from the phone, whatever position it carries: the tracker was heard from, and the
    /// request it replies to is marked answered (once, by whichever instance got the reply).
    private func locateAnswered(_ id: ShareID, at: UnixMillis) {
        if directory.heard(id, at: at, transport: nil) { updateTracker(id, now: clock.now()) }
        guard let snapshot = directory.snapshot(id), snapshot.share.isActive,
              let requestedAt = snapshot.share.locateRequestedAt, at >= requestedAt,
              (snapshot.share.locateAnsweredAt ?? 0) < requestedAt else { return }
        let recorded: Bool
        do { recorded = try store.recordLocateAnswer(row: snapshot.row, at: at) } catch {
            // The next reply, or another instance's, records it; the request stays open meanwhile.
            directory.warnStore("share \(id): cannot record the answer to the location request (\(error))")
            return
        }
        guard recorded else {
            directory.followStored(id, "it from the store")
            return
        }
        directory.updateTracker(id) { $0.locateAnsweredAt = at }
        logger.info("share \(id): the tracker answered the location request")
    }
}
