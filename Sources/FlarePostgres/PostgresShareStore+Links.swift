public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: LinkRecords {
    public func insertLinks(_ links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool {
        guard !links.isEmpty else { return true }
        let operation = "insert links"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                try Self.insertLinkRows(links, events: events, on: connection, operation: operation)
            }
        }
    }

    /// Adds the links and their events inside the caller's transaction, if every share named is active; false, with
    /// nothing added, when one is not. Each share is marked changed (the trigger `shares_changed` tells every instance
    /// at commit), and its row locked: it cannot end before the links are in.
    static func insertLinkRows(_ links: [ShareLink], events: [PendingEvent], on connection: PostgresConnection,
                               operation: String) throws(StoreError) -> Bool {
        for shareRow in Set(links.map(\.shareRow)).sorted() {
            guard try markChanged(shareRow: shareRow, onlyIfActive: true, on: connection, operation: operation) else { return false }
        }
        // Every link in one statement, in the order given (the order `row` keeps).
        try connection.execute("""
            INSERT INTO share_links (link_id, share, contact_id, name, view_token_hash, created_at, withdrawn_at, first_opened_at)
            SELECT l.link_id, l.share, l.contact_id, l.name, l.view_token_hash, l.created_at, l.withdrawn_at, l.first_opened_at
            FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bytea[], $6::bigint[], $7::bigint[], $8::bigint[])
                 WITH ORDINALITY AS l(link_id, share, contact_id, name, view_token_hash, created_at, withdrawn_at, first_opened_at, place)
            ORDER BY l.place
            """, [PostgresText.textArray(links.map(\.id.rawValue)), PostgresText.textArray(links.map { String($0.shareRow) }),
                  PostgresText.textArray(links.map { $0.contactID?.rawValue }), PostgresText.textArray(links.map(\.name)),
                  PostgresText.textArray(links.map { PostgresText.hex($0.viewTokenHash.bytes) }),
                  PostgresText.textArray(links.map { String($0.createdAt) }),
                  PostgresText.textArray(links.map { $0.withdrawnAt.map(String.init) }),
                  PostgresText.textArray(links.map { $0.firstOpenedAt.map(String.init) })], operation: operation)
        if let shareRow = links.first?.shareRow {
            for pending in events { try record(pending, shareRow: shareRow, on: connection) }
        }
        return true
    }

    public func links(shareRow: Int64) throws(StoreError) -> [ShareLink] {
        try selectLinks("WHERE share = $1 ORDER BY row", [String(shareRow)], operation: "read links")
    }

    public func link(viewTokenHash: SecretHash) throws(StoreError) -> ShareLink? {
        try selectLinks("WHERE view_token_hash = $1", [PostgresText.hex(viewTokenHash.bytes)], operation: "read link")
            .first { $0.viewTokenHash.matches(viewTokenHash) }
    }

    public func openLinks() throws(StoreError) -> [ShareLink] {
        try selectLinks("WHERE share IN (SELECT id FROM shares WHERE NOT history_purged) ORDER BY row", [], operation: "load links", long: true)
    }

    public func rekeyLinks(_ changes: [(shareRow: Int64, link: LinkID, viewTokenHash: SecretHash)]) throws(StoreError) {
        guard !changes.isEmpty else { return }
        let operation = "rekey links"
        try pool.with(operation: operation, long: true) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) in
                try connection.execute("""
                    UPDATE share_links l SET view_token_hash = c.view_token_hash
                    FROM unnest($1::bigint[], $2::text[], $3::bytea[]) AS c(share, link_id, view_token_hash)
                    WHERE l.share = c.share AND l.link_id = c.link_id
                    """, [PostgresText.textArray(changes.map { String($0.shareRow) }), PostgresText.textArray(changes.map(\.link.rawValue)),
                          PostgresText.textArray(changes.map { PostgresText.hex($0.viewTokenHash.bytes) })], operation: operation)
                for shareRow in Set(changes.map(\.shareRow)).sorted() {
                    _ = try Self.markChanged(shareRow: shareRow, onlyIfActive: false, on: connection, operation: operation)
                }
            }
        }
    }

    public func withdrawLink(shareRow: Int64, id: LinkID, at: UnixMillis) throws(StoreError) -> Bool {
        let operation = "withdraw link"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                let withdrawn = try connection.execute("UPDATE share_links SET withdrawn_at = $1 WHERE share = $2 AND link_id = $3 AND withdrawn_at IS NULL",
                                                       [String(at), String(shareRow), id.rawValue], operation: operation).affected == 1
                if withdrawn { _ = try Self.markChanged(shareRow: shareRow, onlyIfActive: false, on: connection, operation: operation) }
                return withdrawn
            }
        }
    }

    public func noteLinkOpened(shareRow: Int64, id: LinkID, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool {
        try changedRows("UPDATE share_links SET first_opened_at = $1 WHERE share = $2 AND link_id = $3 AND first_opened_at IS NULL",
                        [String(at), String(shareRow), id.rawValue], operation: "note link opened", event: event, shareRow: shareRow) == 1
    }

    /// An UPDATE of the share's row that changes nothing in it, so that the trigger `shares_changed` announces the
    /// share at commit (other instances read it, and its links, again), and locks the row; false when there is no
    /// such share (or, `onlyIfActive`, it has ended).
    static func markChanged(shareRow: Int64, onlyIfActive: Bool, on connection: PostgresConnection, operation: String) throws(StoreError) -> Bool {
        let sql = onlyIfActive ? "UPDATE shares SET share_id = share_id WHERE id = $1 AND ended_at IS NULL" : "UPDATE shares SET share_id = share_id WHERE id = $1"
        return try connection.execute(sql, [String(shareRow)], operation: operation).affected == 1
    }

    private func selectLinks(_ condition: String, _ parameters: [String?], operation: String, long: Bool = false) throws(StoreError) -> [ShareLink] {
        try pool.with(operation: operation, long: long) { connection throws(StoreError) in
            let rows = try connection.execute("SELECT \(Self.linkColumns) FROM share_links \(condition)", parameters, operation: operation)
            return (0..<rows.count).compactMap { Self.link(rows, $0) }
        }
    }

    static let linkColumns = "link_id, share, contact_id, name, view_token_hash, created_at, withdrawn_at, first_opened_at"

    /// A row of `linkColumns`; nil for one this release cannot read (an id it does not know).
    static func link(_ rows: PostgresRows, _ index: Int) -> ShareLink? {
        guard let id = rows.text(index, 0).flatMap({ LinkID($0) }) else { return nil }
        return ShareLink(id: id, shareRow: rows.int64(index, 1), contactID: rows.text(index, 2).flatMap { ContactID($0) },
                         name: rows.text(index, 3) ?? "", viewTokenHash: SecretHash(bytes: rows.bytes(index, 4)), createdAt: rows.int64(index, 5),
                         withdrawnAt: rows.optionalInt64(index, 6), firstOpenedAt: rows.optionalInt64(index, 7))
    }
}
