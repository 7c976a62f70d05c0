import FlareBridge
import FlareCore
import FlareNATS
import FlareShares
import FlareSystem
import Synchronization
import FlareIngest

/// The phones' fixes from the NATS cluster, into the ingest (the same `FixIngestor` the mosquitto bridge feeds):
/// - QoS 1 fixes from the MQTT layer's own stream, `$MQTT_msgs`, where a message is stored (three replicas) before the
///   phone gets its PUBACK: one durable pull consumer, `flared-ingest`, that every instance binds, so each fix goes to
///   one of them; a batch is acknowledged once it is committed, and a batch an instance dies holding is delivered again
///   (to whichever instance asks next) after `ackWait`: every acknowledged fix is stored, once (the store absorbs a
///   repeat). Measured: no fix lost in 15 of 15 node kills (docs/scaling.md);
/// - QoS 0 fixes and last wills, which the stream does not hold, from a core queue subscription (`flared-direct`): as
///   on mosquitto, a QoS 0 fix in flight when an instance dies is lost.
/// Positions flared published itself carry an `OwnPositionMark`: they are not fixes (`ownPositionCameBack`).
public final class NATSIngest: Sendable {
    public static let stream = "$MQTT_msgs"
    public static let durable = "flared-ingest"
    static let streamFilter = "$MQTT.msgs.flare.v1.shares.*.location"
    static let directSubject = "flare.v1.shares.*.location"
    static let directQueue = "flared-direct"

