import FlareAPI
public import FlareCore
public import FlareShares
import FlareStore
import FlareSystem
import Synchronization
import FlareCodec
#if canImport(Glibc)
import Glibc
#endif

/// Reads the broker's epoch mark (`Topics.brokerEpoch`) as it stands now.
public protocol BrokerEpochReading: Sendable {
    /// The epoch the broker holds, or nil when it holds no mark. Throws when it cannot tell (not reachable).
    func readEpoch() throws -> Int64?
}

/// Notices that the broker forgot retained messages, and puts them back from the store.
///
/// A broker killed or powered off loses what changed since its last save (mosquitto: `autosave_interval`), and its
/// "session present" flag cannot say so: a session restored from that save reports present. So the instance that
/// holds the store's lease `leaseName` keeps a mark of its own on the broker: a retained epoch number it raises every
/// `epochIntervalMillis` and records in the store once the broker has acknowledged it. On every new connection to the
/// broker (before it raises the mark on it), and when it takes the lease, it reads the mark back. No mark, or an older one than the store holds, means
/// the broker went back to a save older than the last second (a store with no mark yet, on a new installation or
/// the first start after an upgrade, only starts the count): every share with history gets its retained status and
/// last position again (`ShareService.restoreBrokerState`), paced so that ingest goes on, and the mark goes up. A
/// crash within one interval of a save can go unnoticed; it loses at most that interval's retained changes.
public final class BrokerStateKeeper: Sendable {
    public static let leaseName = "broker-retained-state"
    /// How long the lease lasts without renewal: after a keeper dies, another instance takes over this much later.
    static let leaseMillis: Int64 = 10_000
    static let epochIntervalMillis: Int64 = 1_000
    /// Messages a restore queues before it waits for the broker's acknowledgement.
    static let restoreWindow = 200
    static let acknowledgementTimeout: Duration = .seconds(10)

    private struct State {
        var holding = false
        /// The last epoch the broker acknowledged, as far as this instance knows (the store's copy at takeover).
        var epoch: Int64 = 0
        var needsCheck = true
        /// The connection to the broker (`MQTTClient.connectionNumber`) whose mark was last checked: the mark is only
        /// ever raised on a checked connection, or a broker that restarted empty would be shown a new mark before
        /// anyone looked at the old one.
        var checkedConnection: Int?
        var nextEpochAt: Int64 = 0
        var nextLeaseAttemptAt: Int64 = 0
        /// Not joined: see `stop`.
        var thread: NamedThread?
    }

