#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` on a thread of its own. Long-lived blocking loops (the store writer) must not sit on a
/// Dispatch worker: those are shared with timers and everything else in the process. `name` (the kernel keeps
/// its first 15 bytes) is what `top -H` and `perf` show for the thread.
func startWorkerThread(name: String, _ body: @escaping @Sendable () -> Void) {
    final class Box: @unchecked Sendable {
        // @unchecked: written once before the thread starts, read once by it.
        let name: String
        let body: @Sendable () -> Void
        init(_ name: String, _ body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }
    let box = Unmanaged.passRetained(Box(name, body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(&thread, nil, { argument in
        let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
        // pthread_setname_np is not visible through Glibc's module map; this is what it does on Linux.
        if let comm = fopen("/proc/thread-self/comm", "w") {
            fputs(box.name, comm)
            fclose(comm)
        }
        box.body()
        return nil
    }, box)
    precondition(result == 0, "cannot start the \(name) thread: error \(result)")
    pthread_detach(thread)
}
