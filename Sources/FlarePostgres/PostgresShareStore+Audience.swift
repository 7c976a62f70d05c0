public import FlareCore
public import FlareStore

extension PostgresShareStore: AudienceRecords {
    public func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool {
        let operation = "note viewer"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            // xmax = 0: the row was inserted by this statement, not updated.
            let note = """
                INSERT INTO viewers (share, viewer, first_seen, last_seen) VALUES ($1, $2, $3, $3)
                ON CONFLICT (share, viewer) DO UPDATE SET last_seen = GREATEST(viewers.last_seen, $3) RETURNING (xmax = 0)
                """
            let parameters = [String(row), PostgresText.hex(viewer.bytes), String(at)]
            guard let firstViewEvent else {
                let rows = try connection.execute(note, parameters, operation: operation)
                return rows.count == 1 && rows.bool(0, 0)
            }
            return try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                // The share's row locked first: two first viewers on two instances are counted one after the other.
                try connection.execute("SELECT id FROM shares WHERE id = $1 FOR UPDATE", [String(row)], operation: operation)
                let rows = try connection.execute(note, parameters, operation: operation)
                let isNew = rows.count == 1 && rows.bool(0, 0)
                if isNew, try connection.execute("SELECT count(*) FROM viewers WHERE share = $1", [String(row)], operation: operation).int64(0, 0) == 1 {
                    try Self.record(firstViewEvent, shareRow: row, on: connection)
                }
                return isNew
            }
        }
    }

    public func audience(row: Int64, watchingSince: UnixMillis) throws(StoreError) -> Audience {
        try pool.with(operation: "read audience") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT min(first_seen), count(*), count(*) FILTER (WHERE last_seen >= $2) FROM viewers WHERE share = $1",
                                              [String(row), String(watchingSince)], operation: "read audience")
            return Audience(firstOpenedAt: rows.optionalInt64(0, 0), opened: Int(rows.int64(0, 1)), watching: Int(rows.int64(0, 2)))
        }
    }
}
