#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A pthread mutex with one or more condition variables, for the places where one thread blocks until another
/// changes something: a bounded queue, a deadline heap, an MQTT acknowledgement. State that no thread waits on
/// belongs in a `Synchronization.Mutex` instead, which is the only other lock kind Flare uses.
///
/// The pthread objects are heap-allocated because they must never move (a `var m = pthread_mutex_t()` passed as
/// `&m` is not guaranteed a stable address in Swift). Conditions wait on CLOCK_MONOTONIC, so a wall-clock step
/// never shortens or stretches a timed wait. pthread rather than `Synchronization.Mutex` also keeps
/// `swift test --sanitize=thread` meaningful: ThreadSanitizer sees pthread locks, not futexes.
public final class ConditionLock: @unchecked Sendable {
    // @unchecked: the pointers are set once in init and freed in deinit; pthread serialises everything else.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let conditions: UnsafeMutablePointer<pthread_cond_t>
    private let conditionCount: Int

    /// - Parameter conditions: how many distinct things waiters wait for (a queue's "not empty" and "not full"
    ///   are two, so that a put wakes a taker and never a second putter).
    public init(conditions: Int = 1) {
        precondition(conditions >= 1)
        conditionCount = conditions
        self.conditions = .allocate(capacity: conditions)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        for index in 0..<conditions { pthread_cond_init(self.conditions + index, &attributes) }
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        for index in 0..<conditionCount { pthread_cond_destroy(conditions + index) }
        pthread_mutex_destroy(mutex)
        conditions.deallocate()
        mutex.deallocate()
    }

    public func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Call with the lock held. Waits until signalled (or a spurious wake-up): callers loop on their predicate.
    public func wait(_ condition: Int = 0) {
        pthread_cond_wait(conditions + condition, mutex)
    }

    /// Call with the lock held. Waits until signalled or `timeout` passes.
    public func wait(_ condition: Int = 0, timeout: Duration) {
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let (fullSeconds, attoseconds) = timeout.components
        let seconds = min(max(fullSeconds, 0), 3_600)  // no timespec overflow for huge timeouts; callers loop
        let nanoseconds = Int(deadline.tv_nsec) + Int(max(attoseconds, 0) / 1_000_000_000)
        deadline.tv_sec += Int(seconds) + nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        _ = pthread_cond_timedwait(conditions + condition, mutex, &deadline)
    }

    /// Call with the lock held. Waits until `predicate` holds or `timeout` passes; returns the predicate's last value.
    public func wait(_ condition: Int = 0, timeout: Duration, until predicate: () -> Bool) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while !predicate() {
            let remaining = deadline - clock.now
            if remaining <= .zero { return false }
            wait(condition, timeout: remaining)
        }
        return true
    }

    /// Call with the lock held, after changing what waiters test: wakes one waiter.
    public func signal(_ condition: Int = 0) {
        pthread_cond_signal(conditions + condition)
    }

    /// Call with the lock held, after changing what waiters test: wakes every waiter.
    public func broadcast(_ condition: Int = 0) {
        pthread_cond_broadcast(conditions + condition)
    }
}
