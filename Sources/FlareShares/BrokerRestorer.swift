import FlareCore
import FlareStore
import FlareSystem
import FlareWire

extension ShareService {
    // MARK: After the broker forgot

    /// What a restore republished, for `confirmRestore`: the shares announced active, with the time of the last
    /// position sent for each.
    public struct RestoredState: Sendable {
        public fileprivate(set) var shares = 0
        public fileprivate(set) var messages = 0
        fileprivate var announcedActive: [ShareID: UnixMillis?] = [:]
    }
}

/// Puts back, from the store, what a broker that lost its retained state should hold (`BrokerStateKeeper` decides
/// when, under its lease). Holds nothing of its own: made for each restore.
struct BrokerRestorer {
    let store: any ShareRecords
    let directory: ShareDirectory
    let announcer: BrokerAnnouncer
    let logger: Logger

    /// Publishes again, from the store, what the broker should hold for every share that still has history: an active
    /// share's retained status and the last position stored, an ended one's ended status and an empty location (the
    /// broker may have gone back to a copy saved while it was active). Shares whose history is deleted are not
    /// touched. Paced by the broker: every `window`-th message waits for its acknowledgement, so that no more than a
    /// window is queued ahead of the acknowledgements the bridge sends for fixes on the same connection. Nil when the
    /// store could not be read or the broker went away meanwhile: the restore is to be done again.
    func restoreBrokerState(window: Int, timeout: Duration) -> ShareService.RestoredState? {
        let open: [StoredShare]
        do { open = try store.loadOpenShares() } catch {
            logger.warning("cannot read the shares to restore on the broker (\(error)); trying again")
            return nil
        }
        var restored = ShareService.RestoredState()
        var sinceWait = 0
        for stored in open {
            // Memory follows the store first (and takes in shares another instance created).
            let lookup: ShareLookup
            do { lookup = try directory.adopt(stored) } catch {
                logger.warning("cannot read share \(stored.share.id) to restore it on the broker (\(error)); trying again")
                return nil
            }
            guard case .live(let snapshot) = lookup else { continue }
            let share = snapshot.share
            let status = announcer.statusMessage(of: share)
            let statusSent: Bool
            if sinceWait >= window {
                statusSent = announcer.publishAndWait(topic: Topics.status(share.id), payload: status.payload, qos: 1, retain: true,
                                                      expirySeconds: status.expiry, timeout: timeout)
                sinceWait = 0
            } else {
                statusSent = announcer.publish(topic: Topics.status(share.id), payload: status.payload, qos: 1, retain: true,
                                               expirySeconds: status.expiry)
            }
            let locationSent: Bool
            if share.isActive {
                if let last = snapshot.last {
                    locationSent = announcer.publishOwnPosition(topic: Topics.location(share.id), payload: last.ownTracksJSON)
                    restored.messages += 1
                } else {
                    locationSent = true
                }
                restored.announcedActive[share.id] = snapshot.last?.timestamp
            } else {
                locationSent = announcer.publish(topic: Topics.location(share.id), payload: [], qos: 1, retain: true, expirySeconds: nil)
                restored.messages += 1
            }
            guard statusSent, locationSent else { return nil }
            restored.shares += 1
            restored.messages += 1
            sinceWait += 2
        }
        return restored
    }

    /// The second half of a restore, once the broker has acknowledged a message published after it (which it
    /// processed after everything the restore sent): a share that ended, or whose history was deleted, while its
    /// active state was being republished (here or by another instance) may have had its end overtaken on the broker,
    /// so its end is announced again; a share whose tracker sent a newer fix meanwhile gets that one, in case the
    /// restored position overtook it. Returns how many shares were corrected.
    @discardableResult
    func confirmRestore(_ restored: ShareService.RestoredState) -> Int {
        guard !restored.announcedActive.isEmpty else { return 0 }
        let open: [StoredShare]
        do { open = try store.loadOpenShares() } catch {
            // What a restore may have overtaken stays so until the next restore; said, since it is rare and matters.
            logger.warning("cannot read the shares to confirm a broker restore (\(error))")
            return 0
        }
        let now = Dictionary(open.map { ($0.share.id, $0) }, uniquingKeysWith: { first, _ in first })
        var corrected = 0
        for (id, sentTst) in restored.announcedActive {
            guard let stored = now[id] else {
                // Deleted meanwhile: nothing of it stays on the broker.
                announcer.retain(topic: Topics.location(id), payload: [], expiry: nil)
                announcer.retain(topic: Topics.status(id), payload: [], expiry: nil)
                corrected += 1
                continue
            }
            let lookup: ShareLookup
            do { lookup = try directory.adopt(stored) } catch {
                directory.warnStore("cannot read share \(id) to confirm a broker restore (\(error))")
                continue
            }
            guard case .live(let snapshot) = lookup else { continue }
            if !snapshot.share.isActive {
                announcer.retain(topic: Topics.location(id), payload: [], expiry: nil)
                announcer.publishStatus(of: snapshot.share)
                corrected += 1
            } else if let last = snapshot.last, last.timestamp > (sentTst ?? Int64.min) {
                _ = announcer.publishOwnPosition(topic: Topics.location(id), payload: last.ownTracksJSON)
                corrected += 1
            }
        }
        return corrected
    }
}
