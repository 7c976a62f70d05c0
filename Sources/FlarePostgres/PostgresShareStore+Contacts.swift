public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: ContactRecords {
    public func insertContact(_ contact: Contact, limit: Int) throws(StoreError) -> Bool {
        let operation = "insert contact"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                // One key's insertions in turn, so that two instances cannot both take the last place under the limit.
                try connection.execute("SELECT pg_advisory_xact_lock(hashtext('flare-contacts'), $1::int)",
                                       [String(contact.ownerKeyID.map { Int32(truncatingIfNeeded: $0) } ?? 0)], operation: operation)
                let count = try connection.execute("SELECT count(*) FROM contacts WHERE owner_key IS NOT DISTINCT FROM $1::bigint",
                                                   [contact.ownerKeyID.map(String.init)], operation: operation)
                guard count.int64(0, 0) < Int64(limit) else { return false }
                try connection.execute("""
                    INSERT INTO contacts (id, owner_key, name, email, phone, language, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
                    """, [contact.id.rawValue, contact.ownerKeyID.map(String.init), contact.name, contact.email, contact.phone,
                          contact.language.rawValue, String(contact.createdAt)], operation: operation)
                return true
            }
        }
    }

    public func contact(id: ContactID) throws(StoreError) -> Contact? {
        try pool.with(operation: "read contact") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT \(Self.contactColumns) FROM contacts WHERE id = $1", [id.rawValue], operation: "read contact")
            return rows.count == 1 ? Self.contact(rows, 0) : nil
        }
    }

    public func listContacts(owner: Int64?, after position: ContactListPosition?, limit: Int) throws(StoreError) -> [StoredContact] {
        try pool.with(operation: "list contacts") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT \(Self.contactColumns), row FROM contacts
                WHERE ($1::bigint IS NULL OR owner_key = $1::bigint) AND ($2::bigint IS NULL OR row < $2::bigint)
                ORDER BY row DESC LIMIT $3
                """, [owner.map(String.init), position.map { String($0.row) }, String(max(0, limit))], operation: "list contacts")
            return (0..<rows.count).compactMap { index in Self.contact(rows, index).map { StoredContact(row: rows.int64(index, 7), contact: $0) } }
        }
    }

    public func deleteContact(id: ContactID, withdrawingLinksAt at: UnixMillis) throws(StoreError) -> [WithdrawnLink]? {
        let operation = "delete contact"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> [WithdrawnLink]? in
                guard try connection.execute("DELETE FROM contacts WHERE id = $1 RETURNING id", [id.rawValue], operation: operation).count == 1 else {
                    return nil
                }
                // Its alerts end with it; the links' viewers' subscriptions end with the links (at the next fan-out).
                try connection.execute("DELETE FROM push_subscriptions WHERE contact = $1", [id.rawValue], operation: operation)
                let rows = try connection.execute("""
                    UPDATE share_links SET withdrawn_at = $1
                    WHERE contact_id = $2 AND withdrawn_at IS NULL AND share IN (SELECT id FROM shares WHERE ended_at IS NULL)
                    RETURNING share, link_id
                    """, [String(at), id.rawValue], operation: operation)
                let withdrawn = (0..<rows.count).compactMap { index in
                    rows.text(index, 1).flatMap { LinkID($0) }.map { WithdrawnLink(shareRow: rows.int64(index, 0), link: $0) }
                }
                for shareRow in Set(withdrawn.map(\.shareRow)).sorted() {
                    _ = try Self.markChanged(shareRow: shareRow, onlyIfActive: false, on: connection, operation: operation)
                }
                return withdrawn
            }
        }
    }

    static let contactColumns = "id, owner_key, name, email, phone, language, created_at"

    /// A row of `contactColumns`; nil for one this release cannot read.
    static func contact(_ rows: PostgresRows, _ index: Int) -> Contact? {
        guard let id = rows.text(index, 0).flatMap({ ContactID($0) }), let language = rows.text(index, 5).flatMap(ContactLanguage.init) else {
            return nil
        }
        return Contact(id: id, ownerKeyID: rows.text(index, 1).flatMap { Int64($0) }, name: rows.text(index, 2) ?? "",
                       email: rows.text(index, 3), phone: rows.text(index, 4), language: language, createdAt: rows.int64(index, 6))
    }
}
