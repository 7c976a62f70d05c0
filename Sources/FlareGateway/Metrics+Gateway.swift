public import FlareSystem

/// The metric families of the HTTP gateway.
extension FlareMetrics {
    public static let sseClients = Metrics.Family("flare_sse_clients", .gauge, "Live viewers connected by Server-Sent Events.")
    public static let httpRequests = Metrics.Family("flare_http_requests_total", .counter, "HTTP requests answered, by status.")
    public static let rateLimited = Metrics.Family("flare_http_rate_limited_total", .counter, "Link requests refused by a rate limit, by scope.")
}
