#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A stored position as the API shows it: the OwnTracks fields Flare keeps, `tst` in Unix seconds. The `last` of a
/// share and of a view document, and the data of each live `fix` event.
public struct ReportedLocation: Codable, Sendable, Equatable {
    public let latitude: Double
    public let longitude: Double
    @UnixSecondsTime public var timestamp: Date
    /// Horizontal accuracy in metres.
    public let accuracy: Double?
    public let altitude: Double?
    /// km/h, as OwnTracks reports it.
    public let velocity: Double?
    /// Course over ground in degrees.
    public let course: Double?
    /// Battery level in percent.
    public let battery: Int?
    /// OwnTracks `bs`: 0 unknown, 1 unplugged, 2 charging, 3 full.
    public let batteryStatus: Int?
    /// OwnTracks `conn`: `w` Wi-Fi, `m` mobile data, `o` offline.
    public let connection: String?

    enum CodingKeys: String, CodingKey {
        case latitude = "lat", longitude = "lon", timestamp = "tst", accuracy = "acc", altitude = "alt", velocity = "vel"
        case course = "cog", battery = "batt", batteryStatus = "bs", connection = "conn"
    }

    public init(latitude: Double, longitude: Double, timestamp: Date, accuracy: Double? = nil, altitude: Double? = nil,
                velocity: Double? = nil, course: Double? = nil, battery: Int? = nil, batteryStatus: Int? = nil, connection: String? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.timestamp = timestamp
        self.accuracy = accuracy
        self.altitude = altitude
        self.velocity = velocity
        self.course = course
        self.battery = battery
        self.batteryStatus = batteryStatus
        self.connection = connection
    }
}

/// Whether the share's phone is reporting: the `tracker` of a view document and of a share, and the data of each
/// live `tracker` event.
public struct TrackerReport: Codable, Sendable, Equatable {
    public enum State: String, Codable, Sendable {
        /// Fixes are arriving.
        case live
        /// No fix for longer than the server's stale limit (`FLARE_STALE_AFTER_S`).
        case stale
        /// The phone's connection was lost (its MQTT last will); until its next fix.
        case offline
    }

    public let state: State
    /// When this state began.
    @RFC3339Time public var since: Date
    /// For `offline`: `connection_lost`.
    public let reason: String?
    /// `mqtt` or `http`, when known: a phone that reports over HTTP sends no last will, so only `stale` can tell that
    /// its reports stopped.
    public let transport: String?
    /// From the last fix, when the phone sends it: percent, and whether it is low (≤ 15 % and not charging).
    public let battery: Int?
    public let batteryLow: Bool?
    /// `unknown`, `unplugged`, `charging` or `full`.
    public let batteryStatus: String?
    /// `wifi`, `mobile` or `offline`, as the phone last said.
    public let connection: String?
    /// The last "locate now" request, and when the phone answered it.
    @OptionalRFC3339Time public var locateRequestedAt: Date?
    @OptionalRFC3339Time public var locateAnsweredAt: Date?

    enum CodingKeys: String, CodingKey {
        case state, since, reason, transport, battery, batteryLow = "battery_low", batteryStatus = "battery_status", connection
        case locateRequestedAt = "locate_requested_at", locateAnsweredAt = "locate_answered_at"
    }
}

/// `GET /api/v1/view/{view_token}`: what the link holder's page shows. 200 while active; 410 with the same shape
/// (`state: ended`, `reason`, `ended_at`) once the share has ended. The server renders it by hand, because it is
/// the most requested body of all (`FlareWire.ViewDocumentRenderer`); this type is its contract, and
/// `WireShapeTests` holds the two equal.
public struct ViewDocument: Codable, Sendable, Equatable {
    /// A point of the recent trail: just enough to draw a line.
    public struct TrailPoint: Codable, Sendable, Equatable {
        public let lat: Double
        public let lon: Double
        /// Unix seconds.
        public let tst: Int64

        public init(lat: Double, lon: Double, tst: Int64) {
            self.lat = lat
            self.lon = lon
            self.tst = tst
        }
    }

    public let state: ShareState
    /// `expired` or `stopped`, when ended.
    public let reason: String?
    @OptionalRFC3339Time public var endedAt: Date?
    public let name: String
    @RFC3339Time public var expiresAt: Date
    @AlwaysPresent public var last: ReportedLocation?
    /// Oldest first.
    public let trail: [TrailPoint]
    /// Whether the phone is reporting; only while the share is active.
    public let tracker: TrackerReport?
    /// The family's latest answers, oldest first (absent from servers before answers).
    public let answers: [ShareAnswer]?
    /// The check-in this share was made for, once missed: the page opens with it.
    public let checkin: MissedCheckin?
    /// True for an end-to-end encrypted share (absent otherwise): `last` is null, `trail` empty, and the positions are
    /// `sealed`, which only a holder of the link's key (its `#k=` fragment) can open.
    public let e2e: Bool?
    /// An end-to-end encrypted share's newest ciphertexts, oldest first.
    public let sealed: [SealedLocation]?
    /// The server's clock, so the page can say "2 minutes ago" right on a phone whose clock is off.
    @RFC3339Time public var serverTime: Date

