import FlareSystem
/// A long-lived response that the application pushes bytes into (used for Server-Sent Events).
///
/// While nothing is queued the server suspends the connection, and `send` resumes it: no thread
/// waits and nothing polls. The queue is bounded: if more than `maxBufferedBytes` wait for a slow
/// client, the stream closes itself and drops the connection (an EventSource reconnects).
///
/// A suspended connection does not notice that its client went away; that shows at the next
/// `send`, so an application that wants prompt `onClose` sends a heartbeat now and then.
public final class EventStream: @unchecked Sendable {
    // @unchecked: all mutable state is `unlockedState`, touched only inside `withState` (under `lock`).
    public let maxBufferedBytes: Int
    private let lock = ConditionLock()
    private var unlockedState = State()

    public init(maxBufferedBytes: Int = 256 * 1024) {
        self.maxBufferedBytes = maxBufferedBytes
    }

    /// Queues `bytes` for the client. Returns false if the stream is closed (or this send overflowed it).
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        let (accepted, callbacks) = withState { state -> (Bool, [@Sendable () -> Void]) in
            guard state.phase == .open else { return (false, []) }
            if state.queuedCount + bytes.count > maxBufferedBytes {
                return (false, state.close(.aborted))
            }
            state.pending.append(contentsOf: bytes)
            state.wakeConnection()
            return (true, [])
        }
        callbacks.forEach { $0() }
        return accepted
    }

    /// Queues `bytes` once the client has taken enough of what was queued before: a producer of a long body (a track of
    /// a day's positions) waits for a slow client instead of holding the whole body in memory. False when the stream
    /// closed, or the client took nothing for `timeout`.
    public func sendWhenRoom(_ bytes: [UInt8], timeout: Duration) -> Bool {
        let clock = ContinuousClock(), deadline = clock.now + timeout
        while true {
            let ready: Bool? = withState { state in
                guard state.phase == .open else { return false }
                return state.queuedCount == 0 || state.queuedCount + bytes.count <= maxBufferedBytes ? true : nil
            }
            if ready == false { return false }
            if ready == true { return send(bytes) }
            guard clock.now < deadline else { return false }
            // Woken by the connection's read (`read(into:)`); the short wait also notices a close, which does not signal.
            lock.withLock { lock.wait(0, timeout: .milliseconds(50)) }
        }
    }

    /// Sends what is queued, then ends the response. The stream counts as closed from now on.
    public func finish() {
        let callbacks = withState { state in
            state.phase == .open ? state.close(.finishing) : []
        }
        callbacks.forEach { $0() }
    }

    public var isClosed: Bool {
        withState { $0.phase != .open }
    }

    /// Runs `callback` once when the stream closes: client gone, `finish()`, overflow, or server stop.
    /// Runs it at once if the stream is already closed. It runs on the thread that closed the
    /// stream (a server thread, or the caller of `send`/`finish`/`stop`), outside any lock.
    public func onClose(_ callback: @escaping @Sendable () -> Void) {
        let alreadyClosed = withState { state in
            if state.phase == .open { state.closeCallbacks.append(callback) }
            return state.phase != .open
        }
        if alreadyClosed { callback() }
    }

    // MARK: - Used by the server (MicroHTTPDaemon.swift)

    enum ReadResult {
        case bytes(Int)
        /// Nothing queued: the connection was suspended and `send`/`finish`/close will resume it.
        case suspended
        case end
        case abort
    }

    /// Binds the stream to the connection that will carry it; a stream can be sent only once.
    func attach(connection: OpaquePointer, owner: MicroHTTPDaemon) -> Bool {
        withState { state in
            guard !state.attached else { return false }
            state.attached = true
            state.connection = connection
            state.owner = owner
            return true
        }
    }

    /// Called on the connection's MHD thread whenever it can take more bytes.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        withState { state in
            if state.phase == .aborted { return .abort }
            let count = min(state.queuedCount, buffer.count)
            if count > 0 {
                state.pending.withUnsafeBytes { queued in
                    buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: queued[state.readIndex..<state.readIndex + count]))
                }
                state.readIndex += count
                state.compact()
                lock.broadcast(0)
                return .bytes(count)
            }
            if state.phase == .finishing { return .end }
            guard let connection = state.connection else { return .abort }
            // Suspending under the lock pairs every suspend with exactly one resume in `wakeConnection`.
            state.suspended = true
            EventStream.suspend(connection)
            return .suspended
        }
    }

    /// MHD is done with the response (finished, client gone, or server stopped).
    func detach() {
        let (callbacks, owner) = withState { state -> ([@Sendable () -> Void], MicroHTTPDaemon?) in
            state.connection = nil
            state.suspended = false
            state.pending = []
            state.readIndex = 0
            let owner = state.owner
            state.owner = nil
            return (state.phase == .open ? state.close(.aborted) : [], owner)
        }
        owner?.forget(self)
        callbacks.forEach { $0() }
    }

    private func withState<Result>(_ body: (inout State) -> Result) -> Result {
        lock.withLock { body(&unlockedState) }
    }

    private struct State {
        enum Phase { case open, finishing, aborted }

        var phase = Phase.open
        var pending: [UInt8] = []
        var readIndex = 0
        var attached = false
        var connection: OpaquePointer?
        /// True while `connection` is suspended by us and owed a resume.
        var suspended = false
        var owner: MicroHTTPDaemon?
        var closeCallbacks: [@Sendable () -> Void] = []

        var queuedCount: Int { pending.count - readIndex }

        /// Leaves the open phase; returns the callbacks to run once the lock is released.
        mutating func close(_ phase: Phase) -> [@Sendable () -> Void] {
            self.phase = phase
            if phase == .aborted {
                pending = []
                readIndex = 0
            }
            wakeConnection()
            defer { closeCallbacks = [] }
            return closeCallbacks
        }

        mutating func wakeConnection() {
            guard suspended, let connection else { return }
            suspended = false
            EventStream.resume(connection)
        }

        /// Drops sent bytes; keeps a small buffer's capacity but never a burst's (20k viewers add up).
        mutating func compact() {
            if readIndex == pending.count {
                pending.removeAll(keepingCapacity: pending.capacity <= 16 * 1024)
                readIndex = 0
            } else if readIndex >= 16 * 1024 {
                pending.removeFirst(readIndex)
                readIndex = 0
            }
        }
    }
}
