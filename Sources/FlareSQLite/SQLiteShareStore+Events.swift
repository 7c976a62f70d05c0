public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: EventRecords {
    public func dueEvents(now: UnixMillis, limit: Int) throws(StoreError) -> [OutboxDelivery] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT d.event, d.destination, d.attempts, e.event_id, e.type, s.share_id, e.at, e.body, s.owner_key
                FROM (SELECT event, destination, attempts, next_at,
                             row_number() OVER (PARTITION BY destination ORDER BY next_at, event) AS place
                      FROM event_deliveries WHERE next_at <= ?1) d
                JOIN events e ON e.id = d.event JOIN shares s ON s.id = e.share
                WHERE d.place <= ?2 ORDER BY d.next_at, d.event
                """)
            defer { statement.reset() }
            statement.bind(1, now)
            statement.bind(2, Int64(max(0, limit)))
            var due: [OutboxDelivery] = []
            while try statement.step() {
                guard let destination = EventDestination(name: statement.string(1)),
                      let type = ShareEventType(rawValue: statement.string(4)), let share = ShareID(statement.string(5)) else { continue }
                due.append(OutboxDelivery(row: statement.int64(0), destination: destination, attempts: Int(statement.int64(2)),
                                          event: ShareEvent(id: statement.string(3), type: type, shareID: share, at: statement.int64(6), body: statement.blob(7)),
                                          ownerKey: statement.optionalInt64(8)))
            }
            return due
        }
    }

    public func eventsDelivered(_ deliveries: [(row: Int64, destination: EventDestination)]) throws(StoreError) {
        guard !deliveries.isEmpty else { return }
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                let delete = try db.statement("DELETE FROM event_deliveries WHERE event = ?1 AND destination = ?2")
                defer { delete.reset() }
                let event = try db.statement("DELETE FROM events WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM event_deliveries WHERE event = ?1)")
                defer { event.reset() }
                for delivery in deliveries {
                    delete.reset()
                    delete.bind(1, delivery.row)
                    delete.bind(2, delivery.destination.name)
                    try delete.run()
                }
                for row in Set(deliveries.map(\.row)) {
                    event.reset()
                    event.bind(1, row)
                    try event.run()
                }
            }
        }
    }

    public func recordEvent(_ event: PendingEvent, shareRow: Int64) throws(StoreError) {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in try Self.record(event, shareRow: shareRow, in: db) }
        }
    }

    public func eventDelivered(id: String, destination: EventDestination) throws(StoreError) {
        let row: Int64? = try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT id FROM events WHERE event_id = ?1")
            defer { statement.reset() }
            statement.bind(1, id)
            return try statement.step() ? statement.int64(0) : nil
        }
        if let row { try eventsDelivered([(row, destination)]) }
    }

    public func eventDelivered(row: Int64, destination: EventDestination, reporting report: PendingEvent) throws(StoreError) {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                let share = try db.statement("SELECT share FROM events WHERE id = ?1")
                defer { share.reset() }
                share.bind(1, row)
                guard try share.step() else { return }  // another holder finished it
                let shareRow = share.int64(0)
                share.reset()
                let delete = try db.statement("DELETE FROM event_deliveries WHERE event = ?1 AND destination = ?2")
                defer { delete.reset() }
                delete.bind(1, row)
                delete.bind(2, destination.name)
                try delete.run()
                guard db.changes == 1 else { return }
                try Self.record(report, shareRow: shareRow, in: db)
                let event = try db.statement("DELETE FROM events WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM event_deliveries WHERE event = ?1)")
                defer { event.reset() }
                event.bind(1, row)
                try event.run()
            }
        }
    }

    public func eventFailed(row: Int64, destination: EventDestination, attempts: Int, retryAt: UnixMillis?) throws(StoreError) {
        guard let retryAt else { return try eventsDelivered([(row, destination)]) }
        _ = try changedRows("UPDATE event_deliveries SET attempts = ?1, next_at = ?2 WHERE event = ?3 AND destination = ?4") { statement in
            statement.bind(1, Int64(attempts))
            statement.bind(2, retryAt)
            statement.bind(3, row)
            statement.bind(4, destination.name)
        }
    }

    public func outboxBacklog() throws(StoreError) -> [OutboxBacklog] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT d.destination, count(*), min(e.at) FROM event_deliveries d JOIN events e ON e.id = d.event GROUP BY d.destination
                """)
            defer { statement.reset() }
            var backlog: [OutboxBacklog] = []
            while try statement.step() {
                guard let destination = EventDestination(name: statement.string(0)) else { continue }
                backlog.append(OutboxBacklog(destination: destination, waiting: Int(statement.int64(1)), oldestAt: statement.int64(2)))
            }
            return backlog
        }
    }
}
