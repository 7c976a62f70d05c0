#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// `POST /api/v1/contacts`: someone the key's shares may tell. `name` (at most 80 characters) is required; `email`
/// and `phone` (E.164: `+4915123456789`) are optional; `language` is `en` (default) or `zh-CN`.
public struct ContactRequest: RequestBody, Equatable {
    public var name: String
    public var email: String?
    public var phone: String?
    public var language: String?

    public init(name: String, email: String? = nil, phone: String? = nil, language: String? = nil) {
        self.name = name
        self.email = email
        self.phone = phone
        self.language = language
    }

    public static let memberRefusals = [
        "name": BodyRefusal("invalid_name", "a contact needs a name (a string)"),
        "email": BodyRefusal("invalid_email", "email must be a string"),
        "phone": BodyRefusal("invalid_phone", "phone must be a string"),
        "language": BodyRefusal("invalid_language", "language must be a string"),
    ]
    public static let malformedRefusal = BodyRefusal("invalid_json", #"the body must be a JSON object, e.g. {"name":"Anna","email":"anna@example.org"}"#)
}

/// A contact: the answer of `POST /api/v1/contacts` (201) and `GET /api/v1/contacts/{id}`, and each item of
/// `GET /api/v1/contacts`.
public struct ContactInfo: Codable, Sendable, Equatable {
    public let id: String
    public let name: String
    public let email: String?
    public let phone: String?
    public let language: String
    @RFC3339Time public var createdAt: Date

    enum CodingKeys: String, CodingKey { case id, name, email, phone, language, createdAt = "created_at" }

    public init(id: String, name: String, email: String?, phone: String?, language: String, createdAt: Date) {
        self.id = id
        self.name = name
        self.email = email
        self.phone = phone
        self.language = language
        self.createdAt = createdAt
    }
}

/// `GET /api/v1/contacts?limit=N&cursor=C`: the caller's contacts, newest first, paged as shares are.
public struct ContactList: Codable, Sendable, Equatable {
    public let contacts: [ContactInfo]
    @AlwaysPresent public var nextCursor: String?

    enum CodingKeys: String, CodingKey { case contacts, nextCursor = "next_cursor" }

    public static let defaultLimit = 50
    public static let maximumLimit = 200

    public init(contacts: [ContactInfo], nextCursor: String?) {
        self.contacts = contacts
        self.nextCursor = nextCursor
    }
}

/// A personal link: the share's view, for one contact, withdrawn on its own. In the create answer (`links`, only
/// when `contacts` was given) and `POST /api/v1/shares/{id}/links`.
public struct PersonalLink: Codable, Sendable, Equatable {
    public let linkID: String
    public let contactID: String?
    public let name: String
    /// `https://host/s/<this link's own view token>`: text it to that contact only.
    public let url: String
    /// Whether Flare mails the link to its contact: absent for a contact it does not mail (no address, or no SMTP
    /// server), false with `reason` when it does not: `mail_budget` (the key's hourly mail budget is spent),
    /// `same_address` (another link of the share went to that address). The link works either way.
    public let mailed: Bool?
    public let reason: String?

    enum CodingKeys: String, CodingKey { case linkID = "link_id", contactID = "contact_id", name, url, mailed, reason }

    public init(linkID: String, contactID: String?, name: String, url: String, mailed: Bool? = nil, reason: String? = nil) {
        self.linkID = linkID
        self.contactID = contactID
        self.name = name
        self.url = url
        self.mailed = mailed
        self.reason = reason
    }
}

/// `GET /api/v1/shares/{id}/links` (owner key): every personal link of the share, oldest first.
public struct PersonalLinkList: Codable, Sendable, Equatable {
    public struct Item: Codable, Sendable, Equatable {
        public let linkID: String
        public let contactID: String?
        public let name: String
        public let url: String
        @RFC3339Time public var createdAt: Date
        @OptionalRFC3339Time public var firstOpenedAt: Date?
        @OptionalRFC3339Time public var withdrawnAt: Date?

        enum CodingKeys: String, CodingKey {
            case linkID = "link_id", contactID = "contact_id", name, url, createdAt = "created_at", firstOpenedAt = "first_opened_at"
            case withdrawnAt = "withdrawn_at"
        }

        public init(linkID: String, contactID: String?, name: String, url: String, createdAt: Date, firstOpenedAt: Date?, withdrawnAt: Date?) {
            self.linkID = linkID
            self.contactID = contactID
            self.name = name
            self.url = url
            self.createdAt = createdAt
            self.firstOpenedAt = firstOpenedAt
            self.withdrawnAt = withdrawnAt
        }
    }

    public let links: [Item]
    public init(links: [Item]) { self.links = links }
}

/// `POST /api/v1/shares/{id}/links`: `{"contacts":["<contact id>", …]}`: a link each for a running share →
/// 201 `{"links":[PersonalLink]}`.
public struct LinkRequest: RequestBody, Equatable {
    public var contacts: [String]
    public init(contacts: [String]) { self.contacts = contacts }

    // One code for every wrong body, this endpoint's since it was added.
    static let refusal = BodyRefusal("invalid_contacts", #"the body must be {"contacts":["<contact id>", …]}"#)
    public static let memberRefusals = ["contacts": refusal]
    public static let malformedRefusal = refusal
}

/// The answer of `POST /api/v1/shares/{id}/links`.
public struct CreatedLinks: Codable, Sendable, Equatable {
    public let links: [PersonalLink]
    public init(links: [PersonalLink]) { self.links = links }
}
