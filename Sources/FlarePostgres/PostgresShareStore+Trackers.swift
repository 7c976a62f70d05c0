public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: TrackerRecords {
    public func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition, event: PendingEvent?) throws(StoreError) -> Bool {
        // As in the SQLite store: the fixes looked at are bounded by `tst` too, so the primary key's range is read.
        try changedRows("""
            UPDATE shares SET tracker_state = $1, tracker_since = $2, tracker_reason = $3, tracker_transport = COALESCE($4, tracker_transport)
            WHERE id = $5 AND ended_at IS NULL
              AND (tracker_state IS DISTINCT FROM $1 OR tracker_transport IS DISTINCT FROM COALESCE($4, tracker_transport))
              AND ($6::text IS NULL OR tracker_state IS NULL OR tracker_state = $6)
              AND ($7::bigint IS NULL OR NOT EXISTS (SELECT 1 FROM fixes WHERE share = $5 AND tst >= $7::bigint / 1000 - 3600 AND received_at > $7::bigint))
            """, [record.state.rawValue, String(record.since), record.reason, record.transport?.rawValue, String(row),
                 condition.from?.rawValue, condition.noFixReceivedAfter.map { String($0) }], operation: "record tracker", event: event, shareRow: row) == 1
    }

    public func recordBatteryLow(row: Int64, lowSince: UnixMillis?, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET battery_low_at = $1::bigint WHERE id = $2 AND ended_at IS NULL AND (battery_low_at IS NULL) <> ($1::bigint IS NULL)
            """, [lowSince.map { String($0) }, String(row)], operation: "record battery", event: event, shareRow: row) == 1
    }

    public func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_requested_at = $1
            WHERE id = $2 AND ended_at IS NULL AND (locate_requested_at IS NULL OR locate_requested_at <= $3)
            """, [String(now), String(row), String(now - minimumIntervalMillis)], operation: "request location", event: event, shareRow: row) == 1
    }

    public func recordLocateAnswer(row: Int64, at: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_answered_at = $1
            WHERE id = $2 AND locate_requested_at IS NOT NULL AND (locate_answered_at IS NULL OR locate_answered_at < locate_requested_at)
            """, [String(at), String(row)], operation: "record answer") == 1
    }

    public func takeLocateCommand(row: Int64, now: UnixMillis, validForMillis: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET locate_delivered_at = $1
            WHERE id = $2 AND ended_at IS NULL AND locate_requested_at > $3
              AND (locate_delivered_at IS NULL OR locate_delivered_at < locate_requested_at)
            """, [String(now), String(row), String(now - validForMillis)], operation: "take command") == 1
    }

    public func recordHandledSequences(_ handled: [(shareRow: Int64, sequence: TrackerSequence)]) throws(StoreError) -> [(shareRow: Int64, mark: TrackerSequence)] {
        guard !handled.isEmpty else { return [] }
        let byShare = Dictionary(grouping: handled, by: \.shareRow)
        let operation = "record handled sequences"
        return try pool.with(operation: operation, long: true) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) in
                var marks: [(shareRow: Int64, mark: TrackerSequence)] = []
                // In row order, so that two instances lock the same shares' marks in the same order.
                for (row, entries) in byShare.sorted(by: { $0.key < $1.key }) {
                    let stream = entries.map(\.sequence.stream).max() ?? 0
                    let share = String(row)
                    try connection.execute("INSERT INTO tracker_marks (share, stream, through) VALUES ($1, 0, 0) ON CONFLICT DO NOTHING",
                                           [share], operation: operation)
                    let mark = try connection.execute("SELECT stream, through FROM tracker_marks WHERE share = $1 FOR UPDATE", [share],
                                                      operation: operation)
                    var (markStream, through) = (mark.int64(0, 0), mark.int64(0, 1))
                    if stream < markStream {  // an older stream's messages: the tracker has moved on
                        if let mark = TrackerSequence(stream: markStream, number: max(1, through)), through > 0 { marks.append((row, mark)) }
                        continue
                    }
                    if stream > markStream {
                        try connection.execute("DELETE FROM tracker_handled WHERE share = $1", [share], operation: operation)
                        (markStream, through) = (stream, 0)
                    }
                    let numbers = entries.filter { $0.sequence.stream == stream && $0.sequence.number > through }.map { String($0.sequence.number) }
                    if !numbers.isEmpty {
                        try connection.execute("INSERT INTO tracker_handled (share, stream, seq) SELECT $1, $2, unnest($3::bigint[]) ON CONFLICT DO NOTHING",
                                               [share, String(stream), "{" + numbers.joined(separator: ",") + "}"], operation: operation)
                    }
                    let pending = try connection.execute("SELECT seq FROM tracker_handled WHERE share = $1 AND stream = $2 AND seq > $3 ORDER BY seq LIMIT 10000",
                                                         [share, String(stream), String(through)], operation: operation)
                    let end = contiguousEnd(from: through, over: (0..<pending.count).map { pending.int64($0, 0) })
                    try connection.execute("UPDATE tracker_marks SET stream = $2, through = $3 WHERE share = $1",
                                           [share, String(stream), String(end)], operation: operation)
                    try connection.execute("DELETE FROM tracker_handled WHERE share = $1 AND stream = $2 AND seq <= $3",
                                           [share, String(stream), String(end)], operation: operation)
                    if end > 0, let mark = TrackerSequence(stream: stream, number: end) { marks.append((row, mark)) }
                }
                return marks
            }
        }
    }
}
