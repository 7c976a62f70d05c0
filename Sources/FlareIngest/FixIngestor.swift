public import FlareCore
public import FlareShares
public import FlareStore
import Dispatch
import FlareSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// MQTT → validate → persist → publish to viewers.
///
/// `handle` runs on the MQTT network thread: it parses and validates (microseconds) and queues the fix. One
/// writer drains the queue in batches, each in one SQLite transaction, and only then tells the share service,
/// so a viewer never sees a fix that is not stored. The bridge acknowledges QoS 1 messages to the broker only
/// once `waitUntilStored` says they are committed. When the queue is full, or the store is failing, `handle`
/// blocks: the broker then holds messages in the bridge's session queue instead of anything being dropped.
public final class FixIngestor: Sendable {
    struct Item: Sendable {
        let shareID: ShareID
        let pending: PendingFix
        /// When the tracker was heard sending it: on receipt, or for a retained message (a replay of something sent
        /// earlier) no later than its own time.
        let heardAt: UnixMillis
        /// A reply to "locate now" that is live, not a retained replay.
        let repliesToLocate: Bool
        /// How it came: over MQTT, or over HTTP (then the writer also publishes it for integrators).
        let transport: TrackerTransport
    }

    private let store: any FixRecords & StoreHealth
    private let shares: ShareService
    private let metrics: Metrics
    private let logger: Logger
    private let clock: any Clock
    private let parser: LocationPayloadParser
    private let queue: BlockingQueue<Item>
    private let batchSize: Int
    private let minimumCommitIntervalMillis: Int
    static let busyBatchCount = 16
    private let gatherThreshold: Int
    private let gatherMillis: Int
    private let finished = DispatchSemaphore(value: 0)
    private let storeHealthy = Atomic<Bool>(true)
    private let started = Atomic<Bool>(false)
    private let shuttingDown = Atomic<Bool>(false)
    /// Fixes taken from the queue and not yet committed.
    private let batchBeingWritten = Atomic<Int>(0)
    /// A flood of bad messages must not become a flood of log lines: a few per reason per second, the rest counted.
    private let rejectLogLimiter = RateLimiter(rule: .init(ratePerSecond: 1, burst: 10), maximumKeys: 64)

    public init(store: any FixRecords & StoreHealth, shares: ShareService, metrics: Metrics, logger: Logger, clock: any Clock,
                parser: LocationPayloadParser, queueCapacity: Int = 8192, batchSize: Int = 8192,
                minimumCommitIntervalMillis: Int = 2, gatherThreshold: Int = 256, gatherMillis: Int = 20) {
        self.store = store
        self.shares = shares
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        self.parser = parser
        self.queue = BlockingQueue(capacity: queueCapacity)
        self.batchSize = batchSize
        self.minimumCommitIntervalMillis = minimumCommitIntervalMillis
        self.gatherThreshold = max(8, gatherThreshold)
        self.gatherMillis = gatherMillis
        metrics.register(FlareMetrics.fixesAccepted, FlareMetrics.fixesDuplicate, FlareMetrics.fixesRejected, FlareMetrics.lastWills, FlareMetrics.storeErrors)
        let queue = self.queue
        metrics.registerGauge(FlareMetrics.ingestQueueDepth) { Double(queue.depth) }
    }

    /// Starts the writer. Call once.
    public func start() {
        guard !started.exchange(true, ordering: .relaxed) else { return }
        NamedThread.start(name: "flare-writer") { [self] in writeLoop() }
    }

    /// A message from a location topic. Returns the reject reason, or nil when the fix was queued (or was a
    /// duplicate of the last one).
    @discardableResult
    public func handle(topic: String, payload: [UInt8], retained: Bool) -> RejectReason? {
        // A zero-length retained message is how a location is cleared (by the bridge itself at a share's end).
        if payload.isEmpty { return nil }
        guard let shareID = Topics.shareID(fromLocationTopic: topic) else { return reject(.badTopic, share: nil) }
        return handle(shareID: shareID, payload: payload, retained: retained)
    }

