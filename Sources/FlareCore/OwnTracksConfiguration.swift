/// The OwnTracks apps' `_type: configuration` for one share, so the iOS and Android apps publish into it
/// unchanged: MQTT mode, the share's broker credentials (username = share id, password = device token), and the
/// share's location topic as `pubTopicBase`. Key names and values follow the OwnTracks booklet
/// (tech/json.md, `_type=configuration`; features/remoteconfig.md for `.otrc` files and `owntracks:///config`).
public struct OwnTracksConfiguration: Sendable {
    public var shareID: ShareID
    public var deviceToken: String
    public var broker: MQTTURL
    /// Two characters shown on the map; from the share's name when it has letters.
    public var trackerID: String
    /// `monitoring` 2 = "move" mode: continuous GPS updates, the right mode for an emergency (1 = significant
    /// changes only, which can leave minutes between fixes).
    public var monitoring: Int = 2
    /// Seconds between fixes in move mode.
    public var locatorInterval: Int = 10
    /// Metres moved before a new fix in move mode.
    public var locatorDisplacement: Int = 10

    public init(shareID: ShareID, deviceToken: String, broker: MQTTURL, shareName: String?) {
        self.shareID = shareID
        self.deviceToken = deviceToken
        self.broker = broker
        self.trackerID = Self.trackerID(from: shareName)
    }

    static func trackerID(from name: String?) -> String {
        let letters = (name ?? "").unicodeScalars.filter { (65...90).contains($0.value) || (97...122).contains($0.value) || (48...57).contains($0.value) }
        let initials = String(String.UnicodeScalarView(letters.prefix(2))).uppercased()
        return initials.count == 2 ? initials : "SO"
    }

    /// The configuration JSON (what the `.otrc` file holds).
    public var json: [UInt8] {
        var writer = JSONWriter(capacity: 1024)
        writer.beginObject()
        writer.field("_type", "configuration")
        writer.field("mode", 0)                                // private MQTT
        writer.field("host", broker.host)
        writer.field("port", broker.port)
        writer.field("tls", broker.tls)
        writer.field("auth", true)
        writer.field("username", shareID.rawValue)
        writer.field("password", deviceToken)
        writer.field("deviceId", "sos")
        writer.field("tid", trackerID)
        // One MQTT session per share: a phone provisioned for a second share must not take over the first's.
        writer.field("clientId", "flare-\(shareID.rawValue)")
        // Locations go to exactly this topic; the apps' other messages (event, status, waypoint) go below it,
        // where the device token may publish and the bridge does not listen.
        writer.field("pubTopicBase", Topics.location(shareID))
        writer.field("pubQos", 1)
        writer.field("pubRetain", true)
        // The broker publishes the app's last will on the same topic: it must never replace the retained position.
        writer.field("willRetain", false)
        writer.field("mqttProtocolLevel", 4)                   // MQTT 3.1.1: both apps speak it
        writer.field("keepalive", 60)
        writer.field("cleanSession", false)
        writer.field("monitoring", monitoring)
        writer.field("locatorInterval", locatorInterval)
        writer.field("locatorDisplacement", locatorDisplacement)
        writer.field("locatorPriority", 3)                     // Android: GPS
        // The device token may publish into its own share and read its status, nothing else: no subscriptions,
        // no remote commands.
        writer.field("sub", false)
        writer.field("cmd", false)
        writer.field("allowRemoteLocation", false)
        writer.field("remoteConfiguration", false)
        writer.field("extendedData", true)                     // battery state and connectivity for the family
        writer.endObject()
        return writer.bytes
    }

    /// `owntracks:///config?inline=<base64 of the JSON>`: opens the app and imports the configuration.
    ///
    /// Standard base64, not base64url: the Android app decodes with the standard alphabet and refuses `-` and `_`.
    /// Its `+`, `/` and `=` are percent-encoded so that no URL parser turns `+` into a space.
    public var inlineURL: String {
        var base64 = ""
        for character in Base64URL.encode(json) {
            switch character {
            case "-": base64 += "%2B"
            case "_": base64 += "%2F"
            default: base64.append(character)
            }
        }
        let padding = (3 - json.count % 3) % 3
        return "owntracks:///config?inline=" + base64 + String(repeating: "%3D", count: padding)
    }
}
