public import FlareSystem
import Synchronization

/// Jobs at wall-clock deadlines for every concern of the share service, on one scheduler thread (`DeadlineScheduler`).
/// Each concern declares its own job type and registers what runs it (`on`): no list of every concern's jobs.
public final class Deadlines: Sendable {
    /// A concern's job. `AnyHashable` keeps the job's type: equal values of two concerns' types are two jobs, and the
    /// type says which runner takes it. Nothing more is kept beside it: every live share has an item in the heap.
    struct Job: Hashable, @unchecked Sendable {
        // @unchecked: `value` holds the `Hashable & Sendable` job it was made from (`schedule`, `cancel`).
        let value: AnyHashable
        init<J: Hashable & Sendable>(_ job: J) { value = AnyHashable(job) }
        var kind: ObjectIdentifier { ObjectIdentifier(type(of: value.base)) }
    }

    /// A registered runner, in a class so that reading it out of the table copies a reference, not a closure.
    private final class Runner: Sendable {
        let run: @Sendable (AnyHashable) -> Void
        init(_ run: @escaping @Sendable (AnyHashable) -> Void) { self.run = run }
    }

    private let runners = Mutex<[ObjectIdentifier: Runner]>([:])
    private let scheduler = Mutex<DeadlineScheduler<Job>?>(nil)

    public init(clock: any Clock) {
        let scheduler = DeadlineScheduler<Job>(clock: clock) { [weak self] job in
            self?.runners.withLock { $0[job.kind] }?.run(job.value)
        }
        self.scheduler.withLock { $0 = scheduler }
    }

    /// Registers what runs the jobs of type `J` (once per type, before any is scheduled).
    public func on<J: Hashable & Sendable>(_ type: J.Type, run: @escaping @Sendable (J) -> Void) {
        runners.withLock { runners in
            precondition(runners[ObjectIdentifier(type)] == nil, "\(type) jobs are run by one concern")
            runners[ObjectIdentifier(type)] = Runner { value in
                if let job = value.base as? J { run(job) }
            }
        }
    }

    /// Runs `job` at `deadline`, replacing an earlier schedule of the same job.
    public func schedule<J: Hashable & Sendable>(_ job: J, at deadline: UnixMillis) {
        scheduler.withLock { $0?.schedule(Job(job), at: deadline) }
    }

    /// Runs `job` at `deadline` whatever is scheduled or cancelled since (`DeadlineScheduler.scheduleUntracked`):
    /// for a job every live share has, whose runner checks that it is still due.
    public func scheduleUntracked<J: Hashable & Sendable>(_ job: J, at deadline: UnixMillis) {
        scheduler.withLock { $0?.scheduleUntracked(Job(job), at: deadline) }
    }

    public func cancel<J: Hashable & Sendable>(_ job: J) {
        scheduler.withLock { $0?.cancel(Job(job)) }
    }

    /// Stops the thread after the job it may be running; pending jobs are dropped.
    public func stop() {
        scheduler.withLock { $0?.stop(); $0 = nil }
    }
}
