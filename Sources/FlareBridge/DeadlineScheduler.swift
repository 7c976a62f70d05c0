public import FlareCore

#if canImport(Glibc)
import Glibc
#endif

/// Runs jobs at wall-clock deadlines: a min-heap of deadlines and one thread that sleeps until the earliest.
/// Creating, extending or ending a share is O(log n); nothing scans all shares. The thread is its own, so a
/// busy Dispatch pool can never delay an expiry.
public final class DeadlineScheduler<Job: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: every stored var is only touched with `mutex` held.
    private struct Item { let deadline: UnixMillis; let job: Job; let generation: Int }

    private var mutex = pthread_mutex_t()
    private var changed = pthread_cond_t()
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
        pthread_mutex_init(&mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(&changed, &attributes)
        pthread_condattr_destroy(&attributes)
        startWorkerThread(name: "flare-scheduler") { [self] in run() }
    }

    /// Schedules `job` at `deadline`, replacing any earlier schedule of the same job.
    public func schedule(_ job: Job, at deadline: UnixMillis) {
        locked {
            guard !stopped else { return }
            nextGeneration += 1
            generations[job] = nextGeneration
            push(Item(deadline: deadline, job: job, generation: nextGeneration))
            pthread_cond_signal(&changed)
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
            pthread_cond_signal(&changed)
        }
    }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }

    private func run() {
        pthread_mutex_lock(&mutex)
        while !stopped {
            while let top = heap.first, generations[top.job] != top.generation { popMin() }
            guard let top = heap.first else {
                pthread_cond_wait(&changed, &mutex)
                continue
            }
            let wait = top.deadline - clock.now()
            if wait > 0 {
                // Sleep on the monotonic clock, at most a minute at a time so a wall-clock step is noticed.
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                let sleepMillis = min(wait, 60_000)
                var until = timespec(tv_sec: now.tv_sec + Int(sleepMillis / 1000), tv_nsec: now.tv_nsec + Int(sleepMillis % 1000) * 1_000_000)
                if until.tv_nsec >= 1_000_000_000 { until.tv_sec += 1; until.tv_nsec -= 1_000_000_000 }
                pthread_cond_timedwait(&changed, &mutex, &until)
                continue
            }
            popMin()
            generations[top.job] = nil
            pthread_mutex_unlock(&mutex)
            handler(top.job)
            pthread_mutex_lock(&mutex)
        }
        pthread_mutex_unlock(&mutex)
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
