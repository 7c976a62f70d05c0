public import FlareSystem

/// The metric families of the share lifecycle.
extension FlareMetrics {
    public static let sharesActive = Metrics.Family("flare_shares_active", .gauge, "Shares currently active.")
    public static let sharesCreated = Metrics.Family("flare_shares_created_total", .counter, "Shares created.")
    public static let sosStarted = Metrics.Family("flare_sos_started_total", .counter, "SOS started by devices (a repeated press starts none).")
    public static let deviceFixesDropped = Metrics.Family("flare_device_fixes_dropped_total", .counter, "Positions from devices outside an SOS: answered and dropped, never stored.")
    public static let sharesEnded = Metrics.Family("flare_shares_ended_total", .counter, "Shares ended, by reason.")
    public static let quotaRefusals = Metrics.Family("flare_quota_refusals_total", .counter, "Requests refused for being over their key's limits, by limit.")
    public static let answers = Metrics.Family("flare_answers_total", .counter, "Answers from the family, by kind.")
    public static let trackerChanges = Metrics.Family("flare_tracker_changes_total", .counter, "Tracker states recorded (live, stale, offline), by state.")
    public static let locateRequests = Metrics.Family("flare_locate_requests_total", .counter, "\"Locate now\" requests sent to trackers.")
    public static let httpFixesUnpublished = Metrics.Family("flare_http_fixes_unpublished_total", .counter, "Fixes received over HTTP and stored while the broker was unavailable: kept in memory and published on reconnect.")
    public static let clearPositionsCleared = Metrics.Family("flare_e2e_clear_positions_cleared_total", .counter, "Positions sent in clear to end-to-end encrypted shares, refused and taken off the broker's retained store.")
    public static let mailRefused = Metrics.Family("flare_mail_refused_total", .counter, "Mails to contacts not sent, by reason: mail_budget (the key's hourly budget was spent), same_address (another link of the share went to that address), key_revoked (dropped from the queue when the key was revoked).")
    public static let httpFixesDropped = Metrics.Family("flare_http_outbox_dropped_total", .counter, "HTTP fixes dropped from memory, beyond the most it keeps, before the broker came back (stored all the same; only their publication is lost).")
}
