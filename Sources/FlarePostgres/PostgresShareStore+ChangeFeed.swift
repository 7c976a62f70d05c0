public import FlareStore
import Synchronization

extension PostgresShareStore: ChangeFeed {
    public var isShared: Bool { true }

    public func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) {
        listener.withLock { listener in
            guard listener == nil else { return }
            let newestStored = newestStored
            listener = PostgresListener(conninfo: url, instance: instance, listening: { newestStored.listening($0) }) { change in
                // Ciphertexts have no time and place to be keyed by: they are not the plain fixes' frontier.
                if case .fixes(let fixes) = change, !fixes.contains(where: { $0.fix.isSealed }) { newestStored.stored(fixes) }
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
