/// Matches acknowledgements (PUBACK, SUBACK) to message ids.
///
/// The mid is only known when `mosquitto_publish`/`mosquitto_subscribe` returns, but the network thread may
/// already have received the ack by then. So callers announce `willRegister()` before the C call, and acks
/// that arrive while any registration is open are kept until it completes. Not thread-safe: used under
/// `ClientCore.lock`.
struct AckTracker {
    private var registering = 0
    private var awaited: Set<Int32> = []
    private var acked: [Int32: Int32] = [:]  // mid -> reason code (0 = success)

    mutating func willRegister() { registering += 1 }

    /// Completes a `willRegister()`; `mids` is empty when the C call failed.
    mutating func register(_ mids: [Int32]) {
        registering -= 1
        awaited.formUnion(mids)
        if registering == 0 {
            // Early acks for mids nobody registered belong to plain publish() calls: drop them.
            acked = acked.filter { awaited.contains($0.key) }
        }
    }

    mutating func ack(_ mid: Int32, code: Int32) {
        if registering > 0 || awaited.contains(mid) { acked[mid] = code }
    }

    func code(for mid: Int32) -> Int32? { acked[mid] }

    /// Stops waiting for `mid`; returns its reason code if it was acknowledged.
    mutating func remove(_ mid: Int32) -> Int32? {
        awaited.remove(mid)
        return acked.removeValue(forKey: mid)
    }

    var allAcknowledged: Bool { registering == 0 && awaited.allSatisfy { acked[$0] != nil } }

    var awaitedCodes: [Int32] { awaited.compactMap { acked[$0] } }

    /// Forgets awaited mids (a new connection starts); open registrations stay counted.
    mutating func reset() {
        awaited.removeAll()
        acked.removeAll()
    }
}
