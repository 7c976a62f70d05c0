public import FlareCore
public import FlareStore

extension SQLiteShareStore: FixRecords {
    /// Writes a batch in one transaction. Returns, per fix, whether it was new (false: already stored, e.g. a
    /// QoS 1 redelivery or a retained message seen again).
    public func insertFixes(_ fixes: [PendingFix]) throws(StoreError) -> [Bool] {
        guard !fixes.isEmpty else { return [] }
        return try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) in
                let statement = try db.statement("""
                    INSERT OR IGNORE INTO fixes (share, tst, lat, lon, acc, alt, vel, cog, batt, tid, received_at, bs, conn)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """)
                defer { statement.reset() }
                let sealed = try db.statement("INSERT OR IGNORE INTO sealed_fixes (share, digest, received_at, data) VALUES (?, ?, ?, ?)")
                defer { sealed.reset() }
                var inserted: [Bool] = []
                inserted.reserveCapacity(fixes.count)
                for pending in fixes {
                    let fix = pending.fix
                    if let data = fix.sealed {
                        sealed.resetKeepingBindings()
                        sealed.bind(1, pending.shareRow)
                        sealed.bind(2, SealedPayload.digest(data))
                        sealed.bind(3, pending.receivedAt)
                        sealed.bind(4, data)
                        try sealed.run()
                        inserted.append(db.changes > 0)
                        continue
                    }
                    statement.resetKeepingBindings()
                    statement.bind(1, pending.shareRow)
                    statement.bind(2, fix.timestamp)
                    statement.bind(3, fix.latitude)
                    statement.bind(4, fix.longitude)
                    statement.bind(5, fix.accuracy)
                    statement.bind(6, fix.altitude)
                    statement.bind(7, fix.velocity)
                    statement.bind(8, fix.course)
                    statement.bind(9, fix.battery.map(Int64.init))
                    statement.bind(10, fix.trackerID)
                    statement.bind(11, pending.receivedAt)
                    statement.bind(12, fix.batteryStatus.map(Int64.init))
                    statement.bind(13, fix.connection)
                    try statement.run()
                    inserted.append(db.changes > 0)
                }
                return inserted
            }
        }
    }

    /// The newest `limit` fixes of a share, oldest first.
    public func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                SELECT tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn FROM fixes WHERE share = ? ORDER BY tst DESC LIMIT ?
                """)
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, Int64(limit))
            var fixes: [Fix] = []
            while try statement.step() {
                fixes.append(Self.fix(statement))
            }
            return fixes.reversed()
        }
    }

    public func fixes(row: Int64, after position: FixPosition?, limit: Int) throws(StoreError) -> [Fix] {
        try database.withLock { db throws(StoreError) in
            // The primary key's order (share, tst, lat, lon): each page a range of it.
            let statement = try db.statement("""
                SELECT tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn FROM fixes
                WHERE share = ?1 AND (?2 IS NULL OR (tst, lat, lon) > (?2, ?3, ?4)) ORDER BY tst, lat, lon LIMIT ?5
                """)
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, position?.timestamp)
            statement.bind(3, position?.latitude)
            statement.bind(4, position?.longitude)
            statement.bind(5, Int64(max(0, limit)))
            var fixes: [Fix] = []
            while try statement.step() {
                fixes.append(Self.fix(statement))
            }
            return fixes
        }
    }

    public func recentSealedFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT received_at, data FROM sealed_fixes WHERE share = ? ORDER BY received_at DESC LIMIT ?")
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, Int64(limit))
            var fixes: [Fix] = []
            while try statement.step() { fixes.append(.sealed(statement.string(1), receivedAt: statement.int64(0))) }
            return fixes.reversed()
        }
    }

    public func fixCount(row: Int64) throws(StoreError) -> Int {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT (SELECT count(*) FROM fixes WHERE share = ?1) + (SELECT count(*) FROM sealed_fixes WHERE share = ?1)")
            defer { statement.reset() }
            statement.bind(1, row)
            _ = try statement.step()
            return Int(statement.int64(0))
        }
    }

    /// A row of `tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn` (the columns both reads select).
    private static func fix(_ statement: SQLiteStatement) -> Fix {
        Fix(latitude: statement.double(1), longitude: statement.double(2), timestamp: statement.int64(0),
            accuracy: statement.optionalDouble(3), altitude: statement.optionalDouble(4),
            velocity: statement.optionalDouble(5), course: statement.optionalDouble(6),
            battery: statement.optionalInt64(7).map { Int($0) }, batteryStatus: statement.optionalInt64(9).map { Int($0) },
            connection: statement.optionalString(10), trackerID: statement.optionalString(8))
    }
}
