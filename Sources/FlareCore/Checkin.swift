import FlareCrypto
import FlareSystem
import FlareCodec
#if canImport(Glibc)
import Glibc
#endif

/// A check-in's id: 16 random bytes in base64url (22 characters). Not a capability: the owner key or the share's
/// device token is.
public struct CheckinID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public static let length = 22

    public init?(_ text: some StringProtocol) {
        guard Base64URL.isValid(text, length: Self.length) else { return nil }
        self.rawValue = String(text)
    }

    public static func generate() -> CheckinID { CheckinID(Base64URL.encode(Crypto.randomBytes(16)))! }

    public var description: String { rawValue }
}

/// Where a check-in stands. Only `armed` moves: to `done` (the sharer checked in), `arrived` (a fix inside the
/// zone) or `missed` (the deadline and its grace passed), once each, whichever instance gets there first.
public enum CheckinState: String, Sendable, CaseIterable {
    case armed, done, arrived, missed
    /// Its key was revoked before the deadline: nobody is told.
    case cancelled
}

/// "Tell them if I am not there": a circle the sharer is to reach.
public struct ArrivalZone: Sendable, Equatable {
    public let latitude: Double
    public let longitude: Double
    public let radiusMeters: Double

    public init(latitude: Double, longitude: Double, radiusMeters: Double) {
        self.latitude = latitude
        self.longitude = longitude
        self.radiusMeters = radiusMeters
    }

    /// A fix is inside when its centre is, and its accuracy is no coarser than the zone: a fix ±2 km cannot say
    /// that someone reached a 200 m circle, however near its centre falls. A fix without an accuracy counts as exact.
    public func contains(_ fix: Fix) -> Bool {
        guard (fix.accuracy ?? 0) <= radiusMeters else { return false }
        return Self.distanceMeters(latitude, longitude, fix.latitude, fix.longitude) <= radiusMeters
    }

    /// The great-circle distance (haversine, on a sphere of the Earth's mean radius): within 0.5 % of the ellipsoid's,
    /// far finer than any phone's fix.
    public static func distanceMeters(_ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double) -> Double {
        let radians = Double.pi / 180
        let dLat = (lat2 - lat1) * radians, dLon = (lon2 - lon1) * radians
        let a = sin(dLat / 2) * sin(dLat / 2) + cos(lat1 * radians) * cos(lat2 * radians) * sin(dLon / 2) * sin(dLon / 2)
        return 2 * 6_371_008.8 * asin(min(1, a.squareRoot()))
    }
}

/// A check-in: a share that records positions with no live link, and personal links that go live, with mail to each
/// contact, if the sharer has not checked in (or arrived) by `dueAt` plus the grace.
public struct Checkin: Sendable, Equatable {
    public let id: CheckinID
    /// The share that records the positions (and that the links, once missed, show).
    public let shareRow: Int64
    public let shareID: ShareID
    public let ownerKeyID: Int64?
    public var dueAt: UnixMillis
    public let graceMillis: Int64
    public let message: String
    public let contacts: [ContactID]
    public let arrive: ArrivalZone?
    public let notifyOnArrival: Bool
    /// How long the share runs once the check-in is missed.
    public let durationSeconds: Int64
    /// The escalation ladder once it is missed (`EscalationRules`; 0: off).
    public let escalateAfterSeconds: Int
    public var state: CheckinState
    /// When the state last changed (nil: armed since creation).
    public var stateAt: UnixMillis?
    public let createdAt: UnixMillis

