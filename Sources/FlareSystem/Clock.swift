#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Milliseconds since the Unix epoch. Share expiry is wall-clock time (it is shown to people and stored),
/// so it is kept in this form rather than as a monotonic instant.
public typealias UnixMillis = Int64

/// Where every component that reads time reads it, so that a test holds time in its hands (`ManualClock` in the
/// test support) instead of waiting for it to pass.
///
/// Two readings, for two jobs: `now()` is wall-clock time, for what is stored or shown (expiry, deadlines, event
/// times); `monotonicMillis()` never steps back, for rate limits, timeouts and pacing.
public protocol Clock: Sendable {
    func now() -> UnixMillis
    func monotonicMillis() -> Int64
    /// Calls `wake` each time this clock's time moves other than by passing (a test advancing it), so that a thread
    /// sleeping until a deadline of this clock looks again. The system's clock only passes, and never calls it.
    func whenMoved(_ wake: @escaping @Sendable () -> Void)
}

/// The system's clocks: CLOCK_REALTIME and CLOCK_MONOTONIC.
public struct SystemClock: Clock {
    public init() {}
    public func now() -> UnixMillis { Self.read(CLOCK_REALTIME) }
    public func monotonicMillis() -> Int64 { Self.read(CLOCK_MONOTONIC) }
    public func whenMoved(_ wake: @escaping @Sendable () -> Void) {}

    private static func read(_ id: clockid_t) -> Int64 {
        var spec = timespec()
        clock_gettime(id, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }
}

/// Milliseconds of the system's monotonic clock, for the C edge (the MQTT network loop, the CLI) that no test moves.
/// Everything in the service reads its injected `Clock` instead.
public func monotonicMillis() -> Int64 { SystemClock().monotonicMillis() }

/// Sleeps the calling thread for about `millis` milliseconds (pacing and retry back-off, never a deadline).
public func sleepMillis(_ millis: Int) {
    guard millis > 0 else { return }
    usleep(UInt32(millis) * 1000)
}
