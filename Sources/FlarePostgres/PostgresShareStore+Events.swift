public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: EventRecords {
    public func dueEvents(now: UnixMillis, limit: Int) throws(StoreError) -> [OutboxDelivery] {
        try pool.with(operation: "read events") { connection throws(StoreError) in
            // The event and its share are looked up by primary key for each due delivery (`OFFSET 0` keeps the planner
            // from turning the lookups into a join): as a join, its plan hashed every row of `shares` at each read, 30
            // ms with 100,000 shares, several times a second while shares were being created.
            let rows = try connection.execute("""
                SELECT d.event, d.destination, d.attempts, e.event_id, e.type, s.share_id, e.at, e.body, s.owner_key
                FROM (SELECT event, destination, attempts, next_at,
                             row_number() OVER (PARTITION BY destination ORDER BY next_at, event) AS place
                      FROM event_deliveries WHERE next_at <= $1) d
                CROSS JOIN LATERAL (SELECT event_id, type, share, at, body FROM events WHERE id = d.event OFFSET 0) e
                CROSS JOIN LATERAL (SELECT share_id, owner_key FROM shares WHERE id = e.share OFFSET 0) s
                WHERE d.place <= $2 ORDER BY d.next_at, d.event
                """, [String(now), String(max(0, limit))], operation: "read events")
            return (0..<rows.count).compactMap { index in
                guard let destination = rows.text(index, 1).flatMap(EventDestination.init(name:)),
                      let type = rows.text(index, 4).flatMap(ShareEventType.init(rawValue:)),
                      let share = rows.text(index, 5).flatMap(ShareID.init) else { return nil }
                return OutboxDelivery(row: rows.int64(index, 0), destination: destination, attempts: Int(rows.int64(index, 2)),
                                      event: ShareEvent(id: rows.text(index, 3) ?? "", type: type, shareID: share, at: rows.int64(index, 6),
                                                        body: Array((rows.text(index, 7) ?? "").utf8)),
                                      ownerKey: rows.optionalInt64(index, 8))
            }
        }
    }

    public func eventsDelivered(_ deliveries: [(row: Int64, destination: EventDestination)]) throws(StoreError) {
        guard !deliveries.isEmpty else { return }
        let operation = "deliver events"
        let rows = PostgresText.textArray(deliveries.map { String($0.row) }), names = PostgresText.textArray(deliveries.map { $0.destination.name })
        try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) in
                try connection.execute("""
                    DELETE FROM event_deliveries d USING unnest($1::bigint[], $2::text[]) AS done(event, destination)
                    WHERE d.event = done.event AND d.destination = done.destination
                    """, [rows, names], operation: operation)
                try connection.execute("""
                    DELETE FROM events e WHERE e.id = ANY($1::bigint[]) AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event = e.id)
                    """, [rows], operation: operation)
            }
        }
    }

    public func recordEvent(_ event: PendingEvent, shareRow: Int64) throws(StoreError) {
        try pool.with(operation: "record event") { connection throws(StoreError) in try Self.record(event, shareRow: shareRow, on: connection) }
    }

    public func eventDelivered(id: String, destination: EventDestination) throws(StoreError) {
        let rows = try pool.with(operation: "read event") { connection throws(StoreError) in
            try connection.execute("SELECT id FROM events WHERE event_id = $1", [id], operation: "read event")
        }
        if rows.count == 1 { try eventsDelivered([(rows.int64(0, 0), destination)]) }
    }

    public func eventDelivered(row: Int64, destination: EventDestination, reporting report: PendingEvent) throws(StoreError) {
        let operation = "deliver event"
        try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) in
                // Only the call that ended the delivery reports it (another holder may have finished it meanwhile).
                let ended = try connection.execute("DELETE FROM event_deliveries WHERE event = $1 AND destination = $2 RETURNING event",
                                                   [String(row), destination.name], operation: operation)
                guard ended.count == 1 else { return }
                let statement = Self.withOutbox("SELECT s.id, s.owner_key FROM events e JOIN shares s ON s.id = e.share WHERE e.id = $1",
                                                [String(row)], report)
                try connection.execute(statement.sql, statement.parameters, operation: operation)
                try connection.execute("DELETE FROM events e WHERE e.id = $1 AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event = e.id)",
                                       [String(row)], operation: operation)
            }
        }
    }

    public func eventFailed(row: Int64, destination: EventDestination, attempts: Int, retryAt: UnixMillis?) throws(StoreError) {
        guard let retryAt else { return try eventsDelivered([(row, destination)]) }
        try changedRows("UPDATE event_deliveries SET attempts = $1, next_at = $2 WHERE event = $3 AND destination = $4",
                        [String(attempts), String(retryAt), String(row), destination.name], operation: "retry event")
    }

    public func outboxBacklog() throws(StoreError) -> [OutboxBacklog] {
        try pool.with(operation: "read outbox") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT d.destination, count(*), min(e.at) FROM event_deliveries d JOIN events e ON e.id = d.event GROUP BY d.destination
                """, operation: "read outbox")
            return (0..<rows.count).compactMap { index in
                rows.text(index, 0).flatMap(EventDestination.init(name:)).map {
                    OutboxBacklog(destination: $0, waiting: Int(rows.int64(index, 1)), oldestAt: rows.int64(index, 2))
                }
            }
        }
    }
}
