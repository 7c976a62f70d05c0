import FlareCore
import Synchronization
public import FlareSystem
#if canImport(Glibc)
import Glibc
#endif

/// Free space on the filesystem that holds the store. A write only fails once the disk is full, and an idle
/// bridge writes nothing, so without this a full disk would read as healthy until the next SOS arrived.
public final class StoreSpace: Sendable {
    public struct Reading: Sendable, Equatable {
        /// Bytes an unprivileged writer may still use; nil when the filesystem cannot be asked.
        public let freeBytes: Int64?
        public let isLow: Bool
    }

    private let directory: String
    public let minimumFreeBytes: Int64
    private let logger: Logger
    private let wasLow = Atomic<Bool>(false)

    /// - Parameter storePath: the database file; its directory's filesystem is the one measured.
    public init(storePath: String, minimumFreeBytes: Int64, logger: Logger) {
        let slash = storePath.lastIndex(of: "/")
        directory = slash.map { String(storePath[..<$0]) }.map { $0.isEmpty ? "/" : $0 } ?? "."
        self.minimumFreeBytes = minimumFreeBytes
        self.logger = logger
    }

    /// Measures now (one statvfs call); logs when the space falls below the minimum and when it comes back.
    public func read() -> Reading {
        var stats = statvfs()
        guard statvfs(directory, &stats) == 0 else { return Reading(freeBytes: nil, isLow: false) }
        let free = Int64(stats.f_bavail) * Int64(stats.f_frsize)
        let isLow = free < minimumFreeBytes
        if wasLow.exchange(isLow, ordering: .relaxed) != isLow {
            if isLow {
                logger.error("the store's disk has \(free / 1_048_576) MiB free, below the \(minimumFreeBytes / 1_048_576) MiB minimum: fixes will stop being stored when it is full")
            } else {
                logger.info("the store's disk has \(free / 1_048_576) MiB free again")
            }
        }
        return Reading(freeBytes: free, isLow: isLow)
    }
}
