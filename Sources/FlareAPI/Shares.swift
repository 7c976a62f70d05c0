#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A share's state as the API names it.
public enum ShareState: String, Codable, Sendable, CaseIterable {
    case active, ended
}

/// `POST /api/v1/shares` and `POST /api/v1/shares/{id}/extend`: every field optional (server defaults), `null` as absent;
/// an empty body is an empty request.
public struct ShareRequest: RequestBody, Equatable {
    /// Seconds from now until the share ends.
    public var durationSeconds: Double?
    /// Shown on the viewer page (create only).
    public var name: String?
    /// Contact ids (create only): a personal link each, in the answer's `links`.
    public var contacts: [String]?
    /// End-to-end encrypted (create only): the phone encrypts every position with a passphrase the server never
    /// receives; the owner's client makes it and puts it in the link's fragment (`#k=`). Takes no `contacts`.
    public var e2e: Bool?

    enum CodingKeys: String, CodingKey { case durationSeconds = "duration_s", name, contacts, e2e }

    public init(durationSeconds: Double? = nil, name: String? = nil, contacts: [String]? = nil, e2e: Bool? = nil) {
        self.durationSeconds = durationSeconds
        self.name = name
        self.contacts = contacts
        self.e2e = e2e
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        durationSeconds = try c.decodeIfPresent(Double.self, forKey: .durationSeconds)
        name = try c.decodeIfPresent(String.self, forKey: .name)
        contacts = try c.decodeIfPresent([String].self, forKey: .contacts)
        // A string too, for clients that write every value as one (as the create answer is).
        if try !c.contains(.e2e) || c.decodeNil(forKey: .e2e) {
            e2e = nil
        } else if let flag = try? c.decode(Bool.self, forKey: .e2e) {
            e2e = flag
        } else {
            switch try c.decode(String.self, forKey: .e2e) {
            case "true": e2e = true
            case "false": e2e = false
            default: throw DecodingError.dataCorruptedError(forKey: .e2e, in: c, debugDescription: "e2e must be true or false")
            }
        }
    }

    public static let memberRefusals = [
        "duration_s": BodyRefusal("invalid_duration", "duration_s must be a number of seconds"),
        "name": BodyRefusal("invalid_name", "name must be a string"),
        "contacts": BodyRefusal("invalid_contacts", "contacts must be a list of contact ids (flare contacts list)"),
        "e2e": BodyRefusal("invalid_e2e", "e2e must be true or false"),
    ]
    public static let emptyIsEmptyObject = true
}

/// What `POST /api/v1/shares` answers (201): a flat object of strings, because the original iOS client decodes it
/// as `[String: String]`. Every value, the duration included, is a string.
public struct CreatedShare: Codable, Sendable, Equatable {
    public let shareID: String
    /// The link to text to family members: `https://host/s/<view token>`.
    public let shareURL: URL
    public let expiresAt: Date
    /// Seconds from creation to expiry.
    public let durationSeconds: Int?
    /// The publish capability for this share: the MQTT password and the HTTP ingest bearer token.
    public let deviceToken: String
    public let mqttURL: String
    public let mqttUsername: String
    public let mqttTopic: String
    public let statusTopic: String?
    public let ingestURL: URL?
    public let ownTracksConfigURL: URL?
    /// A personal link per contact, only when the request named `contacts` (then the answer is no longer all strings:
    /// a client that sends no contacts gets exactly the flat object it always did).
    public var links: [PersonalLink]?
    /// `"true"` for an end-to-end encrypted share (a string, like every member), absent otherwise. `share_url` never
    /// carries the key: the server does not have it. The client that made the passphrase adds `#k=<passphrase>`.
    public var e2e: String?

    public enum CodingKeys: String, CodingKey {
        case shareID = "share_id", shareURL = "share_url", expiresAt = "expires_at", durationSeconds = "duration_s"
        case deviceToken = "device_token", mqttURL = "mqtt_url", mqttUsername = "mqtt_username", mqttTopic = "mqtt_topic"
        case statusTopic = "status_topic", ingestURL = "ingest_url", ownTracksConfigURL = "owntracks_config_url"
        case links, e2e
    }

