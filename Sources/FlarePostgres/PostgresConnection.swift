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
/// time. Every statement is sent with its parameters apart from the SQL text (`PQsendQueryParams`, text format), so
/// no value is ever spliced into SQL.
///
/// Every call waits at most until `deadline`. libpq's own calls (`PQexec`, `PQreset`) block for as long as TCP
/// does, and a server that stops answering without closing its sockets (paused with SIGSTOP, its host frozen or cut
/// off) would hold the calling thread, an HTTP worker among them, for minutes; `statement_timeout` is the server's
/// and never fires in a server that is stopped. So the connection is non-blocking and every wait is a `poll` on its
/// socket bounded by the deadline. A call that runs past it is abandoned with the connection (the server rolls back
/// whatever it had begun once it notices the socket closed), and the next call connects again, within its own
/// deadline. A COMMIT abandoned that way may still have committed: the caller is told it failed, and its retry is
/// one more request (as after any lost answer).
final class PostgresConnection {
    private let handle: OpaquePointer
    let conninfo: String
    /// Statements prepared on this connection, by SQL text: parsed and planned once, not on every call (a fifth of
    /// the server's work for a share creation).
    private var prepared: [String: String] = [:]
    /// Whether this session's temporary staging table for fixes exists yet.
    var hasFixStaging = false
    /// Until when the current call may wait for the server (the pool sets it for each call).
    var deadline: ContinuousClock.Instant = .now + .seconds(3600)
    /// A call ran past its deadline: the session is in an unknown state and is not used again before a reconnect.
    private var abandoned = false

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
        guard PQsetnonblocking(connection, 1) == 0 else {
            throw StoreError(operation: "connect", postgres: "cannot make the connection non-blocking")
        }
    }

    deinit { PQfinish(handle) }

    var isBroken: Bool { abandoned || PQstatus(handle) != CONNECTION_OK }

    /// Connects again after the server went away or a call was abandoned, within the deadline. Throws if it cannot.
    func reset() throws(StoreError) {
        prepared = [:]  // a new server session knows none of them, nor its temporary tables
        hasFixStaging = false
        abandoned = true  // until the new session is up
        guard PQresetStart(handle) == 1 else {
            throw StoreError(operation: "reconnect", postgres: Self.firstLine(PQerrorMessage(handle)))
        }
        var state = PGRES_POLLING_WRITING
        while state != PGRES_POLLING_OK {
            switch state {
            case PGRES_POLLING_FAILED:
                throw StoreError(operation: "reconnect", postgres: Self.firstLine(PQerrorMessage(handle)))
            case PGRES_POLLING_READING:
                try wait(for: Int16(POLLIN), operation: "reconnect")
            default:
                try wait(for: Int16(POLLOUT), operation: "reconnect")
            }
            state = PQresetPoll(handle)
        }
        guard PQsetnonblocking(handle, 1) == 0 else {
            throw StoreError(operation: "reconnect", postgres: "cannot make the connection non-blocking")
        }
        abandoned = false
    }

    /// Runs one statement (or, as a `script`, several without parameters). `nil` parameters are SQL NULL. Rows come
    /// back as text.
    @discardableResult
    func execute(_ sql: String, _ parameters: [String?] = [], operation: String, script: Bool = false) throws(StoreError) -> PostgresRows {
        try usable(operation)
        let sent: Int32
        if script {
            sent = PQsendQuery(handle, sql)
        } else if parameters.isEmpty {
            sent = PQsendQueryParams(handle, sql, 0, nil, nil, nil, nil, 0)
        } else {
            let name = try statementName(for: sql, parameters: parameters.count, operation: operation)
            sent = parameters.withOptionalCStrings { pointers in
                PQsendQueryPrepared(handle, name, Int32(parameters.count), pointers, nil, nil, 0)
            }
        }
        guard sent == 1 else { throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle))) }
        return PostgresRows(try takeResult(operation: operation))
    }

    private func statementName(for sql: String, parameters: Int, operation: String) throws(StoreError) -> String {
        if let name = prepared[sql] { return name }
        let name = "flare_\(prepared.count + 1)"
        guard PQsendPrepare(handle, name, sql, Int32(parameters), nil) == 1 else {
            throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
        }
        PQclear(try takeResult(operation: operation))
        prepared[sql] = name
        return name
    }

    /// `COPY … FROM STDIN (FORMAT binary)` with `data` as the whole stream: no text to format here or to parse there.
    func copyIn(_ sql: String, _ data: [UInt8], operation: String) throws(StoreError) {
        try usable(operation)
        guard PQsendQuery(handle, sql) == 1 else { throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle))) }
        PQclear(try takeResult(operation: operation, until: PGRES_COPY_IN))
        var offset = 0
        while offset < data.count {
            // Non-blocking: libpq takes what fits in its buffer (0: none now, wait until the socket drains).
            let chunk = min(data.count - offset, 1 << 16)
            let queued = data.withUnsafeBytes { bytes in
                PQputCopyData(handle, bytes.baseAddress!.advanced(by: offset).assumingMemoryBound(to: CChar.self), Int32(chunk))
            }
            switch queued {
            case 1: offset += chunk
            case 0: try flush(operation: operation)
            default: throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
            }
        }
        while true {
            let ended = PQputCopyEnd(handle, nil)
            if ended == 1 { break }
            guard ended == 0 else { throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle))) }
            try flush(operation: operation)
        }
        PQclear(try takeResult(operation: operation))
    }

    // MARK: Waiting within the deadline

    private func usable(_ operation: String) throws(StoreError) {
        guard !abandoned else { throw StoreError(operation: operation, postgres: "the connection was abandoned after a timeout") }
    }

    /// Waits until the socket is ready for `events`, at most until the deadline; past it, abandons the connection.
    private func wait(for events: Int16, operation: String) throws(StoreError) {
        while true {
            let remaining = deadline - .now
            let millis = remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000
            guard millis > 0 else {
                abandoned = true
                throw StoreError(operation: operation, postgres: "no answer from the database server in time; connection dropped")
            }
            var descriptor = pollfd(fd: PQsocket(handle), events: events, revents: 0)
            let ready = poll(&descriptor, 1, Int32(clamping: millis))
            if ready > 0 { return }
            if ready < 0 && errno != EINTR {
                abandoned = true
                throw StoreError(operation: operation, postgres: "cannot wait for the database server (errno \(errno))")
            }
        }
    }

    /// Sends what libpq has buffered for the server.
    private func flush(operation: String) throws(StoreError) {
        while true {
            switch PQflush(handle) {
            case 0: return
            case 1:
                // Read too while waiting: the server may be sending (an error) and wait for us to read it.
                try wait(for: Int16(POLLIN | POLLOUT), operation: operation)
                guard PQconsumeInput(handle) == 1 else {
                    throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
                }
            default:
                throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
            }
        }
    }

    /// The result of what was sent: every result read (as `PQexec` does), the last returned and the first error
    /// thrown; with `until`, the first result of that status is returned as soon as it comes (a COPY's start).
    private func takeResult(operation: String, until awaited: ExecStatusType? = nil) throws(StoreError) -> OpaquePointer {
        try flush(operation: operation)
        var last: OpaquePointer?
        var failure: StoreError?
        var handedOver = false
        defer { if !handedOver, let last { PQclear(last) } }
        while true {
            while PQisBusy(handle) == 1 {
                try wait(for: Int16(POLLIN), operation: operation)
                guard PQconsumeInput(handle) == 1 else {
                    throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle)))
                }
            }
            guard let result = PQgetResult(handle) else { break }
            let status = PQresultStatus(result)
            if let awaited, status == awaited, failure == nil { return result }
            if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_COPY_IN {
                if let last { PQclear(last) }
                last = result
            } else {
                if failure == nil {
                    let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
                    let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
                        ?? Self.firstLine(PQerrorMessage(handle))
                    failure = StoreError(operation: operation, postgres: primary, sqlState: state)
                }
                PQclear(result)
            }
        }
        if let failure { throw failure }
        guard let last else { throw StoreError(operation: operation, postgres: Self.firstLine(PQerrorMessage(handle))) }
        handedOver = true
        return last
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
