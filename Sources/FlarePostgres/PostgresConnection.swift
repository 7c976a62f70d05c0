internal import CLibPQ
import FlareStore
#if canImport(Glibc)
import Glibc
#endif

extension StoreError {
    /// A failed PostgreSQL call: the operation, the SQLSTATE (as text in the message, since it is five characters,
    /// not a number) and the server's primary message. Never the DETAIL, which can quote the values of a row.
    init(operation: String, postgres message: String, sqlState: String? = nil) {
        let state = sqlState.map { "SQLSTATE \($0): " } ?? ""
        self.init(operation: operation, code: 0, message: state + message, engine: "postgresql")
    }

    /// A row's key was already in a unique index (SQLSTATE 23505).
    var isUniqueViolation: Bool { engine == "postgresql" && message.hasPrefix("SQLSTATE 23505:") }
}

/// Owns one `PGconn*`. Not thread-safe by itself: `PostgresShareStore` hands each connection to one thread at a
/// time. Every statement is sent with its parameters apart from the SQL text (`PQexecParams`, text format), so no
/// value is ever spliced into SQL.
final class PostgresConnection {
    private let handle: OpaquePointer
    let conninfo: String
    /// Statements prepared on this connection, by SQL text: parsed and planned once, not on every call (a fifth of
    /// the server's work for a share creation).
    private var prepared: [String: String] = [:]
    /// Whether this session's temporary staging table for fixes exists yet.
    var hasFixStaging = false

    /// - Parameter conninfo: a libpq connection URI or key=value string. Errors name the server, never the password.
    init(conninfo: String, applicationName: String) throws(StoreError) {
        self.conninfo = conninfo
        let keys = ["dbname", "application_name", "connect_timeout"]
        let values = [conninfo, applicationName, "5"]
        // expand_dbname = 1: the "dbname" value may be a whole URI or conninfo string.
        let connection: OpaquePointer? = keys.withCStrings { keyPointers in
            values.withCStrings { valuePointers in PQconnectdbParams(keyPointers, valuePointers, 1) }
        }
        guard let connection else { throw StoreError(operation: "connect", postgres: "out of memory") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.firstLine(PQerrorMessage(connection))
            PQfinish(connection)
            throw StoreError(operation: "connect", postgres: message)
        }
        handle = connection
        flare_pq_silence_notices(connection)
    }

    deinit { PQfinish(handle) }

    var isBroken: Bool { PQstatus(handle) != CONNECTION_OK }

    /// Tries to connect again after the server went away. Throws if it still cannot.
    func reset() throws(StoreError) {
        prepared = [:]  // a new server session knows none of them, nor its temporary tables
        hasFixStaging = false
        PQreset(handle)
        guard PQstatus(handle) == CONNECTION_OK else {
            throw StoreError(operation: "reconnect", postgres: Self.firstLine(PQerrorMessage(handle)))
        }
    }

