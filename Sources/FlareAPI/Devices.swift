#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// `POST /api/v1/devices` (owner key), and `PATCH /api/v1/devices/{id}` with only the members to change: a standing
/// SOS trigger for one person's phone or tracker. `name` is the person as the contacts know them ("Anna": the mails
/// say "Anna pressed SOS"); `contacts` (1 to 20 contact ids) get a personal link each when the SOS starts;
/// `duration_s` is how long it runs (the server's default when absent); `message` goes into the SOS mail; `pin` (4 to
/// 12 digits) is then needed to stop the SOS from the device; `duress_pin` (needs a PIN, differs from it) answers as
/// a stop does while the SOS goes on for the contacts. In a `PATCH`, `"pin": ""` removes the PIN (and the duress PIN),
/// `"duress_pin": ""` the duress PIN.
public struct DeviceRequest: RequestBody, Equatable {
    public var name: String?
    public var contacts: [String]?
    public var durationSeconds: Double?
    public var message: String?
    public var pin: String?
    public var duressPin: String?
    /// The SOS page's countdown after a press, 0 to 10 s (default 5).
    public var countdownSeconds: Double?
    /// The escalation ladder: 0 (off) or 5 to 3,600 s (default 300).
    public var escalateAfterSeconds: Double?

    enum CodingKeys: String, CodingKey {
        case name, contacts, durationSeconds = "duration_s", message, pin, duressPin = "duress_pin", countdownSeconds = "countdown_s"
        case escalateAfterSeconds = "escalate_after_s"
    }

    public init(name: String? = nil, contacts: [String]? = nil, durationSeconds: Double? = nil, message: String? = nil, pin: String? = nil,
                duressPin: String? = nil, countdownSeconds: Double? = nil, escalateAfterSeconds: Double? = nil) {
        self.name = name
        self.contacts = contacts
        self.durationSeconds = durationSeconds
        self.message = message
        self.pin = pin
        self.duressPin = duressPin
        self.countdownSeconds = countdownSeconds
        self.escalateAfterSeconds = escalateAfterSeconds
    }

