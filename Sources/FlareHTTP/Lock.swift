#if canImport(Glibc)
import Glibc
#endif

/// A pthread mutex. `Synchronization.Mutex` is futex-based on Linux and invisible to
/// ThreadSanitizer, which then reports every access it guards; this one keeps
/// `swift test --sanitize=thread` meaningful for the server's cross-thread paths.
final class Lock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}
