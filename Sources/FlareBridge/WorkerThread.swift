#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` on a thread of its own. Long-lived blocking loops (the store writer) must not sit on a
/// Dispatch worker: those are shared with timers and everything else in the process.
func startWorkerThread(name: String, _ body: @escaping @Sendable () -> Void) {
    final class Box: @unchecked Sendable {
        // @unchecked: written once before the thread starts, read once by it.
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(&thread, nil, { argument in
        let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
        box.body()
        return nil
    }, box)
    precondition(result == 0, "cannot start the \(name) thread: error \(result)")
    pthread_detach(thread)
}
