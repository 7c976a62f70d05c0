import Dispatch
import FlareHTTP
import Synchronization

/// Every open live-event stream: counted for /metrics, kept alive with comment lines, closed on shutdown.
final class LiveStreams: @unchecked Sendable {
    // @unchecked: the keepalive timer is only cancelled after init, which libdispatch allows from any thread;
    // everything else is in `state`.
    private struct State {
        var streams: [Int: EventStream] = [:]
        var nextID = 0
    }

    private let timer: DispatchSourceTimer

    private let state = Mutex(State())

    func add(_ stream: EventStream) -> Int {
        state.withLock { state in
            state.nextID += 1
            state.streams[state.nextID] = stream
            return state.nextID
        }
    }

    func remove(_ id: Int) { state.withLock { _ = $0.streams.removeValue(forKey: id) } }

    private func openStreams() -> [EventStream] {
        state.withLock { state -> [EventStream] in Array(state.streams.values) }
    }

    var count: Int { state.withLock { $0.streams.count } }

    private static let keepalive = Array(": keepalive\n\n".utf8)

    init(keepaliveSeconds seconds: Int) {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "flare.sse-keepalive"))
        timer.schedule(deadline: .now() + .seconds(seconds), repeating: .seconds(seconds), leeway: .seconds(1))
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            for stream in openStreams() { stream.send(Self.keepalive) }
        }
        timer.resume()
    }

    func closeAll() {
        timer.cancel()
        for stream in openStreams() { stream.finish() }
    }
}
