public import FlareCore
public import FlareStore

import Synchronization

extension PostgresShareStore: FixRecords {
    public func insertFixes(_ batch: [PendingFix]) throws(StoreError) -> [Bool] {
        guard !batch.isEmpty else { return [] }
        // End-to-end encrypted shares' ciphertexts go to a table of their own, in the same transaction; a batch without
        // any (nearly every one) takes the path below unchanged.
        let sealedAt = batch.indices.filter { batch[$0].fix.isSealed }
        let fixes = sealedAt.isEmpty ? batch : batch.filter { !$0.fix.isSealed }
        let sealed = sealedAt.map { batch[$0] }
        let (plainNew, sealedNew) = try insertSplit(fixes, sealed: sealed)
        guard !sealedAt.isEmpty else { return plainNew }
        var isNew = Array(repeating: false, count: batch.count)
        var plain = plainNew.makeIterator()
        var next = sealedNew.makeIterator()
        for index in batch.indices { isNew[index] = (batch[index].fix.isSealed ? next.next() : plain.next()) ?? false }
        return isNew
    }

    private func insertSplit(_ fixes: [PendingFix], sealed: [PendingFix]) throws(StoreError) -> (plain: [Bool], sealed: [Bool]) {
        return try pool.with(operation: "insert fixes", long: true) { connection throws(StoreError) in
            if !connection.hasFixStaging {  // outside the transaction, which may roll back
                try connection.execute("CREATE TEMPORARY TABLE IF NOT EXISTS fixes_staging (LIKE fixes) ON COMMIT DELETE ROWS",
                                       operation: "insert fixes")
                connection.hasFixStaging = true
            }
            let unknown = newestStored.unknown(among: fixes.lazy.map(\.shareRow))
            if !unknown.rows.isEmpty {
                newestStored.seed(unknown.rows, newest: try newestStoredFixes(unknown.rows, on: connection), generation: unknown.generation)
            }
            let isNew: (plain: [Bool], sealed: [Bool])
            let direct = newestStored.claimNewFixes(in: fixes)
            do throws(StoreError) {
                isNew = try insert(fixes, copying: direct, sealed: sealed, on: connection)
                writerCounts.withLock { $0.copied += direct.count }
            } catch where error.isUniqueViolation {
                // A fix judged new was stored after all: by another instance, committed just before its announcement
                // reached this one. The whole batch goes the other way (PostgreSQL logs the duplicate key).
                writerCounts.withLock { $0.retried += 1 }
                isNew = try insert(fixes, copying: [], sealed: sealed, on: connection)
            }
            if direct.count < fixes.count { newestStored.stored(fixes.lazy.map { ($0.shareRow, $0.fix) }) }
            return isNew
        }
    }

    /// Ciphertexts, inside the caller's transaction: new unless their digest is stored for the share. The new ones are
    /// announced one to a notification on `flare_sealed` (`row,received_at,data`; `data` is at most
    /// `SealedPayload.maximumDataLength` characters of base64, well under NOTIFY's 8,000 bytes).
    private func insertSealed(_ sealed: [PendingFix], on connection: PostgresConnection) throws(StoreError) -> [Bool] {
        guard !sealed.isEmpty else { return [] }
        let digests = sealed.map { PostgresText.hex(SealedPayload.digest($0.fix.sealed ?? "")) }
        let inserted = try connection.execute("""
            INSERT INTO sealed_fixes (share, digest, received_at, data)
            SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bigint[], $4::text[]) ON CONFLICT DO NOTHING RETURNING share, digest
            """, [PostgresText.textArray(sealed.map { String($0.shareRow) }), PostgresText.textArray(digests),
                  PostgresText.textArray(sealed.map { String($0.receivedAt) }), PostgresText.textArray(sealed.map { $0.fix.sealed ?? "" })],
            operation: "insert sealed fixes")
        struct Key: Hashable { let share: Int64; let digest: [UInt8] }
        var new = Set<Key>()
        for index in 0..<inserted.count { new.insert(Key(share: inserted.int64(index, 0), digest: inserted.bytes(index, 1))) }
        // The same ciphertext twice in one batch is inserted once: the first is the new one.
        let isNew = sealed.map { new.remove(Key(share: $0.shareRow, digest: SealedPayload.digest($0.fix.sealed ?? ""))) != nil }
        let announced = zip(sealed, isNew).filter(\.1).map { "\($0.0.shareRow),\($0.0.receivedAt),\($0.0.fix.sealed ?? "")" }
        if !announced.isEmpty {
            try connection.execute("SELECT pg_notify('flare_sealed', $1 || ' ' || chunk) FROM unnest($2::text[]) chunk",
                                   [instance, PostgresText.textArray(announced)], operation: "announce sealed fixes")
        }
        return isNew
    }

