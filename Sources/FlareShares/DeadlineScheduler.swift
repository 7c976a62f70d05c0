import FlareCore
import FlareSystem

/// Runs jobs at wall-clock deadlines: a min-heap of deadlines and one thread that sleeps until the earliest.
/// Creating, extending or ending a share is O(log n); nothing scans all shares. The thread is its own, so a
/// busy Dispatch pool can never delay an expiry.
public final class DeadlineScheduler<Job: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: every stored var is only touched with `lock` held.
    /// `generation` 0: scheduled with `scheduleUntracked`, never skipped.
    private struct Item { let deadline: UnixMillis; let job: Job; let generation: Int }

    private let lock = ConditionLock()
    private var heap: [Item] = []
    /// The live generation per job; heap items with another generation are stale and skipped.
    private var generations: [Job: Int] = [:]
    private var nextGeneration = 0
    /// How many untracked items wait in the heap.
    private var untracked = 0
    private var stopped = false
    private let clock: any Clock
    private let handler: @Sendable (Job) -> Void

    /// `handler` runs on the scheduler's own thread, one job at a time.
    public init(clock: any Clock, handler: @escaping @Sendable (Job) -> Void) {
        self.clock = clock
        self.handler = handler
        // A clock a test moves wakes the thread to look at the earliest deadline again.
        clock.whenMoved { [weak self] in self?.locked { self?.lock.signal() } }
        NamedThread.start(name: "flare-scheduler") { [self] in run() }
    }

    /// Schedules `job` at `deadline`, replacing any earlier schedule of the same job.
    public func schedule(_ job: Job, at deadline: UnixMillis) {
        locked {
            guard !stopped else { return }
            nextGeneration += 1
            generations[job] = nextGeneration
            // The thread sleeps until the earliest deadline: only a new earliest one must wake it. Waking it for
            // every share created a day ahead cost a context switch per creation.
            if push(Item(deadline: deadline, job: job, generation: nextGeneration)) { lock.signal() }
        }
    }

    /// Schedules `job` at `deadline` as an item that nothing replaces or cancels: it runs when due even if the job
    /// was scheduled again or cancelled since, so its handler must check that it is still due. It costs the heap
    /// item alone, without the table of live generations (some 100 bytes a job at 100,000 jobs): for the one job
    /// every live share has, its expiry, which the handler checks against the share's current end anyway.
    public func scheduleUntracked(_ job: Job, at deadline: UnixMillis) {
        locked {
            guard !stopped else { return }
            untracked += 1
            if push(Item(deadline: deadline, job: job, generation: 0)) { lock.signal() }
        }
    }

    public func cancel(_ job: Job) {
        locked { _ = generations.removeValue(forKey: job) }
    }

    /// Jobs waiting: the tracked ones, and every untracked item (run or not, when due).
    public var pendingCount: Int { locked { generations.count + untracked } }

    /// Stops the thread after the job it may be running; pending jobs are dropped.
    public func stop() {
        locked {
            stopped = true
            heap = []
            generations = [:]
            untracked = 0
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
                while let top = heap.first, top.generation != 0, generations[top.job] != top.generation { popMin() }
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
                if top.generation == 0 { untracked -= 1 } else { generations[top.job] = nil }
                return top.job
            }
            return nil
        }
    }

    /// Returns whether the item is now the earliest.
    private func push(_ item: Item) -> Bool {
        heap.append(item)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { break }
            heap.swapAt(child, parent)
            child = parent
        }
        return child == 0
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