    public init(shareID: String, shareURL: URL, expiresAt: Date, durationSeconds: Int?, deviceToken: String, mqttURL: String,
                mqttUsername: String, mqttTopic: String, statusTopic: String?, ingestURL: URL?, ownTracksConfigURL: URL?) {
        self.shareID = shareID
        self.shareURL = shareURL
        self.expiresAt = expiresAt
        self.durationSeconds = durationSeconds
        self.deviceToken = deviceToken
        self.mqttURL = mqttURL
        self.mqttUsername = mqttUsername
        self.mqttTopic = mqttTopic
        self.statusTopic = statusTopic
        self.ingestURL = ingestURL
        self.ownTracksConfigURL = ownTracksConfigURL
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        shareID = try c.decode(String.self, forKey: .shareID)
        shareURL = try Self.url(c.decode(String.self, forKey: .shareURL), .shareURL, c)
        expiresAt = try c.decode(RFC3339Time.self, forKey: .expiresAt).wrappedValue
        durationSeconds = try c.decodeIfPresent(String.self, forKey: .durationSeconds).flatMap { Int($0) }
        deviceToken = try c.decode(String.self, forKey: .deviceToken)
        mqttURL = try c.decode(String.self, forKey: .mqttURL)
        mqttUsername = try c.decode(String.self, forKey: .mqttUsername)
        mqttTopic = try c.decode(String.self, forKey: .mqttTopic)
        statusTopic = try c.decodeIfPresent(String.self, forKey: .statusTopic)
        ingestURL = try c.decodeIfPresent(String.self, forKey: .ingestURL).map { try Self.url($0, .ingestURL, c) }
        ownTracksConfigURL = try c.decodeIfPresent(String.self, forKey: .ownTracksConfigURL).map { try Self.url($0, .ownTracksConfigURL, c) }
        links = try c.decodeIfPresent([PersonalLink].self, forKey: .links)
        e2e = try c.decodeIfPresent(String.self, forKey: .e2e)
    }

    private static func url(_ text: String, _ key: CodingKeys, _ container: KeyedDecodingContainer<CodingKeys>) throws -> URL {
        guard let url = URL(string: text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "not a URL: \(text)")
        }
        return url
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        for (key, value) in fields { try c.encode(value, forKey: key) }
        if let links { try c.encode(links, forKey: .links) }
    }

    /// The body's members in order, each a string; absent ones are left out. `encode(to:)` writes these, and so
    /// does the server's own writer, which skips `JSONEncoder` on the hot path of share creation.
    public var fields: [(key: CodingKeys, value: String)] {
        Self.fields(shareID: shareID, shareURL: shareURL.absoluteString, expiresAt: RFC3339.format(expiresAt), durationSeconds: durationSeconds,
                    deviceToken: deviceToken, mqttURL: mqttURL, mqttUsername: mqttUsername, mqttTopic: mqttTopic, statusTopic: statusTopic,
                    ingestURL: ingestURL?.absoluteString, ownTracksConfigURL: ownTracksConfigURL?.absoluteString, e2e: e2e)
    }

    /// The same members from their text: the server writes a creation's answer from these without parsing its three
    /// URLs into `URL`s only to print them again.
    public static func fields(shareID: String, shareURL: String, expiresAt: String, durationSeconds: Int?, deviceToken: String, mqttURL: String,
                              mqttUsername: String, mqttTopic: String, statusTopic: String?, ingestURL: String?,
                              ownTracksConfigURL: String?, e2e: String? = nil) -> [(key: CodingKeys, value: String)] {
        var fields: [(key: CodingKeys, value: String)] = [(.shareID, shareID), (.shareURL, shareURL), (.expiresAt, expiresAt)]
        if let durationSeconds { fields.append((.durationSeconds, String(durationSeconds))) }
        fields += [(.deviceToken, deviceToken), (.mqttURL, mqttURL), (.mqttUsername, mqttUsername), (.mqttTopic, mqttTopic)]
        if let statusTopic { fields.append((.statusTopic, statusTopic)) }
        if let ingestURL { fields.append((.ingestURL, ingestURL)) }
        if let ownTracksConfigURL { fields.append((.ownTracksConfigURL, ownTracksConfigURL)) }
        if let e2e { fields.append((.e2e, e2e)) }
        return fields
    }
}

