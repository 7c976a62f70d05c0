import Foundation

/// Sends a share's fixes over HTTP ingest, in order, surviving time without network: fixes wait in a bounded
/// queue (oldest dropped first beyond `capacity`, and counted), outages are retried with backoff, and a fix the
/// server refuses (4xx) is dropped and counted rather than retried forever. When the share is over (410, or the
/// device token is refused) the reporter stops and says why.
///
/// An actor: call `report` from the CoreLocation delegate on any thread; fixes go out in the order they were given.
public actor LocationReporter {
    public enum State: Sendable, Equatable {
        /// Nothing waiting.
        case idle
        /// Sending the queue.
        case sending
        /// The last attempts failed (no network, Flare or its broker unavailable); the queue waits for the next
        /// `report` or `flush`.
        case offline(reason: String)
        /// The server refused the device token (401): fixes stay queued until `updateDeviceToken`.
        case unauthorized
        /// The share has ended; nothing more will be sent.
        case ended
    }

    public struct Statistics: Sendable, Equatable {
        /// Accepted by Flare (202).
        public var sent = 0
        /// Dropped from the queue to stay within its bound, oldest first.
        public var droppedOverflow = 0
        /// Refused by Flare with a 4xx (e.g. invalid coordinates); not retried.
        public var rejected = 0
        /// Attempts that failed for a retryable reason and were tried again.
        public var retries = 0
        /// Waiting to be sent.
        public var pending = 0
        /// When Flare last accepted a fix.
        public var lastAcceptedAt: Date?
        /// The last refusal's error code (`invalid_coordinates`, …).
        public var lastRejection: String?
    }

    public let shareID: String
    public let capacity: Int
    private let client: FlareClient
    private let retry: RetryPolicy
    private var deviceToken: String
    /// Each fix with, for an end-to-end encrypted share, the sealed body it is sent as (sealed once, when queued).
    private var queue: [(sequence: UInt64, location: Location, sealed: Data?)] = []
    private let sealer: (any LocationSealer)?
    private var nextSequence: UInt64 = 0
    private var flushing = false
    public private(set) var state: State = .idle
    private var stats = Statistics()
    /// What Flare asks of the tracker, from the answers to its fixes: `reportLocation` when someone following the
    /// link asked for a fresh position (the phone had gone quiet). Answer it with a fresh fix whose
    /// `answersLocateRequest` is true (on iOS: `CLLocationManager.requestLocation()`, see docs/ios.md). Ends when the
    /// share does.
    public nonisolated let commands: AsyncStream<DeviceCommand>
    private let commandSink: AsyncStream<DeviceCommand>.Continuation

    /// - Parameters:
    ///   - capacity: fixes kept while offline. At one fix every 5 s, 720 is an hour.
    ///   - retry: backoff within one flush; after `maxAttempts` the reporter goes `.offline` and the next
    ///     `report` (or `flush`) tries again.
    ///   - sealer: for an end-to-end encrypted share, the app's secretbox (see `LocationSealer`): every fix is sealed
    ///     before it leaves the phone.
    public init(client: FlareClient, shareID: String, deviceToken: String, capacity: Int = 720, retry: RetryPolicy? = nil,
                sealer: (any LocationSealer)? = nil) {
        self.client = client
        self.sealer = sealer
        self.shareID = shareID
        self.deviceToken = deviceToken
        self.capacity = max(1, capacity)
        self.retry = retry ?? client.retry
        (commands, commandSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(8))
    }

    public init(client: FlareClient, share: CreatedShare, capacity: Int = 720, retry: RetryPolicy? = nil, sealer: (any LocationSealer)? = nil) {
        self.init(client: client, shareID: share.shareID, deviceToken: share.deviceToken, capacity: capacity, retry: retry, sealer: sealer)
    }

    public var statistics: Statistics {
        var copy = stats
        copy.pending = queue.count
        return copy
    }

    /// The fixes still waiting, oldest first.
    public var pendingLocations: [Location] { queue.map(\.location) }

    /// Queues a fix and sends everything waiting, in order. Returns when the queue is empty or sending has
    /// stopped for now (see `state`). A fix given after the share ended is ignored.
    public func report(_ location: Location) async {
        guard state != .ended else { return }
        enqueue(location)
        await flush()
    }

    /// Queues a fix without sending (e.g. from a delegate callback that cannot wait); `flush` sends it.
    public func enqueue(_ location: Location) {
        guard state != .ended else { return }
        var sealed: Data?
        if let sealer {
            // A fix that cannot be sealed is never sent in clear.
            guard let body = try? location.sealed(by: sealer) else {
                stats.rejected += 1
                stats.lastRejection = "cannot_seal"
                return
            }
            sealed = body
        }
        queue.append((nextSequence, location, sealed))
        nextSequence += 1
        if queue.count > capacity {
            queue.removeFirst(queue.count - capacity)
            stats.droppedOverflow += 1
        }
    }

    /// After `extendShare`: the new token, and another try for fixes held back by a refused token.
    public func updateDeviceToken(_ token: String) async {
        deviceToken = token
        if state == .unauthorized { state = .idle }
        await flush()
    }

    /// The share ended (the app stopped it, or its expiry passed): drop what is left and send nothing more.
    public func finish() {
        state = .ended
        queue.removeAll()
        commandSink.finish()
    }

    /// Sends the queue in order. Only one flush runs at a time; a `report` during a flush just queues, and
    /// the running flush picks it up.
    public func flush() async {
        guard !flushing, state != .ended, state != .unauthorized else { return }
        flushing = true
        defer { flushing = false }
        var failures = 0
        while let head = queue.first {
            state = .sending
            do {
                let receipt = if let sealed = head.sealed {
                    try await client.reportOnce(body: sealed, shareID: shareID, deviceToken: deviceToken)
                } else {
                    try await client.reportOnce(head.location, shareID: shareID, deviceToken: deviceToken)
                }
                for command in receipt.commands { commandSink.yield(command) }
                removeIfStillQueued(head.sequence)
                stats.sent += 1
                stats.lastAcceptedAt = Date()
                failures = 0
            } catch {
                if case .api(let apiError) = error, !apiError.isRetryable {
                    if apiError.status == 410 || apiError.code == "share_ended" {
                        finish()
                        return
                    }
                    if apiError.status == 401 {
                        state = .unauthorized
                        return
                    }
                    // This fix will never be accepted (bad coordinates, a timestamp before the share, …).
                    removeIfStillQueued(head.sequence)
                    stats.rejected += 1
                    stats.lastRejection = apiError.code
                    continue
                }
                failures += 1
                guard failures < retry.maxAttempts, !Task.isCancelled else {
                    state = .offline(reason: error.description)
                    return
                }
                stats.retries += 1
                var retryAfter: TimeInterval?
                if case .api(let apiError) = error { retryAfter = apiError.retryAfter }
                let pause = retry.delay(afterAttempt: failures, retryAfter: retryAfter)
                do { try await Task.sleep(nanoseconds: UInt64(pause * 1_000_000_000)) } catch {
                    state = .offline(reason: "cancelled")
                    return
                }
            }
        }
        state = .idle
    }

    /// The head may have been dropped by the bound while its request was in flight; remove by identity.
    private func removeIfStillQueued(_ sequence: UInt64) {
        if let index = queue.firstIndex(where: { $0.sequence == sequence }) { queue.remove(at: index) }
    }
}
