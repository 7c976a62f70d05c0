import FlareCrypto
import FlareSystem
import FlareCodec

/// A personal link's id: 16 random bytes in base64url (22 characters). Named in events and the audience, never a
/// capability: the link's view token is.
public struct LinkID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public static let length = 22

    public init?(_ text: some StringProtocol) {
        guard Base64URL.isValid(text, length: Self.length) else { return nil }
        self.rawValue = String(text)
    }

    public static func generate() -> LinkID { LinkID(Base64URL.encode(Crypto.randomBytes(16)))! }

    public var description: String { rawValue }
}

/// A view link of a share made for one contact: it shows the share as the share's own link does, it can be
/// withdrawn alone, and the audience names who opened it. Its view token is a `Secret` of its own; only the
/// token's hash is stored.
public struct ShareLink: Sendable, Equatable {
    public let id: LinkID
    public let shareRow: Int64
    /// The contact it was made for (nil once that contact is removed is not tracked: the id stays as it was).
    public let contactID: ContactID?
    /// The contact's name when the link was made: what the audience and the link's answers say.
    public let name: String
    public let viewTokenHash: SecretHash
    public let createdAt: UnixMillis
    public var withdrawnAt: UnixMillis?
    public var firstOpenedAt: UnixMillis?

    public init(id: LinkID, shareRow: Int64, contactID: ContactID?, name: String, viewTokenHash: SecretHash, createdAt: UnixMillis,
                withdrawnAt: UnixMillis? = nil, firstOpenedAt: UnixMillis? = nil) {
        self.id = id
        self.shareRow = shareRow
        self.contactID = contactID
        self.name = name
        self.viewTokenHash = viewTokenHash
        self.createdAt = createdAt
        self.withdrawnAt = withdrawnAt
        self.firstOpenedAt = firstOpenedAt
    }

    public var isWithdrawn: Bool { withdrawnAt != nil }
}

/// One personal link in a share's audience: whom it was made for, when it was first opened, whether someone watches
/// through it now.
public struct LinkAudience: Sendable, Equatable {
    public let id: LinkID
    public let name: String
    public let firstOpenedAt: UnixMillis?
    public let watchingNow: Bool
    public let withdrawnAt: UnixMillis?

    public init(id: LinkID, name: String, firstOpenedAt: UnixMillis?, watchingNow: Bool, withdrawnAt: UnixMillis?) {
        self.id = id
        self.name = name
        self.firstOpenedAt = firstOpenedAt
        self.watchingNow = watchingNow
        self.withdrawnAt = withdrawnAt
    }
}

extension ShareLink {
    /// A personal link's view token, derived from the token key, the share and the link (`ShareService.linkToken`
    /// says why): the gateway shows it to the owner, and a contact's mail carries it, without the store holding it.
    public static func viewToken(tokenKey: [UInt8], share: ShareID, link: LinkID) -> String {
        let derived = Crypto.hmacSHA256(key: tokenKey, message: Array("flare-link-v1:\(share.rawValue):\(link.rawValue)".utf8))
        return Base64URL.encode(Array(derived.prefix(Secret.byteCount)))
    }
}
