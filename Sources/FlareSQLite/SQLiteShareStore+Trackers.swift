public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: TrackerRecords {
    public func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition, event: PendingEvent?) throws(StoreError) -> Bool {
        // The fixes looked at for `noFixReceivedAfter` are bounded by `tst` as well, so that the primary key's range
        // is read, not every fix of a long share: a fix stamped an hour before it arrived does not count.
        try changedRows("""
            UPDATE shares SET tracker_state = ?1, tracker_since = ?2, tracker_reason = ?3, tracker_transport = COALESCE(?4, tracker_transport)
            WHERE id = ?5 AND ended_at IS NULL
              AND (tracker_state IS NOT ?1 OR tracker_transport IS NOT COALESCE(?4, tracker_transport))
              AND (?6 IS NULL OR tracker_state IS NULL OR tracker_state = ?6)
              AND (?7 IS NULL OR NOT EXISTS (SELECT 1 FROM fixes WHERE share = ?5 AND tst >= ?7 / 1000 - 3600 AND received_at > ?7))
            """, event: event, shareRow: row) { statement in
            statement.bind(1, record.state.rawValue)
            statement.bind(2, record.since)
            statement.bind(3, record.reason)
            statement.bind(4, record.transport?.rawValue)
            statement.bind(5, row)
            statement.bind(6, condition.from?.rawValue)
            statement.bind(7, condition.noFixReceivedAfter)
        } == 1
    }

    public func recordBatteryLow(row: Int64, lowSince: UnixMillis?, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET battery_low_at = ?1 WHERE id = ?2 AND ended_at IS NULL AND (battery_low_at IS NULL) <> (?1 IS NULL)
            """, event: event, shareRow: row) { statement in
            statement.bind(1, lowSince)
            statement.bind(2, row)
        } == 1
    }

    public func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_requested_at = ?1
            WHERE id = ?2 AND ended_at IS NULL AND (locate_requested_at IS NULL OR locate_requested_at <= ?3)
            """, event: event, shareRow: row) { statement in
            statement.bind(1, now)
            statement.bind(2, row)
            statement.bind(3, now - minimumIntervalMillis)
        } == 1
    }

    public func recordLocateAnswer(row: Int64, at: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_answered_at = ?1
            WHERE id = ?2 AND locate_requested_at IS NOT NULL AND (locate_answered_at IS NULL OR locate_answered_at < locate_requested_at)
            """) { statement in
            statement.bind(1, at)
            statement.bind(2, row)
        } == 1
    }

    public func takeLocateCommand(row: Int64, now: UnixMillis, validForMillis: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_delivered_at = ?1
            WHERE id = ?2 AND ended_at IS NULL AND locate_requested_at > ?3
              AND (locate_delivered_at IS NULL OR locate_delivered_at < locate_requested_at)
            """) { statement in
            statement.bind(1, now)
            statement.bind(2, row)
            statement.bind(3, now - validForMillis)
        } == 1
    }

    public func recordHandledSequences(_ handled: [(shareRow: Int64, sequence: TrackerSequence)]) throws(StoreError) -> [(shareRow: Int64, mark: TrackerSequence)] {
        guard !handled.isEmpty else { return [] }
        let byShare = Dictionary(grouping: handled, by: \.shareRow)
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                var marks: [(shareRow: Int64, mark: TrackerSequence)] = []
                for (row, entries) in byShare {
                    let stream = entries.map(\.sequence.stream).max() ?? 0
                    let read = try db.statement("SELECT stream, through FROM tracker_marks WHERE share = ?")
                    defer { read.reset() }
                    read.bind(1, row)
                    var (markStream, through): (Int64, Int64) = try read.step() ? (read.int64(0), read.int64(1)) : (0, 0)
                    read.reset()
                    if stream < markStream {  // an older stream's messages: the tracker has moved on
                        if let mark = TrackerSequence(stream: markStream, number: max(1, through)), through > 0 { marks.append((row, mark)) }
                        continue
                    }
                    if stream > markStream {
                        let forget = try db.statement("DELETE FROM tracker_handled WHERE share = ?")
                        defer { forget.reset() }
                        forget.bind(1, row)
                        try forget.run()
                        (markStream, through) = (stream, 0)
                    }
                    let insert = try db.statement("INSERT OR IGNORE INTO tracker_handled (share, stream, seq) VALUES (?1, ?2, ?3)")
                    defer { insert.reset() }
                    for entry in entries where entry.sequence.stream == stream && entry.sequence.number > through {
                        insert.bind(1, row)
                        insert.bind(2, stream)
                        insert.bind(3, entry.sequence.number)
                        try insert.run()
                        insert.reset()
                    }
                    let pending = try db.statement("SELECT seq FROM tracker_handled WHERE share = ?1 AND stream = ?2 AND seq > ?3 ORDER BY seq LIMIT 10000")
                    defer { pending.reset() }
                    pending.bind(1, row)
                    pending.bind(2, stream)
                    pending.bind(3, through)
                    var numbers: [Int64] = []
                    while try pending.step() { numbers.append(pending.int64(0)) }
                    pending.reset()
                    let end = contiguousEnd(from: through, over: numbers)
                    let write = try db.statement("INSERT INTO tracker_marks (share, stream, through) VALUES (?1, ?2, ?3) ON CONFLICT (share) DO UPDATE SET stream = ?2, through = ?3")
                    defer { write.reset() }
                    write.bind(1, row)
                    write.bind(2, stream)
                    write.bind(3, end)
                    try write.run()
                    let prune = try db.statement("DELETE FROM tracker_handled WHERE share = ?1 AND stream = ?2 AND seq <= ?3")
                    defer { prune.reset() }
                    prune.bind(1, row)
                    prune.bind(2, stream)
                    prune.bind(3, end)
                    try prune.run()
                    if end > 0, let mark = TrackerSequence(stream: stream, number: end) { marks.append((row, mark)) }
                }
                return marks
            }
        }
    }
}
