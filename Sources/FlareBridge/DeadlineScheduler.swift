public import FlareCore
import Dispatch
import Synchronization

/// Runs jobs at wall-clock deadlines with one timer: a min-heap of deadlines and a single DispatchSource armed
/// for the earliest. Creating, extending or ending a share is O(log n); nothing scans all shares.
// @unchecked: the only non-Sendable property is the DispatchSource timer, which libdispatch allows to be
// re-scheduled and cancelled from any thread; it is only re-armed with `state`'s lock held.
public final class DeadlineScheduler<Job: Hashable & Sendable>: @unchecked Sendable {
    private struct Item { let deadline: UnixMillis; let job: Job; let generation: Int }

    private struct State {
        var heap: [Item] = []
        /// The live generation per job; heap items with another generation are stale and skipped.
        var generations: [Job: Int] = [:]
        var nextGeneration = 0
        var armedFor: UnixMillis?
        var stopped = false
    }

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "flare.scheduler")
    private let timer: DispatchSourceTimer
    private let clock: any WallClock
    private let handler: @Sendable (Job) -> Void

    /// `handler` runs on the scheduler's own serial queue, one job at a time.
    public init(clock: any WallClock, handler: @escaping @Sendable (Job) -> Void) {
        self.clock = clock
        self.handler = handler
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.setEventHandler { [weak self] in self?.fire() }
        timer.resume()
    }

    /// Schedules `job` at `deadline`, replacing any earlier schedule of the same job.
    public func schedule(_ job: Job, at deadline: UnixMillis) {
        let rearm: Bool = state.withLock { state in
            guard !state.stopped else { return false }
            state.nextGeneration += 1
            state.generations[job] = state.nextGeneration
            Self.push(Item(deadline: deadline, job: job, generation: state.nextGeneration), into: &state.heap)
            return state.armedFor.map { deadline < $0 } ?? true
        }
        if rearm { arm() }
    }

    public func cancel(_ job: Job) {
        state.withLock { _ = $0.generations.removeValue(forKey: job) }
    }

    public var pendingCount: Int { state.withLock { $0.generations.count } }

    public func stop() {
        state.withLock { $0.stopped = true; $0.heap = []; $0.generations = [:] }
        timer.cancel()
    }

    private func arm() {
        // Armed under the lock, so two threads re-arming at once cannot leave the later deadline in force.
        state.withLock { state in
            while let top = state.heap.first, state.generations[top.job] != top.generation { Self.popMin(&state.heap) }
            state.armedFor = state.heap.first?.deadline
            guard let next = state.armedFor, !state.stopped else { return }
            let delay = max(0, next - clock.now())
            timer.schedule(deadline: .now() + .milliseconds(Int(min(delay, Int64(Int32.max)))), leeway: .milliseconds(5))
        }
    }

    private func fire() {
        let now = clock.now()
        let due: [Job] = state.withLock { state in
            var due: [Job] = []
            while let top = state.heap.first, top.deadline <= now {
                Self.popMin(&state.heap)
                if state.generations[top.job] == top.generation {
                    state.generations[top.job] = nil
                    due.append(top.job)
                }
            }
            state.armedFor = nil
            return due
        }
        for job in due { handler(job) }
        arm()
    }

    private static func push(_ item: Item, into heap: inout [Item]) {
        heap.append(item)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private static func popMin(_ heap: inout [Item]) {
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
