import FlareCodec
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
    /// How the app reaches Flare.
    public enum Connection: Sendable, Equatable {
        /// MQTT (`mode: 0`) to the broker: live, with a last will, commands on the command topic.
        case mqtt(MQTTURL)
        /// HTTP (`mode: 3`), one POST per message to this URL (`…/api/v1/shares/{id}/owntracks/http`), for networks
        /// that block MQTT's ports. No will: the family sees "no new position" but never "offline".
        case http(url: String)
    }

    public var shareID: ShareID
    public var deviceToken: String
    public var connection: Connection
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

    public init(shareID: ShareID, deviceToken: String, connection: Connection, shareName: String?) {
        self.shareID = shareID
        self.deviceToken = deviceToken
        self.connection = connection
        self.trackerID = Self.trackerID(from: shareName)
    }

    /// The path, below the public URL, where the apps in HTTP mode post a share's messages.
    public static func httpPath(_ id: ShareID) -> String { "/api/v1/shares/\(id.rawValue)/owntracks/http" }

    /// What Flare answers a phone that still reports into a share that has ended (HTTP mode's answer; over MQTT the
    /// same command goes to the command topic when the share is stopped): the command to stop reporting. Both apps
    /// take `setConfiguration` with `remoteConfiguration` on (Android `MessageProcessor.kt`, iOS
    /// `OwnTracksAppDelegate.m`, v2.5.9 / 26.2.3) and honour `monitoring: -1`, quiet mode: no more positions
    /// unless the person asks for one, no alert, nothing left retrying. Importing a new share's configuration sets
    /// move mode again.
    public static let stopReporting: [UInt8] = {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("_type", "cmd")
        writer.field("action", "setConfiguration")
        writer.key("configuration")
        writer.beginObject()
        writer.field("_type", "configuration")
        writer.field("monitoring", -1)
        writer.endObject()
        writer.endObject()
        return writer.bytes
    }()

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
        switch connection {
        case .mqtt(let broker):
            writer.field("mode", 0)                            // private MQTT
            writer.field("host", broker.host)
            writer.field("port", broker.port)
            writer.field("tls", broker.tls)
        case .http(let url):
            writer.field("mode", 3)                            // HTTP: one POST per message to `url`
            writer.field("url", url)
        }
        // Credentials: over MQTT the broker's; over HTTP Basic auth (Android sends it when both are set; iOS only
        // with `auth`, and the password only with `usePassword`: Connection.m, OwnTracksAppDelegate.m).
        writer.field("auth", true)
        writer.field("usePassword", true)
        writer.field("username", shareID.rawValue)
        writer.field("password", deviceToken)
        writer.field("deviceId", "sos")
        writer.field("tid", trackerID)
        if case .mqtt = connection {
            // One MQTT session per share: a phone provisioned for a second share must not take over the first's.
            writer.field("clientId", ClientIDs.device(shareID))
            // Locations go to exactly this topic; the apps' other messages (event, status, waypoint) go below it,
            // where the device token may not publish: the broker acknowledges and drops them (`ShareToken.acl`).
            writer.field("pubTopicBase", Topics.location(shareID))
            writer.field("pubQos", 1)
            // Both apps retain location messages only, never their events, status or last will (which neither app
            // retains whatever `willRetain` says, so that key is not written).
            writer.field("pubRetain", true)
            writer.field("mqttProtocolLevel", 4)               // MQTT 3.1.1: both apps speak it
            writer.field("keepalive", 60)
            writer.field("cleanSession", false)
        }
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
        if case .mqtt = connection {
            writer.field("sub", true)
            writer.field("subTopic", Topics.status(shareID) + " " + Topics.command(shareID))
        }
        // Commands on, for "locate now" (`reportLocation`): `cmd` on in both apps (iOS defaults it off), and iOS
        // also wants `allowRemoteLocation` (OwnTracksAppDelegate.m). Over HTTP they come in Flare's answers.
        writer.field("cmd", true)
        writer.field("allowRemoteLocation", true)
        // On, so that an ended share can tell the app to stop reporting (`stopReporting`). It lets whoever can send
        // the app a command change any of its settings: only flared may write the command topic (the device and
        // watch tokens are refused it, and Android obeys commands on its subscribed topics, which only flared
        // writes too), and over HTTP only Flare's own answers carry commands. Flare wrote this configuration in the
        // first place, so this gives it no power it did not have.
        writer.field("remoteConfiguration", true)
        writer.field("extendedData", true)                     // battery state and connectivity for the family
        writer.endObject()
        return writer.bytes
    }

    /// `owntracks:///config?inline=<base64 of the JSON>`: opens the app and imports the configuration.
    ///
    /// Standard base64, not base64url: the Android app decodes with the standard alphabet and refuses `-` and `_`.
    /// Its `+`, `/` and `=` are percent-encoded so that no URL parser turns `+` into a space.
    public var inlineURL: String { Self.inlineURL(of: json) }

    /// The same link for a configuration's JSON as given (the CLI adds `encryptionKey` to the server's, on the owner's
    /// machine, for an end-to-end encrypted share).
    public static func inlineURL(of json: [UInt8]) -> String {
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
