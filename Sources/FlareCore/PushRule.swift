import FlareCodec
import FlareCrypto

/// How an event reaches browsers by Web Push, for the event types that do (`ShareEventType.pushRule`).
public struct PushRule: Sendable, Equatable {
    /// RFC 8030 §5.3: `high` wakes a phone at once, even saving battery; `normal` may wait for the next wake-up.
    public enum Urgency: String, Sendable {
        case normal, high
    }

    /// What a newer notification replaces: one state per share and kind, so that a phone that was offline gets the
    /// newest of each kind, not a backlog (RFC 8030 §5.4 `Topic`; the notification's tag does the same on the phone).
    public enum Kind: String, Sendable {
        case alarm, duress, tracker, answer, ended
    }

    public let urgency: Urgency
    /// How long the push service keeps it for a phone that is offline (RFC 8030 §5.2 `TTL`): past it, the news is old.
    public let ttlSeconds: Int
    public let kind: Kind
    /// Whether contacts who subscribed to alerts ahead of time get it (the alarms), besides the link's viewers.
    public let reachesAlertSubscribers: Bool

    /// An alarm is news for half a day: a phone off overnight still learns of it when it wakes.
    static let alarmTTL = 43_200
    /// What the tracker or another family member did is stale after an hour.
    static let newsTTL = 3_600
    /// The end of a share, for six hours: whoever was on the way learns they can stop.
    static let endedTTL = 21_600

    /// The `Topic` header for this kind of news about `share`: 22 base64url characters (132 bits of a hash: the
    /// share's id is not shown to the push service), within RFC 8030's 32.
    public func topic(for share: ShareID) -> String {
        String(Base64URL.encode(Crypto.sha256("flare-push-topic:\(share.rawValue):\(kind.rawValue)")).prefix(22))
    }
}

extension ShareEventType {
    /// How the event is pushed; nil for the events that are not (they are for integrators, not for people).
    public var pushRule: PushRule? {
        switch self {
        case .sosStarted, .sosRepeated, .sosEscalated, .sosStopRefused, .checkinMissed:
            PushRule(urgency: .high, ttlSeconds: PushRule.alarmTTL, kind: .alarm, reachesAlertSubscribers: true)
        case .sosDuress:
            PushRule(urgency: .high, ttlSeconds: PushRule.alarmTTL, kind: .duress, reachesAlertSubscribers: true)
        case .trackerOffline, .trackerStale, .batteryLow:
            PushRule(urgency: .normal, ttlSeconds: PushRule.newsTTL, kind: .tracker, reachesAlertSubscribers: false)
        case .answered:
            PushRule(urgency: .normal, ttlSeconds: PushRule.newsTTL, kind: .answer, reachesAlertSubscribers: false)
        case .ended:
            PushRule(urgency: .normal, ttlSeconds: PushRule.endedTTL, kind: .ended, reachesAlertSubscribers: false)
        default:
            nil
        }
    }
}

/// The bounds of a Web Push subscription as a browser hands it over (`PushSubscription.toJSON()`).
public enum PushSubscriptionRules {
    /// Subscriptions per link, and per contact's alerts: a family's few phones and browsers, not a way to make flared
    /// post to a thousand addresses for one link.
    public static let maximumPerLink = 5
    /// Chrome's and Firefox's endpoints are about 200 characters; Apple's about 150.
    public static let maximumEndpointLength = 1_024
    /// RFC 8291 §3.2: the authentication secret is 16 bytes.
    public static let authSecretLength = 16
}
