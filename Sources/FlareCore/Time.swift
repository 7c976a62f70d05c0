/// Milliseconds since the Unix epoch. Share expiry is wall-clock time (it is shown to people and stored),
/// so it is kept in this form rather than as a monotonic instant.
public typealias UnixMillis = Int64

/// The source of wall-clock time, so tests can move time by hand.
public protocol WallClock: Sendable {
    func now() -> UnixMillis
}

#if canImport(Glibc)
import Glibc
#endif

public struct SystemWallClock: WallClock {
    public init() {}
    public func now() -> UnixMillis {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }
}