    public static let memberRefusals = [
        "countdown_s": BodyRefusal("invalid_countdown", "countdown_s must be a number of seconds from 0 to 10"),
        "escalate_after_s": BodyRefusal("invalid_escalation", "escalate_after_s must be a number of seconds: 0 (off) or 5 to 3600"),
        "name": BodyRefusal("invalid_name", "name must be a string"),
        "contacts": BodyRefusal("invalid_contacts", #"contacts must be a list of contact ids, e.g. ["<contact id>"]"#),
        "duration_s": BodyRefusal("invalid_duration", "duration_s must be a number of seconds"),
        "message": BodyRefusal("invalid_message", "message must be a string"),
        "pin": BodyRefusal("invalid_pin", #"pin must be a string of 4 to 12 digits, e.g. "4711""#),
        "duress_pin": BodyRefusal("invalid_duress_pin", "duress_pin must be a string of 4 to 12 digits"),
    ]
    public static let malformedRefusal = BodyRefusal("invalid_json", #"the body must be a JSON object, e.g. {"name":"Anna","contacts":["<contact id>"]}"#)
}

/// A device as its owner sees it: `GET /api/v1/devices/{id}`, each item of `GET /api/v1/devices`. Never its secret or
/// PINs: only whether it has them.
public struct DeviceInfo: Codable, Sendable, Equatable {
    public let deviceID: String
    public let name: String
    public let contacts: [String]
    public let durationSeconds: Int?
    public let message: String
    public let hasPin: Bool
    public let hasDuressPin: Bool
    public let countdownSeconds: Int
    /// The escalation ladder of its SOS: 0 (off) or 5 to 3,600 s.
    public let escalateAfterSeconds: Int
    @RFC3339Time public var createdAt: Date
    /// When Flare last heard from the device (any request with its secret): the setup's test.
    @OptionalRFC3339Time public var lastHeardAt: Date?
    /// Its SOS as the owner sees it: `none`, `live`, `duress` (live for the contacts, stopped for the device) or
    /// `ended`, with its share.
    public let sos: String
    public let sosShareID: String?

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id", name, contacts, durationSeconds = "duration_s", message, hasPin = "has_pin", hasDuressPin = "has_duress_pin"
        case countdownSeconds = "countdown_s", escalateAfterSeconds = "escalate_after_s", createdAt = "created_at", lastHeardAt = "last_heard_at"
        case sos, sosShareID = "sos_share_id"
    }

    public init(deviceID: String, name: String, contacts: [String], durationSeconds: Int?, message: String, hasPin: Bool, hasDuressPin: Bool,
                countdownSeconds: Int, escalateAfterSeconds: Int = 300, createdAt: Date, lastHeardAt: Date?, sos: String, sosShareID: String?) {
        self.deviceID = deviceID
        self.name = name
        self.contacts = contacts
        self.durationSeconds = durationSeconds
        self.message = message
        self.hasPin = hasPin
        self.hasDuressPin = hasDuressPin
        self.countdownSeconds = countdownSeconds
        self.escalateAfterSeconds = escalateAfterSeconds
        self.createdAt = createdAt
        self.lastHeardAt = lastHeardAt
        self.sos = sos
        self.sosShareID = sosShareID
    }
}

/// `GET /api/v1/devices?limit=N&cursor=C`: the caller's devices, newest first, paged as contacts are.
public struct DeviceList: Codable, Sendable, Equatable {
    public let devices: [DeviceInfo]
    @AlwaysPresent public var nextCursor: String?

    enum CodingKeys: String, CodingKey { case devices, nextCursor = "next_cursor" }

    public static let defaultLimit = 50
    public static let maximumLimit = 200

    public init(devices: [DeviceInfo], nextCursor: String?) {
        self.devices = devices
        self.nextCursor = nextCursor
    }
}

/// What each app needs to start this device's SOS: `GET /api/v1/devices/{id}/setup` (owner key), and in the answers
/// that show a secret (`POST /api/v1/devices`, `POST …/{id}/secret`). The secret is stored only as a hash: elsewhere
/// the fields hold `<secret>` where it goes.
public struct DeviceSetup: Codable, Sendable, Equatable {
    /// One app: the fields to enter, in the app's own words, and how its SOS is pressed.
    public struct App: Codable, Sendable, Equatable {
        public struct Field: Codable, Sendable, Equatable {
            public let label: String
            public let value: String
            public init(label: String, value: String) {
                self.label = label
                self.value = value
            }
        }

        /// `traccar_client`, `gpslogger`, `osmand`, `http`.
        public let app: String
        public let name: String
        public let fields: [Field]
        /// How the SOS is started from it.
        public let sos: String
        /// What a QR code of this app's setup holds (nil: the app reads none); `flare devices setup ID --qr` draws it.
        public let qr: String?

        public init(app: String, name: String, fields: [Field], sos: String, qr: String?) {
            self.app = app
            self.name = name
            self.fields = fields
            self.sos = sos
            self.qr = qr
        }
    }

    public let deviceID: String
    /// Whether the fields hold the secret (true only in the answers that issue it).
    public let includesSecret: Bool
    public let apps: [App]
    /// The test: when Flare last heard from the device, and how many seconds ago (null: never).
    @OptionalRFC3339Time public var lastHeardAt: Date?
    public let lastHeardSecondsAgo: Int?

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id", includesSecret = "includes_secret", apps, lastHeardAt = "last_heard_at", lastHeardSecondsAgo = "last_heard_s_ago"
    }

    public init(deviceID: String, includesSecret: Bool, apps: [App], lastHeardAt: Date?, lastHeardSecondsAgo: Int?) {
        self.deviceID = deviceID
        self.includesSecret = includesSecret
        self.apps = apps
        self.lastHeardAt = lastHeardAt
        self.lastHeardSecondsAgo = lastHeardSecondsAgo
    }
}

/// The answer of `POST /api/v1/devices` (201) and `POST /api/v1/devices/{id}/secret` (200): the device, and its
/// `secret`, shown this once (the server keeps only its hash). The secret is the device's only credential.
public struct CreatedDevice: Codable, Sendable, Equatable {
    public let deviceID: String
    public let name: String
    public let secret: String
    public let contacts: [String]
    public let setup: DeviceSetup

    enum CodingKeys: String, CodingKey { case deviceID = "device_id", name, secret, contacts, setup }

    public init(deviceID: String, name: String, secret: String, contacts: [String], setup: DeviceSetup) {
        self.deviceID = deviceID
        self.name = name
        self.secret = secret
        self.contacts = contacts
        self.setup = setup
    }
}

/// `POST /api/v1/devices/sos` (the device's secret as `Authorization: Bearer`): the SOS, new or already live. With it
/// an app can also publish over MQTT (`device_token` is the password, `mqtt_username` the user name).
public struct SOSStarted: Codable, Sendable, Equatable {
    public let shareID: String
    public let shareURL: String
    @RFC3339Time public var expiresAt: Date
    public let deviceToken: String
    public let mqttURL: String
    public let mqttUsername: String
    public let mqttTopic: String
    public let links: [PersonalLink]
    /// True when the SOS was live already (no new share; the contacts were told it was pressed again).
    public let repeated: Bool

    enum CodingKeys: String, CodingKey {
        case shareID = "share_id", shareURL = "share_url", expiresAt = "expires_at", deviceToken = "device_token", mqttURL = "mqtt_url"
        case mqttUsername = "mqtt_username", mqttTopic = "mqtt_topic", links, repeated
    }

