/// Every error of the API: `{"error":"<code>","message":"…"}` with a fitting HTTP status.
public struct APIErrorBody: Codable, Sendable, Equatable {
    /// Machine-readable: `unauthorized`, `not_found`, `share_ended`, `invalid_coordinates`, `rate_limited`, …
    public let error: String
    public let message: String

    public init(error: String, message: String) {
        self.error = error
        self.message = message
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        error = try c.decode(String.self, forKey: .error)
        message = try c.decodeIfPresent(String.self, forKey: .message) ?? ""
    }
}

/// 429 `quota_exceeded`: the request is over one of its key's limits, named in `limit` (`max_live`,
/// `max_duration_s`, `create_rate`) with its `value`; `Retry-After` comes with it where waiting helps.
public struct QuotaErrorBody: Codable, Sendable, Equatable {
    public let error: String
    public let message: String
    public let limit: String
    public let value: Int64

    public init(message: String, limit: String, value: Int64) {
        self.error = "quota_exceeded"
        self.message = message
        self.limit = limit
        self.value = value
    }
}

/// `GET /healthz`: 200 when everything is up, 503 otherwise; which part is down, and nothing else. It is public
/// (a proxy's health check reads it): counts such as live shares and free disk space are in /metrics, which is not.
public struct HealthStatus: Codable, Sendable, Equatable {
    public enum Overall: String, Codable, Sendable { case ok, unhealthy }
    public let status: Overall
    /// `connected` or `disconnected`.
    public let mqtt: String
    /// `ok`, `failing` (writes fail) or `low_space` (below FLARE_STORE_MIN_FREE_MB).
    public let store: String

    public init(status: Overall, mqtt: String, store: String) {
        self.status = status
        self.mqtt = mqtt
        self.store = store
    }
}