    public init(id: CheckinID, shareRow: Int64, shareID: ShareID, ownerKeyID: Int64?, dueAt: UnixMillis, graceMillis: Int64, message: String,
                contacts: [ContactID], arrive: ArrivalZone?, notifyOnArrival: Bool, durationSeconds: Int64,
                escalateAfterSeconds: Int = EscalationRules.defaultSeconds, state: CheckinState = .armed, stateAt: UnixMillis? = nil,
                createdAt: UnixMillis) {
        self.id = id
        self.shareRow = shareRow
        self.shareID = shareID
        self.ownerKeyID = ownerKeyID
        self.dueAt = dueAt
        self.graceMillis = graceMillis
        self.message = message
        self.contacts = contacts
        self.arrive = arrive
        self.notifyOnArrival = notifyOnArrival
        self.durationSeconds = durationSeconds
        self.escalateAfterSeconds = escalateAfterSeconds
        self.state = state
        self.stateAt = stateAt
        self.createdAt = createdAt
    }

    /// When it is missed if nobody checks in: the deadline and its grace.
    public var firesAt: UnixMillis { dueAt + graceMillis }
    /// What the share's end must cover while armed: the deadline, the grace and the time it runs once missed.
    public var shareEndsAt: UnixMillis { firesAt + durationSeconds * 1000 }
}

/// What makes a check-in valid, with a named code for each refusal (the API answers 400 with it).
public enum CheckinRules {
    public static let defaultGraceSeconds: Int64 = 600
    /// A day of grace is a deadline of its own.
    public static let maximumGraceSeconds: Int64 = 86_400
    public static let maximumRadiusMeters: Double = 50_000
    public static let message = NameBounds(maximumScalars: 280)
    /// A share at least this long once missed: the family needs the time to look.
    public static let defaultDurationSeconds: Int64 = 3_600

    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public let code: String
        public let message: String
        public var description: String { message }

        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    public static func grace(_ seconds: Int64?) throws(Refusal) -> Int64 {
        let grace = seconds ?? defaultGraceSeconds
        guard (0...maximumGraceSeconds).contains(grace) else {
            throw Refusal(code: "invalid_grace", message: "grace_s must be 0 to \(maximumGraceSeconds) seconds")
        }
        return grace
    }

    /// The deadline, from `due_at` (ms) or `in_s` (exactly one of them), in the future.
    public static func dueAt(dueAt: UnixMillis?, inSeconds: Double?, now: UnixMillis) throws(Refusal) -> UnixMillis {
        let due: UnixMillis
        switch (dueAt, inSeconds) {
        case (let at?, nil): due = at
        case (nil, let seconds?):
            guard seconds.isFinite, seconds > 0, seconds < 1e9 else { throw Refusal(code: "invalid_deadline", message: "in_s must be a positive number of seconds") }
            due = now + Int64(seconds * 1000)
        case (nil, nil): throw Refusal(code: "invalid_deadline", message: "give due_at (RFC 3339) or in_s (seconds from now)")
        default: throw Refusal(code: "invalid_deadline", message: "give due_at or in_s, not both")
        }
        guard due > now else { throw Refusal(code: "deadline_in_past", message: "the deadline has passed already") }
        return due
    }

    public static func validMessage(_ text: String?) throws(Refusal) -> String {
        let trimmed = (text ?? "").trimmingWhitespace
        guard message.admits(trimmed), !NameBounds.hasHiddenScalars(trimmed, allowingNewlines: true) else {
            throw Refusal(code: "invalid_message", message: "message must be \(message.description), without control or format characters")
        }
        return trimmed
    }

    public static func zone(latitude: Double, longitude: Double, radiusMeters: Double) throws(Refusal) -> ArrivalZone {
        guard latitude.isFinite, longitude.isFinite, (-90...90).contains(latitude), (-180...180).contains(longitude) else {
            throw Refusal(code: "invalid_arrive", message: "arrive needs lat (-90 to 90) and lon (-180 to 180)")
        }
        guard radiusMeters.isFinite, radiusMeters > 0, radiusMeters <= maximumRadiusMeters else {
            throw Refusal(code: "invalid_radius", message: "arrive.radius_m must be over 0 and at most \(Int(maximumRadiusMeters)) m")
        }
        return ArrivalZone(latitude: latitude, longitude: longitude, radiusMeters: radiusMeters)
    }
}
