public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: AudienceRecords {
    public func noteViewer(row: Int64, viewer: SecretHash, link: LinkID?, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            guard let firstViewEvent else { return try Self.noteViewer(row: row, viewer: viewer, link: link, at: at, in: db) }
            return try db.transaction { () throws(StoreError) -> Bool in
                let isNew = try Self.noteViewer(row: row, viewer: viewer, link: link, at: at, in: db)
                if isNew {
                    let count = try db.statement("SELECT count(*) FROM viewers WHERE share = ?1")
                    defer { count.reset() }
                    count.bind(1, row)
                    if try count.step(), count.int64(0) == 1 { try Self.record(firstViewEvent, shareRow: row, in: db) }
                }
                return isNew
            }
        }
    }

    /// The link it came through is kept until it comes through another one (nil: the share's own link, which
    /// changes nothing).
    private static func noteViewer(row: Int64, viewer: SecretHash, link: LinkID?, at: UnixMillis, in db: SQLiteDatabase) throws(StoreError) -> Bool {
        let insert = try db.statement("""
            INSERT INTO viewers (share, viewer, first_seen, last_seen, link) VALUES (?1, ?2, ?3, ?3, ?4)
            ON CONFLICT DO UPDATE SET last_seen = max(last_seen, ?3), link = coalesce(excluded.link, link)
            """)
        defer { insert.reset() }
        insert.bind(1, row)
        insert.bind(2, viewer.bytes)
        insert.bind(3, at)
        insert.bind(4, link?.rawValue)
        try insert.run()
        let first = try db.statement("SELECT first_seen FROM viewers WHERE share = ?1 AND viewer = ?2")
        defer { first.reset() }
        first.bind(1, row)
        first.bind(2, viewer.bytes)
        return try first.step() && first.int64(0) == at
    }

    public func audience(row: Int64, watchingSince: UnixMillis) throws(StoreError) -> Audience {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT min(first_seen), count(*), count(CASE WHEN last_seen >= ?2 THEN 1 END) FROM viewers WHERE share = ?1")
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, watchingSince)
            _ = try statement.step()
            var audience = Audience(firstOpenedAt: statement.optionalInt64(0), opened: Int(statement.int64(1)), watching: Int(statement.int64(2)))
            statement.reset()
            let links = try db.statement("""
                SELECT l.link_id, l.name, l.first_opened_at,
                       EXISTS (SELECT 1 FROM viewers v WHERE v.share = l.share AND v.link = l.link_id AND v.last_seen >= ?2), l.withdrawn_at
                FROM share_links l WHERE l.share = ?1 ORDER BY l.row
                """)
            defer { links.reset() }
            links.bind(1, row)
            links.bind(2, watchingSince)
            while try links.step() {
                guard let id = LinkID(links.string(0)) else { continue }
                audience.links.append(LinkAudience(id: id, name: links.string(1), firstOpenedAt: links.optionalInt64(2),
                                                   watchingNow: links.int64(3) != 0, withdrawnAt: links.optionalInt64(4)))
            }
            return audience
        }
    }
}
