import Synchronization

/// The services of a process as a list: started in order, stopped in reverse order, under one overall deadline.
/// A failure while starting stops whatever had already started, in reverse, before the error goes on. Modelled on
/// swift-service-lifecycle's `ServiceGroup` (without async: Flare's services run their own threads).
public final class ServiceGroup: Sendable {
    public struct Service: Sendable {
        public let name: String
        let start: @Sendable () throws -> Void
        /// Gets the time left before the overall deadline; returns false when it could not finish its stop (the
        /// service logs what it left undone).
        let stop: @Sendable (Duration) -> Bool

        public init(_ name: String, start: @escaping @Sendable () throws -> Void, stop: @escaping @Sendable (Duration) -> Bool) {
            self.name = name
            self.start = start
            self.stop = stop
        }
    }

    public struct StartError: Error, CustomStringConvertible {
        public let service: String
        public let underlying: any Error
        public var description: String { "cannot start \(service): \(underlying)" }
    }

    /// How a shutdown ended.
    public enum Outcome: Sendable, Equatable {
        /// Every service stopped and said it finished.
        case clean
        /// Every service stopped, but these could not finish their stop (e.g. fixes left unwritten).
        case incomplete([String])
        /// The deadline passed: these were still stopping or not yet stopped.
        case timedOut([String])
    }

    private struct State {
        var started: [Service] = []
        /// While stopping: the services not yet stopped, the one stopping now first.
        var remaining: [String] = []
        var stopping = false
    }

    private let services: [Service]
    private let logger: Logger
    private let state = Mutex(State())
    private let finished = ConditionLock()
    private let outcome = Mutex<Outcome?>(nil)

    public init(_ services: [Service], logger: Logger) {
        self.services = services
        self.logger = logger
    }

    /// Starts every service in order. If one fails, those already started are stopped in reverse (with `deadline`
    /// for all of them) and the failure is thrown.
    public func start(stopDeadline deadline: Duration = .seconds(30)) throws(StartError) {
        for service in services {
            do {
                try service.start()
            } catch {
                logger.error("\(service.name) failed to start: \(error); stopping what had started")
                _ = stopAndWait(deadline: deadline)
                throw StartError(service: service.name, underlying: error)
            }
            state.withLock { $0.started.append(service) }
        }
    }

    /// The services not yet stopped while a shutdown runs (the one stopping now first); empty otherwise.
    public var remaining: [String] { state.withLock { $0.remaining } }

    /// Stops the started services in reverse order on a thread of its own and waits at most `deadline` for it.
    /// Called again while a shutdown runs, it only waits for the same shutdown.
    public func stopAndWait(deadline: Duration) -> Outcome {
        let first = state.withLock { state -> Bool in
            guard !state.stopping else { return false }
            state.stopping = true
            state.remaining = state.started.reversed().map(\.name)
            return true
        }
        let clock = ContinuousClock()
        let end = clock.now + deadline
        if first {
            let toStop = state.withLock { Array($0.started.reversed()) }
            NamedThread.start(name: "flare-shutdown") { [self] in
                var unfinished: [String] = []
                for service in toStop {
                    logger.info("stopping \(service.name)")
                    if !service.stop(max(.zero, end - clock.now)) { unfinished.append(service.name) }
                    state.withLock { state in
                        state.remaining.removeFirst()
                        state.started.removeAll { $0.name == service.name }
                    }
                }
                outcome.withLock { $0 = unfinished.isEmpty ? .clean : .incomplete(unfinished) }
                finished.withLock { finished.broadcast() }
            }
        }
        let done = finished.withLock { finished.wait(timeout: max(.zero, end - clock.now)) { outcome.withLock { $0 } != nil } }
        if done, let result = outcome.withLock({ $0 }) { return result }
        return .timedOut(remaining)
    }
}