/// A share as its owner sees it: `GET /api/v1/shares/{id}`, and each item of `GET /api/v1/shares`.
public struct ShareStatus: Codable, Sendable, Equatable {
    public let shareID: String
    public let name: String
    public let state: ShareState
    @RFC3339Time public var createdAt: Date
    @RFC3339Time public var expiresAt: Date
    @OptionalRFC3339Time public var endedAt: Date?
    /// `expired` or `stopped` once the share has ended.
    public let reason: String?
    /// The positions were deleted after the retention time; only that the share existed remains.
    public let historyDeleted: Bool
    /// The last position (null when none, or once the history is deleted).
    @AlwaysPresent public var last: ReportedLocation?
    /// Viewers watching now: `audience.watching` (every instance, by the pages' viewer ids), or this instance's live
    /// streams where those are more (clients that send no viewer id). Kept for clients of the release before the
    /// audience.
    public let viewers: Int
    /// Who has seen the link (`GET /api/v1/shares/{id}` only; absent from listings).
    public let audience: ShareAudience?
    /// True for an end-to-end encrypted share (absent otherwise): `last` is then always null.
    public let e2e: Bool?

    enum CodingKeys: String, CodingKey {
        case shareID = "share_id", name, state, createdAt = "created_at", expiresAt = "expires_at", endedAt = "ended_at"
        case reason, historyDeleted = "history_deleted", last, viewers, e2e, audience
    }

    public init(shareID: String, name: String, state: ShareState, createdAt: Date, expiresAt: Date, endedAt: Date?,
                reason: String?, historyDeleted: Bool, last: ReportedLocation?, viewers: Int, e2e: Bool? = nil, audience: ShareAudience? = nil) {
        self.e2e = e2e
        self.shareID = shareID
        self.name = name
        self.state = state
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.endedAt = endedAt
        self.reason = reason
        self.historyDeleted = historyDeleted
        self.last = last
        self.viewers = viewers
        self.audience = audience
    }
}

/// Who has seen a share's link: when it was first opened, by how many distinct browsers, how many watch now.
public struct ShareAudience: Codable, Sendable, Equatable {
    /// One personal link: whom it was made for, when it was first opened, whether someone watches through it now.
    public struct Link: Codable, Sendable, Equatable {
        public let linkID: String
        public let name: String
        @OptionalRFC3339Time public var firstOpenedAt: Date?
        public let watchingNow: Bool
        /// Set once the link was withdrawn.
        @OptionalRFC3339Time public var withdrawnAt: Date?

        enum CodingKeys: String, CodingKey {
            case linkID = "link_id", name, firstOpenedAt = "first_opened_at", watchingNow = "watching_now", withdrawnAt = "withdrawn_at"
        }

        public init(linkID: String, name: String, firstOpenedAt: Date?, watchingNow: Bool, withdrawnAt: Date?) {
            self.linkID = linkID
            self.name = name
            self.firstOpenedAt = firstOpenedAt
            self.watchingNow = watchingNow
            self.withdrawnAt = withdrawnAt
        }
    }

    @OptionalRFC3339Time public var firstOpenedAt: Date?
    public let opened: Int
    public let watching: Int
    /// The personal links, oldest first (absent for a share made without contacts).
    public let links: [Link]?

    enum CodingKeys: String, CodingKey { case firstOpenedAt = "first_opened_at", opened, watching, links }

