public import FlareCore
import FlareSystem

/// Runs jobs at wall-clock deadlines: a min-heap of deadlines and one thread that sleeps until the earliest.
/// Creating, extending or ending a share is O(log n); nothing scans all shares. The thread is its own, so a
/// busy Dispatch pool can never delay an expiry.
public final class DeadlineScheduler<Job: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: every stored var is only touched with `lock` held.
    private struct Item { let deadline: UnixMillis; let job: Job; let generation: Int }

    private let lock = ConditionLock()
    private var heap: [Item] = []
    /// The live generation per job; heap items with another generation are stale and skipped.
    private var generations: [Job: Int] = [:]
    private var nextGeneration = 0
    private var stopped = false
    private let clock: any WallClock
    private let handler: @Sendable (Job) -> Void

    /// `handler` runs on the scheduler's own thread, one job at a time.
    public init(clock: any WallClock, handler: @escaping @Sendable (Job) -> Void) {
        self.clock = clock
        self.handler = handler
        NamedThread.start(name: "flare-scheduler") { [self] in run() }
    }

    /// Schedules `job` at `deadline`, replacing any earlier schedule of the same job.
    public func schedule(_ job: Job, at deadline: UnixMillis) {
        locked {
            guard !stopped else { return }
            nextGeneration += 1
            generations[job] = nextGeneration
            push(Item(deadline: deadline, job: job, generation: nextGeneration))
            // The thread sleeps until the earliest deadline: only a new earliest one must wake it. Waking it for
            // every share created a day ahead cost a context switch per creation.
            if heap.first?.generation == nextGeneration { lock.signal() }
        }
    }

    public func cancel(_ job: Job) {
        locked { _ = generations.removeValue(forKey: job) }
    }

    public var pendingCount: Int { locked { generations.count } }

    /// Stops the thread after the job it may be running; pending jobs are dropped.
    public func stop() {
        locked {
            stopped = true
            heap = []
            generations = [:]
            lock.signal()
        }
    }

    private func locked<T>(_ body: () -> T) -> T { lock.withLock(body) }

    private func run() {
        while let job = nextDueJob() { handler(job) }
    }

    /// Waits until the earliest job is due and takes it; nil once stopped.
    private func nextDueJob() -> Job? {
        locked {
            while !stopped {
                while let top = heap.first, generations[top.job] != top.generation { popMin() }
                guard let top = heap.first else {
                    lock.wait()
                    continue
                }
                let wait = top.deadline - clock.now()
                if wait > 0 {
                    // Sleep on the monotonic clock, at most a minute at a time so a wall-clock step is noticed.
                    lock.wait(timeout: .milliseconds(min(wait, 60_000)))
                    continue
                }
                popMin()
                generations[top.job] = nil
                return top.job
            }
            return nil
        }
    }

    private func push(_ item: Item) {
        heap.append(item)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func popMin() {
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count, heap[right].deadline < heap[smallest].deadline { smallest = right }
            guard smallest != parent else { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
