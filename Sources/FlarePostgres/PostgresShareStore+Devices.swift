public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: DeviceRecords {
    public func insertDevice(_ device: Device, limit: Int) throws(StoreError) -> Bool {
        let operation = "insert device"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Bool in
                // One key's insertions in turn, so that two instances cannot both take the last place under the limit.
                try connection.execute("SELECT pg_advisory_xact_lock(hashtext('flare-devices'), $1::int)",
                                       [String(Int32(truncatingIfNeeded: device.ownerKeyID))], operation: operation)
                let count = try connection.execute("SELECT count(*) FROM devices WHERE owner_key = $1", [String(device.ownerKeyID)], operation: operation)
                guard count.int64(0, 0) < Int64(limit) else { return false }
                try connection.execute("""
                    INSERT INTO devices (id, owner_key, name, secret_hash, contacts, duration_s, message, pin, duress_pin, created_at, countdown_s,
                                         escalate_after_s)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                    """, [device.id.rawValue, String(device.ownerKeyID), device.name, PostgresText.hex(device.secretHash.bytes),
                          DeviceSOSArithmetic.contactsText(device.contacts), device.durationSeconds.map(String.init), device.message,
                          device.pin?.text, device.duressPin?.text, String(device.createdAt), String(device.countdownSeconds),
                          String(device.escalateAfterSeconds)], operation: operation)
                return true
            }
        }
    }

    public func device(id: DeviceID) throws(StoreError) -> StoredDevice? {
        try oneDevice("id = $1", [id.rawValue])
    }

    public func device(secretHash: SecretHash) throws(StoreError) -> StoredDevice? {
        guard let found = try oneDevice("secret_hash = $1", [PostgresText.hex(secretHash.bytes)]), found.device.secretHash.matches(secretHash) else {
            return nil
        }
        return found
    }

    public func device(sosShareRow: Int64) throws(StoreError) -> StoredDevice? {
        try oneDevice("sos_share = $1", [String(sosShareRow)])
    }

    public func listDevices(owner: Int64?, after position: DeviceListPosition?, limit: Int) throws(StoreError) -> [StoredDevice] {
        try pool.with(operation: "list devices") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT \(Self.deviceColumns) FROM devices
                WHERE ($1::bigint IS NULL OR owner_key = $1::bigint) AND ($2::bigint IS NULL OR row < $2::bigint)
                ORDER BY row DESC LIMIT $3
                """, [owner.map(String.init), position.map { String($0.row) }, String(max(0, limit))], operation: "list devices")
            return (0..<rows.count).compactMap { Self.device(rows, $0) }
        }
    }

    public func updateDevice(_ device: Device) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE devices SET name = $2, secret_hash = $3, contacts = $4, duration_s = $5, message = $6, pin = $7, duress_pin = $8,
            countdown_s = $9, escalate_after_s = $10 WHERE id = $1
            """, [device.id.rawValue, device.name, PostgresText.hex(device.secretHash.bytes), DeviceSOSArithmetic.contactsText(device.contacts),
                  device.durationSeconds.map(String.init), device.message, device.pin?.text, device.duressPin?.text,
                  String(device.countdownSeconds), String(device.escalateAfterSeconds)], operation: "update device") == 1
    }

    public func deleteDevice(id: DeviceID) throws(StoreError) -> Bool {
        try changedRows("DELETE FROM devices WHERE id = $1", [id.rawValue], operation: "delete device") == 1
    }

    public func startSOS(device id: DeviceID, share: Share, perHour: Int, now: UnixMillis, events: [PendingEvent]) throws(StoreError) -> SOSStart {
        let operation = "start SOS"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> SOSStart in
                // The device's row locked: a press seen by two instances at once starts one SOS, and the second finds it.
                // Its share is read by a statement of its own, after the lock: one joined to the locked row would be
                // read as it was before the wait, and miss the share the first press just made.
                let rows = try connection.execute("SELECT sos_share, sos_tokens, sos_tokens_at FROM devices WHERE id = $1 FOR UPDATE",
                                                  [id.rawValue], operation: operation)
                guard rows.count == 1 else { throw StoreError(operation: operation, postgres: "no such device") }
                if let row = rows.optionalInt64(0, 0) {
                    let live = try connection.execute("SELECT 1 FROM shares WHERE id = $1 AND ended_at IS NULL AND expires_at > $2 AND duress_at IS NULL",
                                                      [String(row), String(now)], operation: operation)
                    if live.count == 1 { return .live(row: row) }
                }
                let held: (tokens: Double, at: UnixMillis)? = rows.optionalDouble(0, 1).map { ($0, rows.int64(0, 2)) }
                let bucket: (tokens: Double, at: UnixMillis)
                switch DeviceSOSArithmetic.takeStart(from: held, now: now, perHour: perHour) {
                case .success(let taken): bucket = taken
                case .failure(let wait): return .tooMany(retryAfterSeconds: wait.seconds)
                }
                let row = try Self.insert(share, event: events.first, on: connection)
                for event in events.dropFirst() { try Self.record(event, shareRow: row, on: connection) }
                try connection.execute("""
                    UPDATE devices SET sos_share = $2, sos_tokens = $3, sos_tokens_at = $4, repeat_mailed_at = $5, wrong_pins = 0,
                    wrong_pins_since = NULL, stop_locked_until = NULL WHERE id = $1
                    """, [id.rawValue, String(row), PostgresText.double(bucket.tokens), String(bucket.at), String(now)], operation: operation)
                // The ladder starts with the SOS, as the device is set now.
                try connection.execute("""
                    UPDATE shares SET escalate_after_s = d.escalate_after_s, escalation_from = $2::bigint,
                    escalation_due_at = CASE WHEN d.escalate_after_s > 0 THEN $2::bigint + 1000 * d.escalate_after_s END
                    FROM (SELECT escalate_after_s FROM devices WHERE id = $3) d WHERE shares.id = $1
                    """, [String(row), String(now), id.rawValue], operation: operation)
                return .started(row: row)
            }
        }
    }

    public func takeRepeatMail(device id: DeviceID, now: UnixMillis, interval: Int64) throws(StoreError) -> Bool {
        try changedRows("UPDATE devices SET repeat_mailed_at = $2 WHERE id = $1 AND (repeat_mailed_at IS NULL OR repeat_mailed_at <= $3)",
                        [id.rawValue, String(now), String(now - interval)], operation: "mark repeated SOS") == 1
    }

    public func noteWrongPIN(device id: DeviceID, now: UnixMillis, window: Int64, limit: Int, lock: Int64, lockEvent: (shareRow: Int64, event: PendingEvent)?) throws(StoreError) -> DeviceSOSState {
        let operation = "note wrong PIN"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> DeviceSOSState in
                let rows = try connection.execute("SELECT \(Self.deviceColumns) FROM devices WHERE id = $1 FOR UPDATE", [id.rawValue], operation: operation)
                guard rows.count == 1, let stored = Self.device(rows, 0) else { throw StoreError(operation: operation, postgres: "no such device") }
                let after = DeviceSOSArithmetic.wrongPIN(stored.sos, now: now, window: window, limit: limit, lock: lock)
                try connection.execute("UPDATE devices SET wrong_pins = $2, wrong_pins_since = $3, stop_locked_until = $4 WHERE id = $1",
                                       [id.rawValue, String(after.wrongPins), after.wrongPinsSince.map(String.init), after.stopLockedUntil.map(String.init)],
                                       operation: operation)
                if after.stopLockedUntil != stored.sos.stopLockedUntil, let lockEvent { try Self.record(lockEvent.event, shareRow: lockEvent.shareRow, on: connection) }
                return after
            }
        }
    }

    public func noteDeviceHeard(device id: DeviceID, at: UnixMillis) throws(StoreError) {
        _ = try changedRows("UPDATE devices SET last_heard_at = $2 WHERE id = $1 AND (last_heard_at IS NULL OR last_heard_at < $2)",
                            [id.rawValue, String(at)], operation: "note device heard")
    }

    private func oneDevice(_ condition: String, _ parameters: [String?]) throws(StoreError) -> StoredDevice? {
        try pool.with(operation: "read device") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT \(Self.deviceColumns) FROM devices WHERE \(condition)", parameters, operation: "read device")
            return rows.count == 1 ? Self.device(rows, 0) : nil
        }
    }

    static let deviceColumns = """
        row, id, owner_key, name, secret_hash, contacts, duration_s, message, pin, duress_pin, created_at,
        sos_share, repeat_mailed_at, wrong_pins, wrong_pins_since, stop_locked_until, last_heard_at,
        (SELECT duress_at FROM shares WHERE shares.id = devices.sos_share), countdown_s, escalate_after_s
        """

    /// A row of `deviceColumns`; nil for one this release cannot read.
    static func device(_ rows: PostgresRows, _ index: Int) -> StoredDevice? {
        guard let id = rows.text(index, 1).flatMap({ DeviceID($0) }) else { return nil }
        let device = Device(id: id, ownerKeyID: rows.int64(index, 2), name: rows.text(index, 3) ?? "", secretHash: SecretHash(bytes: rows.bytes(index, 4)),
                            contacts: DeviceSOSArithmetic.contacts(rows.text(index, 5) ?? ""), durationSeconds: rows.optionalInt64(index, 6),
                            message: rows.text(index, 7) ?? "", pin: rows.text(index, 8).flatMap { PINHash(text: $0) },
                            duressPin: rows.text(index, 9).flatMap { PINHash(text: $0) }, countdownSeconds: Int(rows.int64(index, 18)),
                            escalateAfterSeconds: Int(rows.int64(index, 19)), createdAt: rows.int64(index, 10))
        let sos = DeviceSOSState(shareRow: rows.optionalInt64(index, 11), repeatMailedAt: rows.optionalInt64(index, 12),
                                 wrongPins: Int(rows.int64(index, 13)), wrongPinsSince: rows.optionalInt64(index, 14),
                                 stopLockedUntil: rows.optionalInt64(index, 15), lastHeardAt: rows.optionalInt64(index, 16), duressAt: rows.optionalInt64(index, 17))
        return StoredDevice(row: rows.int64(index, 0), device: device, sos: sos)
    }
}
