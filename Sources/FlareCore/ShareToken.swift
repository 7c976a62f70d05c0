import FlareCrypto
import FlareCodec

/// The publish (device) and subscribe (watch) capabilities for one share: an HS256 JWT whose `exp` is the
/// share's expiry and whose EMQX-5-style `acl` claim lists exactly the topics it may use, so a clustered
/// broker can verify it natively with no callback to Flare.
public struct ShareToken: Sendable, Equatable {
    public enum Role: String, Sendable { case device, watch }

    public let shareID: ShareID
    public let role: Role
    public let issuedAt: Int64   // Unix seconds
    public let expiresAt: Int64  // Unix seconds

    public init(shareID: ShareID, role: Role, issuedAt: Int64, expiresAt: Int64) {
        self.shareID = shareID
        self.role = role
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }

    public struct ACLRule: Sendable, Equatable {
        public let allow: Bool
        public let action: String  // "publish" | "subscribe"
        public let topic: String

        public init(allow: Bool = true, action: String, topic: String) {
            self.allow = allow
            self.action = action
            self.topic = topic
        }
    }

    /// The rules, first match wins (the broker plugin holds at most 8 per token; EMQX reads the same list).
    ///
    /// The device token's list, defined once for every feature that needs one, exact topics only (a `#` would let one
    /// token write retained messages to any number of topics, which outlive the share and fill the broker):
    /// 1. publish `…/location`: its fixes and its last will, all Flare reads from a phone. The OwnTracks apps' other
    ///    messages (`/event`, `/status`, `/waypoint`, `/waypoints`, `/dump`, `/step`, `/beacon`, `/info` below it) are
    ///    refused, which the broker acknowledges and drops: the app carries on undisturbed;
    /// 2. subscribe `…/location/cmd`: the OwnTracks command topic (`<pubTopicBase>/cmd`), written by flared only;
    /// 3. subscribe `…/status`: the share's state and tracker state (retained);
    /// 4. subscribe `…/answers`: the family's answers (QoS 1);
    /// 5. subscribe `…/audience`: how many opened the link and watch it (retained);
    /// 6. subscribe `…/stored`: what Flare has stored of the tracker's fixes (its end-to-end confirmation).
    /// A token issued before a rule changed keeps the rules it was signed with until it expires (at most the longest
    /// share): one issued before this list may still publish below `…/location/` (`ShareService` clears what is
    /// retained there when the share ends) and write its command topic, and cannot read the newer topics.
    public var acl: [ACLRule] {
        switch role {
        case .device:
            return [ACLRule(action: "publish", topic: Topics.location(shareID)),
                    ACLRule(action: "subscribe", topic: Topics.command(shareID)),
                    ACLRule(action: "subscribe", topic: Topics.status(shareID)),
                    ACLRule(action: "subscribe", topic: Topics.answers(shareID)),
                    ACLRule(action: "subscribe", topic: Topics.audience(shareID)),
                    ACLRule(action: "subscribe", topic: Topics.stored(shareID))]
        case .watch:
            return [ACLRule(action: "subscribe", topic: Topics.shareRoot(shareID) + "/#")]
        }
    }

    public func signed(with key: [UInt8]) -> String {
        var claims = JSONWriter(capacity: 1024)  // a device token's claims are about 800 bytes
        claims.beginObject()
        claims.field("sub", shareID.rawValue)
        claims.field("role", role.rawValue)
        claims.field("iat", issuedAt)
        claims.field("exp", expiresAt)
        claims.key("acl")
        claims.beginArray()
        for rule in acl {
            claims.beginObject()
            claims.field("permission", rule.allow ? "allow" : "deny")
            claims.field("action", rule.action)
            claims.field("topic", rule.topic)
            claims.endObject()
        }
        claims.endArray()
        claims.endObject()
        let signingInput = Self.encodedHeader + "." + Base64URL.encode(claims.bytes)
        return signingInput + "." + Base64URL.encode(Crypto.hmacSHA256(key: key, message: Array(signingInput.utf8)))
    }

    private static let encodedHeader = Base64URL.encode(#"{"alg":"HS256","typ":"JWT"}"#)
    /// Longer tokens are refused before any parsing: a device token is about 1,050 bytes (six rules), a watch token less.
    public static let maximumLength = 2048

    public enum VerificationError: Error, Equatable, CustomStringConvertible {
        case malformed, unsupportedAlgorithm, badSignature, expired, wrongShare
        public var description: String {
            switch self {
            case .malformed: "malformed token"
            case .unsupportedAlgorithm: "token algorithm is not HS256"
            case .badSignature: "token signature does not verify"
            case .expired: "token has expired"
            case .wrongShare: "token is for another share"
            }
        }
    }

    /// Verifies signature (constant time), algorithm (HS256 only, never `none`), expiry, and optionally the share.
    public static func verify(_ token: String, key: [UInt8], nowSeconds: Int64, expectedShare: ShareID? = nil) throws(VerificationError) -> ShareToken {
        try verifyWithRules(token, key: key, nowSeconds: nowSeconds, expectedShare: expectedShare).token
    }

    /// `verify`, and the `acl` rules the token was signed with (a broker enforces those, not today's `acl`: a token
    /// issued before a rule changed keeps its own). A missing or malformed list is a malformed token.
    public static func verifyWithRules(_ token: String, key: [UInt8], nowSeconds: Int64, expectedShare: ShareID? = nil)
        throws(VerificationError) -> (token: ShareToken, rules: [ACLRule]) {
        guard token.utf8.count <= maximumLength else { throw .malformed }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerBytes = Base64URL.decode(parts[0]),
              let claimBytes = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]),
              let header = try? JSONValue.parse(headerBytes)
        else { throw .malformed }
        guard header["alg"]?.stringValue == "HS256" else { throw .unsupportedAlgorithm }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard Crypto.constantTimeEquals(signature, Crypto.hmacSHA256(key: key, message: signingInput)) else { throw .badSignature }
        guard let claims = try? JSONValue.parse(claimBytes),
              let subject = claims["sub"]?.stringValue, let shareID = ShareID(subject),
              let roleText = claims["role"]?.stringValue, let role = Role(rawValue: roleText),
              let exp = claims["exp"]?.doubleValue, exp.isFinite, abs(exp) < 1e12,
              let iat = claims["iat"]?.doubleValue, iat.isFinite, abs(iat) < 1e12
        else { throw .malformed }
        guard Int64(exp) > nowSeconds else { throw .expired }
        if let expectedShare, expectedShare != shareID { throw .wrongShare }
        guard case .array(let list)? = claims["acl"], list.count <= maximumRules else { throw .malformed }
        var rules: [ACLRule] = []
        for entry in list {
            guard let permission = entry["permission"]?.stringValue, permission == "allow" || permission == "deny",
                  let action = entry["action"]?.stringValue, action == "publish" || action == "subscribe" || action == "all",
                  let topic = entry["topic"]?.stringValue, !topic.isEmpty
            else { throw .malformed }
            rules.append(ACLRule(allow: permission == "allow", action: action, topic: topic))
        }
        return (ShareToken(shareID: shareID, role: role, issuedAt: Int64(iat), expiresAt: Int64(exp)), rules)
    }

    /// The most rules a token may carry (the broker plugin's MAX_RULES).
    public static let maximumRules = 8
}