    /// Runs one statement. `nil` parameters are SQL NULL. Rows come back as text.
    @discardableResult
    func execute(_ sql: String, _ parameters: [String?] = [], operation: String, script: Bool = false) throws(StoreError) -> PostgresRows {
        let result: OpaquePointer?
        if script {
            result = PQexec(handle, sql)
        } else if parameters.isEmpty {
            result = PQexecParams(handle, sql, 0, nil, nil, nil, nil, 0)
        } else {
            let name = try statementName(for: sql, parameters: parameters.count, operation: operation)
            result = parameters.withOptionalCStrings { pointers in
                PQexecPrepared(handle, name, Int32(parameters.count), pointers, nil, nil, 0)
            }
        }
        guard let result else {
            throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
        }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
                ?? Self.firstLine(PQerrorMessage(handle))
            PQclear(result)
            throw StoreError(operation: operation, postgres: primary, sqlState: state)
        }
        return PostgresRows(result)
    }

    private func statementName(for sql: String, parameters: Int, operation: String) throws(StoreError) -> String {
        if let name = prepared[sql] { return name }
        let name = "flare_\(prepared.count + 1)"
        guard let result = PQprepare(handle, name, sql, Int32(parameters), nil) else {
            throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_COMMAND_OK else {
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) } ?? "cannot prepare"
            throw StoreError(operation: operation, postgres: primary, sqlState: state)
        }
        prepared[sql] = name
        return name
    }

    /// `COPY … FROM STDIN (FORMAT binary)` with `data` as the whole stream: no text to format here or to parse there.
    func copyIn(_ sql: String, _ data: [UInt8], operation: String) throws(StoreError) {
        guard let start = PQexec(handle, sql) else {
            throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
        }
        let started = PQresultStatus(start) == PGRES_COPY_IN
        PQclear(start)
        guard started else { throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle))) }
        let sent = data.withUnsafeBytes { bytes in
            PQputCopyData(handle, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
        }
        guard sent == 1, PQputCopyEnd(handle, nil) == 1 else {
            throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
        }
        var failure: StoreError?
        while let result = PQgetResult(handle) {
            if PQresultStatus(result) != PGRES_COMMAND_OK && failure == nil {
                let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
                let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) } ?? "copy failed"
                failure = StoreError(operation: operation, postgres: primary, sqlState: state)
            }
            PQclear(result)
        }
        if let failure { throw failure }
    }

    // MARK: notifications (LISTEN)

    /// The socket to poll for incoming notifications; -1 when the connection is broken.
    var socket: Int32 { PQsocket(handle) }

    /// Reads what arrived on the socket and returns the notifications it carried, in order. Throws when the
    /// connection is lost.
    func takeNotifications() throws(StoreError) -> [(channel: String, payload: String)] {
        guard PQconsumeInput(handle) == 1 else {
            throw StoreError(operation: "listen", postgres: Self.firstLine(PQerrorMessage(handle)))
        }
        var notifications: [(String, String)] = []
        while let notify = PQnotifies(handle) {
            notifications.append((String(cString: notify.pointee.relname), String(cString: notify.pointee.extra)))
            PQfreemem(notify)
        }
        return notifications
    }

    /// libpq's messages end with a newline and sometimes carry a second line of detail: keep the first.
    private static func firstLine(_ text: UnsafePointer<CChar>?) -> String {
        guard let text else { return "unknown error" }
        let message = String(cString: text)
        return message.split(whereSeparator: \.isNewline).first.map(String.init) ?? message
    }
}

/// The rows of one result, as text (`nil` = NULL). Frees the result when it goes.
final class PostgresRows {
    private let result: OpaquePointer
    let count: Int
    let columns: Int

    init(_ result: OpaquePointer) {
        self.result = result
        count = Int(PQntuples(result))
        columns = Int(PQnfields(result))
    }

    deinit { PQclear(result) }

    /// Rows changed by an INSERT/UPDATE/DELETE.
    var affected: Int { Int(String(cString: PQcmdTuples(result))) ?? 0 }

    func text(_ row: Int, _ column: Int) -> String? {
        guard PQgetisnull(result, Int32(row), Int32(column)) == 0 else { return nil }
        return String(cString: PQgetvalue(result, Int32(row), Int32(column)))
    }

    func int64(_ row: Int, _ column: Int) -> Int64 { text(row, column).flatMap { Int64($0) } ?? 0 }
    func optionalInt64(_ row: Int, _ column: Int) -> Int64? { text(row, column).flatMap { Int64($0) } }
    func double(_ row: Int, _ column: Int) -> Double { text(row, column).flatMap { Double($0) } ?? 0 }
    func optionalDouble(_ row: Int, _ column: Int) -> Double? { text(row, column).flatMap { Double($0) } }
    func bool(_ row: Int, _ column: Int) -> Bool { text(row, column) == "t" }

    /// A bytea column in PostgreSQL's hex output (`\x0a1b…`).
    func bytes(_ row: Int, _ column: Int) -> [UInt8] {
        guard let text = text(row, column), text.hasPrefix("\\x") else { return [] }
        return PostgresText.bytes(fromHex: text.utf8.dropFirst(2))
    }
}

extension Array where Element == String {
    /// Calls `body` with a C array of C strings (and a terminating NULL) that lives for the call.
    func withCStrings<R>(_ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        var pointers: [UnsafeMutablePointer<CChar>?] = map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return body(pointers.map { UnsafePointer($0) })
    }
}

extension Array where Element == String? {
    func withOptionalCStrings<R>(_ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        let pointers: [UnsafeMutablePointer<CChar>?] = map { $0.map { strdup($0) } ?? nil }
        defer { for pointer in pointers { free(pointer) } }
        return body(pointers.map { $0.map { UnsafePointer($0) } })
    }
}

extension PostgresConnection {
    /// Several statements in one string, as a migration is written (`PQexec`, no parameters).
    func executeScript(_ sql: String, operation: String) throws(StoreError) {
        try execute(sql, operation: operation, script: true)
    }

    func transaction<T>(operation: String, _ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        try execute("BEGIN", operation: operation)
        do {
            let result = try body()
            try execute("COMMIT", operation: operation)
            return result
        } catch {
            _ = try? execute("ROLLBACK", operation: operation)
            throw error
        }
    }
}
