public import FlareSystem

/// The metric families of ingest: what was taken, refused and stored, whichever way it came.
extension FlareMetrics {
    public static let fixesAccepted = Metrics.Family("flare_fixes_accepted_total", .counter, "Fixes validated and stored.")
    public static let fixesDuplicate = Metrics.Family("flare_fixes_duplicate_total", .counter, "Fixes already stored (QoS 1 redelivery, retained replay, a tracker resending what was not yet confirmed).")
    public static let fixesRejected = Metrics.Family("flare_fixes_rejected_total", .counter, "Messages refused, by reason.")
    public static let lastWills = Metrics.Family("flare_tracker_last_wills_total", .counter, "Trackers' last wills received (a lost connection).")
    public static let storeErrors = Metrics.Family("flare_store_errors_total", .counter, "Failed store writes (retried).")
    public static let ingestQueueDepth = Metrics.Family("flare_ingest_queue_depth", .gauge, "Validated fixes waiting to be written.")
}
