#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutex with a condition variable, for the few places where a caller thread waits for libmosquitto's
/// network thread (CONNACK, PUBACK, SUBACK). pthread rather than NSCondition to keep Foundation out of the
/// module; the pthread objects are heap-allocated because they must not move.
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Call with the lock held (inside `withLock`). Waits until `predicate` holds or `timeout` passes and
    /// returns the predicate's last value.
    func wait(timeout: Duration, until predicate: () -> Bool) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while !predicate() {
            let remaining = deadline - clock.now
            if remaining <= .zero { return false }
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let (fullSeconds, attoseconds) = remaining.components
            let seconds = min(fullSeconds, 3_600)  // no timespec overflow for huge timeouts; the loop waits again
            var nanoseconds = Int(now.tv_nsec) + Int(attoseconds / 1_000_000_000)
            var wakeUp = timespec(tv_sec: now.tv_sec + Int(seconds) + nanoseconds / 1_000_000_000, tv_nsec: 0)
            nanoseconds %= 1_000_000_000
            wakeUp.tv_nsec = nanoseconds
            _ = pthread_cond_timedwait(condition, mutex, &wakeUp)
        }
        return true
    }

    /// Call with the lock held, after changing what waiters test.
    func broadcast() {
        pthread_cond_broadcast(condition)
    }
}
