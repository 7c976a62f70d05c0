import FlareSystem
/// What an owner key may do beyond its own shares' lifecycle. An admin key sees and controls every share; any other
/// sees only the shares it created, within these limits (nil: no limit of that kind).
public struct KeyLimits: Sendable, Equatable {
    /// Live shares at once.
    public var maxLive: Int?
    /// A share's whole length, from its creation to its expiry, whoever extends it.
    public var maxDurationSeconds: Int64?
    /// Shares created in any hour.
    public var createsPerHour: Int?

    public init(maxLive: Int? = nil, maxDurationSeconds: Int64? = nil, createsPerHour: Int? = nil) {
        self.maxLive = maxLive
        self.maxDurationSeconds = maxDurationSeconds
        self.createsPerHour = createsPerHour
    }

    public static let none = KeyLimits()
}

/// An owner key as the store knows it (never the key itself: only its hash is kept).
public struct OwnerKeyRecord: Sendable, Equatable {
    public let id: Int64
    public var label: String
    public var isAdmin: Bool
    public var limits: KeyLimits
    public let createdAt: UnixMillis
    public var lastUsedAt: UnixMillis?
    public var revokedAt: UnixMillis?
    /// Live shares it owns (filled in by listings only).
    public var liveShares: Int
    /// Where its shares' events are sent, if it set a webhook.
    public var webhookURL: String?

    public init(id: Int64, label: String, isAdmin: Bool, limits: KeyLimits, createdAt: UnixMillis,
                lastUsedAt: UnixMillis? = nil, revokedAt: UnixMillis? = nil, liveShares: Int = 0, webhookURL: String? = nil) {
        self.id = id
        self.label = label
        self.isAdmin = isAdmin
        self.limits = limits
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
        self.liveShares = liveShares
        self.webhookURL = webhookURL
    }

    public var isRevoked: Bool { revokedAt != nil }

    /// Whether this key may see and control `share`: an admin key any, another key the shares it created.
    public func owns(_ share: Share) -> Bool { isAdmin || share.ownerKeyID == id }
}

/// The limit a request ran into (its name in `quota_exceeded` answers and in `/metrics`).
public enum QuotaLimit: String, Sendable, CaseIterable {
    case maxLive = "max_live"
    case maxDuration = "max_duration_s"
    case createRate = "create_rate"
}

/// A request over one of its key's limits: which, its value, and how long waiting would take (nil: waiting does
/// not help, as for a duration).
public struct QuotaRefusal: Error, Sendable, Equatable {
    public let limit: QuotaLimit
    public let value: Int64
    public let retryAfterSeconds: Int?

    public init(limit: QuotaLimit, value: Int64, retryAfterSeconds: Int?) {
        self.limit = limit
        self.value = value
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var message: String {
        switch limit {
        case .maxLive: "this key may have at most \(value) live shares at once"
        case .maxDuration: "this key's shares may last at most \(value) s from their creation"
        case .createRate: "this key may create at most \(value) shares an hour"
        }
    }
}
