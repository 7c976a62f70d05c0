import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: InstanceRecords {
    public func registerInstance(_ clientID: String, process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            INSERT INTO instances (client_id, process, last_seen) VALUES ($1, $2, $3)
            ON CONFLICT (client_id) DO UPDATE SET process = $2, last_seen = $3
            WHERE instances.process = $2 OR instances.last_seen < $4
            """, [clientID, process, String(now), String(now - staleAfter)], operation: "register instance") == 1
    }

    public func instanceProcess(_ clientID: String) throws(StoreError) -> String? {
        try pool.with(operation: "read instance") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT process FROM instances WHERE client_id = $1", [clientID], operation: "read instance")
            return rows.count == 1 ? rows.text(0, 0) : nil
        }
    }

    @discardableResult
    public func heartbeat(_ clientID: String, process: String, now: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE instances SET last_seen = $1 WHERE client_id = $2 AND process = $3",
                        [String(now), clientID, process], operation: "heartbeat") == 1
    }

    public func claimStaleInstance(process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> String? {
        try pool.with(operation: "claim instance") { connection throws(StoreError) in
            // SKIP LOCKED: two instances looking at once claim different ones (or one claims and one finds none).
            let rows = try connection.execute("""
                UPDATE instances SET process = $1, last_seen = $2
                WHERE client_id = (SELECT client_id FROM instances WHERE last_seen < $3 AND process <> $1
                                   ORDER BY last_seen LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING client_id
                """, [process, String(now), String(now - staleAfter)], operation: "claim instance")
            return rows.count == 1 ? rows.text(0, 0) : nil
        }
    }

    public func removeInstance(_ clientID: String, process: String) throws(StoreError) {
        try changedRows("DELETE FROM instances WHERE client_id = $1 AND process = $2", [clientID, process], operation: "remove instance")
    }
}

extension PostgresShareStore: LeaseRecords {
    public func holdLease(_ name: String, holder: String, now: UnixMillis, durationMillis: Int64) throws(StoreError) -> Int64? {
        try pool.with(operation: "hold lease") { connection throws(StoreError) in
            let rows = try connection.execute("""
                INSERT INTO leases (name, holder, until) VALUES ($1, $2, \(Self.databaseNowMillis) + $3)
                ON CONFLICT (name) DO UPDATE SET holder = $2, until = \(Self.databaseNowMillis) + $3
                    WHERE leases.holder = $2 OR leases.until <= \(Self.databaseNowMillis)
                RETURNING value
                """, [name, holder, String(durationMillis)], operation: "hold lease")
            return rows.count == 1 ? rows.int64(0, 0) : nil
        }
    }

    @discardableResult
    public func setLeaseValue(_ name: String, holder: String, value: Int64) throws(StoreError) -> Bool {
        try changedRows("UPDATE leases SET value = $3 WHERE name = $1 AND holder = $2", [name, holder, String(value)],
                        operation: "set lease value") == 1
    }

    public func releaseLease(_ name: String, holder: String) throws(StoreError) {
        try changedRows("UPDATE leases SET until = 0 WHERE name = $1 AND holder = $2", [name, holder], operation: "release lease")
    }
}
