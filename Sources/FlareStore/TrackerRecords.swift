public import FlareCore
public import FlareSystem

/// Trackers and their commands: the tracker state, the battery, "locate now" requests, and the marks of confirming
/// trackers.
public protocol TrackerRecords: Sendable {
    /// Records the share's tracker state, if the share is active, the state differs from the recorded one and
    /// `condition` holds. True only for the call that recorded it: with several instances, the one that announces it.
    func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition, event: PendingEvent?) throws(StoreError) -> Bool
    /// Records that the phone's battery is low (`lowSince` set) or no longer so (nil), if the share is active and that
    /// differs from what is recorded. True only for the call that recorded it.
    func recordBatteryLow(row: Int64, lowSince: UnixMillis?, event: PendingEvent?) throws(StoreError) -> Bool
    /// A link holder asks the phone for a fresh position: recorded, if the share is active and no request was
    /// recorded in the last `minimumIntervalMillis`, which holds across instances. False when refused.
    func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64, event: PendingEvent?) throws(StoreError) -> Bool
    /// The phone answered the last request, at `at`. True only for the first answer to a request.
    func recordLocateAnswer(row: Int64, at: UnixMillis) throws(StoreError) -> Bool
    /// For phones that report over HTTP: true once per request (made in the last `validForMillis`), for the call
    /// that is to hand the command out; any instance may.
    func takeLocateCommand(row: Int64, now: UnixMillis, validForMillis: Int64) throws(StoreError) -> Bool

    /// Records that these messages of confirming trackers are handled (their fixes committed, or refused for good),
    /// and moves each share's mark to the highest `seq` through which every message of its newest stream is handled
    /// (a newer stream starts the count again; an older one's messages are ignored). Holds across instances: the
    /// messages of one stream may be handled by several. Returns the mark of every share concerned (moved or not: a
    /// tracker that sends again what it was not told of must hear the mark again) that has one.
    func recordHandledSequences(_ handled: [(shareRow: Int64, sequence: TrackerSequence)]) throws(StoreError) -> [(shareRow: Int64, mark: TrackerSequence)]
}

extension TrackerRecords {
    // Without an event: as tests and tools that record none call them.
    public func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition) throws(StoreError) -> Bool {
        try recordTracker(row: row, record, condition: condition, event: nil)
    }
    public func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64) throws(StoreError) -> Bool {
        try requestLocate(row: row, at: now, minimumIntervalMillis: minimumIntervalMillis, event: nil)
    }
}

/// When a tracker state may be recorded (see `TrackerRecords.recordTracker`).
public struct TrackerCondition: Sendable, Equatable {
    /// Only over this recorded state (or none recorded yet); nil: over any other.
    public var from: TrackerState?
    /// Only if no fix of the share was received after this time: a will or a silence that a fix stored meanwhile
    /// (by another instance) has already made untrue is not recorded.
    public var noFixReceivedAfter: UnixMillis?

    public init(from: TrackerState? = nil, noFixReceivedAfter: UnixMillis? = nil) {
        self.from = from
        self.noFixReceivedAfter = noFixReceivedAfter
    }
}

/// How far a confirming tracker's mark moves: from `through`, over every number in `handled` (ascending) that
/// continues the run without a gap.
public func contiguousEnd(from through: Int64, over handled: [Int64]) -> Int64 {
    var end = through
    for number in handled where number > end {
        guard number == end + 1 else { break }
        end = number
    }
    return end
}
