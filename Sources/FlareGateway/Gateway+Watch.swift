import FlareAPI
import FlareShares
import FlareCore
import FlareHTTP
import FoundationEssentials

/// Integrators: a watch token lets a dispatch desk or a home-automation system subscribe to one share's topics
/// on the broker (`flare/v1/shares/{id}/#`) until the share ends, and do nothing else there.
extension Gateway {
    func createWatchToken(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        guard let id = ShareID(text) else { throw .shareNotFound }
        let key = try ownerKey(request)
        guard let share = try lookUp(id)?.share, key.owns(share) else { throw .shareNotFound }
        guard share.isActive else { return shareErrorResponse(.ended) }
        return .api(201, WatchToken(shareID: id.rawValue, watchToken: shares.watchToken(for: share),
                                    mqttURL: configuration.mqttPublicURL, mqttUsername: id.rawValue,
                                    topicFilter: Topics.shareRoot(id) + "/#", mqttClientIDPrefix: ClientIDs.watcherPrefix(id),
                                    expiresAt: Date(unixMillis: share.expiresAt)))
    } }
}
