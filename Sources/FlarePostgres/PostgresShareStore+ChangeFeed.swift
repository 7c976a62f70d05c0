public import FlareStore
import Synchronization

extension PostgresShareStore: ChangeFeed {
    public var isShared: Bool { true }

    public func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) {
        listener.withLock { listener in
            guard listener == nil else { return }
            let newestStored = newestStored
            listener = PostgresListener(conninfo: url, instance: instance, listening: { newestStored.listening($0) }) { change in
                if case .fixes(let fixes) = change { newestStored.stored(fixes) }
                handler(change)
            }
        }
    }

    public func stopWatching() {
        let running = listener.withLock { listener in
            defer { listener = nil }
            return listener
        }
        running?.stop()
    }
}
