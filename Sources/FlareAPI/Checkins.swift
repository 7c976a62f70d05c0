#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A check-in's zone: a fix inside it (`radius_m` at most 50,000) ends the check-in as `arrived`.
public struct CheckinZone: Codable, Sendable, Equatable {
    public let lat: Double
    public let lon: Double
    public let radiusM: Double

    enum CodingKeys: String, CodingKey { case lat, lon, radiusM = "radius_m" }

    public init(lat: Double, lon: Double, radiusM: Double) {
        self.lat = lat
        self.lon = lon
        self.radiusM = radiusM
    }
}

/// `POST /api/v1/checkins`: "if I have not checked in by then, tell them". `due_at` (RFC 3339) or `in_s` (seconds
/// from now), one of them; `grace_s` (default 600); at least one contact; `message` (at most 280 characters) goes to
/// them if it is missed; `duration_s`: how long the share runs once missed (default 3,600). `null` is absent.
public struct CheckinRequest: RequestBody, Equatable {
    @OptionalRFC3339Time public var dueAt: Date?
    public var inSeconds: Double?
    public var graceSeconds: Int?
    public var contacts: [String]
    public var message: String?
    public var arrive: CheckinZone?
    public var notifyOnArrival: Bool?
    public var durationSeconds: Int?
    public var name: String?
    /// The escalation ladder once missed: 0 (off) or 5 to 3,600 s (default 300).
    public var escalateAfterSeconds: Double?

    enum CodingKeys: String, CodingKey {
        case dueAt = "due_at", inSeconds = "in_s", graceSeconds = "grace_s", contacts, message, arrive, notifyOnArrival = "notify_on_arrival",
             durationSeconds = "duration_s", name, escalateAfterSeconds = "escalate_after_s"
    }

    public init(dueAt: Date? = nil, inSeconds: Double? = nil, graceSeconds: Int? = nil, contacts: [String], message: String? = nil,
                arrive: CheckinZone? = nil, notifyOnArrival: Bool? = nil, durationSeconds: Int? = nil, name: String? = nil,
                escalateAfterSeconds: Double? = nil) {
        self.dueAt = dueAt
        self.inSeconds = inSeconds
        self.graceSeconds = graceSeconds
        self.contacts = contacts
        self.message = message
        self.arrive = arrive
        self.notifyOnArrival = notifyOnArrival
        self.durationSeconds = durationSeconds
        self.name = name
        self.escalateAfterSeconds = escalateAfterSeconds
    }

    public static let memberRefusals = CheckinExtension.memberRefusals.merging([
        "escalate_after_s": BodyRefusal("invalid_escalation", "escalate_after_s must be a number of seconds: 0 (off) or 5 to 3600"),
        "grace_s": BodyRefusal("invalid_grace", "grace_s must be a whole number of seconds"),
        "contacts": BodyRefusal("invalid_contacts", "contacts must be a list of contact ids (flare contacts list)"),
        "message": BodyRefusal("invalid_message", "message must be a string"),
        "arrive": BodyRefusal("invalid_arrive", #"arrive must be {"lat":…,"lon":…,"radius_m":…}"#),
        "notify_on_arrival": BodyRefusal("invalid_notify_on_arrival", "notify_on_arrival must be true or false"),
        "duration_s": BodyRefusal("invalid_duration", "duration_s must be a whole number of seconds"),
        "name": BodyRefusal("invalid_name", "name must be a string"),
    ]) { $1 }
    public static let malformedRefusal = BodyRefusal("invalid_json", #"the body must be a JSON object, e.g. {"in_s":7200,"contacts":["…"]}"#)
    /// An empty body is `{}`, refused for its missing `contacts`.
    public static let emptyIsEmptyObject = true
}

/// A check-in as `GET /api/v1/checkins/{id}` shows it. The answers of `POST /api/v1/checkins` (201) and of
/// `…/extend` add the share's device credentials: `device_token` (its `exp` covers the deadline, the grace and
/// `duration_s`), the MQTT settings and the OwnTracks configuration URL, as a share's creation answers them.
public struct CheckinInfo: Codable, Sendable, Equatable {
    public let checkinID: String
    /// `armed`, `done`, `arrived` or `missed`.
    public let state: String
    public let shareID: String
    @RFC3339Time public var dueAt: Date
    public let graceSeconds: Int
    /// When it is missed if nobody checks in: `due_at` plus the grace.
    @RFC3339Time public var firesAt: Date
    public let message: String
    public let contacts: [String]
    public let arrive: CheckinZone?
    public let notifyOnArrival: Bool
    public let durationSeconds: Int
    /// The escalation ladder once missed: 0 (off) or 5 to 3,600 s.
    public let escalateAfterSeconds: Int?
    @OptionalRFC3339Time public var stateAt: Date?
    public var deviceToken: String?
    public var mqttURL: String?
    public var mqttUsername: String?
    public var mqttTopic: String?
    public var ingestURL: String?
    public var ownTracksConfigURL: String?

    enum CodingKeys: String, CodingKey {
        case checkinID = "checkin_id", state, shareID = "share_id", dueAt = "due_at", graceSeconds = "grace_s", firesAt = "fires_at", message, contacts,
             arrive, notifyOnArrival = "notify_on_arrival", durationSeconds = "duration_s", escalateAfterSeconds = "escalate_after_s",
             stateAt = "state_at", deviceToken = "device_token",
             mqttURL = "mqtt_url", mqttUsername = "mqtt_username", mqttTopic = "mqtt_topic", ingestURL = "ingest_url",
             ownTracksConfigURL = "owntracks_config_url"
    }

    public init(checkinID: String, state: String, shareID: String, dueAt: Date, graceSeconds: Int, firesAt: Date, message: String, contacts: [String],
                arrive: CheckinZone?, notifyOnArrival: Bool, durationSeconds: Int, escalateAfterSeconds: Int? = nil, stateAt: Date?) {
        self.checkinID = checkinID
        self.state = state
        self.shareID = shareID
        self.dueAt = dueAt
        self.graceSeconds = graceSeconds
        self.firesAt = firesAt
        self.message = message
        self.contacts = contacts
        self.arrive = arrive
        self.notifyOnArrival = notifyOnArrival
        self.durationSeconds = durationSeconds
        self.escalateAfterSeconds = escalateAfterSeconds
        self.stateAt = stateAt
    }
}

/// `POST /api/v1/checkins/{id}/extend`: the new deadline, `due_at` or `in_s`.
public struct CheckinExtension: RequestBody, Equatable {
    @OptionalRFC3339Time public var dueAt: Date?
    public var inSeconds: Double?

    enum CodingKeys: String, CodingKey { case dueAt = "due_at", inSeconds = "in_s" }

    public init(dueAt: Date? = nil, inSeconds: Double? = nil) {
        self.dueAt = dueAt
        self.inSeconds = inSeconds
    }

    public static let memberRefusals = [
        "due_at": BodyRefusal("invalid_deadline", "due_at must be an RFC 3339 time, e.g. 2026-12-02T22:00:00Z"),
        "in_s": BodyRefusal("invalid_deadline", "in_s must be a number of seconds"),
    ]
    public static let malformedRefusal = BodyRefusal("invalid_json", #"the body must be a JSON object, e.g. {"in_s":3600}"#)
    public static let emptyIsEmptyObject = true
}