    private let shares: ShareService
    private let store: any LeaseRecords
    private let publisher: any BrokerPublisher
    private let reader: any BrokerEpochReading
    private let connection: @Sendable () -> Int?
    private let holder: String
    private let clock: any Clock
    private let metrics: Metrics
    private let logger: Logger
    private let state = Mutex(State())
    /// The keeper retries several times a second: a store or broker that stays away is said a few times a minute.
    private let warningLimiter = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 2), maximumKeys: 8)
    private let stopping = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)

    /// - Parameters:
    ///   - holder: this instance's name for the lease (its MQTT client id: a restarted instance takes its own lease
    ///     back at once).
    ///   - connection: which connection `publisher` has to the broker now (a number that changes at each
    ///     reconnection), nil while it has none.
    public init(store: any LeaseRecords, shares: ShareService, publisher: any BrokerPublisher, reader: any BrokerEpochReading, holder: String,
                connection: @escaping @Sendable () -> Int?, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.shares = shares
        self.store = store
        self.publisher = publisher
        self.reader = reader
        self.holder = holder
        self.connection = connection
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        metrics.register(FlareMetrics.brokerRestores, FlareMetrics.brokerRestoredMessages)
        metrics.registerGauge(FlareMetrics.brokerEpoch) { [weak self] in
            Double(self?.state.withLock { $0.holding ? $0.epoch : 0 } ?? 0)
        }
    }

    public func start() {
        let thread = NamedThread.start(name: "flare-keeper") { [self] in
            while !stopping.load(ordering: .relaxed) {
                step()
                usleep(200_000)
            }
            // Let the lease go so that another instance takes the job at once.
            if state.withLock({ $0.holding }) { try? store.releaseLease(Self.leaseName, holder: holder) }
            finished.store(true, ordering: .relaxed)
        }
        state.withLock { $0.thread = thread }
    }

    /// Stops the job. Waits a moment for the thread to let the lease go, but never for a store that does not answer
    /// (a shutdown must not hang on it; the lease then runs out by itself).
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        let deadline = clock.monotonicMillis() + 1_000
        while !finished.load(ordering: .relaxed) && clock.monotonicMillis() < deadline { usleep(10_000) }
    }

    /// One round of the job: hold the lease, check the mark after a (re)connection, or raise it when it is time.
    /// Called by the keeper's thread a few times a second (and by tests directly).
    func step() {
        let now = clock.monotonicMillis()
        guard holdLease(now: now), let current = connection() else { return }
        let (needsCheck, due) = state.withLock { ($0.needsCheck || $0.checkedConnection != current, now >= $0.nextEpochAt) }
        if needsCheck {
            checkMark(on: current)
        } else if due {
            state.withLock { $0.nextEpochAt = now + Self.epochIntervalMillis }
            let next = state.withLock { $0.epoch } + 1
            if publishEpoch(next) { recordEpoch(next) }
        }
    }

    /// Holds the lease: renews it, or tries to take it, once a second (it lasts `leaseMillis`). True when held.
    private func holdLease(now: Int64) -> Bool {
        let (holding, attemptDue) = state.withLock { ($0.holding, now >= $0.nextLeaseAttemptAt) }
        guard attemptDue else { return holding }
        state.withLock { $0.nextLeaseAttemptAt = now + 1_000 }
        let value: Int64?
        do {
            value = try store.holdLease(Self.leaseName, holder: holder, now: clock.now(), durationMillis: Self.leaseMillis)
        } catch {
            // The store is away: whoever holds the lease keeps it until it runs out; nothing is published meanwhile.
            warn("lease", "cannot renew the broker-keeper lease (\(error))")
            return holding
        }
        return state.withLock { state in
            guard let value else {
                if state.holding { logger.warning("another instance keeps the broker's retained state now") }
                state.holding = false
                return false
            }
            if !state.holding {
                // Taken over (or first start): what the store says was acknowledged last is what the broker must show.
                state.holding = true
                state.epoch = max(state.epoch, value)
                state.needsCheck = true
                logger.info("keeping the broker's retained state (epoch \(value))")
            }
            return true
        }
    }

    /// Reads the mark on connection `current` and, if the broker lost retained messages, restores them. The connection
    /// counts as checked only if it is still the same one at the end.
    private func checkMark(on current: Int) {
        let shown: Int64?
        do { shown = try reader.readEpoch() } catch {
            warn("probe", "cannot read the broker's epoch mark (\(error)); trying again")
            return
        }
        let expected = state.withLock { $0.epoch }
        if let shown, shown >= expected {
            guard connection() == current else { return }
            state.withLock { state in
                state.epoch = shown
                state.needsCheck = false
                state.checkedConnection = current
            }
            return
        }
        if expected == 0 {
            // The store has never recorded a mark: a new installation, or the first start after an upgrade, when the
            // broker still holds what the last release published. Nothing to restore; from now on the mark says.
            if publishEpoch(1), connection() == current {
                recordEpoch(1)
                state.withLock { state in
                    state.needsCheck = false
                    state.checkedConnection = current
                }
                logger.info("published the broker's first epoch mark")
            }
            return
        }
        logger.warning("the broker's epoch mark is \(shown.map { "\($0)" } ?? "missing"), the store's \(expected): the broker lost retained messages (a crash since its last save); publishing every share's retained status and last position again")
        let startedAt = clock.monotonicMillis()
        guard let restored = shares.restoreBrokerState(window: Self.restoreWindow, timeout: Self.acknowledgementTimeout) else {
            warn("restore", "the restore was interrupted (broker or store unavailable); starting again")
            return
        }
        // The new mark is acknowledged after everything the restore sent, on the same connection: from here the broker
        // holds it all. A broker that went away meanwhile may hold only part of it: then the restore is done again.
        let next = max(expected, shown ?? 0) + 1
        guard connection() == current, publishEpoch(next), connection() == current else {
            logger.warning("the broker went away during the restore; starting again at the next connection")
            return
        }
        let corrected = shares.confirmRestore(restored)
        recordEpoch(next)
        state.withLock { state in
            state.needsCheck = false
            state.checkedConnection = current
        }
        metrics.increment(FlareMetrics.brokerRestores)
        metrics.increment(FlareMetrics.brokerRestoredMessages, by: Double(restored.messages))
        let millis = clock.monotonicMillis() - startedAt
        logger.info("restored \(restored.shares) shares' retained state on the broker (\(restored.messages) messages, \(millis / 1000).\(millis % 1000 / 100) s\(corrected > 0 ? "; \(corrected) changed meanwhile and were announced again" : ""))")
    }

    /// Raises the mark: at QoS 0, which the client never sends again on a later connection (a QoS 1 message in flight
    /// when the broker dies is re-sent to the restarted broker, which would then show a mark it has not earned), then
    /// a QoS 1 message after it, whose acknowledgement says that the broker has processed the mark.
    private func warn(_ key: String, _ message: @autoclosure () -> String) {
        if warningLimiter.take(key, nowMillis: clock.monotonicMillis()) == nil { logger.warning(message()) }
    }

    private func publishEpoch(_ epoch: Int64) -> Bool {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("epoch", epoch)
        writer.field("at", RFC3339.format(millis: clock.now()))
        writer.endObject()
        guard publisher.publish(topic: Topics.brokerEpoch, payload: writer.bytes, qos: 0, retain: true, expirySeconds: nil) else { return false }
        return publisher.publishAndWait(topic: Self.barrierTopic, payload: Array("\(epoch)".utf8), qos: 1, retain: false, expirySeconds: nil,
                                        timeout: Self.acknowledgementTimeout)
    }

    /// Nobody subscribes to it: its acknowledgement is all that matters.
    static let barrierTopic = Topics.brokerEpoch + "/barrier"

    /// The broker acknowledged `epoch`: the store remembers it for whoever checks next (this instance after a
    /// restart, or another after a takeover).
    private func recordEpoch(_ epoch: Int64) {
        state.withLock { $0.epoch = max($0.epoch, epoch) }
        do {
            if try !store.setLeaseValue(Self.leaseName, holder: holder, value: epoch) {
                state.withLock { $0.holding = false }
            }
        } catch {
            warn("record", "cannot record the broker's epoch mark in the store (\(error))")
        }
    }
}
