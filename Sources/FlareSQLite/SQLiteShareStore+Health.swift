public import FlareStore
import Foundation

extension SQLiteShareStore: StoreHealth {
    /// After a failed write (a full or read-only disk): checkpoints on the writer's own connection, truncates the
    /// WAL, and from then on lets the writer checkpoint at SQLite's default 1,000 pages. Otherwise a disk with
    /// less room than the WAL's bound filled up with WAL as soon as space returned, and a checkpoint, which needs a
    /// little room in the database file, could then never run again (`make chaos`, disk full). Errors are ignored:
    /// the retried write reports the state.
    public func recoverAfterFailedWrite() {
        database.withLock { db in
            try? db.execute("PRAGMA wal_autocheckpoint=1000")
            try? db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    /// Why the store's directory cannot be written, as the OS says it (e.g. "Read-only file system"), found by
    /// writing a small file next to the database; nil if that works. SQLite reports such failures only as
    /// "disk I/O error".
    public func writeProblem() -> String? {
        let probe = path + ".write-probe"
        let descriptor = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { return String(cString: strerror(errno)) }
        defer {
            close(descriptor)
            unlink(probe)
        }
        let written = write(descriptor, "probe", 5)
        guard written == 5 else { return written < 0 ? String(cString: strerror(errno)) : "short write" }
        return fsync(descriptor) == 0 ? nil : String(cString: strerror(errno))
    }
}