    /// A missed check-in, as a link holder sees it: only that it was missed, and by when.
    public struct MissedCheckin: Codable, Sendable, Equatable {
        public let state: String
        @RFC3339Time public var dueAt: Date

        enum CodingKeys: String, CodingKey { case state, dueAt = "due_at" }
    }

    enum CodingKeys: String, CodingKey {
        case state, reason, endedAt = "ended_at", name, expiresAt = "expires_at", last, trail, tracker, answers, checkin, e2e, sealed, serverTime = "server_time"
    }
}

/// One position of an end-to-end encrypted share, as the phone sent it: `data` is the OwnTracks `encrypted` message's
/// (base64 of nonce(24) | Poly1305 tag(16) | XSalsa20 ciphertext, NaCl's secretbox keyed by the passphrase's UTF-8
/// bytes zero-padded to 32); it opens to an OwnTracks `location`. In the view document's `sealed` and the live
/// `sealed` event.
public struct SealedLocation: Codable, Sendable, Equatable {
    /// When the server received it (Unix seconds): the only time the server knows.
    public let tst: Int64
    public let data: String

    public init(tst: Int64, data: String) {
        self.tst = tst
        self.data = data
    }
}

/// A family member's answer to the person who shared: in the view document, the live `answer` event, the MQTT
/// topic `flare/v1/shares/{id}/answers` and `GET /api/v1/shares/{id}/answers`.
public struct ShareAnswer: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case onMyWay = "on_my_way", calledEmergency = "called_emergency", cannotHelp = "cannot_help"
    }
    /// Increasing: ask for those after the last one you have (`?after=`).
    public let id: String
    public let kind: Kind
    /// Text as typed, at most 40 characters; "" when none was given. Show it as text, never as markup.
    public let name: String
    @RFC3339Time public var at: Date

    public init(id: String, kind: Kind, name: String, at: Date) {
        self.id = id
        self.kind = kind
        self.name = name
        self.at = at
    }
}

/// `POST /api/v1/view/{view_token}/answers`: `{"kind":"on_my_way","name":"Mum"}` (name optional) → 201 `ShareAnswer`.
public struct AnswerRequest: RequestBody, Equatable {
    public var kind: ShareAnswer.Kind
    public var name: String?

    public init(kind: ShareAnswer.Kind, name: String? = nil) {
        self.kind = kind
        self.name = name
    }

    public static let memberRefusals = [
        "kind": BodyRefusal("invalid_kind", "kind must be on_my_way, called_emergency or cannot_help"),
        "name": BodyRefusal("invalid_name", "name must be text"),
    ]
}

/// `GET /api/v1/shares/{id}/answers?after=ID`.
public struct ShareAnswerList: Codable, Sendable, Equatable {
    public let answers: [ShareAnswer]
    public init(answers: [ShareAnswer]) { self.answers = answers }
}

/// The events of `GET /api/v1/view/{view_token}/events` (Server-Sent Events): `status` (`LiveStatus`, first and
/// after each extension), `tracker` (a `TrackerReport`, after `status` and on each change), `fix` (a
/// `ReportedLocation`, each new last position; `sealed`, a `SealedLocation`, instead for an end-to-end encrypted
/// share), `answer` (a `ShareAnswer`, each new one) and `ended` (`LiveEnded`,
/// last).
public enum LiveEventName: String, Sendable, CaseIterable {
    case status, tracker, fix, sealed, ended, answer
}

/// `POST /api/v1/view/{view_token}/locate` → 202: the phone was asked for a fresh position.
public struct LocateReceipt: Codable, Sendable, Equatable {
    @RFC3339Time public var requestedAt: Date

    enum CodingKeys: String, CodingKey { case requestedAt = "requested_at" }

    public init(requestedAt: Date) { self.requestedAt = requestedAt }
}

/// The `status` event: the share is active until `expires_at`.
public struct LiveStatus: Codable, Sendable, Equatable {
    public let state: ShareState
    @RFC3339Time public var expiresAt: Date

    enum CodingKeys: String, CodingKey { case state, expiresAt = "expires_at" }

    public init(expiresAt: Date) {
        self.state = .active
        self.expiresAt = expiresAt
    }
}

/// The `ended` event: the share is over; the stream closes after it.
public struct LiveEnded: Codable, Sendable, Equatable {
    public let state: ShareState
    public let reason: String
    @RFC3339Time public var endedAt: Date

    enum CodingKeys: String, CodingKey { case state, reason, endedAt = "ended_at" }

    public init(reason: String, endedAt: Date) {
        self.state = .ended
        self.reason = reason
        self.endedAt = endedAt
    }
}
