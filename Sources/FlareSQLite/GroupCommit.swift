import FlareStore
import Synchronization

/// Writes that arrive together, committed in one transaction: the caller that takes the store's lock runs every
/// write waiting at that moment, its own and the others', and those callers find theirs done when the lock comes to
/// them. Each caller still returns only after its own write is committed.
///
/// For share creations: each is a transaction of its own (the share, its `share.started` event and the event's
/// deliveries), and its commit writes the pages it dirtied into the WAL (a `pwrite` of 30 KB or so), while the
/// other HTTP threads wait for the lock. Creations that wait together touch the same last pages of the same tables,
/// so one commit for all of them writes each page once. Alone, a creation is committed at once, as before.
final class GroupCommit<Output: Sendable>: Sendable {
    typealias Work = @Sendable (SQLiteDatabase) throws(StoreError) -> Output

    /// One caller's write and, once run, its outcome. Read and written only under the store's lock.
    private final class Ticket: @unchecked Sendable {
        let work: Work
        var outcome: Result<Output, StoreError>?
        init(_ work: @escaping Work) { self.work = work }
    }

    private let waiting = Mutex<[Ticket]>([])

    /// How many writes wait for the lock now.
    var waitingCount: Int { waiting.withLock { $0.count } }

    /// Runs `work` inside a transaction, with whatever else is waiting; returns its output once committed. A write
    /// that fails fails alone: the others are then run again, each in a transaction of its own.
    func run(in store: SQLiteShareStore, _ work: @escaping Work) throws(StoreError) -> Output {
        let ticket = Ticket(work)
        waiting.withLock { $0.append(ticket) }
        return try store.database.withLock { db throws(StoreError) -> Output in
            // Taken by a caller that held the lock before this one: it ran and committed (or failed) it.
            if let outcome = ticket.outcome { return try outcome.get() }
            let batch = waiting.withLock { waiting in
                let batch = waiting
                waiting = []
                return batch
            }
            do {
                try db.transaction { () throws(StoreError) in
                    for each in batch { each.outcome = .success(try each.work(db)) }
                }
            } catch {
                for each in batch { each.outcome = Self.alone(each.work, db) }
            }
            // Every ticket in the batch has its outcome now, this caller's among them (it was waiting, untaken).
            return try ticket.outcome!.get()
        }
    }

    private static func alone(_ work: Work, _ db: SQLiteDatabase) -> Result<Output, StoreError> {
        do { return .success(try db.transaction { () throws(StoreError) -> Output in try work(db) }) } catch { return .failure(error) }
    }
}