    public init(shareID: String, shareURL: String, expiresAt: Date, deviceToken: String, mqttURL: String, mqttUsername: String, mqttTopic: String,
                links: [PersonalLink], repeated: Bool) {
        self.shareID = shareID
        self.shareURL = shareURL
        self.expiresAt = expiresAt
        self.deviceToken = deviceToken
        self.mqttURL = mqttURL
        self.mqttUsername = mqttUsername
        self.mqttTopic = mqttTopic
        self.links = links
        self.repeated = repeated
    }
}

/// `POST /api/v1/devices/sos/stop` (the device's secret): `{"pin":"4711"}`, or `{}` for a device without a PIN.
public struct SOSStopRequest: RequestBody, Equatable {
    public var pin: String?
    public init(pin: String? = nil) { self.pin = pin }

    public static let memberRefusals = ["pin": BodyRefusal("invalid_pin", #"pin must be a string of digits, e.g. "4711""#)]
    public static var emptyIsEmptyObject: Bool { true }
}

/// What the device reads of its SOS: `GET /api/v1/devices/sos`, and the answer of a stop. `status` is `none` (no SOS
/// yet), `live` or `stopped`. While live: the share, its end, who has opened their link, and the family's answers.
public struct SOSState: Codable, Sendable, Equatable {
    public let status: String
    public let shareID: String?
    @OptionalRFC3339Time public var expiresAt: Date?
    @OptionalRFC3339Time public var stoppedAt: Date?
    public let audience: ShareAudience?
    public let answers: [ShareAnswer]?
    /// While nobody has answered "on my way" or "called emergency services": the escalation ladder, so that the page
    /// can say "nobody has answered yet" and when everyone is alerted again. Absent once answered, or with the ladder off.
    public let escalation: SOSEscalation?

    enum CodingKeys: String, CodingKey {
        case status, shareID = "share_id", expiresAt = "expires_at", stoppedAt = "stopped_at", audience, answers, escalation
    }

    public init(status: String, shareID: String?, expiresAt: Date?, stoppedAt: Date?, audience: ShareAudience? = nil, answers: [ShareAnswer]? = nil,
                escalation: SOSEscalation? = nil) {
        self.status = status
        self.shareID = shareID
        self.expiresAt = expiresAt
        self.stoppedAt = stoppedAt
        self.audience = audience
        self.answers = answers
        self.escalation = escalation
    }
}

/// Where an SOS's escalation ladder stands: `step` alerts sent again so far (0, 1 or 2), and when the next goes
/// (`next_at`; absent after the last).
public struct SOSEscalation: Codable, Sendable, Equatable {
    public let step: Int
    @OptionalRFC3339Time public var nextAt: Date?

    enum CodingKeys: String, CodingKey { case step, nextAt = "next_at" }

    public init(step: Int, nextAt: Date?) {
        self.step = step
        self.nextAt = nextAt
    }
}

/// `GET /api/v1/devices/me` (the device's secret): what its SOS page shows before a press: the person's name, the
/// countdown, whether stopping asks for a PIN, and whom the SOS tells, with their numbers for the page's SMS fallback
/// when Flare cannot be reached.
public struct DeviceCard: Codable, Sendable, Equatable {
    public struct Contact: Codable, Sendable, Equatable {
        public let name: String
        public let phone: String?
        public init(name: String, phone: String?) {
            self.name = name
            self.phone = phone
        }
    }

    public let deviceID: String
    public let name: String
    public let countdownSeconds: Int
    public let hasPin: Bool
    public let contacts: [Contact]

    enum CodingKeys: String, CodingKey { case deviceID = "device_id", name, countdownSeconds = "countdown_s", hasPin = "has_pin", contacts }

    public init(deviceID: String, name: String, countdownSeconds: Int, hasPin: Bool, contacts: [Contact]) {
        self.deviceID = deviceID
        self.name = name
        self.countdownSeconds = countdownSeconds
        self.hasPin = hasPin
        self.contacts = contacts
    }
}

/// `POST /api/v1/devices/sos/extend` (the device's secret): `{"duration_s":3600}` from now, or `{}` for the device's
/// own duration.
public struct SOSExtendRequest: RequestBody, Equatable {
    public var durationSeconds: Double?
    public init(durationSeconds: Double? = nil) { self.durationSeconds = durationSeconds }

    enum CodingKeys: String, CodingKey { case durationSeconds = "duration_s" }

    public static let memberRefusals = ["duration_s": BodyRefusal("invalid_duration", "duration_s must be a number of seconds")]
    public static var emptyIsEmptyObject: Bool { true }
}

/// `POST /api/v1/devices/locations` outside a live SOS: the position was not kept.
public struct DevicePositionDropped: Codable, Sendable, Equatable {
    /// `not_sharing`.
    public let status: String
    public init(status: String = "not_sharing") { self.status = status }
}
