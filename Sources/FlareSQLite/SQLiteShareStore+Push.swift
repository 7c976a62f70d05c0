public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: PushRecords {
    public func addPushSubscription(_ subscriber: PushSubscriber, endpoint: String, p256dh: [UInt8], auth: [UInt8], language: ContactLanguage,
                                    at: UnixMillis, limit: Int) throws(StoreError) -> PushSubscribing {
        let (share, link, contact) = Self.columns(subscriber)
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> PushSubscribing in
                let renew = try db.statement("""
                    UPDATE push_subscriptions SET p256dh = ?5, auth = ?6, language = ?7
                    WHERE share IS ?1 AND coalesce(link, '') = coalesce(?2, '') AND contact IS ?3 AND endpoint = ?4 RETURNING row
                    """)
                defer { renew.reset() }
                renew.bind(1, share)
                renew.bind(2, link)
                renew.bind(3, contact)
                renew.bind(4, endpoint)
                renew.bind(5, p256dh)
                renew.bind(6, auth)
                renew.bind(7, language.rawValue)
                if try renew.step() {
                    let row = renew.int64(0)
                    while try renew.step() {}
                    return .renewed(row: row)
                }
                renew.reset()
                let count = try db.statement("""
                    SELECT count(*) FROM push_subscriptions WHERE share IS ?1 AND coalesce(link, '') = coalesce(?2, '') AND contact IS ?3
                    """)
                defer { count.reset() }
                count.bind(1, share)
                count.bind(2, link)
                count.bind(3, contact)
                _ = try count.step()
                guard count.int64(0) < Int64(limit) else { return .full }
                count.reset()
                let insert = try db.statement("""
                    INSERT INTO push_subscriptions (share, link, contact, endpoint, p256dh, auth, language, created_at)
                    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                    """)
                defer { insert.reset() }
                insert.bind(1, share)
                insert.bind(2, link)
                insert.bind(3, contact)
                insert.bind(4, endpoint)
                insert.bind(5, p256dh)
                insert.bind(6, auth)
                insert.bind(7, language.rawValue)
                insert.bind(8, at)
                try insert.run()
                return .added(row: db.lastInsertRowID)
            }
        }
    }

    public func removePushSubscription(_ subscriber: PushSubscriber, endpoint: String) throws(StoreError) -> Bool {
        let (share, link, contact) = Self.columns(subscriber)
        return try changedRows("""
            DELETE FROM push_subscriptions WHERE share IS ?1 AND coalesce(link, '') = coalesce(?2, '') AND contact IS ?3 AND endpoint = ?4
            """) { statement in
            statement.bind(1, share)
            statement.bind(2, link)
            statement.bind(3, contact)
            statement.bind(4, endpoint)
        } > 0
    }

    public func pushSubscription(row: Int64) throws(StoreError) -> PushSubscription? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT row, share, link, contact, endpoint, p256dh, auth, language, created_at FROM push_subscriptions WHERE row = ?1
                """)
            defer { statement.reset() }
            statement.bind(1, row)
            guard try statement.step() else { return nil }
            let subscriber: PushSubscriber
            if !statement.isNull(1) {
                subscriber = .link(shareRow: statement.int64(1), link: statement.optionalString(2).flatMap { LinkID($0) })
            } else if let contact = statement.optionalString(3).flatMap({ ContactID($0) }) {
                subscriber = .contact(contact)
            } else {
                return nil
            }
            return PushSubscription(row: statement.int64(0), subscriber: subscriber, endpoint: statement.string(4), p256dh: statement.blob(5),
                                    auth: statement.blob(6), language: ContactLanguage(rawValue: statement.string(7)) ?? .en,
                                    createdAt: statement.int64(8))
        }
    }

    public func deletePushSubscription(row: Int64) throws(StoreError) {
        _ = try changedRows("DELETE FROM push_subscriptions WHERE row = ?1") { $0.bind(1, row) }
    }

    public func fanOutPush(eventRow: Int64, alerts: Bool) throws(StoreError) -> Int {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Int in
                let take = try db.statement("DELETE FROM event_deliveries WHERE event = ?1 AND destination = 'push'")
                defer { take.reset() }
                take.bind(1, eventRow)
                try take.run()
                guard db.changes == 1 else { return 0 }
                // A withdrawn link's viewers are told nothing more: their subscriptions end here.
                let withdrawn = try db.statement("""
                    DELETE FROM push_subscriptions WHERE share = (SELECT share FROM events WHERE id = ?1)
                    AND link IN (SELECT link_id FROM share_links WHERE share = push_subscriptions.share AND withdrawn_at IS NOT NULL)
                    """)
                defer { withdrawn.reset() }
                withdrawn.bind(1, eventRow)
                try withdrawn.run()
                let fan = try db.statement("""
                    INSERT OR IGNORE INTO event_deliveries (event, destination, next_at)
                    SELECT e.id, 'push:' || p.row, e.at FROM events e JOIN push_subscriptions p ON p.share = e.share WHERE e.id = ?1
                    UNION ALL
                    SELECT e.id, 'push:' || p.row, e.at FROM events e JOIN share_links l ON l.share = e.share AND l.withdrawn_at IS NULL
                    JOIN push_subscriptions p ON p.contact = l.contact_id WHERE e.id = ?1 AND ?2
                    """)
                defer { fan.reset() }
                fan.bind(1, eventRow)
                fan.bind(2, Int64(alerts ? 1 : 0))
                try fan.run()
                let made = db.changes
                // The event leaves the outbox once nothing else waits for it.
                let event = try db.statement("DELETE FROM events WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM event_deliveries WHERE event = ?1)")
                defer { event.reset() }
                event.bind(1, eventRow)
                try event.run()
                return made
            }
        }
    }

    public func pushSubscriptionCount() throws(StoreError) -> Int {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT count(*) FROM push_subscriptions")
            defer { statement.reset() }
            _ = try statement.step()
            return Int(statement.int64(0))
        }
    }

    public func serverSecret(_ name: String, storingIfAbsent candidate: [UInt8]) throws(StoreError) -> [UInt8] {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> [UInt8] in
                let insert = try db.statement("INSERT OR IGNORE INTO server_secrets (name, value) VALUES (?1, ?2)")
                defer { insert.reset() }
                insert.bind(1, name)
                insert.bind(2, candidate)
                try insert.run()
                let read = try db.statement("SELECT value FROM server_secrets WHERE name = ?1")
                defer { read.reset() }
                read.bind(1, name)
                guard try read.step() else { throw StoreError(operation: "serverSecret", code: 0, message: "the secret was not stored", engine: "sqlite") }
                return read.blob(0)
            }
        }
    }

    public func setAlertsHash(contact: ContactID, hash: SecretHash) throws(StoreError) {
        _ = try changedRows("UPDATE contacts SET alerts_hash = ?2 WHERE id = ?1 AND alerts_hash IS NOT ?2") { statement in
            statement.bind(1, contact.rawValue)
            statement.bind(2, hash.bytes)
        }
    }

    public func contact(alertsHash: SecretHash) throws(StoreError) -> Contact? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.contactColumns), alerts_hash FROM contacts WHERE alerts_hash = ?1")
            defer { statement.reset() }
            statement.bind(1, alertsHash.bytes)
            guard try statement.step(), SecretHash(bytes: statement.blob(7)).matches(alertsHash) else { return nil }
            return Self.contact(statement)
        }
    }

    /// The columns that say whose a subscription is: (share, link, contact).
    private static func columns(_ subscriber: PushSubscriber) -> (Int64?, String?, String?) {
        switch subscriber {
        case .link(let share, let link): (share, link?.rawValue, nil)
        case .contact(let contact): (nil, nil, contact.rawValue)
        }
    }
}

extension SQLiteShareStore: EscalationRecords {
    public func dueEscalations(now: UnixMillis, limit: Int) throws(StoreError) -> [EscalationDue] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT s.id, s.share_id, s.escalation_step + 1,
                       s.ended_at IS NOT NULL OR s.expires_at <= ?1 OR EXISTS (SELECT 1 FROM answers a WHERE a.share = s.id
                           AND a.kind IN ('on_my_way', 'called_emergency') AND a.at >= s.escalation_from)
                FROM shares s WHERE s.escalation_due_at IS NOT NULL AND s.escalation_due_at <= ?1 ORDER BY s.escalation_due_at LIMIT ?2
                """)
            defer { statement.reset() }
            statement.bind(1, now)
            statement.bind(2, Int64(max(0, limit)))
            var due: [EscalationDue] = []
            while try statement.step() {
                guard let id = ShareID(statement.string(1)) else { continue }
                due.append(EscalationDue(shareRow: statement.int64(0), shareID: id, step: Int(statement.int64(2)), over: statement.int64(3) != 0))
            }
            return due
        }
    }

    public func escalate(shareRow: Int64, step: Int, event: PendingEvent) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET escalation_step = ?2,
            escalation_due_at = CASE WHEN ?2 < 2 THEN escalation_from + \(EscalationRules.secondStepFactor) * 1000 * escalate_after_s END
            WHERE id = ?1 AND escalation_step = ?2 - 1 AND escalation_due_at IS NOT NULL
            """, event: event, shareRow: shareRow) { statement in
            statement.bind(1, shareRow)
            statement.bind(2, Int64(step))
        } == 1
    }

    public func endEscalation(shareRow: Int64) throws(StoreError) {
        _ = try changedRows("UPDATE shares SET escalation_due_at = NULL WHERE id = ?1") { $0.bind(1, shareRow) }
    }

    public func escalation(shareRow: Int64) throws(StoreError) -> EscalationState? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT escalation_step, escalation_due_at FROM shares WHERE id = ?1 AND escalation_from IS NOT NULL AND escalate_after_s > 0
                """)
            defer { statement.reset() }
            statement.bind(1, shareRow)
            guard try statement.step() else { return nil }
            return EscalationState(step: Int(statement.int64(0)), nextAt: statement.optionalInt64(1))
        }
    }
}
