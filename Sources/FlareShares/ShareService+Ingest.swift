import FlareCore
import FlareStore
import FlareSystem

extension ShareService {
    // MARK: What the ingest reports

    /// Stored fixes (new ones, with when and how their trackers were heard) and the replies to "locate now" among
    /// the messages of the batch, from the ingest's writer after the commit (`PositionPublication.stored`).
    package func stored(_ fixes: [ShareRegistry.HeardFix], locateReplies: [(share: ShareID, at: UnixMillis)]) {
        positions.stored(fixes, locateReplies: locateReplies)
    }

    /// Fixes that came over HTTP, just stored: published to their shares' location topics.
    package func publishHTTPFixes(_ fixes: [(share: ShareID, fix: Fix)]) { positions.publishHTTPFixes(fixes) }

    /// A position in clear reached an end-to-end encrypted share: the broker's retained copy is replaced at once.
    package func clearRefusedClearPosition(_ id: ShareID, lastSealed: Fix?) { positions.clearRefusedClearPosition(id, lastSealed: lastSealed) }

    /// A position flared published came back through the bridge (from the MQTT thread).
    package func ownPositionCameBack(topic: String, payload: [UInt8]) { positions.ownPositionCameBack(topic: topic, payload: payload) }

    /// A copy of a position flared published came back long after: the newest stored is published over it.
    package func ownPositionReplayed(topic: String) { positions.ownPositionReplayed(topic: topic) }

    /// Longer than a fix takes from the broker to the store, even in a batch.
    static var positionCheckDelayMillis: Int64 { PositionPublication.positionCheckDelayMillis }

    // MARK: Confirming trackers

    /// A confirming tracker's messages whose fixes were just committed, or that were refused: recorded, and the
    /// marks published (`ConfirmingTrackers.handled`). False when the store could not be written.
    @discardableResult
    package func handled(_ sequences: [(share: ShareID, row: Int64, sequence: TrackerSequence)]) -> Bool { confirmations.handled(sequences) }

    /// A confirming tracker's message was refused, or was a retained repeat of what is known (from the MQTT thread).
    package func refused(_ sequence: TrackerSequence, row: Int64, share: ShareID) { confirmations.refused(sequence, row: row, share: share) }

    // MARK: Trackers and "locate now"

    /// The broker delivered the tracker's last will (from the MQTT thread): recorded on the scheduler's thread.
    package func lastWillArrived(_ id: ShareID, at: UnixMillis) { trackers.lastWillArrived(id, at: at) }

    public enum LocateRefusal: Error, Equatable {
        case ended
        /// The tracker is live: its next fix is on its way anyway.
        case trackerLive
        /// Asked less than `locateIntervalMillis` ago (by anyone, on any instance).
        case tooSoon(retryAfterSeconds: Int)
        case storage(String)
    }
    /// At most one "locate now" per share in this time, across instances.
    public static var locateIntervalMillis: Int64 { Trackers.locateIntervalMillis }
    /// How long a request stays worth answering: the command's expiry on the broker, for a phone that is away.
    public static var locateCommandValidityMillis: Int64 { Trackers.locateCommandValidityMillis }
    /// The OwnTracks "report location" command.
    public static var reportLocationCommand: [UInt8] { Trackers.reportLocationCommand }

    /// Asks the share's tracker for a fresh position (`Trackers.requestLocate`). Returns when it was asked.
    public func requestLocate(_ snapshot: ShareSnapshot) throws(LocateRefusal) -> UnixMillis { try trackers.requestLocate(snapshot) }

    /// For a tracker that reports over HTTP: whether a "locate now" request is waiting for it (once per request).
    public func takeLocateRequest(_ snapshot: ShareSnapshot) -> Bool { trackers.takeLocateRequest(snapshot) }
}
