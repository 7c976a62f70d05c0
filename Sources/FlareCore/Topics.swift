/// MQTT topic names of the v1 contract.
public enum Topics {
    public static let prefix = "flare/v1/shares/"
    /// What the bridge subscribes to.
    public static let allLocations = "flare/v1/shares/+/location"
    /// The same stream shared among the `flared` instances of one store (MQTT 5 shared subscription): the broker hands
    /// each message to one member of the group, in turn.
    public static let sharedLocations = "$share/flared/flare/v1/shares/+/location"
    /// Where flared tells the broker's auth plugin to revoke a share's tokens (only flared may write it).
    public static let brokerControl = "$CONTROL/flare/v1"
    /// Flare's mark on the broker's retained state (retained; only flared writes it): `{"epoch": N, "at": "…"}`, a
    /// number the keeping instance raises every second and records in the store once the broker acknowledged it. A
    /// broker that shows an older epoch than the store, or none, has forgotten retained messages (it crashed since
    /// its last save) and Flare publishes them again.
    public static let brokerEpoch = "flare/v1/epoch"
    /// What the broker's auth plugin counts (retained; only the broker writes it, only flared reads it):
    /// `{"rate_disconnects": N}`, devices disconnected for sending beyond their share's rate.
    public static let brokerStats = "flare/v1/broker/stats"
    /// Messages on a location topic that flared published itself (a fix that came over HTTP, a restored last position)
    /// carry this MQTT v5 user property, so that no instance's bridge takes them for new fixes.
    public static let originProperty = (name: "flare-origin", value: "flared")

    public static func shareRoot(_ id: ShareID) -> String { prefix + id.rawValue }
    public static func location(_ id: ShareID) -> String { prefix + id.rawValue + "/location" }
    public static func status(_ id: ShareID) -> String { prefix + id.rawValue + "/status" }
    /// OwnTracks commands for the share's tracker (`<pubTopicBase>/cmd`: the iOS app obeys commands only there). Only
    /// flared writes it; the device token reads it.
    public static func command(_ id: ShareID) -> String { location(id) + "/cmd" }
    /// The family's answers to the person who shared (QoS 1, not retained).
    public static func answers(_ id: ShareID) -> String { prefix + id.rawValue + "/answers" }
    /// How many opened the link and how many watch it now (retained).
    public static func audience(_ id: ShareID) -> String { prefix + id.rawValue + "/audience" }
    /// The share's lifecycle events for integrators (QoS 1, not retained; watch tokens read it): `ShareEvent`.
    public static func events(_ id: ShareID) -> String { prefix + id.rawValue + "/events" }
    /// What Flare has stored of the tracker's fixes, for trackers that keep each fix until it is stored.
    public static func stored(_ id: ShareID) -> String { prefix + id.rawValue + "/stored" }

    /// The share of a `flare/v1/shares/{id}/location` topic; nil for anything else.
    public static func shareID(fromLocationTopic topic: String) -> ShareID? {
        guard topic.hasPrefix(prefix), topic.hasSuffix("/location") else { return nil }
        let middle = topic.utf8.dropFirst(prefix.utf8.count).dropLast("/location".utf8.count)
        guard let text = String(middle) else { return nil }
        return ShareID(text)
    }
}
