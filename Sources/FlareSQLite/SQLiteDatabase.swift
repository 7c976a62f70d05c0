internal import CSQLite
import FlareStore

extension StoreError {
    /// A failed SQLite call: the operation, SQLite's result code and its message.
    init(operation: String, code: Int32, message: String) {
        self.init(operation: operation, code: code, message: message, engine: "sqlite")
    }
}

/// Owns one `sqlite3*` connection. Not thread-safe by itself: `ShareStore` serialises access.
final class SQLiteDatabase {
    private let handle: OpaquePointer
    private var statements: [String: SQLiteStatement] = [:]

    /// Process-wide SQLite settings, applied once before the first connection opens.
    private static let configured: Int32 = flare_sqlite3_disable_memory_statistics()

    init(path: String) throws(StoreError) {
        _ = Self.configured  // SQLITE_MISUSE if SQLite was already initialised: harmless, statistics stay on
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &db, flags, nil)
        guard code == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close(db)
            throw StoreError(operation: "open \(path)", code: code, message: message)
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, Self.busyMillis)
    }

    /// How long a call waits for another connection's lock (another process writing the file: `flare keys create`,
    /// a backup) before it fails: a request is answered 503 within about this long, as with PostgreSQL's deadline.
    static let busyMillis: Int32 = 2_000

    /// Runs `body` with a shorter wait for another connection's lock than `busyMillis`: for periodic jobs that try
    /// again anyway (leases), which must not hold the store's one connection for seconds while a write is stuck.
    func withBusyTimeout<T>(milliseconds: Int32, _ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        sqlite3_busy_timeout(handle, milliseconds)
        defer { sqlite3_busy_timeout(handle, Self.busyMillis) }
        return try body()
    }

    deinit {
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    enum CheckpointMode: String { case passive = "PASSIVE", restart = "RESTART" }

    /// Runs a WAL checkpoint; returns the WAL's length in frames, as the checkpoint found it. A checkpoint that could
    /// not finish (a RESTART held back by a reader) throws `SQLITE_BUSY`. The pragma, not `sqlite3_wal_checkpoint_v2`:
    /// that one does nothing on a connection that has not read the database yet, while preparing the pragma reads it.
    @discardableResult
    func checkpoint(_ mode: CheckpointMode) throws(StoreError) -> Int64 {
        let statement = try statement("PRAGMA wal_checkpoint(\(mode.rawValue))")
        defer { statement.reset() }
        // One row: 1 if it could not finish, the WAL's frames, the frames copied into the database so far.
        guard try statement.step() else { return 0 }
        guard statement.int64(0) == 0 else { throw StoreError(operation: "checkpoint", code: SQLITE_BUSY, message: "not finished: the WAL is in use") }
        return statement.int64(1)
    }

    func execute(_ sql: String) throws(StoreError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        guard code == SQLITE_OK else {
            let message = errorMessage.map { String(cString: $0) } ?? lastMessage
            sqlite3_free(errorMessage)
            throw StoreError(operation: "exec \(sql.prefix(40))", code: code, message: message)  // literal SQL, never a bound value
        }
    }

    /// A prepared statement, cached by its SQL text: hot statements are compiled once. Callers reset it when
    /// done: a statement left mid-step keeps its read snapshot open, and the connection would not see rows that
    /// another process (`flare keys create`) commits afterwards.
    func statement(_ sql: String) throws(StoreError) -> SQLiteStatement {
        if let cached = statements[sql] {
            cached.reset()
            return cached
        }
        var raw: OpaquePointer?
        let code = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard code == SQLITE_OK, let raw else { throw error("prepare", code) }
        let statement = SQLiteStatement(raw, database: self)
        statements[sql] = statement
        return statement
    }

    func transaction<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    var changes: Int { Int(sqlite3_changes(handle)) }
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
    var lastMessage: String { String(cString: sqlite3_errmsg(handle)) }

    func error(_ operation: String, _ code: Int32) -> StoreError {
        StoreError(operation: operation, code: code, message: lastMessage)
    }
}

/// One prepared statement. Binding is 1-based, columns 0-based, as in SQLite.
final class SQLiteStatement {
    private let handle: OpaquePointer
    private unowned let database: SQLiteDatabase

    init(_ handle: OpaquePointer, database: SQLiteDatabase) {
        self.handle = handle
        self.database = database
    }

    deinit { sqlite3_finalize(handle) }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Ready for the next row of a loop that binds every parameter each time: clearing them would be wasted work.
    func resetKeepingBindings() { sqlite3_reset(handle) }

    func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }
    func bind(_ index: Int32, _ value: Double) { sqlite3_bind_double(handle, index, value) }
    func bind(_ index: Int32, _ value: String) {
        var value = value
        value.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { _ = flare_sqlite3_bind_text(handle, index, $0.baseAddress, Int32($0.count)) }
        }
    }
    func bind(_ index: Int32, _ value: [UInt8]) {
        value.withUnsafeBytes { _ = flare_sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count)) }
    }
    func bind(_ index: Int32, _ value: Double?) { if let value { bind(index, value) } else { sqlite3_bind_null(handle, index) } }
    func bind(_ index: Int32, _ value: Int64?) { if let value { bind(index, value) } else { sqlite3_bind_null(handle, index) } }
    func bind(_ index: Int32, _ value: String?) { if let value { bind(index, value) } else { sqlite3_bind_null(handle, index) } }
    func bind(_ index: Int32, _ value: [UInt8]?) { if let value { bind(index, value) } else { sqlite3_bind_null(handle, index) } }

    /// Steps once: true while a row is available.
    func step() throws(StoreError) -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = database.error("step", code)
            sqlite3_reset(handle)
            throw error
        }
    }

    func run() throws(StoreError) {
        while try step() {}
    }

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func double(_ column: Int32) -> Double { sqlite3_column_double(handle, column) }
    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    func optionalDouble(_ column: Int32) -> Double? { isNull(column) ? nil : double(column) }
    func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }
    func string(_ column: Int32) -> String {
        guard let text = sqlite3_column_text(handle, column) else { return "" }
        return String(cString: text)
    }
    func optionalString(_ column: Int32) -> String? { isNull(column) ? nil : string(column) }
    func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let pointer = sqlite3_column_blob(handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
