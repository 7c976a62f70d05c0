public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: PushRecords {
    public func addPushSubscription(_ subscriber: PushSubscriber, endpoint: String, p256dh: [UInt8], auth: [UInt8], language: ContactLanguage,
                                    at: UnixMillis, limit: Int) throws(StoreError) -> PushSubscribing {
        let operation = "add push subscription"
        let (share, link, contact) = Self.columns(subscriber)
        let owner = [share.map(String.init), link, contact]
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> PushSubscribing in
                // One subscriber's subscriptions in turn, so that two instances cannot both take the last place.
                try connection.execute("SELECT pg_advisory_xact_lock(hashtext('flare-push'), hashtext($1))",
                                       [contact ?? "\(share ?? 0):\(link ?? "")"], operation: operation)
                let renewed = try connection.execute("""
                    UPDATE push_subscriptions SET p256dh = $5, auth = $6, language = $7
                    WHERE share IS NOT DISTINCT FROM $1::bigint AND coalesce(link, '') = coalesce($2, '') AND contact IS NOT DISTINCT FROM $3
                      AND endpoint = $4 RETURNING row
                    """, owner + [endpoint, PostgresText.hex(p256dh), PostgresText.hex(auth), language.rawValue], operation: operation)
                if renewed.count >= 1 { return .renewed(row: renewed.int64(0, 0)) }
                let count = try connection.execute("""
                    SELECT count(*) FROM push_subscriptions
                    WHERE share IS NOT DISTINCT FROM $1::bigint AND coalesce(link, '') = coalesce($2, '') AND contact IS NOT DISTINCT FROM $3
                    """, owner, operation: operation)
                guard count.int64(0, 0) < Int64(limit) else { return .full }
                let inserted = try connection.execute("""
                    INSERT INTO push_subscriptions (share, link, contact, endpoint, p256dh, auth, language, created_at)
                    VALUES ($1::bigint, $2, $3, $4, $5, $6, $7, $8) RETURNING row
                    """, owner + [endpoint, PostgresText.hex(p256dh), PostgresText.hex(auth), language.rawValue, String(at)], operation: operation)
                return .added(row: inserted.int64(0, 0))
            }
        }
    }

    public func removePushSubscription(_ subscriber: PushSubscriber, endpoint: String) throws(StoreError) -> Bool {
        let (share, link, contact) = Self.columns(subscriber)
        return try changedRows("""
            DELETE FROM push_subscriptions
            WHERE share IS NOT DISTINCT FROM $1::bigint AND coalesce(link, '') = coalesce($2, '') AND contact IS NOT DISTINCT FROM $3 AND endpoint = $4
            """, [share.map(String.init), link, contact, endpoint], operation: "remove push subscription") > 0
    }

    public func pushSubscription(row: Int64) throws(StoreError) -> PushSubscription? {
        try pool.with(operation: "read push subscription") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT row, share, link, contact, endpoint, p256dh, auth, language, created_at FROM push_subscriptions WHERE row = $1
                """, [String(row)], operation: "read push subscription")
            guard rows.count == 1 else { return nil }
            let subscriber: PushSubscriber
            if let share = rows.optionalInt64(0, 1) {
                subscriber = .link(shareRow: share, link: rows.text(0, 2).flatMap { LinkID($0) })
            } else if let contact = rows.text(0, 3).flatMap({ ContactID($0) }) {
                subscriber = .contact(contact)
            } else {
                return nil
            }
            return PushSubscription(row: rows.int64(0, 0), subscriber: subscriber, endpoint: rows.text(0, 4) ?? "", p256dh: rows.bytes(0, 5),
                                    auth: rows.bytes(0, 6), language: rows.text(0, 7).flatMap { ContactLanguage(rawValue: $0) } ?? .en,
                                    createdAt: rows.int64(0, 8))
        }
    }

    public func deletePushSubscription(row: Int64) throws(StoreError) {
        try changedRows("DELETE FROM push_subscriptions WHERE row = $1", [String(row)], operation: "delete push subscription")
    }

    public func fanOutPush(eventRow: Int64, alerts: Bool) throws(StoreError) -> Int {
        let operation = "fan out push"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Int in
                let taken = try connection.execute("DELETE FROM event_deliveries WHERE event = $1 AND destination = 'push' RETURNING event",
                                                   [String(eventRow)], operation: operation)
                guard taken.count == 1 else { return 0 }
                // A withdrawn link's viewers are told nothing more: their subscriptions end here.
                try connection.execute("""
                    DELETE FROM push_subscriptions p USING events e, share_links l
                    WHERE e.id = $1 AND p.share = e.share AND l.share = e.share AND l.link_id = p.link AND l.withdrawn_at IS NOT NULL
                    """, [String(eventRow)], operation: operation)
                let made = try connection.execute("""
                    INSERT INTO event_deliveries (event, destination, next_at)
                    SELECT e.id, 'push:' || p.row, e.at FROM events e JOIN push_subscriptions p ON p.share = e.share WHERE e.id = $1
                    UNION
                    SELECT e.id, 'push:' || p.row, e.at FROM events e JOIN share_links l ON l.share = e.share AND l.withdrawn_at IS NULL
                    JOIN push_subscriptions p ON p.contact = l.contact_id WHERE e.id = $1 AND $2::boolean
                    ON CONFLICT DO NOTHING
                    """, [String(eventRow), alerts ? "t" : "f"], operation: operation).affected
                try connection.execute("DELETE FROM events e WHERE e.id = $1 AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event = e.id)",
                                       [String(eventRow)], operation: operation)
                return made
            }
        }
    }

    public func pushSubscriptionCount() throws(StoreError) -> Int {
        try pool.with(operation: "count push subscriptions") { connection throws(StoreError) in
            Int(try connection.execute("SELECT count(*) FROM push_subscriptions", operation: "count push subscriptions").int64(0, 0))
        }
    }

    public func serverSecret(_ name: String, storingIfAbsent candidate: [UInt8]) throws(StoreError) -> [UInt8] {
        let operation = "read server secret"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.execute("INSERT INTO server_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                                   [name, PostgresText.hex(candidate)], operation: operation)
            let rows = try connection.execute("SELECT value FROM server_secrets WHERE name = $1", [name], operation: operation)
            guard rows.count == 1 else { throw StoreError(operation: operation, postgres: "the secret was not stored") }
            return rows.bytes(0, 0)
        }
    }

    public func setAlertsHash(contact: ContactID, hash: SecretHash) throws(StoreError) {
        try changedRows("UPDATE contacts SET alerts_hash = $2 WHERE id = $1 AND alerts_hash IS DISTINCT FROM $2::bytea",
                        [contact.rawValue, PostgresText.hex(hash.bytes)], operation: "set alerts hash")
    }

    public func contact(alertsHash: SecretHash) throws(StoreError) -> Contact? {
        try pool.with(operation: "read contact") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT \(Self.contactColumns), alerts_hash FROM contacts WHERE alerts_hash = $1",
                                              [PostgresText.hex(alertsHash.bytes)], operation: "read contact")
            guard rows.count == 1, SecretHash(bytes: rows.bytes(0, 7)).matches(alertsHash) else { return nil }
            return Self.contact(rows, 0)
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

extension PostgresShareStore: EscalationRecords {
    public func dueEscalations(now: UnixMillis, limit: Int) throws(StoreError) -> [EscalationDue] {
        try pool.with(operation: "read due escalations") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT s.id, s.share_id, s.escalation_step + 1,
                       s.ended_at IS NOT NULL OR s.expires_at <= $1 OR EXISTS (SELECT 1 FROM answers a WHERE a.share = s.id
                           AND a.kind IN ('on_my_way', 'called_emergency') AND a.at >= s.escalation_from)
                FROM shares s WHERE s.escalation_due_at IS NOT NULL AND s.escalation_due_at <= $1 ORDER BY s.escalation_due_at LIMIT $2
                """, [String(now), String(max(0, limit))], operation: "read due escalations")
            return (0..<rows.count).compactMap { index in
                rows.text(index, 1).flatMap { ShareID($0) }.map {
                    EscalationDue(shareRow: rows.int64(index, 0), shareID: $0, step: Int(rows.int64(index, 2)), over: rows.bool(index, 3))
                }
            }
        }
    }

    public func escalate(shareRow: Int64, step: Int, event: PendingEvent) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE shares SET escalation_step = $2::int,
            escalation_due_at = CASE WHEN $2::int < 2 THEN escalation_from + \(EscalationRules.secondStepFactor) * 1000 * escalate_after_s END
            WHERE id = $1 AND escalation_step = $2::int - 1 AND escalation_due_at IS NOT NULL
            """, [String(shareRow), String(step)], operation: "escalate", event: event, shareRow: shareRow) == 1
    }

    public func endEscalation(shareRow: Int64) throws(StoreError) {
        try changedRows("UPDATE shares SET escalation_due_at = NULL WHERE id = $1", [String(shareRow)], operation: "end escalation")
    }

    public func escalation(shareRow: Int64) throws(StoreError) -> EscalationState? {
        try pool.with(operation: "read escalation") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT escalation_step, escalation_due_at FROM shares WHERE id = $1 AND escalation_from IS NOT NULL AND escalate_after_s > 0
                """, [String(shareRow)], operation: "read escalation")
            guard rows.count == 1 else { return nil }
            return EscalationState(step: Int(rows.int64(0, 0)), nextAt: rows.optionalInt64(0, 1))
        }
    }
}
