import FlareBridge
import FlareCore
import FlareHTTP

/// Integrators: a watch token lets a dispatch desk or a home-automation system subscribe to one share's topics
/// on the broker (`flare/v1/shares/{id}/#`) until the share ends, and do nothing else there.
extension Gateway {
    func createWatchToken(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        guard let id = ShareID(text) else { return APIError.notFound("no such share").response }
        guard authenticate(request, share: id, allowDevice: false) == .owner else { return APIError.unauthorized.response }
        guard let snapshot = registry.snapshot(id) else { return APIError.notFound("no such share").response }
        let share = snapshot.share
        guard share.isActive else { return shareErrorResponse(.ended) }
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("share_id", id.rawValue)
        writer.field("watch_token", shares.watchToken(for: share))
        writer.field("mqtt_url", configuration.mqttPublicURL)
        writer.field("mqtt_username", id.rawValue)
        writer.field("topic_filter", Topics.shareRoot(id) + "/#")
        writer.field("expires_at", RFC3339.format(millis: share.expiresAt))
        writer.endObject()
        return .json(201, writer.bytes)
    }
}
