import FlareAPI
import FlareBridge
import FlareCore
import FlareHTTP

/// HTTP ingest: for a device that cannot speak MQTT. The fix is validated here (so the caller gets a clear
/// 4xx), then published through the broker as an OwnTracks location, so integrators see it and the bridge
/// stores it exactly as it stores MQTT fixes.
extension Gateway {
    func ingestLocation(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        guard let id = ShareID(text) else { return APIError.shareNotFound.response }
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer "),
              shares.authorizeDevice(token: String(authorization.dropFirst("Bearer ".count)), for: id)
        else {
            if let found = shares.share(id), !found.share.isActive { return APIError.shareEnded.response }
            return APIError.unauthorized.response
        }
        guard let found = shares.share(id) else { return APIError.shareNotFound.response }
        switch parser.parse(request.body, receivedAt: clock.now(), shareCreatedAt: found.share.createdAt) {
        case .failure(let reason):
            metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
            let status = reason == .tooLarge ? 413 : (reason == .ignoredType ? 422 : 400)
            return APIError(status: status, code: reason.rawValue, message: reason.message).response
        case .success(let fix):
            do {
                try ingestPublisher.publishAndWait(topic: Topics.location(id), payload: fix.ownTracksJSON, timeoutMillis: 3000)
            } catch {
                logger.warning("HTTP ingest for share \(id): broker did not take the fix (\(error))")
                return APIError(status: 503, code: "broker_unavailable", message: "the message broker is unavailable; retry",
                                headers: [("Retry-After", "2")]).response
            }
            return .api(202, IngestReceipt(tst: fix.timestamp))
        }
    }
}
