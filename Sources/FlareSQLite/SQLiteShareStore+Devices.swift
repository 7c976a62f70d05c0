public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: DeviceRecords {
    public func insertDevice(_ device: Device, limit: Int) throws(StoreError) -> Bool {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Bool in
                let count = try db.statement("SELECT count(*) FROM devices WHERE owner_key = ?1")
                defer { count.reset() }
                count.bind(1, device.ownerKeyID)
                _ = try count.step()
                guard count.int64(0) < Int64(limit) else { return false }
                let insert = try db.statement("""
                    INSERT INTO devices (id, owner_key, name, secret_hash, contacts, duration_s, message, pin, duress_pin, created_at, countdown_s,
                                         escalate_after_s)
                    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                    """)
                defer { insert.reset() }
                insert.bind(1, device.id.rawValue)
                insert.bind(2, device.ownerKeyID)
                insert.bind(3, device.name)
                insert.bind(4, device.secretHash.bytes)
                insert.bind(5, DeviceSOSArithmetic.contactsText(device.contacts))
                insert.bind(6, device.durationSeconds)
                insert.bind(7, device.message)
                insert.bind(8, device.pin?.text)
                insert.bind(9, device.duressPin?.text)
                insert.bind(10, device.createdAt)
                insert.bind(11, Int64(device.countdownSeconds))
                insert.bind(12, Int64(device.escalateAfterSeconds))
                try insert.run()
                return true
            }
        }
    }

    public func device(id: DeviceID) throws(StoreError) -> StoredDevice? {
        try oneDevice("id = ?1") { $0.bind(1, id.rawValue) }
    }

    public func device(secretHash: SecretHash) throws(StoreError) -> StoredDevice? {
        guard let found = try oneDevice("secret_hash = ?1", { $0.bind(1, secretHash.bytes) }), found.device.secretHash.matches(secretHash) else {
            return nil
        }
        return found
    }

    public func device(sosShareRow: Int64) throws(StoreError) -> StoredDevice? {
        try oneDevice("sos_share = ?1") { $0.bind(1, sosShareRow) }
    }

    public func listDevices(owner: Int64?, after position: DeviceListPosition?, limit: Int) throws(StoreError) -> [StoredDevice] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT \(Self.deviceColumns) FROM devices WHERE (?1 IS NULL OR owner_key = ?1) AND (?2 IS NULL OR row < ?2)
                ORDER BY row DESC LIMIT ?3
                """)
            defer { statement.reset() }
            statement.bind(1, owner)
            statement.bind(2, position?.row)
            statement.bind(3, Int64(max(0, limit)))
            var found: [StoredDevice] = []
            while try statement.step() {
                if let device = Self.device(statement) { found.append(device) }
            }
            return found
        }
    }

    public func updateDevice(_ device: Device) throws(StoreError) -> Bool {
        try changedRows("""
            UPDATE devices SET name = ?2, secret_hash = ?3, contacts = ?4, duration_s = ?5, message = ?6, pin = ?7, duress_pin = ?8,
            countdown_s = ?9, escalate_after_s = ?10 WHERE id = ?1
            """) { statement in
            statement.bind(1, device.id.rawValue)
            statement.bind(2, device.name)
            statement.bind(3, device.secretHash.bytes)
            statement.bind(4, DeviceSOSArithmetic.contactsText(device.contacts))
            statement.bind(5, device.durationSeconds)
            statement.bind(6, device.message)
            statement.bind(7, device.pin?.text)
            statement.bind(8, device.duressPin?.text)
            statement.bind(9, Int64(device.countdownSeconds))
            statement.bind(10, Int64(device.escalateAfterSeconds))
        } == 1
    }

    public func deleteDevice(id: DeviceID) throws(StoreError) -> Bool {
        try changedRows("DELETE FROM devices WHERE id = ?1") { $0.bind(1, id.rawValue) } == 1
    }

    public func startSOS(device id: DeviceID, share: Share, perHour: Int, now: UnixMillis, events: [PendingEvent]) throws(StoreError) -> SOSStart {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> SOSStart in
                let read = try db.statement("""
                    SELECT d.sos_share, d.sos_tokens, d.sos_tokens_at, s.ended_at IS NULL AND s.expires_at > ?2 AND s.duress_at IS NULL FROM devices d
                    LEFT JOIN shares s ON s.id = d.sos_share WHERE d.id = ?1
                    """)
                defer { read.reset() }
                read.bind(1, id.rawValue)
                read.bind(2, now)
                guard try read.step() else { throw StoreError(operation: "startSOS", code: 0, message: "no such device", engine: "sqlite") }
                if let row = read.optionalInt64(0), !read.isNull(3), read.int64(3) != 0 { return .live(row: row) }
                let held: (tokens: Double, at: UnixMillis)? = read.isNull(1) ? nil : (read.double(1), read.int64(2))
                read.reset()
                let bucket: (tokens: Double, at: UnixMillis)
                switch DeviceSOSArithmetic.takeStart(from: held, now: now, perHour: perHour) {
                case .success(let taken): bucket = taken
                case .failure(let wait): return .tooMany(retryAfterSeconds: wait.seconds)
                }
                let row = try Self.insert(share, into: db)
                for event in events { try Self.record(event, shareRow: row, in: db) }
                let update = try db.statement("""
                    UPDATE devices SET sos_share = ?2, sos_tokens = ?3, sos_tokens_at = ?4, repeat_mailed_at = ?5, wrong_pins = 0,
                    wrong_pins_since = NULL, stop_locked_until = NULL WHERE id = ?1
                    """)
                defer { update.reset() }
                update.bind(1, id.rawValue)
                update.bind(2, row)
                update.bind(3, bucket.tokens)
                update.bind(4, bucket.at)
                update.bind(5, now)
                try update.run()
                // The ladder starts with the SOS, as the device is set now.
                let ladder = try db.statement("""
                    UPDATE shares SET escalate_after_s = d.escalate_after_s, escalation_from = ?2,
                    escalation_due_at = CASE WHEN d.escalate_after_s > 0 THEN ?2 + 1000 * d.escalate_after_s END
                    FROM (SELECT escalate_after_s FROM devices WHERE id = ?3) d WHERE shares.id = ?1
                    """)
                defer { ladder.reset() }
                ladder.bind(1, row)
                ladder.bind(2, now)
                ladder.bind(3, id.rawValue)
                try ladder.run()
                return .started(row: row)
            }
        }
    }

    public func takeRepeatMail(device id: DeviceID, now: UnixMillis, interval: Int64) throws(StoreError) -> Bool {
        try changedRows("UPDATE devices SET repeat_mailed_at = ?2 WHERE id = ?1 AND (repeat_mailed_at IS NULL OR repeat_mailed_at <= ?3)") { statement in
            statement.bind(1, id.rawValue)
            statement.bind(2, now)
            statement.bind(3, now - interval)
        } == 1
    }

    public func noteWrongPIN(device id: DeviceID, now: UnixMillis, window: Int64, limit: Int, lock: Int64, lockEvent: (shareRow: Int64, event: PendingEvent)?) throws(StoreError) -> DeviceSOSState {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> DeviceSOSState in
                let read = try db.statement("SELECT \(Self.deviceColumns) FROM devices WHERE id = ?1")
                defer { read.reset() }
                read.bind(1, id.rawValue)
                guard try read.step(), let stored = Self.device(read) else {
                    throw StoreError(operation: "noteWrongPIN", code: 0, message: "no such device", engine: "sqlite")
                }
                read.reset()
                let after = DeviceSOSArithmetic.wrongPIN(stored.sos, now: now, window: window, limit: limit, lock: lock)
                let write = try db.statement("UPDATE devices SET wrong_pins = ?2, wrong_pins_since = ?3, stop_locked_until = ?4 WHERE id = ?1")
                defer { write.reset() }
                write.bind(1, id.rawValue)
                write.bind(2, Int64(after.wrongPins))
                write.bind(3, after.wrongPinsSince)
                write.bind(4, after.stopLockedUntil)
                try write.run()
                if after.stopLockedUntil != stored.sos.stopLockedUntil, let lockEvent { try Self.record(lockEvent.event, shareRow: lockEvent.shareRow, in: db) }
                return after
            }
        }
    }

    public func noteDeviceHeard(device id: DeviceID, at: UnixMillis) throws(StoreError) {
        _ = try changedRows("UPDATE devices SET last_heard_at = ?2 WHERE id = ?1 AND (last_heard_at IS NULL OR last_heard_at < ?2)") { statement in
            statement.bind(1, id.rawValue)
            statement.bind(2, at)
        }
    }

    private func oneDevice(_ condition: String, _ bind: (SQLiteStatement) -> Void) throws(StoreError) -> StoredDevice? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT \(Self.deviceColumns) FROM devices WHERE \(condition)")
            defer { statement.reset() }
            bind(statement)
            return try statement.step() ? Self.device(statement) : nil
        }
    }

    static let deviceColumns = """
        row, id, owner_key, name, secret_hash, contacts, duration_s, message, pin, duress_pin, created_at,
        sos_share, repeat_mailed_at, wrong_pins, wrong_pins_since, stop_locked_until, last_heard_at,
        (SELECT duress_at FROM shares WHERE shares.id = devices.sos_share), countdown_s, escalate_after_s
        """

    /// A row of `deviceColumns`; nil for one this release cannot read.
    static func device(_ statement: SQLiteStatement) -> StoredDevice? {
        guard let id = DeviceID(statement.string(1)) else { return nil }
        let device = Device(id: id, ownerKeyID: statement.int64(2), name: statement.string(3), secretHash: SecretHash(bytes: statement.blob(4)),
                            contacts: DeviceSOSArithmetic.contacts(statement.string(5)), durationSeconds: statement.optionalInt64(6),
                            message: statement.string(7), pin: statement.optionalString(8).flatMap { PINHash(text: $0) },
                            duressPin: statement.optionalString(9).flatMap { PINHash(text: $0) }, countdownSeconds: Int(statement.int64(18)),
                            escalateAfterSeconds: Int(statement.int64(19)), createdAt: statement.int64(10))
        let sos = DeviceSOSState(shareRow: statement.optionalInt64(11), repeatMailedAt: statement.optionalInt64(12),
                                 wrongPins: Int(statement.int64(13)), wrongPinsSince: statement.optionalInt64(14),
                                 stopLockedUntil: statement.optionalInt64(15), lastHeardAt: statement.optionalInt64(16), duressAt: statement.optionalInt64(17))
        return StoredDevice(row: statement.int64(0), device: device, sos: sos)
    }
}
