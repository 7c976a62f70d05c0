import FlareCore
import FlareStore
import Synchronization

/// What this instance knows of each share's newest stored fixes, so that the fix writer can tell which fixes of a
/// batch cannot be stored yet: one later than the share's newest stored time (`tst`), or at that time with a
/// position not stored at it. Those go into `fixes` by a plain COPY; the rest need `INSERT … ON CONFLICT DO NOTHING`,
/// whose speculative insertion costs the database as much again per row (see `PostgresShareStore.insertFixes`).
///
/// The knowledge must never fall behind the database for a share it has, or a stored fix would be copied again
/// (which the writer survives: the COPY fails on the primary key and the batch takes the other path). So:
/// - a share is known only from the database itself (`seed`, read after the change feed listens), then kept up to
///   date by this instance's commits and by the other instances' announcements;
/// - an announcement for a share not known is ignored: it need not be the share's newest;
/// - everything is forgotten, and nothing is known, while the change feed is not connected, since what the others
///   store meanwhile is not heard.
/// Knowing too much is harmless: a fix is then only sent by the slower path.
final class NewestStoredFixes: Sendable {
    struct Position: Hashable {
        let latitude: Double
        let longitude: Double
    }

    /// A share's newest stored time and the positions stored at it; `complete` is false once more were stored at it
    /// than are kept (then no fix at that time is judged new).
    struct Frontier: Equatable {
        var tst: Int64
        var positions: Set<Position>
        var complete: Bool

        static let noFix = Frontier(tst: .min, positions: [], complete: true)

        /// Whether a fix at `tst` and `position` is certainly not stored yet; if so it counts as stored from now on.
        mutating func claim(_ tst: Int64, _ position: Position, keeping limit: Int) -> Bool {
            if tst > self.tst {
                self = Frontier(tst: tst, positions: [position], complete: true)
                return true
            }
            guard tst == self.tst, complete else { return false }
            guard positions.count < limit else {
                complete = false
                positions = []
                return false
            }
            return positions.insert(position).inserted
        }

        mutating func add(_ tst: Int64, _ position: Position, keeping limit: Int) {
            _ = claim(tst, position, keeping: limit)
        }
    }

    private struct State {
        var listening = false
        /// Counts the feed's connections, so that what was read from the database before the latest one is not kept.
        var generation = 0
        var frontiers: [Int64: Frontier] = [:]
    }
    private let state = Mutex(State())
    /// Past this many shares everything is forgotten and read again as needed: live shares are far fewer, and ended
    /// ones are dropped as they end.
    private let capacity: Int
    /// Positions kept per share at its newest time (a tracker sends one; a burst of a benchmark, many).
    let positionsKept: Int

    init(capacity: Int = 200_000, positionsKept: Int = 256) {
        self.capacity = capacity
        self.positionsKept = positionsKept
    }

    /// The change feed connected (`true`: from now on every other instance's commit is heard) or dropped.
    func listening(_ listening: Bool) {
        state.withLock { state in
            state.listening = listening
            state.generation += 1
            state.frontiers.removeAll()
        }
    }

    /// Of `rows`, those whose newest stored fixes must be read from the database before `newFixes` can judge their
    /// fixes, and the feed connection that reading belongs to; none while the change feed is not connected (then
    /// nothing is judged new).
    func unknown(among rows: some Sequence<Int64>) -> (rows: [Int64], generation: Int) {
        state.withLock { state in
            guard state.listening else { return ([], state.generation) }
            var seen = Set<Int64>()
            return (rows.filter { state.frontiers[$0] == nil && seen.insert($0).inserted }, state.generation)
        }
    }

    /// Each share's newest stored fixes as the database had them (a share without fixes: none), read after `unknown`
    /// said `generation`: dropped if the feed reconnected since, as commits before that may be missing from it.
    func seed(_ rows: [Int64], newest: [(row: Int64, tst: Int64, position: Position)], generation: Int) {
        var read = Dictionary(uniqueKeysWithValues: rows.map { ($0, Frontier.noFix) })
        for (row, tst, position) in newest { read[row]?.add(tst, position, keeping: positionsKept) }
        state.withLock { state in
            guard state.listening, state.generation == generation else { return }
            if state.frontiers.count + read.count > capacity { state.frontiers.removeAll() }
            for (row, frontier) in read where state.frontiers[row] == nil { state.frontiers[row] = frontier }
        }
    }

    /// The indexes of the fixes that are certainly not stored yet, judged against their share's newest stored fixes
    /// and the fixes before them in the batch (so a fix twice in one batch is judged new once); from now on they count
    /// as stored, whether or not the caller's transaction commits (knowing too much is harmless: a batch that did
    /// not commit is judged again, and then takes the slower path). No fix of a share not known is among them.
    func claimNewFixes(in fixes: [PendingFix]) -> [Int] {
        state.withLock { state in
            guard state.listening else { return [] }
            var indexes: [Int] = []
            indexes.reserveCapacity(fixes.count)
            for (index, pending) in fixes.enumerated() {
                let position = Position(latitude: pending.fix.latitude, longitude: pending.fix.longitude)
                // In place through the dictionary's subscript: the share's positions are not copied.
                if state.frontiers[pending.shareRow]?.claim(pending.fix.timestamp, position, keeping: positionsKept) == true {
                    indexes.append(index)
                }
            }
            return indexes
        }
    }

    /// Fixes are stored (by this instance, once committed, or by another, as its announcement says).
    func stored(_ fixes: some Sequence<(shareRow: Int64, fix: Fix)>) {
        state.withLock { state in
            guard state.listening else { return }
            for (row, fix) in fixes {
                state.frontiers[row]?.add(fix.timestamp, Position(latitude: fix.latitude, longitude: fix.longitude), keeping: positionsKept)
            }
        }
    }

    /// A share ended or its history was deleted: it is not kept (read again should a fix of it come).
    func forget(_ row: Int64) {
        _ = state.withLock { $0.frontiers.removeValue(forKey: row) }
    }

    func frontier(of row: Int64) -> Frontier? { state.withLock { $0.frontiers[row] } }
}
