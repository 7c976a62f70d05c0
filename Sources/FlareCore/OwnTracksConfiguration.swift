/// The OwnTracks apps' `_type: configuration` for one share, so the iOS and Android apps publish into it
/// unchanged: MQTT mode, the share's broker credentials (username = share id, password = device token), and the
/// share's location topic as `pubTopicBase`. Key names and values follow the OwnTracks booklet
/// (tech/json.md, `_type=configuration`; features/remoteconfig.md for `.otrc` files and `owntracks:///config`), each
/// checked against the apps' own import code: owntracks/android v2.4.12, v2.5.7–v2.5.9 and master (2.6.0), and
/// owntracks/ios 26.2.3 and master. A key either app ignores is left out, so nothing here pretends to configure
/// what it does not.
///
/// The iOS app from 26.2.2 and the Android app from 2.6.0 import a configuration by link or file only after the
/// user has turned on "allow configuration by URI and config file" (`allowConfigurationByURIAndConfigFile`, off by
/// default, and no configuration can turn it on): the setup instructions say so.
public struct OwnTracksConfiguration: Sendable {
    public var shareID: ShareID
    public var deviceToken: String
    public var broker: MQTTURL
    /// Two characters shown on the map; from the share's name when it has letters.
    public var trackerID: String
    /// `monitoring` 2 = "move" mode: continuous GPS updates, the right mode for an emergency (1 = significant
    /// changes only, which can leave minutes between fixes).
    public var monitoring: Int = 2
    /// Seconds between fixes in move mode: iOS reads `locatorInterval`, Android `moveModeLocatorInterval` (its
    /// `locatorInterval` only applies in significant-changes mode; `BackgroundService.kt`, v2.5.7–v2.5.9).
    public var locatorInterval: Int = 10
    /// Metres moved before a new fix (iOS in move mode; Android outside move mode).
    public var locatorDisplacement: Int = 10

    /// Android's location request priority, by name. Android v2.5.7 to master read a number by its position in
    /// `HighAccuracy, BalancedPowerAccuracy, LowPower, NoPower` (`entries.getOrElse(value)`,
    /// `location/LocatorPriority.kt`), so the 3 that means high accuracy on v2.4 and v2.5.4–v2.5.6 means NoPower
    /// there and the phone gets no GPS fixes. The name matches on every 2.5 release and master (exactly on
    /// v2.5.0–v2.5.3, ignoring case from v2.5.4); v2.4 refuses a string but always uses high accuracy in move mode.
    /// Written rather than left out, because an import only changes the keys it contains: a phone that was given
    /// 3 by an older Flare is repaired by importing again. iOS has no such key.
    public static let androidLocatorPriority = "HighAccuracy"

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
        // Both apps retain location messages only, never their events, status or last will (which neither app
        // retains whatever `willRetain` says, so that key is not written).
        writer.field("pubRetain", true)
        writer.field("mqttProtocolLevel", 4)                   // MQTT 3.1.1: both apps speak it
        writer.field("keepalive", 60)
        writer.field("cleanSession", false)
        writer.field("monitoring", monitoring)
        writer.field("locatorInterval", locatorInterval)
        writer.field("moveModeLocatorInterval", locatorInterval)
        writer.field("locatorDisplacement", locatorDisplacement)
        writer.field("locatorPriority", Self.androidLocatorPriority)
        // The device token reads its share's status and its command topic (`<pubTopicBase>/cmd`), which both apps
        // subscribe to when they are given as `subTopic`, a space-separated list (Android: `split(" ")` in
        // MQTTConnectionConfiguration.kt, v2.4.12 on; iOS: `theSubscriptionsInMOC`, split on whitespace). Android
        // with a `subTopic` of its own obeys commands on any subscribed topic; iOS only on its own `…/cmd`.
        // iOS subscribes only with `sub` on; Android ignores `sub` from 2.5.
        writer.field("sub", true)
        writer.field("subTopic", Topics.status(shareID) + " " + Topics.command(shareID))
        // Commands on, for "locate now" (`reportLocation`): `cmd` on in both apps, and iOS also wants
        // `allowRemoteLocation` (OwnTracksAppDelegate.m). Only flared may write the command topic.
        writer.field("cmd", true)
        writer.field("allowRemoteLocation", true)
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