    @discardableResult
    public func handle(shareID: ShareID, payload: [UInt8], retained: Bool) -> RejectReason? {
        guard let found = lookUp(shareID) else { return nil }
        guard let context = found else { return reject(.unknownShare, share: shareID) }
        guard context.isActive else {
            if let sequence = parser.sequence(in: payload) { shares.refused(sequence, row: context.row, share: shareID) }
            return reject(.shareEnded, share: shareID)
        }
        if shares.fixLimitReached(context, of: shareID) {
            if let sequence = parser.sequence(in: payload) { shares.refused(sequence, row: context.row, share: shareID) }
            return reject(.fixLimitReached, share: shareID)
        }
        let receivedAt = clock.now()
        switch parser.parseMessage(payload, receivedAt: receivedAt, shareCreatedAt: context.createdAt) {
        case .failure(let reason):
            if let sequence = parser.sequence(in: payload) { shares.refused(sequence, row: context.row, share: shareID) }
            return reject(reason, share: shareID)
        case .success(.lastWill):
            // Sent by the broker when the tracker's connection was lost; a retained one is an old story.
            if !retained {
                metrics.increment(FlareMetrics.lastWills)
                shares.lastWillArrived(shareID, at: receivedAt)
            }
            return nil
        case .success(let message):
            // In clear for a plain share, the ciphertext for an end-to-end encrypted one (`LocationMessage.fix`).
            guard let stored = message.fix(endToEnd: context.endToEnd, receivedAt: receivedAt) else { return nil }
            let fix: Fix
            switch stored {
            case .failure(let reason):
                if let sequence = parser.sequence(in: payload) { shares.refused(sequence, row: context.row, share: shareID) }
                if reason == .notEncrypted { shares.clearRefusedClearPosition(shareID, lastSealed: context.last) }
                return reject(reason, share: shareID)
            case .success(let taken): fix = taken
            }
            // A retained message delivered again on (re)subscribe is the one already known: the same place (without a
            // `tst` it would otherwise be stored again under a new receive time) or the same ciphertext. Any other
            // repeat (a QoS 1 redelivery) the store absorbs. A confirming tracker's mark still moves past it: it may be
            // the only copy of its number that reaches this bridge (the tracker published it while the bridge was
            // away), and a number never handled would hold the mark, and the tracker's queue, back.
            if retained, let last = context.last,
               fix.isSealed ? last.sealed == fix.sealed : (last.latitude == fix.latitude && last.longitude == fix.longitude && !last.isSealed) {
                metrics.increment(FlareMetrics.fixesDuplicate)
                if let sequence = fix.sequence { shares.refused(sequence, row: context.row, share: shareID) }
                return nil
            }
            // A ciphertext's time is its arrival; a locate-now answer inside one cannot be told apart here.
            let heardAt = retained && !fix.isSealed ? min(receivedAt, fix.timestamp * 1000) : receivedAt
            queue.put(Item(shareID: shareID, pending: PendingFix(shareRow: context.row, fix: fix, receivedAt: receivedAt),
                           heardAt: heardAt, repliesToLocate: fix.isCommandResponse && !retained, transport: .mqtt))
            return nil
        }
    }

    /// What the ingest needs of a share, from memory or the store. A store that cannot say is no verdict: this waits
    /// for it, as for a full queue, so that the message stays the broker's (unacknowledged) instead of being refused.
    /// Nil only when shutting down meanwhile; the message then counts as refused, so the bridge acknowledges nothing
    /// from here on and the broker delivers it again to the next bridge.
    private func lookUp(_ id: ShareID) -> ShareRegistry.IngestContext?? {
        var waitMillis = 50
        while true {
            do { return .some(try shares.ingestContext(id)) } catch {
                storeHealthy.store(false, ordering: .relaxed)
                if rejectLogLimiter.take("lookup", nowMillis: clock.monotonicMillis()) == nil {
                    logger.warning("cannot look up share \(id.rawValue) for a fix (\(error)); holding the message until the store answers")
                }
            }
            if shuttingDown.load(ordering: .relaxed) || queue.isClosed {
                queue.noteRefused()
                return nil
            }
            sleepMillis(waitMillis)
            waitMillis = min(1_000, waitMillis * 2)
        }
    }

    /// What became of a fix that came over HTTP.
    public enum HTTPIntake: Sendable, Equatable {
        /// Committed (or already stored: a retry), and known to viewers.
        case stored
        /// Not taken: the queue is full or the store is failing. Nothing was queued; the client should retry.
        case unavailable
        /// Queued but not committed within the wait: it will be stored; a retry is absorbed as a duplicate.
        case pending
    }

