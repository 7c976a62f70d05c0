import FlareCore
import FlareSystem

/// Host name lookups for a caller that must not wait long: an HTTP request setting a webhook. Each lookup runs on a
/// thread of its own, at most `limit` at once, and the caller waits at most the timeout it gives.
///
/// getaddrinfo cannot be cancelled: a name whose DNS never answers holds its thread until the resolver gives up
/// (resolv.conf's defaults: 5 s, twice per server). The caller is told `.unfinished` at its timeout, and the lookup
/// finishes on its own thread; its answer is kept for `keepMillis`, so that the caller's retry finds it at once. A
/// caller for a name already being looked up waits for that lookup instead of starting another.
package final class HostLookups: @unchecked Sendable {
    // @unchecked: `state` is only touched with `lock` held; everything else is immutable.
    package enum Answer: Equatable {
        case addresses([IPAddress])
        /// No answer within the caller's timeout, or `limit` lookups under way already: ask again shortly.
        case unfinished
    }

    private struct State {
        var pending: Set<String> = []
        var answers: [String: (addresses: [IPAddress], at: Int64)] = [:]
    }

    private let resolver: any HostResolving
    private let clock: any Clock
    private let limit: Int
    private let keepMillis: Int64
    private let lock = ConditionLock()
    private var state = State()

    /// - Parameters:
    ///   - limit: lookups under way at once; beyond that a caller is answered `.unfinished` without waiting, so that
    ///     names that never answer cannot pile up threads.
    ///   - keepMillis: how long an answer is kept for the next caller. Where the address rule is concerned this is
    ///     only a first check: every delivery looks the name up again and connects to what it checked then.
    package init(resolver: any HostResolving, clock: any Clock, limit: Int = 4, keepMillis: Int64 = 30_000) {
        self.resolver = resolver
        self.clock = clock
        self.limit = limit
        self.keepMillis = keepMillis
    }

    /// What `host` stands for, if a lookup answers within `timeout`.
    package func addresses(of host: String, timeout: Duration) -> Answer {
        let name = host.lowercased()
        enum Step { case answered([IPAddress]), start, wait, full }
        let step: Step = lock.withLock {
            let now = clock.monotonicMillis()
            state.answers = state.answers.filter { now - $0.value.at < keepMillis }
            if let kept = state.answers[name] { return .answered(kept.addresses) }
            if state.pending.contains(name) { return .wait }
            guard state.pending.count < limit else { return .full }
            state.pending.insert(name)
            return .start
        }
        switch step {
        case .answered(let addresses): return .addresses(addresses)
        case .full: return .unfinished
        case .wait: break
        case .start:
            NamedThread.start(name: "flare-lookup") { [self] in
                let found = resolver.addresses(of: name)
                lock.withLock {
                    state.pending.remove(name)
                    if state.answers.count >= 1_000 { state.answers.removeAll(keepingCapacity: true) }
                    state.answers[name] = (found, clock.monotonicMillis())
                    lock.broadcast()
                }
            }
        }
        return lock.withLock {
            guard lock.wait(timeout: timeout, until: { state.answers[name] != nil }), let kept = state.answers[name] else { return .unfinished }
            return .addresses(kept.addresses)
        }
    }
}
