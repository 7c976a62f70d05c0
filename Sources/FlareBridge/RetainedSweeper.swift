import FlareCore
import FlareMQTT
import FlareSystem
import Synchronization

/// Clears what an ended share's tokens left retained below its location topic.
///
/// Today's device tokens publish the location topic itself and nothing below it, and `ShareService` clears that one
/// when a share ends. A device token issued by an earlier release may still publish to `…/location/#` until it
/// expires, so it may have left retained messages under any number of topics below it, which would outlive the share:
/// every watcher would get them, and the broker would keep them in memory and in its save file. MQTT has no way to
/// list retained topics except by subscribing: for each ended share the sweeper subscribes to `…/location/+/#` at
/// QoS 0 (on a clean connection of its own, `<client id>-sweep`, so the bridge's session sees none of it), publishes
/// a marker, and once the marker is acknowledged every retained message matching the filter has arrived (the broker
/// sends them at SUBSCRIBE, ahead of anything it handles after it); it then clears each with an empty retained publish.
///
/// Shares are swept in batches on the sweeper's own thread; a batch that fails (the broker away) is tried again a
/// few times. Only the instance that ended a share sweeps it: a sweep lost with that instance leaves at most what a
/// token of the earlier release wrote, which expires with that token's rules.
public final class RetainedSweeper: Sendable {
    private let options: MQTTClient.Options
    private let logger: Logger
    private struct Pending { var ids: [ShareID] = []; var attempts: [ShareID: Int] = [:]; var stopped = false }
    private let pending = Mutex(Pending())
    private let wake = ConditionLock()
    private let thread = Mutex<NamedThread?>(nil)
    /// Shares waiting beyond this many are not swept (a flood of ends while the broker is away): said, and counted.
    static let maximumPending = 100_000
    static let batchSize = 200
    static let attempts = 5

    /// - Parameter bridgeOptions: the bridge's options (host, credentials); the sweeper connects as `<client id>-sweep`.
    public init(bridgeOptions: MQTTClient.Options, logger: Logger) {
        var options = bridgeOptions
        options.clientID = bridgeOptions.clientID + "-sweep"
        options.cleanSession = true
        options.lastWill = nil
        self.options = options
        self.logger = logger
    }

    /// Queues a share whose end was just recorded.
    public func sweep(_ id: ShareID) {
        let queued = pending.withLock { pending -> Bool in
            guard !pending.stopped, pending.ids.count < Self.maximumPending else { return false }
            pending.ids.append(id)
            return true
        }
        guard queued else { return }
        wake.withLock { wake.signal() }
        thread.withLock { thread in
            if thread == nil { thread = NamedThread.start(name: "flare-sweeper") { [self] in run() } }
        }
    }

    public func stop() {
        pending.withLock { $0.stopped = true }
        wake.withLock { wake.signal() }
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        running?.join()
    }

    private func run() {
        var client: MQTTClient?
        defer { client?.disconnect() }
        while true {
            let batch = pending.withLock { pending -> [ShareID]? in
                if pending.stopped { return nil }
                let taken = Array(pending.ids.prefix(Self.batchSize))
                pending.ids.removeFirst(taken.count)
                return taken
            }
            guard let batch else { return }
            if batch.isEmpty {
                wake.withLock { wake.wait(timeout: .seconds(5)) }
                if pending.withLock({ $0.ids.isEmpty }) { client?.disconnect(); client = nil }
                continue
            }
            do {
                if let stale = client, !stale.isConnected {
                    stale.disconnect()  // one client with this id at a time: two would take the session from each other
                    client = nil
                }
                if client == nil { client = try connect() }
                let cleared = try sweep(batch, on: client!)
                if cleared > 0 { logger.info("cleared \(cleared) retained messages below the location topics of \(batch.count) ended shares") }
                pending.withLock { pending in for id in batch { pending.attempts[id] = nil } }
            } catch {
                client?.disconnect()
                client = nil
                let given = pending.withLock { pending -> Int in
                    var dropped = 0
                    for id in batch {
                        let attempts = (pending.attempts[id] ?? 0) + 1
                        if attempts < Self.attempts {
                            pending.attempts[id] = attempts
                            pending.ids.append(id)
                        } else {
                            pending.attempts[id] = nil
                            dropped += 1
                        }
                    }
                    return dropped
                }
                logger.warning("cannot clear retained messages of ended shares (\(error)); \(given > 0 ? "gave up on \(given)" : "trying again")")
                wake.withLock { wake.wait(timeout: .seconds(2)) }
            }
        }
    }

    private struct Unavailable: Error, CustomStringConvertible { let description: String }

    /// Retained topics seen below the filters of the batch in hand (the message handler's half of a sweep).
    private final class Seen: Sendable {
        let topics = Mutex<Set<String>>([])
    }
    private let seen = Seen()

    private func connect() throws -> MQTTClient {
        let client = try MQTTClient(options: options)
        client.setMessageHandler { [seen] message in
            // Only what the broker kept: a live message below the topic would be cleared with the next sweep anyway.
            if message.retain, !message.payload.isEmpty { _ = seen.topics.withLock { $0.insert(message.topic) } }
        }
        try client.connect()
        guard client.waitUntilConnected(timeout: .seconds(10)) else {
            client.disconnect()
            throw Unavailable(description: "no connection to the broker within 10 s")
        }
        return client
    }

    /// Returns how many retained messages were cleared.
    private func sweep(_ batch: [ShareID], on client: MQTTClient) throws -> Int {
        seen.topics.withLock { $0 = [] }
        let filters = batch.map { Topics.location($0) + "/+/#" }
        for filter in filters { try client.subscribe(filter, qos: 0) }
        guard try client.waitUntilSubscribed(timeout: .seconds(10)) else { throw Unavailable(description: "no SUBACK within 10 s") }
        // The marker: clearing the location itself again (it is cleared already; an empty retained message changes
        // nothing). Acknowledged, it says the broker has sent every retained message the subscriptions matched.
        try client.publishAndWait(topic: Topics.location(batch[0]), payload: [], qos: 1, retain: true, timeout: .seconds(10))
        for filter in filters { try client.unsubscribe(filter) }
        let topics = seen.topics.withLock { $0 }
        for topic in topics { try client.publish(topic: topic, payload: [], qos: 1, retain: true) }
        if let last = topics.first {
            try client.publishAndWait(topic: last, payload: [], qos: 1, retain: true, timeout: .seconds(10))
        }
        return topics.count
    }
}
