public import FlareSystem

/// The metric families of event delivery.
extension FlareMetrics {
    public static let eventDeliveries = Metrics.Family("flare_event_deliveries_total", .counter, "Event delivery attempts, by destination (mqtt, server, key for all keys' webhooks, mail for all contacts' mail) and result (delivered, failed, given_up).")
    public static let eventsWaiting = Metrics.Family("flare_events_waiting", .gauge, "Events in the outbox not yet delivered, by destination (mqtt, server, key, mail; on the delivering instance).")
    public static let eventsOldestWaiting = Metrics.Family("flare_events_oldest_waiting_seconds", .gauge, "Age of the oldest undelivered event, by destination (mqtt, server, key, mail; on the delivering instance).")
    public static let contactNotices = Metrics.Family("flare_contact_notifications_total", .counter, "Contacts told of a share or a missed check-in, by channel (email) and result (notified, failed: refused for good, given up after 24 h, or nothing left to send).")
    public static let pushSent = Metrics.Family("flare_push_sent_total", .counter, "Web Push notifications a push service took (2xx).")
    public static let pushFailed = Metrics.Family("flare_push_failed_total", .counter, "Web Push notifications not taken, by status (the push service's HTTP status, or no_answer, not_allowed, cannot_encrypt): 404 and 410 end the subscription, 429 and 5xx are retried.")
    public static let pushSubscriptions = Metrics.Family("flare_push_subscriptions", .gauge, "Web Push subscriptions stored (links' viewers and contacts' alerts; on the delivering instance).")
}
