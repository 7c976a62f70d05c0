import FlareCore
import FlareStore
import FlareSystem
import FlareWire
import Synchronization
import FlareCodec

/// Confirming trackers (`flare track`, and any client that numbers its messages): what each sent is recorded as
/// handled, stored or refused, and the share's mark (how far everything is handled without a gap) is retained on
/// `…/stored` at most once a second, so that the tracker knows what it may forget.
final class ConfirmingTrackers: Sendable {
    enum Job: Hashable, Sendable {
        /// Record the confirming trackers' messages that were refused (see `refused(_:row:share:)`).
        case refusedSequences
        /// Publish a confirming tracker's mark held back by the once-a-second limit.
        case heldMark(ShareID)
    }

    private let store: any TrackerRecords
    private let directory: ShareDirectory
    private let announcer: BrokerAnnouncer
    private let deadlines: Deadlines
    private let clock: any Clock
    private let logger: Logger
    private let state = Mutex(State())

    init(store: any TrackerRecords, directory: ShareDirectory, announcer: BrokerAnnouncer, deadlines: Deadlines, clock: any Clock, logger: Logger) {
        self.store = store
        self.directory = directory
        self.announcer = announcer
        self.deadlines = deadlines
        self.clock = clock
        self.logger = logger
        deadlines.on(Job.self) { [weak self] job in
            switch job {
            case .refusedSequences: self?.recordRefusedSequences()
            case .heldMark(let id): self?.publishHeldMark(id)
            }
        }
    }

    /// A share whose history is deleted has no mark to hold back.
    func forget(_ id: ShareID) {
        state.withLock { _ = $0.marks.removeValue(forKey: id) }
    }

    private struct State {
        /// Confirming trackers' messages that were refused, until recorded (see `refused(_:row:share:)`).
        var refused: [(share: ShareID, row: Int64, sequence: TrackerSequence)] = []
        /// Per share: when its tracker's mark was last published (monotonic ms), and a newer one held back meanwhile.
        var marks: [ShareID: (publishedAt: Int64, held: TrackerSequence?)] = [:]
    }

    /// A confirming tracker's messages whose fixes were just committed (from the writer, after the commit), or that
    /// were refused: recorded in the store, which moves each share's mark over what is handled without a gap, and the
    /// marks published on `…/stored`, retained, at most once a second per share. False when the store could not be
    /// written (the tracker sends those messages again, and they are recorded then).
    @discardableResult
    func handled(_ sequences: [(share: ShareID, row: Int64, sequence: TrackerSequence)]) -> Bool {
        guard !sequences.isEmpty else { return true }
        let shareOfRow = Dictionary(sequences.map { ($0.row, $0.share) }, uniquingKeysWith: { first, _ in first })
        let marks: [(shareRow: Int64, mark: TrackerSequence)]
        do { marks = try store.recordHandledSequences(sequences.map { ($0.row, $0.sequence) }) } catch {
            logger.warning("cannot record what confirming trackers sent (\(error)); they send it again")
            return false
        }
        for (row, mark) in marks {
            if let id = shareOfRow[row] { publishMark(mark, of: id) }
        }
        return true
    }

    /// A confirming tracker's message was refused, or was a retained repeat of what is known (from the MQTT thread):
    /// its mark must move past it, or the tracker would keep it, and send it again, for ever. Recorded on the
    /// scheduler's thread.
    func refused(_ sequence: TrackerSequence, row: Int64, share: ShareID) {
        let first = state.withLock { state in
            guard state.refused.count < 10_000 else { return false }  // a flood: the rest is sent again, and recorded then
            state.refused.append((share, row, sequence))
            return state.refused.count == 1
        }
        if first { deadlines.schedule(Job.refusedSequences, at: clock.now()) }
    }

    private func recordRefusedSequences() {
        let refused = state.withLock { state in
            defer { state.refused = [] }
            return state.refused
        }
        handled(refused)
    }

    static let trackerMarkIntervalMillis: Int64 = 1_000

    private func publishMark(_ mark: TrackerSequence, of id: ShareID) {
        let now = clock.monotonicMillis()
        // Marks come from two threads (the writer's commits, the scheduler's refusals), so one may be older than a mark
        // held back: the newer of the two is what goes out, now or when the interval has passed.
        let toSend: TrackerSequence? = state.withLock { state in
            let entry = state.marks[id]
            let newest = entry?.held.map { ($0.stream, $0.number) < (mark.stream, mark.number) ? mark : $0 } ?? mark
            guard let entry, now - entry.publishedAt < Self.trackerMarkIntervalMillis else {
                state.marks[id] = (now, nil)
                return newest
            }
            if entry.held == nil {
                deadlines.schedule(Job.heldMark(id), at: clock.now() + Self.trackerMarkIntervalMillis - (now - entry.publishedAt))
            }
            state.marks[id]?.held = newest
            return nil
        }
        if let toSend { sendMark(toSend, of: id) }
    }

    private func publishHeldMark(_ id: ShareID) {
        let held: TrackerSequence? = state.withLock { state in
            guard let mark = state.marks[id]?.held else { return nil }
            state.marks[id] = (clock.monotonicMillis(), nil)
            return mark
        }
        if let held { sendMark(held, of: id) }
    }

    private func sendMark(_ mark: TrackerSequence, of id: ShareID) {
        guard let share = directory.snapshot(id)?.share, share.isActive else { return }
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("seq_stream", mark.stream)
        writer.field("seq", mark.number)
        writer.endObject()
        announcer.retain(topic: Topics.stored(id), payload: writer.bytes, expiry: UInt32(clamping: max(1, (share.expiresAt - clock.now()) / 1000)))
    }
}
