public import FlareCore

/// The metric families of event delivery.
extension FlareMetrics {
    public static let eventDeliveries = Metrics.Family("flare_event_deliveries_total", .counter, "Event delivery attempts, by destination (mqtt, server, or key for all keys' webhooks) and result (delivered, failed, given_up).")
    public static let eventsWaiting = Metrics.Family("flare_events_waiting", .gauge, "Events in the outbox not yet delivered, by destination (mqtt, server, key; on the delivering instance).")
    public static let eventsOldestWaiting = Metrics.Family("flare_events_oldest_waiting_seconds", .gauge, "Age of the oldest undelivered event, by destination (mqtt, server, key; on the delivering instance).")
}
