public import FlareCore
public import FlareSystem

/// The events outbox: each event recorded with the change it reports (`PendingEvent`), then handed out per
/// destination until delivered or given up.
public protocol EventRecords: Sendable {
    /// Events due for delivery (`next attempt <= now`), oldest first, at most `limit` for each destination: a
    /// destination with a backlog (a receiver that is slow or was down) never hides the others' events.
    func dueEvents(now: UnixMillis, limit: Int) throws(StoreError) -> [OutboxDelivery]
    /// The destinations have these events: they leave the outbox (and each event with its last destination), in one
    /// transaction.
    func eventsDelivered(_ deliveries: [(row: Int64, destination: EventDestination)]) throws(StoreError)
    /// The destination has the event with this id (sent by the instance that made it, ahead of the outbox).
    func eventDelivered(id: String, destination: EventDestination) throws(StoreError)
    /// The delivery is over (done, or given up) and `report`, an event of the same share telling how it went,
    /// goes into the outbox, in one transaction: a mail's outcome is announced once, and only for a delivery that ended.
    func eventDelivered(row: Int64, destination: EventDestination, reporting report: PendingEvent) throws(StoreError)
    /// An attempt failed: try again at `retryAt`, or give up (nil) and drop it.
    func eventFailed(row: Int64, destination: EventDestination, attempts: Int, retryAt: UnixMillis?) throws(StoreError)
    /// An event that reports no change of a row (a repeated SOS press), recorded against its share on its own.
    func recordEvent(_ event: PendingEvent, shareRow: Int64) throws(StoreError)
    /// What waits in the outbox, per destination.
    func outboxBacklog() throws(StoreError) -> [OutboxBacklog]
}

extension EventRecords {
    public func eventDelivered(row: Int64, destination: EventDestination) throws(StoreError) {
        try eventsDelivered([(row, destination)])
    }
}

/// An event to record in the outbox with the change it reports, in the same transaction, and only if the change is
/// made: an event is never announced for a change that did not happen, nor lost for one that did. Besides
/// `destinations`, the store adds the webhook of the key that owns the share, if that key has one.
public struct PendingEvent: Sendable {
    public let event: ShareEvent
    public let destinations: [EventDestination]

    public init(_ event: ShareEvent, destinations: [EventDestination]) {
        self.event = event
        self.destinations = destinations
    }
}

/// One event waiting for one destination in the outbox.
public struct OutboxDelivery: Sendable, Equatable {
    /// The event's row in the store.
    public let row: Int64
    public let destination: EventDestination
    /// Failed attempts so far.
    public let attempts: Int
    public let event: ShareEvent
    /// The key that owns the event's share (nil: a share made without one): the deliverer serves keys in turn.
    public let ownerKey: Int64?

    public init(row: Int64, destination: EventDestination, attempts: Int, event: ShareEvent, ownerKey: Int64? = nil) {
        self.row = row
        self.destination = destination
        self.attempts = attempts
        self.event = event
        self.ownerKey = ownerKey
    }
}

/// How many events wait for a destination, and since when the oldest.
public struct OutboxBacklog: Sendable, Equatable {
    public let destination: EventDestination
    public let waiting: Int
    public let oldestAt: UnixMillis

    public init(destination: EventDestination, waiting: Int, oldestAt: UnixMillis) {
        self.destination = destination
        self.waiting = waiting
        self.oldestAt = oldestAt
    }
}
