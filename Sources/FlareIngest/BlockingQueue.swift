import FlareSystem

/// A bounded FIFO between threads. `put` blocks while the queue is full: back-pressure travels to the MQTT
/// network thread and from there to the broker's per-client queue, instead of dropping fixes.
final class BlockingQueue<Element: Sendable>: @unchecked Sendable {
    // @unchecked: every stored var is only touched with `lock` held.
    private let lock = ConditionLock(conditions: 3)
    private static var notEmpty: Int { 0 }
    private static var notFull: Int { 1 }
    private static var processedChanged: Int { 2 }
    private var items: [Element] = []
    private var head = 0
    private var closed = false
    private var refusingWhenFull = false
    private var paused = false
    private var refusedCount = 0
    /// For `waitUntilProcessed`: elements ever accepted, and how many of those the consumer has finished with.
    private var acceptedCount = 0
    private var processedCount = 0
    private var refusedAtLastWait = 0
    private var processingWaiters = 0
    private var waitsAbandoned = false
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
    }

    private var count: Int { items.count - head }

    /// Adds an element, waiting for room (and while paused). Returns false (and counts it in `refused`) if the
    /// queue was closed, or would have to wait after `refuseWhenFull`.
    @discardableResult
    func put(_ element: Element) -> Bool {
        locked {
            while (count >= capacity || paused) && !closed && !refusingWhenFull { lock.wait(Self.notFull) }
            guard !closed, count < capacity, !paused else {
                refusedCount += 1
                return false
            }
            items.append(element)
            acceptedCount += 1
            lock.signal(Self.notEmpty)
            return true
        }
    }

    /// Adds an element only if there is room now (not closed, not paused, not full); never waits. Returns its
    /// ticket for `waitUntilProcessed(ticket:timeout:)`, or nil. Not counted in `refused`: the caller answers for it
    /// (an HTTP client is told to retry), so the bridge's acknowledgement gate is not disturbed.
    func offer(_ element: Element) -> Int? {
        locked {
            guard !closed, !paused, count < capacity else { return nil }
            items.append(element)
            acceptedCount += 1
            lock.signal(Self.notEmpty)
            return acceptedCount
        }
    }

    /// Waits until the consumer has processed the element with this ticket (and everything before it), up to
    /// `timeout`: false if that has not happened by then, or waits were abandoned.
    func waitUntilProcessed(ticket: Int, timeout: Duration) -> Bool {
        locked {
            processingWaiters += 1
            defer { processingWaiters -= 1 }
            return lock.wait(Self.processedChanged, timeout: timeout) { processedCount >= ticket || waitsAbandoned }
                && processedCount >= ticket
        }
    }

    /// The consumer has finished with `count` more of the elements it took (in order).
    func markProcessed(_ count: Int) {
        locked {
            processedCount += count
            lock.broadcast(Self.processedChanged)
        }
    }

    /// Waits until the consumer has processed every element accepted so far: true. False if an element was
    /// refused since the last call (it will never be processed), or once `abandonWaits` is called with elements
    /// still unprocessed.
    func waitUntilProcessed() -> Bool {
        locked {
            let target = acceptedCount
            let refusedMeanwhile = refusedCount != refusedAtLastWait
            refusedAtLastWait = refusedCount
            if refusedMeanwhile { return false }
            processingWaiters += 1
            while processedCount < target && !waitsAbandoned { lock.wait(Self.processedChanged) }
            processingWaiters -= 1
            return processedCount >= target
        }
    }

    /// Ends current and later `waitUntilProcessed` calls that would have to wait (the consumer cannot go on).
    func abandonWaits() {
        locked {
            waitsAbandoned = true
            lock.broadcast(Self.processedChanged)
        }
    }

    /// True while a producer waits in `waitUntilProcessed`: it sends nothing more until then, so a consumer
    /// gathering a larger batch would only keep it waiting.
    var isAwaitingProcessing: Bool { locked { processingWaiters > 0 } }

    /// Waits for at least one element and takes up to `maximum`. Returns [] only once closed and empty.
    func takeBatch(maximum: Int) -> [Element] {
        take(maximum: maximum, waiting: true)
    }

    /// Takes up to `maximum` elements that are already there, without waiting.
    func takeAvailable(maximum: Int) -> [Element] {
        take(maximum: maximum, waiting: false)
    }

    private func take(maximum: Int, waiting: Bool) -> [Element] {
        locked {
            while waiting && count == 0 && !closed { lock.wait(Self.notEmpty) }
            guard count > 0 else { return [] }
            let taken = min(maximum, count)
            let batch = Array(items[head..<head + taken])
            head += taken
            if head == items.count {
                items.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 4096 && head * 2 > items.count {
                items.removeFirst(head)
                head = 0
            }
            lock.broadcast(Self.notFull)
            return batch
        }
    }

    /// While paused, producers wait even when there is room (`takeBatch` still hands out what is queued).
    func setPaused(_ isPaused: Bool) {
        locked {
            paused = isPaused
            lock.broadcast(Self.notFull)
        }
    }

    /// From now on a producer that would have to wait is refused instead; one already waiting returns at once.
    func refuseWhenFull() {
        locked {
            refusingWhenFull = true
            lock.broadcast(Self.notFull)
        }
    }

    /// Wakes every waiter; `put` refuses from now on, `takeBatch` drains what is left.
    func close() {
        locked {
            closed = true
            lock.broadcast(Self.notEmpty)
            lock.broadcast(Self.notFull)
        }
    }

    /// An element the producer could not hand over for a reason of its own (counted as `put` counts one it refuses).
    func noteRefused() { locked { refusedCount += 1 } }

    var refused: Int { locked { refusedCount } }
    var isClosed: Bool { locked { closed } }
    var depth: Int { locked { count } }

    private func locked<T>(_ body: () -> T) -> T { lock.withLock(body) }
}
