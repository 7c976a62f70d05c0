import Glibc
import Synchronization

/// A file that every process touches after it changes something a running process remembers, and that a process
/// may watch (inotify) to learn of it without asking the database: reading `mark` costs one non-blocking `read`.
///
/// The touch comes after the change is committed, and the kernel queues its event before `touch()` returns, so a
/// reader that took the mark before it looked something up, and finds it unchanged later, knows that what it
/// looked up is still current: a change committed after the lookup was touched after it, and moved the mark.
public final class ChangeMarkerFile: Sendable {
    public let path: String
    private struct Watch {
        var descriptor: Int32 = -1
        /// How many rounds of events were read; a watch that cannot be made leaves the mark unknown (nil).
        var count: UInt64 = 0
        var broken = false
    }
    private let watch = Mutex(Watch())

    public init(path: String) { self.path = path }

    deinit {
        watch.withLock { if $0.descriptor >= 0 { close($0.descriptor) } }
    }

    /// Says that something changed: sets the file's time (creating it if it is gone). False when the file can be
    /// neither touched nor made (a read-only directory): a watcher then learns nothing, and must not remember for
    /// longer than it could wait.
    @discardableResult
    public func touch() -> Bool {
        if utimensat(AT_FDCWD, path, nil, 0) == 0 { return true }
        guard errno == ENOENT, Self.create(path) else { return false }
        return true
    }

    /// A number that moves whenever the file is touched, by any process, since the first read; nil when the file
    /// cannot be watched (too many inotify instances, no such directory): the caller then cannot trust what it
    /// remembers and looks things up again.
    public var mark: UInt64? {
        watch.withLock { watch -> UInt64? in
            guard !watch.broken else { return nil }
            if watch.descriptor < 0 {
                guard startWatching(&watch) else { watch.broken = true; return nil }
                return watch.count
            }
            return withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 8) { buffer in drain(&watch, into: buffer) }
        }
    }

    /// Reads every event queued since the last read: one round of them moves the mark by one.
    private func drain(_ watch: inout Watch, into buffer: UnsafeMutableRawBufferPointer) -> UInt64? {
        var read = false
        while true {
            let got = Glibc.read(watch.descriptor, buffer.baseAddress, buffer.count)
            if got > 0 {
                read = true
                if Self.watchEnded(UnsafeRawBufferPointer(rebasing: buffer[..<got])) {
                    // The file was removed or renamed: watch the new one from here on.
                    close(watch.descriptor)
                    watch.descriptor = -1
                    watch.count &+= 1
                    guard startWatching(&watch) else { watch.broken = true; return nil }
                    return watch.count
                }
                continue
            }
            if got < 0 && errno == EINTR { continue }
            if got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            watch.broken = true
            return nil
        }
        if read { watch.count &+= 1 }
        return watch.count
    }

    private func startWatching(_ watch: inout Watch) -> Bool {
        guard access(path, F_OK) == 0 || Self.create(path) else { return false }
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return false }
        let events = UInt32(IN_ATTRIB | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF)
        guard inotify_add_watch(descriptor, path, events) >= 0 else {
            close(descriptor)
            return false
        }
        watch.descriptor = descriptor
        return true
    }

    /// Whether the events read include the end of the watch (the file removed, moved away, or its watch dropped).
    private static func watchEnded(_ events: UnsafeRawBufferPointer) -> Bool {
        let ending = UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)
        let header = MemoryLayout<inotify_event>.size
        var offset = 0
        while offset + header <= events.count {
            let event = events.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
            if event.mask & ending != 0 { return true }
            offset += header + Int(event.len)
        }
        return false
    }

    private static func create(_ path: String) -> Bool {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return false }
        close(descriptor)
        return true
    }
}
