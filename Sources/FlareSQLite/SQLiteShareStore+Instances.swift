import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: InstanceRecords {
    public func registerInstance(_ clientID: String, process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> Bool {
        try changedRows("""
            INSERT INTO instances (client_id, process, last_seen) VALUES (?1, ?2, ?3)
            ON CONFLICT (client_id) DO UPDATE SET process = ?2, last_seen = ?3 WHERE instances.process = ?2 OR instances.last_seen < ?4
            """) { statement in
            statement.bind(1, clientID)
            statement.bind(2, process)
            statement.bind(3, now)
            statement.bind(4, now - staleAfter)
        } == 1
    }

    public func instanceProcess(_ clientID: String) throws(StoreError) -> String? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT process FROM instances WHERE client_id = ?")
            defer { statement.reset() }
            statement.bind(1, clientID)
            return try statement.step() ? statement.string(0) : nil
        }
    }

    @discardableResult
    public func heartbeat(_ clientID: String, process: String, now: UnixMillis) throws(StoreError) -> Bool {
        try changedRows("UPDATE instances SET last_seen = ?1 WHERE client_id = ?2 AND process = ?3") { statement in
            statement.bind(1, now)
            statement.bind(2, clientID)
            statement.bind(3, process)
        } == 1
    }

    public func claimStaleInstance(process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> String? {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("""
                UPDATE instances SET process = ?1, last_seen = ?2
                WHERE client_id = (SELECT client_id FROM instances WHERE last_seen < ?3 AND process <> ?1 ORDER BY last_seen LIMIT 1)
                RETURNING client_id
                """)
            defer { statement.reset() }
            statement.bind(1, process)
            statement.bind(2, now)
            statement.bind(3, now - staleAfter)
            guard try statement.step() else { return nil }
            return statement.string(0)
        }
    }

    public func removeInstance(_ clientID: String, process: String) throws(StoreError) {
        _ = try changedRows("DELETE FROM instances WHERE client_id = ?1 AND process = ?2") { statement in
            statement.bind(1, clientID)
            statement.bind(2, process)
        }
    }
}

extension SQLiteShareStore: LeaseRecords {
    /// Lease calls wait at most this long for another connection's lock: the holder renews every second, and a renewal
    /// stuck behind a locked file would hold this store's connection (and every caller behind it) for seconds.
    static let leaseBusyMillis: Int32 = 200

    public func holdLease(_ name: String, holder: String, now: UnixMillis, durationMillis: Int64) throws(StoreError) -> Int64? {
        try database.withLock { db throws(StoreError) in try db.withBusyTimeout(milliseconds: Self.leaseBusyMillis) { () throws(StoreError) -> Int64? in
            let statement = try db.statement("""
                INSERT INTO leases (name, holder, until) VALUES (?1, ?2, ?3)
                ON CONFLICT (name) DO UPDATE SET holder = ?2, until = ?3 WHERE leases.holder = ?2 OR leases.until <= ?4
                RETURNING value
                """)
            defer { statement.reset() }
            statement.bind(1, name)
            statement.bind(2, holder)
            statement.bind(3, now + durationMillis)
            statement.bind(4, now)
            guard try statement.step() else { return nil }
            return statement.int64(0)
        } }
    }

    @discardableResult
    public func setLeaseValue(_ name: String, holder: String, value: Int64) throws(StoreError) -> Bool {
        try changedRows("UPDATE leases SET value = ?3 WHERE name = ?1 AND holder = ?2", busyMillis: Self.leaseBusyMillis) { statement in
            statement.bind(1, name)
            statement.bind(2, holder)
            statement.bind(3, value)
        } == 1
    }

    public func releaseLease(_ name: String, holder: String) throws(StoreError) {
        _ = try changedRows("UPDATE leases SET until = 0 WHERE name = ?1 AND holder = ?2", busyMillis: Self.leaseBusyMillis) { statement in
            statement.bind(1, name)
            statement.bind(2, holder)
        }
    }
}