    /// A fix that came over HTTP (Flare's HTTP ingest, the OwnTracks apps' HTTP mode), validated by the caller: it
    /// goes through the same writer and batches as MQTT fixes, and this waits for its commit, so a 202 means stored.
    /// The writer then publishes it to the share's location topic (retained, like a phone's), for integrators; the
    /// bridge's copy of that message is a duplicate the store absorbs. Never waits for room in the queue: an HTTP
    /// client can be told to come back, the MQTT thread cannot.
    public func storeHTTPFix(_ fix: Fix, share: ShareID, row: Int64, receivedAt: UnixMillis, timeout: Duration) -> HTTPIntake {
        let item = Item(shareID: share, pending: PendingFix(shareRow: row, fix: fix, receivedAt: receivedAt),
                        heardAt: receivedAt, repliesToLocate: fix.isCommandResponse, transport: .http)
        guard isStoreHealthy, let ticket = queue.offer(item) else { return .unavailable }
        return queue.waitUntilProcessed(ticket: ticket, timeout: timeout) ? .stored : .pending
    }

    private func reject(_ reason: RejectReason, share: ShareID?) -> RejectReason {
        metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
        if reason != .ignoredType, rejectLogLimiter.take(reason.rawValue, nowMillis: clock.monotonicMillis()) == nil {
            logger.info("rejected message on share \(share?.rawValue ?? "-"): \(reason.rawValue)")
        }
        return reason
    }

    public var isStoreHealthy: Bool { storeHealthy.load(ordering: .relaxed) }
    public var queueDepth: Int { queue.depth }

    /// Call before the bridge stops. Stopping it waits for the MQTT thread, which waits for room in the queue
    /// while the queue is full; with a failing store no room would ever come. So once shutting down, a full queue
    /// behind a failing store refuses the message in hand (counted in what `drain` reports) instead.
    public func prepareForShutdown() {
        shuttingDown.store(true, ordering: .relaxed)
        if !isStoreHealthy { giveUpOnFailingStore() }
    }

    private func giveUpOnFailingStore() {
        queue.refuseWhenFull()
        queue.abandonWaits()
    }

    /// The bridge's acknowledgement gate: waits until every fix handed over so far is committed, so the broker
    /// is told a message was received only once it is stored. False when that cannot happen (shutting down
    /// with a failing store, or a fix was refused): those messages must not be acknowledged at all, and the
    /// broker delivers them again when the bridge is back.
    public func waitUntilStored() -> Bool {
        queue.waitUntilProcessed()
    }

    /// Stops taking fixes, writes everything queued, and returns when the writer has finished: nil.
    ///
    /// A store that cannot be written (a full or read-only disk) would keep the writer retrying for ever, and
    /// a shutdown that never ends is ended by SIGKILL without a word. So once the store has been failing for
    /// `failingStoreGraceSeconds` without a successful write, this gives up and returns how many fixes could
    /// not be written, for the caller to say so.
    @discardableResult
    public func drain(failingStoreGraceSeconds: Int) -> Int? {
        queue.close()
        guard started.load(ordering: .relaxed) else { return nil }
        var failingFor = 0
        while finished.wait(timeout: .now() + .seconds(1)) == .timedOut {
            failingFor = isStoreHealthy ? 0 : failingFor + 1
            if failingFor >= failingStoreGraceSeconds {
                return queue.depth + batchBeingWritten.load(ordering: .relaxed) + queue.refused
            }
        }
        finished.signal()  // for a later call
        return nil
    }

    /// Lets a batch grow before it is written when fixes are arriving fast, so that one commit covers many.
    ///
    /// Every commit has a fixed cost, and fixes of many shares interleave, so each fix of a commit dirties a
    /// different page that the commit writes to the WAL: ten commits of 8 fixes write ~80 pages, one commit of
    /// 4,000 fixes over 1,000 shares ~1,000. So while the previous batch was busy (`busyBatchCount` or more),
    /// commits start at most every `minimumCommitIntervalMillis`; and a batch that found hundreds waiting keeps
    /// gathering, up to `gatherMillis`, for as long as the inflow keeps up, so the end of a burst is not held
    /// back. At an ordinary rate a batch is one or two fixes and is written at once.
    ///
    /// None of this waits while the bridge waits for the commit (`waitUntilStored`, before it acknowledges QoS 1
    /// messages): nothing more arrives until the commit is done. So the pacing only groups QoS 0 floods.
    private func gather(_ batch: inout [Item], lastCommitStart: Int64, previousBatchCount: Int) {
        if queue.isAwaitingProcessing { return }
        let sinceLastCommit = clock.monotonicMillis() - lastCommitStart
        if previousBatchCount >= Self.busyBatchCount, sinceLastCommit < Int64(minimumCommitIntervalMillis) {
            var pauseMicros = (minimumCommitIntervalMillis - Int(sinceLastCommit)) * 1000
            while pauseMicros > 0, !queue.isAwaitingProcessing {
                usleep(250)
                pauseMicros -= 250
            }
            batch.append(contentsOf: queue.takeAvailable(maximum: batchSize - batch.count))
        }
        guard batch.count >= gatherThreshold else { return }
        var waited = 0
        while batch.count < batchSize, waited < gatherMillis, !queue.isClosed, !queue.isAwaitingProcessing {
            sleepMillis(1)
            waited += 1
            let more = queue.takeAvailable(maximum: batchSize - batch.count)
            batch.append(contentsOf: more)
            if more.count < gatherThreshold / 8 { break }  // the inflow has slowed: write now
        }
    }