    private let connection: NATSConnection
    private let ingestor: FixIngestor
    private let shares: ShareService
    private let mark: OwnPositionMark
    private let metrics: Metrics
    private let logger: Logger
    private let ackWait: Duration
    private let stopping = Atomic<Bool>(false)
    private let worker = Mutex<NamedThread?>(nil)
    /// FLARE_FIX_RATE_PER_SHARE, as the broker plugin applies it on mosquitto. NATS acknowledges a phone's message
    /// before anyone can look at it, so what came is stored; a share's phones beyond the rate are cut off (once a second
    /// at most), and each reconnection costs them a login, which bounds them.
    private let fixRate: RateLimiter
    private let rateCuts = RateLimiter(rule: .init(ratePerSecond: 1, burst: 1))
    private let replayLog = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 3), maximumKeys: 4)
    private let sessions: NATSSessions
    private let names: NATSAuthCallout.LoginNames
    private let clock: any Clock
    let rateDisconnects = Atomic<Int>(0)

    /// `connection` logs in as flared's service account (it lands in the APP account, where the MQTT layer's streams are).
    public init(connection: NATSConnection, ingestor: FixIngestor, shares: ShareService, mark: OwnPositionMark, ackWait: Duration = .seconds(10),
                fixRate: RateLimiter.Rule, sessions: NATSSessions, names: NATSAuthCallout.LoginNames, clock: any Clock, metrics: Metrics,
                logger: Logger) {
        self.connection = connection
        self.clock = clock
        self.fixRate = RateLimiter(rule: fixRate)
        self.sessions = sessions
        self.names = names
        self.ingestor = ingestor
        self.shares = shares
        self.mark = mark
        self.ackWait = ackWait
        self.metrics = metrics
        self.logger = logger
        metrics.register(FlareMetrics.ownPositionsSkipped, FlareMetrics.ownPositionReplays)
        metrics.registerGauge(FlareMetrics.brokerRateDisconnects) { [weak self] in Double(self?.rateDisconnects.load(ordering: .relaxed) ?? 0) }
    }

    /// Subscribes to the direct messages and starts the stream's reader. Does not wait for the stream: it exists once
    /// the MQTT layer has seen its first client (flared's own publishing connection), and the reader binds it then.
    public func start() throws(NATSError) {
        try connection.subscribe(Self.directSubject, queue: Self.directQueue) { [self] message in
            // QoS 1 fixes come through the stream as well; only QoS 0 ones and last wills are this path's.
            guard message.mqttQoS == 0 || Self.isLastWill(message.payload) else { return }
            take(topic: Self.topic(ofSubject: message.subject), payload: message.payload)
        }
        try connection.flush()
        let started = NamedThread.start(name: "flare-nats-ingest") { [self] in readStream() }
        worker.withLock { $0 = started }
    }

    /// Stops fetching; what was fetched and not committed stays unacknowledged, and is delivered again.
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        let running = worker.withLock { thread in
            defer { thread = nil }
            return thread
        }
        running?.join()
    }

    private func readStream() {
        var consumer: NATSPullConsumer?
        var lastComplaint: Int64 = 0
        var failures = 0
        while !stopping.load(ordering: .relaxed) {
            guard let bound = consumer else {
                do {
                    consumer = try NATSPullConsumer(connection: connection, stream: Self.stream, durable: Self.durable, filter: Self.streamFilter,
                                                    ackWait: ackWait, maxAckPending: 4096)
                    logger.info("reading fixes from the cluster's MQTT stream (\(Self.stream), durable consumer \(Self.durable))")
                } catch {
                    if clock.monotonicMillis() - lastComplaint > 10_000 {
                        lastComplaint = clock.monotonicMillis()
                        logger.warning("cannot bind the cluster's MQTT stream yet (\(error)); trying again")
                    }
                    sleepMillis(250)
                }
                continue
            }
            let batch: [NATSStreamMessage]
            do {
                batch = try bound.fetch(batch: 512, timeout: .milliseconds(500))
                failures = 0
            } catch {
                if clock.monotonicMillis() - lastComplaint > 10_000 {
                    lastComplaint = clock.monotonicMillis()
                    logger.warning("reading the cluster's MQTT stream failed (\(error)); trying again")
                }
                // A consumer that keeps failing may be gone (a cluster that lost its stores): bind it anew, which makes it
                // again where it does not exist.
                failures += 1
                if failures >= 10 { consumer = nil; failures = 0 }
                sleepMillis(100)
                continue
            }
            if batch.isEmpty { continue }
            for message in batch {
                let subject = message.content.subject
                guard subject.hasPrefix("$MQTT.msgs.") else { continue }
                take(topic: Self.topic(ofSubject: String(subject.dropFirst("$MQTT.msgs.".count))), payload: message.content.payload)
            }
            // Told "received" only once stored: a batch not committed (shutting down with a failing store) is left to
            // the stream, which delivers it again.
            guard ingestor.waitUntilStored() else { continue }
            for message in batch {
                do { try message.acknowledge() } catch {
                    // Delivered again after ackWait, and absorbed by the store as a repeat.
                    logger.debug("acknowledgement not sent: \(error)")
                }
            }
        }
    }

    /// The rate first: a marked message counts against its share's rate as any other (a phone cannot flood the
    /// cluster with copies of flared's own messages); then the mark (`OwnPositionMark.verdict`).
    private func take(topic: String, payload: [UInt8]) {
        if let share = Topics.shareID(fromLocationTopic: topic), fixRate.take(share.rawValue, nowMillis: clock.monotonicMillis()) != nil {
            cutOff(share)
        }
        switch mark.verdict(on: payload, topic: topic, now: clock.now()) {
        case .own(let original):
            metrics.increment(FlareMetrics.ownPositionsSkipped)
            shares.ownPositionCameBack(topic: topic, payload: original)
        case .replayed:
            // Someone published a copy of flared's message again: not a fix, and the broker's retained position is
            // put back to the newest stored.
            metrics.increment(FlareMetrics.ownPositionReplays)
            if replayLog.take("replay", nowMillis: clock.monotonicMillis()) == nil { logger.warning("a copy of flared's own position was published again on \(topic); dropped") }
            shares.ownPositionReplayed(topic: topic)
        case .unmarked:
            _ = ingestor.handle(topic: topic, payload: payload, retained: false)
        }
    }

    /// Ends the share's device connections (not its watchers'), off the ingest's thread.
    private func cutOff(_ share: ShareID) {
        guard rateCuts.take(share.rawValue, nowMillis: clock.monotonicMillis()) == nil else { return }
        let name = names.name(share)
        _ = NamedThread.start(name: "flare-rate-cut") { [self] in
            do {
                let ended = try sessions.end(user: name, devicesOnly: true)
                rateDisconnects.add(ended, ordering: .relaxed)
                logger.warning("share \(share.rawValue): its devices sent beyond FLARE_FIX_RATE_PER_SHARE; \(ended) of their connections ended")
            } catch {
                logger.warning("share \(share.rawValue): beyond its rate, but its connections could not be ended: \(error)")
            }
        }
    }

    /// `a.b.c` → `a/b/c` (Flare's topics have no `.` in a level: NATS could not carry one).
    static func topic(ofSubject subject: String) -> String {
        String(subject.map { $0 == "." ? "/" : $0 })
    }

    /// An OwnTracks last will (`"_type":"lwt"`), whatever its QoS: the stream does not carry wills.
    static func isLastWill(_ payload: [UInt8]) -> Bool {
        let needle = Array(#""lwt""#.utf8)
        guard payload.count >= needle.count, payload.count <= 4096 else { return false }
        return (0...(payload.count - needle.count)).contains { start in payload[start..<(start + needle.count)].elementsEqual(needle) }
    }
}
