public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: LinkRecords {
    /// One SQLite file serves one instance: no other instance is to be told that the share's links changed.
    public func insertLinks(_ links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool {
        guard !links.isEmpty else { return true }
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Bool in try Self.insertLinkRows(links, events: events, in: db) }
        }
    }

    /// Adds the links and their events inside the caller's transaction, if every share named is active (BEGIN
    /// IMMEDIATE holds the write lock: a share cannot end between this check and the inserts); false, with nothing
    /// added, when one is not.
    static func insertLinkRows(_ links: [ShareLink], events: [PendingEvent], in db: SQLiteDatabase) throws(StoreError) -> Bool {
        let active = try db.statement("SELECT 1 FROM shares WHERE id = ?1 AND ended_at IS NULL")
        defer { active.reset() }
        for shareRow in Set(links.map(\.shareRow)).sorted() {
            active.reset()
            active.bind(1, shareRow)
            guard try active.step() else { return false }
        }
        active.reset()
        let insert = try db.statement("""
            INSERT INTO share_links (link_id, share, contact_id, name, view_token_hash, created_at, withdrawn_at, first_opened_at)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
            """)
        defer { insert.reset() }
        for link in links {
            insert.reset()
            insert.bind(1, link.id.rawValue)
            insert.bind(2, link.shareRow)
            insert.bind(3, link.contactID?.rawValue)
            insert.bind(4, link.name)
            insert.bind(5, link.viewTokenHash.bytes)
            insert.bind(6, link.createdAt)
            insert.bind(7, link.withdrawnAt)
            insert.bind(8, link.firstOpenedAt)
            try insert.run()
        }
        if let shareRow = links.first?.shareRow {
            for pending in events { try record(pending, shareRow: shareRow, in: db) }
        }
        return true
    }

    public func links(shareRow: Int64) throws(StoreError) -> [ShareLink] {
        try selectLinks("SELECT \(Self.linkColumns) FROM share_links WHERE share = ?1 ORDER BY row") { $0.bind(1, shareRow) }
    }

    public func link(viewTokenHash: SecretHash) throws(StoreError) -> ShareLink? {
        try selectLinks("SELECT \(Self.linkColumns) FROM share_links WHERE view_token_hash = ?1") { $0.bind(1, viewTokenHash.bytes) }
            .first { $0.viewTokenHash.matches(viewTokenHash) }
    }

    public func openLinks() throws(StoreError) -> [ShareLink] {
        try selectLinks("SELECT \(Self.linkColumns) FROM share_links WHERE share IN (SELECT id FROM shares WHERE history_purged = 0) ORDER BY row") { _ in }
    }

    public func rekeyLinks(_ changes: [(shareRow: Int64, link: LinkID, viewTokenHash: SecretHash)]) throws(StoreError) {
        guard !changes.isEmpty else { return }
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                let update = try db.statement("UPDATE share_links SET view_token_hash = ?1 WHERE share = ?2 AND link_id = ?3")
                defer { update.reset() }
                for change in changes {
                    update.reset()
                    update.bind(1, change.viewTokenHash.bytes)
                    update.bind(2, change.shareRow)
                    update.bind(3, change.link.rawValue)
                    try update.run()
                }
            }
        }
    }

    public func withdrawLink(shareRow: Int64, id: LinkID, at: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE share_links SET withdrawn_at = ?1 WHERE share = ?2 AND link_id = ?3 AND withdrawn_at IS NULL") { statement in
            statement.bind(1, at)
            statement.bind(2, shareRow)
            statement.bind(3, id.rawValue)
        } == 1
    }

    public func noteLinkOpened(shareRow: Int64, id: LinkID, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("UPDATE share_links SET first_opened_at = ?1 WHERE share = ?2 AND link_id = ?3 AND first_opened_at IS NULL",
                        event: event, shareRow: shareRow) { statement in
            statement.bind(1, at)
            statement.bind(2, shareRow)
            statement.bind(3, id.rawValue)
        } == 1
    }

    private func selectLinks(_ sql: String, _ bind: (SQLiteStatement) -> Void) throws(StoreError) -> [ShareLink] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement(sql)
            defer { statement.reset() }
            bind(statement)
            var found: [ShareLink] = []
            while try statement.step() {
                if let link = Self.link(statement) { found.append(link) }
            }
            return found
        }
    }

    static let linkColumns = "link_id, share, contact_id, name, view_token_hash, created_at, withdrawn_at, first_opened_at"

    /// A row of `linkColumns`; nil for one this release cannot read (an id it does not know).
    static func link(_ statement: SQLiteStatement) -> ShareLink? {
        guard let id = LinkID(statement.string(0)) else { return nil }
        return ShareLink(id: id, shareRow: statement.int64(1), contactID: statement.optionalString(2).flatMap { ContactID($0) },
                         name: statement.string(3), viewTokenHash: SecretHash(bytes: statement.blob(4)), createdAt: statement.int64(5),
                         withdrawnAt: statement.optionalInt64(6), firstOpenedAt: statement.optionalInt64(7))
    }
}