    private func writeLoop() {
        var retryDelayMillis = 50
        var lastCommitStart: Int64 = 0
        var previousBatchCount = 0
        while true {
            var batch = queue.takeBatch(maximum: batchSize)
            if batch.isEmpty { break }
            gather(&batch, lastCommitStart: lastCommitStart, previousBatchCount: previousBatchCount)
            lastCommitStart = clock.monotonicMillis()
            previousBatchCount = batch.count
            batchBeingWritten.store(batch.count, ordering: .relaxed)
            defer { batchBeingWritten.store(0, ordering: .relaxed) }
            // A failed commit is retried with the same batch until it succeeds: the queue behind it fills and
            // back-pressure stops intake, so a full or read-only disk delays fixes but never drops them.
            while true {
                do {
                    let inserted = try store.insertFixes(batch.map(\.pending))
                    if !storeHealthy.exchange(true, ordering: .relaxed) {
                        queue.setPaused(false)
                        logger.info("store writable again; \(batch.count) queued fixes written")
                    }
                    retryDelayMillis = 50
                    var stored: [ShareRegistry.HeardFix] = []
                    var locateReplies: [(share: ShareID, at: UnixMillis)] = []
                    stored.reserveCapacity(batch.count)
                    var overHTTP: [(share: ShareID, fix: Fix)] = []
                    for (item, isNew) in zip(batch, inserted) {
                        if isNew {
                            stored.append(.init(share: item.shareID, fix: item.pending.fix, heardAt: item.heardAt, transport: item.transport))
                            if item.transport == .http { overHTTP.append((item.shareID, item.pending.fix)) }
                        }
                        if item.repliesToLocate { locateReplies.append((item.shareID, item.heardAt)) }
                    }
                    shares.stored(stored, locateReplies: locateReplies)
                    if !overHTTP.isEmpty { shares.publishHTTPFixes(overHTTP) }
                    // Processed once the registry knows them too: whoever waited for these fixes (an acknowledgement,
                    // an HTTP reply to "locate now") may read the last position next.
                    queue.markProcessed(batch.count)
                    // After the acknowledgements: a confirming tracker's mark comes after what it counts is committed.
                    shares.handled(batch.compactMap { item in
                        item.pending.fix.sequence.map { (item.shareID, item.pending.shareRow, $0) }
                    })
                    let accepted = stored.count
                    metrics.increment(FlareMetrics.fixesAccepted, by: Double(accepted))
                    if accepted < batch.count { metrics.increment(FlareMetrics.fixesDuplicate, by: Double(batch.count - accepted)) }
                    break
                } catch {
                    metrics.increment(FlareMetrics.storeErrors)
                    if shuttingDown.load(ordering: .relaxed) { giveUpOnFailingStore() }
                    if storeHealthy.exchange(false, ordering: .relaxed) {
                        // Take no more while nothing can be stored: what the bridge has not read stays in the broker's
                        // session for flared, and what it read is not acknowledged until stored (`waitUntilStored`),
                        // so neither is lost if flared has to be stopped before the store recovers.
                        queue.setPaused(true)
                        let cause = store.writeProblem().map { "; writing next to the database fails too: \($0)" } ?? ""
                        logger.error("cannot write \(batch.count) fixes, will retry: \(error)\(cause)")
                    }
                    sleepMillis(retryDelayMillis)
                    // At most a second: fixes wait no longer than that once the store is back.
                    retryDelayMillis = min(retryDelayMillis * 2, 1000)
                    store.recoverAfterFailedWrite()
                }
            }
        }
        finished.signal()
    }
}
