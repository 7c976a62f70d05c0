import FlareAPI
import FlareBridge
import FlareCore
import FlareHTTP
import FoundationEssentials

/// Integrators: a watch token lets a dispatch desk or a home-automation system subscribe to one share's topics
/// on the broker (`flare/v1/shares/{id}/#`) until the share ends, and do nothing else there.
extension Gateway {
    func createWatchToken(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        guard let id = ShareID(text) else { return APIError.shareNotFound.response }
        guard case .success(let key) = ownerKey(request) else { return APIError.unauthorized.response }
        guard let share = shares.share(id)?.share, key.owns(share) else { return APIError.shareNotFound.response }
        guard share.isActive else { return shareErrorResponse(.ended) }
        return .api(201, WatchToken(shareID: id.rawValue, watchToken: shares.watchToken(for: share),
                                    mqttURL: configuration.mqttPublicURL, mqttUsername: id.rawValue,
                                    topicFilter: Topics.shareRoot(id) + "/#", mqttClientIDPrefix: ClientIDs.watcherPrefix(id),
                                    expiresAt: Date(unixMillis: share.expiresAt)))
    }
}
