public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: ContactRecords {
    public func insertContact(_ contact: Contact, limit: Int) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Bool in
                let count = try db.statement("SELECT count(*) FROM contacts WHERE owner_key IS ?1")
                defer { count.reset() }
                count.bind(1, contact.ownerKeyID)
                _ = try count.step()
                guard count.int64(0) < Int64(limit) else { return false }
                let insert = try db.statement("""
                    INSERT INTO contacts (id, owner_key, name, email, phone, language, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                    """)
                defer { insert.reset() }
                insert.bind(1, contact.id.rawValue)
                insert.bind(2, contact.ownerKeyID)
                insert.bind(3, contact.name)
                insert.bind(4, contact.email)
                insert.bind(5, contact.phone)
                insert.bind(6, contact.language.rawValue)
                insert.bind(7, contact.createdAt)
                try insert.run()
                return true
            }
        }
    }

    public func contact(id: ContactID) throws(StoreError) -> Contact? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.contactColumns) FROM contacts WHERE id = ?1")
            defer { statement.reset() }
            statement.bind(1, id.rawValue)
            return try statement.step() ? Self.contact(statement) : nil
        }
    }

    public func listContacts(owner: Int64?, after position: ContactListPosition?, limit: Int) throws(StoreError) -> [StoredContact] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT \(Self.contactColumns), row FROM contacts WHERE (?1 IS NULL OR owner_key = ?1) AND (?2 IS NULL OR row < ?2)
                ORDER BY row DESC LIMIT ?3
                """)
            defer { statement.reset() }
            statement.bind(1, owner)
            statement.bind(2, position?.row)
            statement.bind(3, Int64(max(0, limit)))
            var found: [StoredContact] = []
            while try statement.step() {
                if let contact = Self.contact(statement) { found.append(StoredContact(row: statement.int64(7), contact: contact)) }
            }
            return found
        }
    }

    public func deleteContact(id: ContactID, withdrawingLinksAt at: UnixMillis) throws(StoreError) -> [WithdrawnLink]? {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> [WithdrawnLink]? in
                let delete = try db.statement("DELETE FROM contacts WHERE id = ?1")
                defer { delete.reset() }
                delete.bind(1, id.rawValue)
                try delete.run()
                guard db.changes == 1 else { return nil }
                // Its alerts end with it; the links' viewers' subscriptions end with the links (at the next fan-out).
                let alerts = try db.statement("DELETE FROM push_subscriptions WHERE contact = ?1")
                defer { alerts.reset() }
                alerts.bind(1, id.rawValue)
                try alerts.run()
                let withdraw = try db.statement("""
                    UPDATE share_links SET withdrawn_at = ?1
                    WHERE contact_id = ?2 AND withdrawn_at IS NULL AND share IN (SELECT id FROM shares WHERE ended_at IS NULL)
                    RETURNING share, link_id
                    """)
                defer { withdraw.reset() }
                withdraw.bind(1, at)
                withdraw.bind(2, id.rawValue)
                var withdrawn: [WithdrawnLink] = []
                while try withdraw.step() {
                    if let link = LinkID(withdraw.string(1)) { withdrawn.append(WithdrawnLink(shareRow: withdraw.int64(0), link: link)) }
                }
                return withdrawn
            }
        }
    }

    static let contactColumns = "id, owner_key, name, email, phone, language, created_at"

    /// A row of `contactColumns`; nil for one this release cannot read (an id or a language it does not know).
    static func contact(_ statement: SQLiteStatement) -> Contact? {
        guard let id = ContactID(statement.string(0)), let language = ContactLanguage(rawValue: statement.string(5)) else { return nil }
        return Contact(id: id, ownerKeyID: statement.isNull(1) ? nil : statement.int64(1), name: statement.string(2),
                       email: statement.optionalString(3), phone: statement.optionalString(4), language: language,
                       createdAt: statement.int64(6))
    }
}