    /// Stores `fixes` in one transaction and announces the new ones; `copying` (indexes into `fixes`) are certainly
    /// new and go into `fixes` by a plain binary COPY, the rest through a staging table and `INSERT … ON CONFLICT DO
    /// NOTHING`, which says which were new. The plain COPY costs the database half as much per row: no speculative
    /// insertion (a second index search and WAL record per row), no staging copy, rows written by the page.
    private func insert(_ fixes: [PendingFix], copying direct: [Int], sealed: [PendingFix], on connection: PostgresConnection) throws(StoreError) -> (plain: [Bool], sealed: [Bool]) {
        try connection.transaction(operation: "insert fixes") { () throws(StoreError) in
            let sealedNew = try insertSealed(sealed, on: connection)
            guard !fixes.isEmpty else { return ([], sealedNew) }
            var isNew = Array(repeating: false, count: fixes.count)
            let all = direct.count == fixes.count
            if !direct.isEmpty {
                let copy = all ? Self.binaryCopy(fixes) : Self.binaryCopy(direct.map { fixes[$0] })
                try connection.copyIn("COPY fixes (\(Self.fixColumns)) FROM STDIN (FORMAT binary)", copy.bytes, operation: "insert fixes")
                for index in direct { isNew[index] = true }
            }
            let staged = fixes.indices.filter { !isNew[$0] }  // the fixes not copied
            if !staged.isEmpty {
                for (index, new) in zip(staged, try insertStaged(staged.map { fixes[$0] }, on: connection)) { isNew[index] = new }
            }
            try announce(all ? fixes : zip(fixes, isNew).filter(\.1).map(\.0), on: connection)
            return (isNew, sealedNew)
        }
    }

    /// The columns of `fixes` in the order `binaryCopy` writes them.
    private static let fixColumns = "share, tst, lat, lon, acc, alt, vel, cog, batt, tid, received_at, bs, conn"

    private static func binaryCopy(_ fixes: [PendingFix]) -> BinaryCopy {
        var copy = BinaryCopy(capacity: fixes.count)
        for pending in fixes {
            let fix = pending.fix
            copy.beginRow(fields: 13)
            copy.int64(pending.shareRow)
            copy.int64(fix.timestamp)
            copy.double(fix.latitude)
            copy.double(fix.longitude)
            copy.double(fix.accuracy)
            copy.double(fix.altitude)
            copy.double(fix.velocity)
            copy.double(fix.course)
            copy.int32(fix.battery.map { Int32(clamping: $0) })
            copy.text(fix.trackerID)
            copy.int64(pending.receivedAt)
            copy.int32(fix.batteryStatus.map { Int32(clamping: $0) })
            copy.text(fix.connection)
        }
        copy.finish()
        return copy
    }

