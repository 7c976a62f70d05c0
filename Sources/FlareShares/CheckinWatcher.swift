import FlareCore
public import FlareStore
import FlareSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Fires check-ins whose deadline and grace have passed, and ends those whose sharer reached the zone, from the store:
/// the server acts when the phone is flat, smashed or out of coverage. Each round also stops what revoked keys left
/// running (`KeyRevocations`): their check-ins first of all; and climbs the escalation ladders that are due
/// (`Escalations`).
///
/// One instance at a time does it: the holder of the store lease `leaseName` (renewed every second, taken over
/// `leaseMillis` after its holder stops). The store moves each check-in out of `armed` once (`missCheckin`,
/// `settleCheckin` are conditional), so a holder that dies between reading a deadline and firing it, or two that
/// overlap at a hand-over, fire it once. A deadline that passed while every instance was down is due at the next
/// start, and fires then.
public final class CheckinWatcher: Sendable {
    public static let leaseName = "checkin-deadlines"
    static let leaseMillis: Int64 = 10_000
    /// Check-ins fired or checked for arrival per round.
    static let batch = 200
    /// The newest fixes looked at for each armed check-in with a zone, each round.
    static let fixesLooked = 20

    private struct State {
        var holding = false
        /// Where the next round's look for arrivals starts (a share's row): each round takes the next `batch`, so every
        /// armed zone is looked at however many there are.
        var arrivalCursor: Int64 = 0
        var stopping = false
        var finished = false
    }

    private let shares: ShareService
    private let store: any CheckinRecords & FixRecords & LeaseRecords
    private let holder: String
    private let clock: any Clock
    private let logger: Logger
    private let state = Mutex(State())
    private let warnings = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 3), maximumKeys: 8)

    public init(shares: ShareService, store: any CheckinRecords & FixRecords & LeaseRecords, holder: String, clock: any Clock, logger: Logger) {
        self.shares = shares
        self.store = store
        self.holder = holder
        self.clock = clock
        self.logger = logger
    }

    public func start() {
        NamedThread.start(name: "flare-checkins") { [self] in
            while !state.withLock({ $0.stopping }) {
                step()
                usleep(1_000_000)
            }
            // Let the lease go so another instance takes the deadlines at once; if the store cannot be told, the lease
            // runs out by itself within `leaseMillis`, and no deadline is lost (they are in the store).
            if state.withLock({ $0.holding }) { try? store.releaseLease(Self.leaseName, holder: holder) }
            state.withLock { $0.finished = true }
        }
    }

    /// Stops after the round in progress, and lets the lease go (waits at most two seconds for that).
    public func stop() {
        state.withLock { $0.stopping = true }
        let deadline = clock.monotonicMillis() + 2_000
        while !state.withLock({ $0.finished }) && clock.monotonicMillis() < deadline { usleep(10_000) }
    }

    /// One round: hold the lease, fire what is due, end what arrived. Called every second (and by tests). True when
    /// the round ran: false when another instance holds the lease, or the store could not be asked (the lease waits
    /// only briefly for another connection's lock, so on a busy machine a round may be skipped; the next one, a
    /// second later, does its work).
    @discardableResult
    public func step() -> Bool {
        let held: Bool
        do { held = try store.holdLease(Self.leaseName, holder: holder, now: clock.now(), durationMillis: Self.leaseMillis) != nil } catch {
            warn("lease", "cannot renew the check-in lease (\(error)); trying again")
            return false
        }
        let changed = state.withLock { state in
            defer { state.holding = held }
            return state.holding != held
        }
        if changed { logger.info(held ? "watching check-in deadlines" : "another instance watches check-in deadlines now") }
        guard held else { return false }
        do {
            for checkin in try store.dueCheckins(now: clock.now(), limit: Self.batch) { try shares.fireCheckin(checkin) }
            let cursor = state.withLock { $0.arrivalCursor }
            let armed = try store.armedArrivals(afterShareRow: cursor, limit: Self.batch)
            state.withLock { $0.arrivalCursor = armed.count < Self.batch ? 0 : armed.last?.shareRow ?? 0 }
            for checkin in armed {
                guard let zone = checkin.arrive else { continue }
                let fixes = try store.recentFixes(row: checkin.shareRow, limit: Self.fixesLooked)
                // Only fixes made since it was armed: an old position at the destination is no arrival.
                guard fixes.contains(where: { $0.timestamp * 1000 >= checkin.createdAt - 1000 && zone.contains($0) }) else { continue }
                do throws(ShareError) { try shares.settleCheckin(checkin, as: .arrived) } catch {
                    warn("arrive", "check-in \(checkin.id): cannot record the arrival (\(error)); trying again")
                }
            }
            // Under the same lease: a revoked key's check-ins are among what stops.
            try shares.revocations.sweep()
            // And the escalation ladders: one holder takes each step.
            try shares.escalations.sweep()
        } catch {
            warn("read", "cannot read or fire check-ins (\(error)); trying again")
            return false
        }
        return true
    }

    private func warn(_ key: String, _ message: @autoclosure () -> String) {
        if warnings.take(key, nowMillis: clock.monotonicMillis()) == nil { logger.warning(message()) }
    }
}