    public init(firstOpenedAt: Date?, opened: Int, watching: Int, links: [Link]? = nil) {
        self.firstOpenedAt = firstOpenedAt
        self.opened = opened
        self.watching = watching
        self.links = links
    }
}

/// `GET /api/v1/shares?state=active|ended&limit=N&cursor=C`: the caller's shares, newest first. A page holds at
/// most `limit` shares (default 50, at most 200); `next_cursor` is null on the last page, otherwise the `cursor`
/// for the next one. Cursors are opaque: pass them back unchanged.
public struct ShareList: Codable, Sendable, Equatable {
    public let shares: [ShareStatus]
    @AlwaysPresent public var nextCursor: String?

    enum CodingKeys: String, CodingKey { case shares, nextCursor = "next_cursor" }

    public static let defaultLimit = 50
    public static let maximumLimit = 200

    public init(shares: [ShareStatus], nextCursor: String?) {
        self.shares = shares
        self.nextCursor = nextCursor
    }
}

/// `POST /api/v1/shares/{id}/stop` (200). Stopping an ended share answers with its end again.
public struct StoppedShare: Codable, Sendable, Equatable {
    public let shareID: String
    public let state: ShareState
    /// `stopped`, or `expired` when it had already ended that way.
    public let reason: String
    @OptionalRFC3339Time public var endedAt: Date?

    enum CodingKeys: String, CodingKey { case shareID = "share_id", state, reason, endedAt = "ended_at" }

    public init(shareID: String, state: ShareState, reason: String, endedAt: Date?) {
        self.shareID = shareID
        self.state = state
        self.reason = reason
        self.endedAt = endedAt
    }
}

/// `POST /api/v1/shares/{id}/extend` (200): same link, a new expiry and a device token valid until then.
public struct ExtendedShare: Codable, Sendable, Equatable {
    public let shareID: String
    public let state: ShareState
    @RFC3339Time public var expiresAt: Date
    public let deviceToken: String

    enum CodingKeys: String, CodingKey { case shareID = "share_id", state, expiresAt = "expires_at", deviceToken = "device_token" }

    public init(shareID: String, expiresAt: Date, deviceToken: String) {
        self.shareID = shareID
        self.state = .active
        self.expiresAt = expiresAt
        self.deviceToken = deviceToken
    }
}

/// `POST /api/v1/shares/{id}/watch-tokens` (201): subscribe rights on the broker for one share, until it ends.
public struct WatchToken: Codable, Sendable, Equatable {
    public let shareID: String
    public let watchToken: String
    public let mqttURL: String
    public let mqttUsername: String
    /// `flare/v1/shares/{id}/#`
    public let topicFilter: String
    /// `flare-{id}-watch-`: the broker admits this token only with a client id that starts so and goes on with a
    /// suffix of the integrator's own (1–64 of `A-Z a-z 0-9 . _ -`). Absent from servers before it was bound.
    public let mqttClientIDPrefix: String?
    @RFC3339Time public var expiresAt: Date

    enum CodingKeys: String, CodingKey {
        case shareID = "share_id", watchToken = "watch_token", mqttURL = "mqtt_url", mqttUsername = "mqtt_username"
        case topicFilter = "topic_filter", mqttClientIDPrefix = "mqtt_client_id_prefix", expiresAt = "expires_at"
    }

    public init(shareID: String, watchToken: String, mqttURL: String, mqttUsername: String, topicFilter: String,
                mqttClientIDPrefix: String?, expiresAt: Date) {
        self.shareID = shareID
        self.watchToken = watchToken
        self.mqttURL = mqttURL
        self.mqttUsername = mqttUsername
        self.topicFilter = topicFilter
        self.mqttClientIDPrefix = mqttClientIDPrefix
        self.expiresAt = expiresAt
    }
}

/// `GET /api/v1/shares/{id}/owntracks/link`: `owntracks:///config?inline=…`, which holds the device token.
public struct OwnTracksLink: Codable, Sendable, Equatable {
    public let url: String
    public init(url: String) { self.url = url }
}
