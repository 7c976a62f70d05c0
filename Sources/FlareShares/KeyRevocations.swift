import FlareCore
import FlareStore
import FlareSystem

/// What a revoked key left running stops: a revoked key is a lost or stolen one, and whoever held it must not keep an
/// SOS running, a check-in armed to mail someone, or mail queued to strangers.
///
/// From the store, so that every way of revoking counts (`DELETE /api/v1/keys/{id}` on any instance, `flare keys
/// revoke` straight into the store while flared runs or is down): each round (`sweep`, under the check-in watcher's
/// lease, and at once on the instance that revoked a key over HTTP) takes the revoked keys not yet done
/// (`keysWithWorkToStop`), cancels their armed check-ins and drops their queued mail in one transaction (counted in
/// `flare_mail_refused_total{reason="key_revoked"}`), ends their live shares as stopped (memory, broker, viewers, as
/// `flare share stop` does), and marks the key done. Every step is idempotent, so two instances at it, or a round cut
/// short by a failing store, finish the job at the next round.
public final class KeyRevocations: Sendable {
    private let shares: ShareService
    private let store: any KeyRecords
    private let clock: any Clock
    private let metrics: Metrics
    private let logger: Logger
    /// Live shares ended per key and round; more wait for the next round (a second later).
    static let sharesPerRound = 500

    init(shares: ShareService, store: any KeyRecords, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.shares = shares
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
    }

    /// One round over every revoked key not yet done. Throws when the store cannot be asked (the next round tries again).
    public func sweep() throws(StoreError) {
        for key in try store.keysWithWorkToStop() { try stopWork(of: key) }
    }

    private func stopWork(of key: Int64) throws(StoreError) {
        let now = clock.now()
        // First what would tell anyone: a check-in whose share is stopped below would still mail at its deadline.
        let cancelled = try store.cancelQueuedWork(ofKey: key, at: now)
        if cancelled.mails > 0 { metrics.increment(FlareMetrics.mailRefused, labels: [("reason", "key_revoked")], by: Double(cancelled.mails)) }
        let live: [(row: Int64, lookup: ShareLookup)]
        do { live = try shares.list(state: .active, after: nil, limit: Self.sharesPerRound, owner: key) } catch {
            throw StoreError(operation: "list a revoked key's shares", code: 0, message: error.description, engine: "flare")
        }
        var ended = 0
        for (_, listed) in live {
            // Memory takes in a share another instance made before it is stopped here.
            guard case .live = try shares.share(listed.share.id) else { continue }
            do { _ = try shares.stop(listed.share.id); ended += 1 } catch {
                throw StoreError(operation: "stop a revoked key's share", code: 0, message: error.description, engine: "flare")
            }
        }
        if live.count < Self.sharesPerRound { try store.noteKeyWorkStopped(key, at: now) }
        if ended + cancelled.checkins + cancelled.mails > 0 {
            logger.info("owner key \(key) revoked: \(ended) live shares stopped, \(cancelled.checkins) armed check-ins cancelled, \(cancelled.mails) queued mails dropped")
        }
    }
}
