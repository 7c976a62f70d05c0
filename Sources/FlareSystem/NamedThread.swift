#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A thread of Flare's own, started with a name. Long-lived blocking loops (the store writer, the MQTT network
/// loop, the deadline scheduler, checkpoints) must not sit on a Dispatch worker: those are shared with timers and
/// everything else in the process. The name (the kernel keeps its first 15 bytes) is what `top -H` and `perf`
/// show. `join()` waits for the thread to end; a thread never joined is detached when its handle goes.
public final class NamedThread: @unchecked Sendable {
    // @unchecked: `thread` is written once in `start` and then only read; join/detach happen at most once
    // (guarded by `joined`, which only the owner of the handle touches).
    private let thread: pthread_t
    private var joined = false
    public let name: String

    private init(thread: pthread_t, name: String) {
        self.thread = thread
        self.name = name
    }

    deinit {
        if !joined { pthread_detach(thread) }
    }

    /// Starts `body` on a new thread called `name`. A thread that cannot be started is a broken process (out of
    /// memory or of threads): it stops with the reason rather than running without its loop.
    @discardableResult
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) -> NamedThread {
        final class Start: @unchecked Sendable {
            // @unchecked: written once before the thread starts, read once by it.
            let name: String
            let body: @Sendable () -> Void
            init(_ name: String, _ body: @escaping @Sendable () -> Void) {
                self.name = name
                self.body = body
            }
        }
        let start = Unmanaged.passRetained(Start(name, body)).toOpaque()
        var created = pthread_t()
        let result = pthread_create(&created, nil, { argument in
            let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
            // pthread_setname_np is not visible through Glibc's module map; this is what it does on Linux.
            if let comm = fopen("/proc/thread-self/comm", "w") {
                fputs(start.name, comm)
                fclose(comm)
            }
            start.body()
            return nil
        }, start)
        precondition(result == 0, "cannot start the \(name) thread: error \(result)")
        return NamedThread(thread: created, name: name)
    }

    /// Waits for the thread to end. Never from the thread itself.
    public func join() {
        guard !joined else { return }
        joined = true
        pthread_join(thread, nil)
    }

    /// Whether the calling thread is this one.
    public var isCurrent: Bool { pthread_equal(thread, pthread_self()) != 0 }
}

/// A thread's identity, comparable across threads: lets a callback tell whether it runs on the thread that a
/// blocking call would wait for (and so must not wait).
public struct ThreadID: Sendable, Equatable {
    // pthread_t is an integer on Linux and a pointer on Darwin; only compared, never dereferenced here.
    private let thread: pthread_t

    public static var current: ThreadID { ThreadID(thread: pthread_self()) }

    public static func == (lhs: ThreadID, rhs: ThreadID) -> Bool { pthread_equal(lhs.thread, rhs.thread) != 0 }
}
