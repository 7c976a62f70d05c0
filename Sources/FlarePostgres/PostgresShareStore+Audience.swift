public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: AudienceRecords {
    public func noteViewer(row: Int64, viewer: SecretHash, link: LinkID?, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool {
        let operation = "note viewer"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            // xmax = 0: the row was inserted by this statement, not updated. The link it came through is kept until it
            // comes through another one (nil: the share's own link, which changes nothing).
            let note = """
                INSERT INTO viewers (share, viewer, first_seen, last_seen, link) VALUES ($1, $2, $3, $3, $4)
                ON CONFLICT (share, viewer) DO UPDATE SET last_seen = GREATEST(viewers.last_seen, $3), link = COALESCE(EXCLUDED.link, viewers.link)
                RETURNING (xmax = 0)
                """
            let parameters = [String(row), PostgresText.hex(viewer.bytes), String(at), link?.rawValue]
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
            let links = try connection.execute("""
                SELECT l.link_id, l.name, l.first_opened_at,
                       EXISTS (SELECT 1 FROM viewers v WHERE v.share = l.share AND v.link = l.link_id AND v.last_seen >= $2), l.withdrawn_at
                FROM share_links l WHERE l.share = $1 ORDER BY l.row
                """, [String(row), String(watchingSince)], operation: "read audience")
            return Audience(firstOpenedAt: rows.optionalInt64(0, 0), opened: Int(rows.int64(0, 1)), watching: Int(rows.int64(0, 2)),
                            links: (0..<links.count).compactMap { index in
                                links.text(index, 0).flatMap { LinkID($0) }.map {
                                    LinkAudience(id: $0, name: links.text(index, 1) ?? "", firstOpenedAt: links.optionalInt64(index, 2),
                                                 watchingNow: links.bool(index, 3), withdrawnAt: links.optionalInt64(index, 4))
                                }
                            })
        }
    }
}