    /// Fixes that may already be stored, inside the caller's transaction: a binary COPY into a temporary staging table
    /// (emptied at commit), then one `INSERT … SELECT … ON CONFLICT DO NOTHING` into `fixes`; says which were new.
    private func insertStaged(_ fixes: [PendingFix], on connection: PostgresConnection) throws(StoreError) -> [Bool] {
        let insert = "INSERT INTO fixes (\(Self.fixColumns)) SELECT \(Self.fixColumns) FROM fixes_staging ON CONFLICT DO NOTHING"
        try connection.copyIn("COPY fixes_staging (\(Self.fixColumns)) FROM STDIN (FORMAT binary)", Self.binaryCopy(fixes).bytes,
                              operation: "insert fixes")
        try connection.execute("SAVEPOINT staged", operation: "insert fixes")
        // Usually none was stored: then the row count says so, and the rows need not come back. Otherwise (a
        // redelivery after a crash, retained messages after a reconnect) they are inserted again from the same staged
        // rows, saying which were new.
        if try connection.execute(insert, operation: "insert fixes").affected == fixes.count {
            return Array(repeating: true, count: fixes.count)
        }
        try connection.execute("ROLLBACK TO SAVEPOINT staged", operation: "insert fixes")
        let inserted = try connection.execute(insert + " RETURNING share, tst, lat, lon", operation: "insert fixes")
        struct Key: Hashable { let share: Int64; let tst: Int64; let lat: Double; let lon: Double }
        var new = Set<Key>()
        for index in 0..<inserted.count {
            new.insert(Key(share: inserted.int64(index, 0), tst: inserted.int64(index, 1), lat: inserted.double(index, 2), lon: inserted.double(index, 3)))
        }
        // A fix twice in one batch is inserted once: the first is the new one.
        return fixes.map { new.remove(Key(share: $0.shareRow, tst: $0.fix.timestamp, lat: $0.fix.latitude, lon: $0.fix.longitude)) != nil }
    }

    /// Each share's fixes at its newest stored time (none for a share without fixes; one more than are kept, so that
    /// `NewestStoredFixes` can tell there were more): two searches of the primary key per share.
    private func newestStoredFixes(_ rows: [Int64], on connection: PostgresConnection) throws(StoreError) -> [(row: Int64, tst: Int64, position: NewestStoredFixes.Position)] {
        let found = try connection.execute("""
            SELECT s, f.tst, f.lat, f.lon FROM unnest($1::bigint[]) s CROSS JOIN LATERAL (
                SELECT tst, lat, lon FROM fixes WHERE share = s AND tst = (SELECT max(tst) FROM fixes WHERE share = s) LIMIT $2
            ) f
            """, [PostgresText.textArray(rows.map(String.init)), String(newestStored.positionsKept + 1)],
            operation: "read newest fixes")
        return (0..<found.count).map {
            (found.int64($0, 0), found.int64($0, 1), .init(latitude: found.double($0, 2), longitude: found.double($0, 3)))
        }
    }

    /// Tells the other instances of the new fixes, in this transaction (so they hear of them exactly when they are
    /// stored): `row,tst,lat,lon,acc,alt,vel,cog,batt,bs,conn` (empty when absent; `conn` is one letter) joined by `;`, 30 to a notification, under
    /// NOTIFY's 8,000-byte limit whatever the numbers; tracker ids (unbounded text) are left out. Written here rather
    /// than by a trigger, which cost the database half as much again as the insert itself (15 ms for 8,192 fixes).
    private func announce(_ fixes: [PendingFix], on connection: PostgresConnection) throws(StoreError) {
        guard !fixes.isEmpty else { return }
        try connection.execute("SELECT pg_notify('flare_fixes', $1 || ' ' || chunk) FROM unnest($2::text[]) chunk",
                               [instance, Self.announcement(fixes)], operation: "announce fixes")
    }

