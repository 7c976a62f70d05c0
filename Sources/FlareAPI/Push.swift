/// `GET /api/v1/push/key`: the server's VAPID public key, for `pushManager.subscribe({applicationServerKey})`.
public struct PushKey: Codable, Sendable, Equatable {
    /// The P-256 public key, uncompressed (65 bytes), base64url without padding.
    public let publicKey: String

    enum CodingKeys: String, CodingKey {
        case publicKey = "public_key"
    }

    public init(publicKey: String) {
        self.publicKey = publicKey
    }
}

/// `POST /api/v1/view/{view_token}/push` and `POST /api/v1/alerts/push`: a browser's subscription as
/// `PushSubscription.toJSON()` gives it, and the language its notifications are to be in (`lang`, `en` or `zh-CN`;
/// default `en`). `DELETE` on the same paths takes `{"endpoint": …}` alone.
public struct PushSubscriptionRequest: RequestBody, Equatable {
    public struct Keys: Codable, Sendable, Equatable {
        public var p256dh: String
        public var auth: String

        public init(p256dh: String, auth: String) {
            self.p256dh = p256dh
            self.auth = auth
        }
    }

    public var endpoint: String
    public var keys: Keys?
    public var lang: String?

    public init(endpoint: String, keys: Keys? = nil, lang: String? = nil) {
        self.endpoint = endpoint
        self.keys = keys
        self.lang = lang
    }

    public static let memberRefusals = [
        "endpoint": BodyRefusal("invalid_endpoint", "endpoint must be the subscription's push service URL (a string)"),
        "keys": BodyRefusal("invalid_keys", #"keys must be {"p256dh": "<base64url>", "auth": "<base64url>"}"#),
        "lang": BodyRefusal("invalid_language", "lang must be en or zh-CN"),
    ]
    public static let malformedRefusal = BodyRefusal("invalid_json", #"the body must be a JSON object, e.g. {"endpoint":"https://…","keys":{"p256dh":"…","auth":"…"}}"#)
}

/// What a subscription request did: `subscribed` true for a new subscription, false when the browser was subscribed
/// already (its keys are the new ones).
public struct PushSubscribed: Codable, Sendable, Equatable {
    public let subscribed: Bool

    public init(subscribed: Bool) {
        self.subscribed = subscribed
    }
}

/// `GET /api/v1/contacts/{id}/alerts-link` (owner key): the contact's alerts page, where they allow notifications
/// once and get every SOS of this key's devices and missed check-in at once. The secret is in the fragment (`#c=`):
/// never sent in a request line, so never in a log.
public struct AlertsLink: Codable, Sendable, Equatable {
    public let contactID: String
    public let url: String

    enum CodingKeys: String, CodingKey {
        case contactID = "contact_id", url
    }

    public init(contactID: String, url: String) {
        self.contactID = contactID
        self.url = url
    }
}

/// `GET /api/v1/alerts` with the alerts secret (`Authorization: Bearer`): whose alerts the page holds.
public struct AlertsCard: Codable, Sendable, Equatable {
    /// The contact's name, as the sharer saved it.
    public let name: String
    public let language: String

    public init(name: String, language: String) {
        self.name = name
        self.language = language
    }
}
