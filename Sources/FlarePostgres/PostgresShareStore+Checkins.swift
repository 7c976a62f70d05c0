public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: CheckinRecords {
    public func insertCheckin(_ checkin: Checkin) throws(StoreError) {
        try changedRows("""
            INSERT INTO checkins (checkin_id, share, share_id, owner_key, due_at, grace_ms, message, contacts, arrive_lat, arrive_lon,
                                  arrive_radius_m, notify_on_arrival, duration_s, state, state_at, created_at, escalate_after_s)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
            """, [checkin.id.rawValue, String(checkin.shareRow), checkin.shareID.rawValue, checkin.ownerKeyID.map(String.init),
                  String(checkin.dueAt), String(checkin.graceMillis), checkin.message, checkin.contacts.map(\.rawValue).joined(separator: ","),
                  checkin.arrive.map { String($0.latitude) }, checkin.arrive.map { String($0.longitude) },
                  checkin.arrive.map { String($0.radiusMeters) }, checkin.notifyOnArrival ? "t" : "f", String(checkin.durationSeconds),
                  checkin.state.rawValue, checkin.stateAt.map(String.init), String(checkin.createdAt), String(checkin.escalateAfterSeconds)],
                  operation: "insert check-in")
    }

    public func checkin(id: CheckinID) throws(StoreError) -> Checkin? {
        try selectCheckins("WHERE checkin_id = $1", [id.rawValue], operation: "read check-in").first
    }

    public func checkin(shareRow: Int64) throws(StoreError) -> Checkin? {
        try selectCheckins("WHERE share = $1", [String(shareRow)], operation: "read check-in").first
    }

    public func dueCheckins(now: UnixMillis, limit: Int) throws(StoreError) -> [Checkin] {
        // The database's clock, not `now` (see the protocol).
        try selectCheckins("WHERE state = 'armed' AND due_at + grace_ms <= \(Self.databaseNowMillis) ORDER BY due_at + grace_ms LIMIT $1",
                           [String(max(0, limit))], operation: "read due check-ins")
    }

    public func armedArrivals(afterShareRow: Int64, limit: Int) throws(StoreError) -> [Checkin] {
        try selectCheckins("WHERE state = 'armed' AND arrive_radius_m IS NOT NULL AND share > $1 ORDER BY share LIMIT $2",
                           [String(afterShareRow), String(max(0, limit))],
                           operation: "read armed check-ins")
    }

    public func settleCheckin(_ id: CheckinID, as state: CheckinState, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool {
        let operation = "settle check-in"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                guard let shareRow = try Self.takeArmed(id, to: state, at: at, on: connection, operation: operation) else { return false }
                if let event { try Self.record(event, shareRow: shareRow, on: connection) }
                return true
            }
        }
    }

    public func missCheckin(_ id: CheckinID, at: UnixMillis, links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool {
        let operation = "fire check-in"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                guard let shareRow = try Self.takeArmed(id, to: .missed, at: at, on: connection, operation: operation) else { return false }
                // Every instance reads the share again (the change feed): their pages say it was missed.
                // The ladder starts now, as the check-in was set.
                try connection.execute("""
                    UPDATE shares SET checkin_missed_due = c.due_at, escalate_after_s = c.escalate_after_s, escalation_from = $3::bigint,
                    escalation_due_at = CASE WHEN c.escalate_after_s > 0 THEN $3::bigint + 1000 * c.escalate_after_s END
                    FROM (SELECT due_at, escalate_after_s FROM checkins WHERE checkin_id = $1) c WHERE shares.id = $2
                    """, [id.rawValue, String(shareRow), String(at)], operation: operation)
                // A share that ended meanwhile takes no links: the check-in is missed all the same, and told.
                var linked = false
                if !links.isEmpty { linked = try Self.insertLinkRows(links, events: events, on: connection, operation: operation) }
                if !linked {
                    for pending in events { try Self.record(pending, shareRow: shareRow, on: connection) }
                }
                return true
            }
        }
    }

    public func moveCheckin(_ id: CheckinID, dueAt: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE checkins SET due_at = $1 WHERE checkin_id = $2 AND state = 'armed'", [String(dueAt), id.rawValue],
                        operation: "move check-in") == 1
    }

    /// Moves an armed check-in to `state` inside the caller's transaction (its row locked until the commit, so one
    /// instance of all moves it); its share's row, or nil if it was not armed.
    private static func takeArmed(_ id: CheckinID, to state: CheckinState, at: UnixMillis, on connection: PostgresConnection,
                                  operation: String) throws(StoreError) -> Int64? {
        let rows = try connection.execute("UPDATE checkins SET state = $1, state_at = $2 WHERE checkin_id = $3 AND state = 'armed' RETURNING share",
                                          [state.rawValue, String(at), id.rawValue], operation: operation)
        return rows.count == 1 ? rows.int64(0, 0) : nil
    }

    private static let checkinColumns = """
        checkin_id, share, share_id, owner_key, due_at, grace_ms, message, contacts, arrive_lat, arrive_lon, arrive_radius_m,
        notify_on_arrival, duration_s, state, state_at, created_at, escalate_after_s
        """

    private func selectCheckins(_ condition: String, _ parameters: [String?], operation: String) throws(StoreError) -> [Checkin] {
        try pool.with(operation: operation) { connection throws(StoreError) in
            let rows = try connection.execute("SELECT \(Self.checkinColumns) FROM checkins \(condition)", parameters, operation: operation)
            return (0..<rows.count).compactMap { index in
                guard let id = rows.text(index, 0).flatMap({ CheckinID($0) }), let share = rows.text(index, 2).flatMap({ ShareID($0) }),
                      let state = rows.text(index, 13).flatMap({ CheckinState(rawValue: $0) }) else { return nil }
                let arrive = rows.optionalDouble(index, 10).map {
                    ArrivalZone(latitude: rows.double(index, 8), longitude: rows.double(index, 9), radiusMeters: $0)
                }
                return Checkin(id: id, shareRow: rows.int64(index, 1), shareID: share, ownerKeyID: rows.optionalInt64(index, 3),
                               dueAt: rows.int64(index, 4), graceMillis: rows.int64(index, 5), message: rows.text(index, 6) ?? "",
                               contacts: (rows.text(index, 7) ?? "").split(separator: ",").compactMap { ContactID($0) }, arrive: arrive,
                               notifyOnArrival: rows.bool(index, 11), durationSeconds: rows.int64(index, 12),
                               escalateAfterSeconds: Int(rows.int64(index, 16)), state: state,
                               stateAt: rows.optionalInt64(index, 14), createdAt: rows.int64(index, 15))
            }
        }
    }
}
