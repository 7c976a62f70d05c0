import Dispatch
import FlareHTTP
import Synchronization

/// Every open live-event stream: counted for /metrics, kept alive with comment lines, closed on shutdown, and
/// bounded per link and per client address. A stream holds one of the HTTP server's connection slots for as long as
/// it is open, and those slots are shared by every link, the API and OwnTracks HTTP: without a bound, one link (or
/// one address, over many links) opened thousands of times would leave none for anyone else.
final class LiveStreams: @unchecked Sendable {
    // @unchecked: the keepalive timer is only cancelled after init, which libdispatch allows from any thread;
    // everything else is in `state`.
    private struct State {
        var streams: [Int: (stream: EventStream, link: String, address: String)] = [:]
        var perLink: [String: Int] = [:]
        var perAddress: [String: Int] = [:]
        var nextID = 0
    }

    enum Refusal: Error {
        case link, address
    }

    private let timer: DispatchSourceTimer
    private let maximumPerLink: Int
    private let maximumPerAddress: Int

    private let state = Mutex(State())

    /// Registers `stream` for `link` (a share id) from `address` (the rate-limit key of the client), or refuses it
    /// when either already has its maximum open. Returns the id to remove it with.
    func add(_ stream: EventStream, link: String, address: String) throws(Refusal) -> Int {
        try state.withLock { state throws(Refusal) in
            guard state.perLink[link, default: 0] < maximumPerLink else { throw .link }
            guard state.perAddress[address, default: 0] < maximumPerAddress else { throw .address }
            state.nextID += 1
            state.streams[state.nextID] = (stream, link, address)
            state.perLink[link, default: 0] += 1
            state.perAddress[address, default: 0] += 1
            return state.nextID
        }
    }

    func remove(_ id: Int) {
        state.withLock { state in
            guard let removed = state.streams.removeValue(forKey: id) else { return }
            Self.decrement(&state.perLink, removed.link)
            Self.decrement(&state.perAddress, removed.address)
        }
    }

    /// Counts drop to nothing rather than to 0, so the tables hold only what is open.
    private static func decrement(_ counts: inout [String: Int], _ key: String) {
        if let count = counts[key], count > 1 { counts[key] = count - 1 } else { counts[key] = nil }
    }

    private func openStreams() -> [EventStream] {
        state.withLock { state -> [EventStream] in state.streams.values.map(\.stream) }
    }

    var count: Int { state.withLock { $0.streams.count } }

    private static let keepalive = Array(": keepalive\n\n".utf8)

    init(keepaliveSeconds seconds: Int, perLink: Int, perAddress: Int) {
        maximumPerLink = perLink
        maximumPerAddress = perAddress
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
