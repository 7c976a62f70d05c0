import FlareShares
import FlareCore
public import FlareHTTP
import FlareSystem

/// `/metrics` (Prometheus text): on a listener of its own (`FLARE_METRICS_ADDR`, loopback by default), and on the
/// public listener only with `FLARE_METRICS_TOKEN`, to requests that bear it. The counts in it (live shares,
/// viewers, refusals) are the operator's, not the public's.
extension Gateway {
    /// The metrics listener's entry point: `GET /metrics`, nothing else. Not rate-limited: only whom the operator lets
    /// reach this address (loopback by default) gets here, and tools that poll it (a dashboard, `make bench` and the
    /// fault tests every 50–250 ms) were answered 429 within seconds, and read the counts as missing.
    @Sendable public func handleMetricsListener(_ request: HTTPRequest) -> HTTPResponse {
        var response: HTTPResponse
        switch (request.method, request.path) {
        case ("GET", "/metrics"): response = metricsText()
        case (_, "/metrics"):
            response = APIError.methodNotAllowed.response
            response.headers.append(("Allow", "GET"))
        default: response = APIError.notFound("this listener serves /metrics only").response
        }
        response.headers.append(("X-Content-Type-Options", "nosniff"))
        return response
    }

    /// `/metrics` on the public listener: 404 like any endpoint that is not there, unless a token is configured;
    /// then 401 unless the request bears it.
    func publicMetrics(_ request: HTTPRequest) -> HTTPResponse {
        guard let expected = metricsTokenHash else { return APIError.notFound("no such endpoint").response }
        guard request.method == "GET" else { return APIError.methodNotAllowed.response }
        if let refused = metricsRateLimited(request) { return refused }
        // Compared as SHA-256 digests in constant time: neither how much of a guess matches nor its length shows
        // in the answer's timing.
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer "),
              SecretHash(of: String(authorization.dropFirst("Bearer ".count))).matches(expected) else {
            // A wrong guess costs its address several requests' worth.
            _ = metricsLimiter.take(clientKey(request), cost: configuration.unknownTokenCost, nowMillis: clock.monotonicMillis())
            return APIError.unauthorized.response
        }
        return metricsText()
    }

    private func metricsRateLimited(_ request: HTTPRequest) -> HTTPResponse? {
        guard let wait = metricsLimiter.take(clientKey(request), nowMillis: clock.monotonicMillis()) else { return nil }
        metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "metrics")])
        return APIError.rateLimited(retryAfter: wait).response
    }

    private func metricsText() -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8"), ("Cache-Control", "no-store")],
                     body: .bytes(Array(metrics.renderText().utf8)))
    }
}
