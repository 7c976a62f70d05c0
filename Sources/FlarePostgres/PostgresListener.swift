import FlareCore
import FlareStore
import FlareSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The change feed of a shared database: a connection of its own that LISTENs on `flare_shares` and `flare_fixes`
/// (see migration 2) and hands each notification from another instance to `handler`, in commit order, on its own
/// thread. When the connection drops it reconnects (every second) and reports `.resync`, because what was
/// announced meanwhile is gone.
final class PostgresListener: Sendable {
    private let stopRequested = Atomic<Bool>(false)
    private let thread = Mutex<NamedThread?>(nil)
    /// Set once the first attempt to LISTEN has succeeded or failed.
    private let firstAttempt = ConditionLock()
    private let firstAttemptDone = Mutex(false)

    /// Returns once listening (or after the first attempt failed, or 5 s): what is committed from then on is heard.
    /// `listening` is told when the connection is up (`true`: every commit from now on is heard) and when it dropped.
    init(conninfo: String, instance: String, listening: @escaping @Sendable (Bool) -> Void,
         handler: @escaping @Sendable (StoreChange) -> Void) {
        let started = NamedThread.start(name: "flare-pg-listen") { [self] in
            run(conninfo: conninfo, instance: instance, connected: listening, handler: handler)
            listening(false)
        }
        thread.withLock { $0 = started }
        firstAttempt.withLock {
            _ = firstAttempt.wait(timeout: .seconds(5)) { firstAttemptDone.withLock { $0 } }
        }
    }

    private func firstAttemptFinished() {
        firstAttempt.withLock {
            firstAttemptDone.withLock { $0 = true }
            firstAttempt.broadcast()
        }
    }

    func stop() {
        stopRequested.store(true, ordering: .relaxed)
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        running?.join()
    }

    private func run(conninfo: String, instance: String, connected: @Sendable (Bool) -> Void, handler: @Sendable (StoreChange) -> Void) {
        var connection: PostgresConnection?
        var firstConnection = true
        while !stopRequested.load(ordering: .relaxed) {
            if connection == nil {
                do {
                    let fresh = try PostgresConnection(conninfo: conninfo, applicationName: instance + "-listen")
                    try fresh.execute("LISTEN flare_shares", operation: "listen")
                    try fresh.execute("LISTEN flare_fixes", operation: "listen")
                    try fresh.execute("LISTEN flare_sealed", operation: "listen")
                    connection = fresh
                    connected(true)
                    if !firstConnection { handler(.resync) }
                    firstConnection = false
                    firstAttemptFinished()
                } catch {
                    firstConnection = false  // whatever happened before this connection is unknown
                    firstAttemptFinished()
                    sleepUnlessStopped(1000)
                    continue
                }
            }
            guard let listening = connection else { continue }
            var descriptor = pollfd(fd: listening.socket, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, 500)  // half a second: `stop` is noticed that soon
            do {
                for notification in try listening.takeNotifications() {
                    if let change = Self.change(from: notification, instance: instance) { handler(change) }
                }
            } catch {
                connection = nil
                connected(false)
            }
        }
    }

    /// `<instance> <share id>` or `<instance> <json array of fixes>`; nil for our own and for anything unreadable.
    static func change(from notification: (channel: String, payload: String), instance: String) -> StoreChange? {
        guard let space = notification.payload.firstIndex(of: " ") else { return nil }
        guard notification.payload[..<space] != instance else { return nil }
        let body = notification.payload[notification.payload.index(after: space)...]
        switch notification.channel {
        case "flare_shares":
            if body.hasPrefix("key:") { return Int64(body.dropFirst(4)).map(StoreChange.ownerKey) }
            return ShareID(String(body)).map(StoreChange.share)
        case "flare_fixes":
            // row,tst,lat,lon,acc,alt,vel,cog,batt,bs,conn;… (see `PostgresShareStore.announce`); without bs and
            // conn from an instance of the release before them.
            let fixes: [(shareRow: Int64, fix: Fix)] = body.split(separator: ";").compactMap { row in
                let values = row.split(separator: ",", omittingEmptySubsequences: false)
                guard values.count == 9 || values.count == 11, let share = Int64(values[0]), let tst = Int64(values[1]),
                      let lat = Double(values[2]), let lon = Double(values[3]) else { return nil }
                return (share, Fix(latitude: lat, longitude: lon, timestamp: tst, accuracy: Double(values[4]),
                                   altitude: Double(values[5]), velocity: Double(values[6]), course: Double(values[7]),
                                   battery: Int(values[8]), batteryStatus: values.count == 11 ? Int(values[9]) : nil,
                                   connection: values.count == 11 && !values[10].isEmpty ? String(values[10]) : nil))
            }
            return fixes.isEmpty ? nil : .fixes(fixes)
        case "flare_sealed":
            // row,received_at,data: one end-to-end encrypted share's ciphertext (see `PostgresShareStore.insertSealed`).
            let values = body.split(separator: ",", maxSplits: 2, omittingEmptySubsequences: false)
            guard values.count == 3, let share = Int64(values[0]), let receivedAt = Int64(values[1]), SealedPayload.isValid(String(values[2])) else { return nil }
            return .fixes([(share, Fix.sealed(String(values[2]), receivedAt: receivedAt))])
        default:
            return nil
        }
    }

    private func sleepUnlessStopped(_ millis: Int) {
        var left = millis
        while left > 0 && !stopRequested.load(ordering: .relaxed) {
            usleep(100_000)
            left -= 100
        }
    }
}