    /// The chunks as one text-array literal, `{"chunk","chunk",…}`, written byte by byte: nothing in a chunk needs
    /// quoting (digits, signs, `.`, `e`, `,`, `;` and a connection letter), and building Strings here, then escaping
    /// them character by character, was a quarter of the writer's time at 40,000 fixes/s.
    static func announcement(_ fixes: [PendingFix]) -> String {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(fixes.count * 96 + 8)
        func integer(_ value: Int64) {
            if value < 0 { bytes.append(UInt8(ascii: "-")) }
            var magnitude = value.magnitude
            let start = bytes.count
            repeat {
                bytes.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
                magnitude /= 10
            } while magnitude > 0
            bytes[start...].reverse()
        }
        func number(_ value: Double?) {
            if let value, let text = PostgresText.double(value) { bytes.append(contentsOf: text.utf8) }
        }
        let comma = UInt8(ascii: ","), quote = UInt8(ascii: "\"")
        for (index, pending) in fixes.enumerated() {
            let fix = pending.fix
            if index % 30 == 0 {
                if index > 0 { bytes += [quote, comma] }
                bytes.append(quote)
            } else {
                bytes.append(UInt8(ascii: ";"))
            }
            integer(pending.shareRow); bytes.append(comma)
            integer(fix.timestamp); bytes.append(comma)
            number(fix.latitude); bytes.append(comma)
            number(fix.longitude); bytes.append(comma)
            number(fix.accuracy); bytes.append(comma)
            number(fix.altitude); bytes.append(comma)
            number(fix.velocity); bytes.append(comma)
            number(fix.course); bytes.append(comma)
            if let battery = fix.battery { integer(Int64(battery)) }
            bytes.append(comma)
            if let status = fix.batteryStatus { integer(Int64(status)) }
            bytes.append(comma)
            if let connection = fix.connection, connection.utf8.allSatisfy({ $0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z") }) {
                bytes.append(contentsOf: connection.utf8)
            }
        }
        bytes += [quote, UInt8(ascii: "}")]
        return String(decoding: bytes, as: UTF8.self)
    }

    public func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] {
        try pool.with(operation: "read fixes") { connection throws(StoreError) in
            let rows = try connection.execute("""
                SELECT tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn FROM fixes WHERE share = $1 ORDER BY tst DESC LIMIT $2
                """, [String(row), String(limit)], operation: "read fixes")
            return (0..<rows.count).reversed().map { index in
                Self.fix(rows, index)
            }
        }
    }

    public func fixes(row: Int64, after position: FixPosition?, limit: Int) throws(StoreError) -> [Fix] {
        try pool.with(operation: "read track") { connection throws(StoreError) in
            // The primary key's order (share, tst, lat, lon): each page a range of it.
            let rows = try connection.execute("""
                SELECT tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn FROM fixes
                WHERE share = $1 AND ($2::bigint IS NULL OR (tst, lat, lon) > ($2::bigint, $3::double precision, $4::double precision))
                ORDER BY tst, lat, lon LIMIT $5
                """, [String(row), position.map { String($0.timestamp) }, position.flatMap { PostgresText.double($0.latitude) },
                      position.flatMap { PostgresText.double($0.longitude) }, String(max(0, limit))], operation: "read track")
            return (0..<rows.count).map { index in
                Self.fix(rows, index)
            }
        }
    }

    public func recentSealedFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] {
        try pool.with(operation: "read fixes") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT received_at, data FROM sealed_fixes WHERE share = $1 ORDER BY received_at DESC LIMIT $2",
                                              [String(row), String(limit)], operation: "read fixes")
            return (0..<rows.count).reversed().map { Fix.sealed(rows.text($0, 1) ?? "", receivedAt: rows.int64($0, 0)) }
        }
    }

    public func fixCount(row: Int64) throws(StoreError) -> Int {
        try pool.with(operation: "count fixes") { connection throws(StoreError) in
            Int(try connection.execute("SELECT (SELECT count(*) FROM fixes WHERE share = $1) + (SELECT count(*) FROM sealed_fixes WHERE share = $1)",
                                       [String(row)], operation: "count fixes").int64(0, 0))
        }
    }

    /// A row of `tst, lat, lon, acc, alt, vel, cog, batt, tid, bs, conn` (the columns both reads select).
    private static func fix(_ rows: PostgresRows, _ index: Int) -> Fix {
        Fix(latitude: rows.double(index, 1), longitude: rows.double(index, 2), timestamp: rows.int64(index, 0),
            accuracy: rows.optionalDouble(index, 3), altitude: rows.optionalDouble(index, 4),
            velocity: rows.optionalDouble(index, 5), course: rows.optionalDouble(index, 6),
            battery: rows.optionalInt64(index, 7).map { Int($0) }, batteryStatus: rows.optionalInt64(index, 9).map { Int($0) },
            connection: rows.text(index, 10), trackerID: rows.text(index, 8))
    }
}
