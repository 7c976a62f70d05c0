#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Milliseconds of a monotonic clock, for rate limits, timeouts and pacing: never for expiry, which is wall-clock
/// time shown to people and stored (`FlareCore.WallClock`).
public func monotonicMillis() -> Int64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
}

/// Sleeps the calling thread for about `millis` milliseconds (pacing and retry back-off, never a deadline).
public func sleepMillis(_ millis: Int) {
    guard millis > 0 else { return }
    usleep(UInt32(millis) * 1000)
}
