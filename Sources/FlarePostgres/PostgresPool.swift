import FlareStore
import FlareSystem

/// A fixed set of connections, each used by one thread at a time. A connection that broke is reconnected when it is
/// next taken; if that fails, the call fails (and the connection is tried again next time).
/// The store's connections, each lent to one call at a time. A call waits for a connection and for the server within
/// one deadline: `callTimeout` (every call on a request path, answered 503 past it), or the longer `longCallTimeout`
/// for the work that is large by nature and off the request paths (migrations, loading every share, a batch of fixes,
/// deleting a share's history).
final class PostgresPool: Sendable {
    private final class Slots: @unchecked Sendable {
        // @unchecked: touched only with `lock` held.
        var idle: [PostgresConnection]
        init(_ idle: [PostgresConnection]) { self.idle = idle }
    }
    private let lock = ConditionLock()
    private let slots: Slots
    let callTimeout: Duration
    static let longCallTimeout: Duration = .seconds(60)

    init(conninfo: String, applicationName: String, size: Int, callTimeout: Duration) throws(StoreError) {
        var connections: [PostgresConnection] = []
        for _ in 0..<size { connections.append(try PostgresConnection(conninfo: conninfo, applicationName: applicationName)) }
        slots = Slots(connections)
        self.callTimeout = callTimeout
    }

    func with<T>(operation: String, long: Bool = false, _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        let deadline = ContinuousClock.now + (long ? Self.longCallTimeout : callTimeout)
        let connection = try lock.withLock { () throws(StoreError) -> PostgresConnection in
            while slots.idle.isEmpty {
                // Every connection is held by a call waiting for the server: this one gives up with them.
                let remaining = deadline - .now
                guard remaining > .zero else {
                    throw StoreError(operation: operation, postgres: "no database connection became free in time")
                }
                lock.wait(timeout: remaining)
            }
            return slots.idle.removeLast()
        }
        defer {
            lock.withLock {
                slots.idle.append(connection)
                lock.signal()
            }
        }
        connection.deadline = deadline
        if connection.isBroken { try connection.reset() }
        return try body(connection)
    }
}
