public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: CheckinRecords {
    public func insertCheckin(_ checkin: Checkin) throws(StoreError) {
        _ = try changedRows("""
            INSERT INTO checkins (checkin_id, share, share_id, owner_key, due_at, grace_ms, message, contacts, arrive_lat, arrive_lon,
                                  arrive_radius_m, notify_on_arrival, duration_s, state, state_at, created_at, escalate_after_s)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
            """) { statement in
            statement.bind(1, checkin.id.rawValue)
            statement.bind(2, checkin.shareRow)
            statement.bind(3, checkin.shareID.rawValue)
            statement.bind(4, checkin.ownerKeyID)
            statement.bind(5, checkin.dueAt)
            statement.bind(6, checkin.graceMillis)
            statement.bind(7, checkin.message)
            statement.bind(8, checkin.contacts.map(\.rawValue).joined(separator: ","))
            statement.bind(9, checkin.arrive?.latitude)
            statement.bind(10, checkin.arrive?.longitude)
            statement.bind(11, checkin.arrive?.radiusMeters)
            statement.bind(12, Int64(checkin.notifyOnArrival ? 1 : 0))
            statement.bind(13, checkin.durationSeconds)
            statement.bind(14, checkin.state.rawValue)
            statement.bind(15, checkin.stateAt)
            statement.bind(16, checkin.createdAt)
            statement.bind(17, Int64(checkin.escalateAfterSeconds))
        }
    }

    public func checkin(id: CheckinID) throws(StoreError) -> Checkin? {
        try selectCheckins("WHERE checkin_id = ?1") { $0.bind(1, id.rawValue) }.first
    }

    public func checkin(shareRow: Int64) throws(StoreError) -> Checkin? {
        try selectCheckins("WHERE share = ?1") { $0.bind(1, shareRow) }.first
    }

    public func dueCheckins(now: UnixMillis, limit: Int) throws(StoreError) -> [Checkin] {
        try selectCheckins("WHERE state = 'armed' AND due_at + grace_ms <= ?1 ORDER BY due_at + grace_ms LIMIT ?2") {
            $0.bind(1, now)
            $0.bind(2, Int64(max(0, limit)))
        }
    }

    public func armedArrivals(afterShareRow: Int64, limit: Int) throws(StoreError) -> [Checkin] {
        try selectCheckins("WHERE state = 'armed' AND arrive_radius_m IS NOT NULL AND share > ?1 ORDER BY share LIMIT ?2") {
            $0.bind(1, afterShareRow)
            $0.bind(2, Int64(max(0, limit)))
        }
    }

    public func settleCheckin(_ id: CheckinID, as state: CheckinState, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Bool in
                guard let shareRow = try Self.takeArmed(id, to: state, at: at, in: db) else { return false }
                if let event { try Self.record(event, shareRow: shareRow, in: db) }
                return true
            }
        }
    }

    public func missCheckin(_ id: CheckinID, at: UnixMillis, links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Bool in
                guard let shareRow = try Self.takeArmed(id, to: .missed, at: at, in: db) else { return false }
                // The ladder starts now, as the check-in was set.
                let mark = try db.statement("""
                    UPDATE shares SET checkin_missed_due = c.due_at, escalate_after_s = c.escalate_after_s, escalation_from = ?3,
                    escalation_due_at = CASE WHEN c.escalate_after_s > 0 THEN ?3 + 1000 * c.escalate_after_s END
                    FROM (SELECT due_at, escalate_after_s FROM checkins WHERE checkin_id = ?1) c WHERE shares.id = ?2
                    """)
                defer { mark.reset() }
                mark.bind(1, id.rawValue)
                mark.bind(2, shareRow)
                mark.bind(3, at)
                try mark.run()
                if links.isEmpty {
                    for pending in events { try Self.record(pending, shareRow: shareRow, in: db) }
                } else {
                    // A share that ended meanwhile takes no links: the check-in is missed all the same, and told.
                    guard try Self.insertLinkRows(links, events: events, in: db) else {
                        for pending in events { try Self.record(pending, shareRow: shareRow, in: db) }
                        return true
                    }
                }
                return true
            }
        }
    }

    public func moveCheckin(_ id: CheckinID, dueAt: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE checkins SET due_at = ?1 WHERE checkin_id = ?2 AND state = 'armed'") { statement in
            statement.bind(1, dueAt)
            statement.bind(2, id.rawValue)
        } == 1
    }

    /// Moves an armed check-in to `state` inside the caller's transaction; its share's row, or nil if it was not armed.
    private static func takeArmed(_ id: CheckinID, to state: CheckinState, at: UnixMillis, in db: SQLiteDatabase) throws(StoreError) -> Int64? {
        let update = try db.statement("UPDATE checkins SET state = ?1, state_at = ?2 WHERE checkin_id = ?3 AND state = 'armed' RETURNING share")
        defer { update.reset() }
        update.bind(1, state.rawValue)
        update.bind(2, at)
        update.bind(3, id.rawValue)
        guard try update.step() else { return nil }
        let shareRow = update.int64(0)
        while try update.step() {}
        return shareRow
    }

    private static let checkinColumns = """
        checkin_id, share, share_id, owner_key, due_at, grace_ms, message, contacts, arrive_lat, arrive_lon, arrive_radius_m,
        notify_on_arrival, duration_s, state, state_at, created_at, escalate_after_s
        """

    private func selectCheckins(_ clause: String, _ bind: (SQLiteStatement) -> Void) throws(StoreError) -> [Checkin] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.checkinColumns) FROM checkins \(clause)")
            defer { statement.reset() }
            bind(statement)
            var found: [Checkin] = []
            while try statement.step() {
                guard let id = CheckinID(statement.string(0)), let share = ShareID(statement.string(2)),
                      let state = CheckinState(rawValue: statement.string(13)) else { continue }
                let arrive: ArrivalZone? = statement.isNull(10) ? nil
                    : ArrivalZone(latitude: statement.double(8), longitude: statement.double(9), radiusMeters: statement.double(10))
                found.append(Checkin(id: id, shareRow: statement.int64(1), shareID: share, ownerKeyID: statement.optionalInt64(3),
                                     dueAt: statement.int64(4), graceMillis: statement.int64(5), message: statement.string(6),
                                     contacts: statement.string(7).split(separator: ",").compactMap { ContactID($0) }, arrive: arrive,
                                     notifyOnArrival: statement.int64(11) != 0, durationSeconds: statement.int64(12),
                                     escalateAfterSeconds: Int(statement.int64(16)), state: state,
                                     stateAt: statement.optionalInt64(14), createdAt: statement.int64(15)))
            }
            return found
        }
    }
}
