import FlareCore
import FlareCrypto
import FlareCodec

/// The NATS broker's auth callout, as plain values: the server sends every login (an MQTT phone's, an integrator's,
/// flared's own) to `$SYS.REQ.USER.AUTH` as a JWT the server signs; the answer is a JWT Flare signs with its account
/// key, holding either a user JWT with that login's permissions or the reason for refusing it. The transport (a queue
/// group on every flared) lives with the NATS client; the rules live here and test in memory.
///
/// The rules are the broker plugin's (broker/plugin/flare_auth.c), translated:
/// - username = share id, password = a share token: the token verifies, is for that share, is not expired, its share
///   was not stopped; the MQTT client id follows `ClientIDs.isAllowed`; share tokens log in over MQTT only;
/// - the token's signed `acl` becomes NATS permissions (`NATSPermissions`), the login expires with the token;
/// - the service account (username `flared` and the service password) gets everything, for flared's own connections.
public enum NATSAuthCallout {
    /// What the broker asks about one login.
    public struct Request: Sendable, Equatable {
        public let serverID: String        // the answer's audience
        public let userKey: String         // the answer's and the user JWT's subject (`U…`)
        public let clientType: String      // "mqtt", "nats", "websocket", …
        public let mqttClientID: String?
        public let username: String
        public let password: String
        /// The client's address, as the node saw it (empty when it did not say).
        public var clientHost: String = ""
    }

    public enum RequestError: Error, Equatable { case malformed, badSignature, expired }

    /// Parses and checks a request: an `ed25519-nkey` JWT signed by the server key it names, not expired.
    public static func parseRequest(_ bytes: [UInt8], nowSeconds: Int64) throws(RequestError) -> Request {
        guard bytes.count <= 16_384 else { throw .malformed }
        let (claims, signingInput, signature) = try split(bytes)
        guard let issuer = claims["iss"]?.stringValue, let serverKey = NKey.decodePublic(issuer, kind: .server)
        else { throw .malformed }
        guard Ed25519.verify(signature, of: signingInput, publicKey: serverKey) else { throw .badSignature }
        if let exp = claims["exp"]?.doubleValue, Int64(exp) < nowSeconds { throw .expired }
        guard let nats = claims["nats"], nats["type"]?.stringValue == "authorization_request",
              let serverID = nats["server_id"]?["id"]?.stringValue,
              let userKey = nats["user_nkey"]?.stringValue, NKey.decodePublic(userKey, kind: .user) != nil
        else { throw .malformed }
        let client = nats["client_info"], options = nats["connect_opts"]
        return Request(serverID: serverID, userKey: userKey,
                       clientType: client?["type"]?.stringValue ?? "",
                       mqttClientID: client?["mqtt_id"]?.stringValue,
                       username: options?["user"]?.stringValue ?? "",
                       password: options?["pass"]?.stringValue ?? "",
                       clientHost: client?["host"]?.stringValue ?? "")
    }

    /// What one login is granted.
    public struct Grant: Sendable, Equatable {
        /// The name the cluster knows the connection by (`LoginNames`): how its connections are found to be ended.
        public let name: String
        public let permissions: NATSPermissions
        public let expiresAt: Int64?   // Unix seconds; the broker drops the connection then
        /// At most this many subscriptions and this large a message (nil: no limit): a share token needs a handful of
        /// subscriptions and messages of a few KiB, and gets no room to load the nodes with more.
        public var subscriptions: Int? = nil
        public var payloadBytes: Int? = nil
    }

    /// A share token's subscriptions: a phone takes five, an integrator one or two.
    public static let shareSubscriptionLimit = 16
    /// A share token's largest message: FLARE_MAX_PAYLOAD_BYTES can be set up to this.
    public static let sharePayloadLimit = 65_536

    /// The name a share-token login gets: `<share>@<key mark>`, device and watch token alike (the client-id rule tells
    /// them apart: a watcher's id is `flare-<share>-watch-…`). The key mark (8 hex digits derived from the token key)
    /// tells the logins a rotated key verified from the others; the share id finds one share's connections.
    public struct LoginNames: Sendable {
        public let keyMark: String

        public init(tokenKey: [UInt8]) {
            keyMark = Crypto.hmacSHA256(key: tokenKey, message: Array("flare nats login names v1".utf8)).prefix(4)
                .map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        }

        public func name(_ share: ShareID) -> String { "\(share.rawValue)@\(keyMark)" }

        /// Whether `name` is a share-token login verified with another token key than this one.
        public func isFromAnotherKey(_ name: String) -> Bool {
            guard let at = name.lastIndex(of: "@"), ShareID(String(name[..<at])) != nil else { return false }
            return name[name.index(after: at)...] != keyMark
        }
    }

    public enum Decision: Sendable, Equatable {
        case grant(Grant)
        case refuse(String)
    }

    /// The service login flared's own connections use.
    public static let serviceUsername = "flared"

    /// Decides one login. `isActive` asks the store whether a share exists and has not ended (a share stopped before
    /// its expiry still has tokens that verify); it throws when the store cannot answer, and the login is then refused
    /// as a failure, never as a verdict on the token (the client retries, as it does after any refused CONNECT).
    public static func decide(_ request: Request, tokenKey: [UInt8], servicePassword: [UInt8], nowSeconds: Int64,
                              isActive: (ShareID) throws -> Bool) -> Decision {
        if request.username == serviceUsername {
            return Crypto.constantTimeEquals(Crypto.sha256(Array(request.password.utf8)), Crypto.sha256(servicePassword))
                ? .grant(Grant(name: serviceUsername, permissions: .everything, expiresAt: nil))
                : .refuse("bad service credentials")
        }
        guard let share = ShareID(request.username) else { return .refuse("unknown user") }
        guard request.clientType == "mqtt" else { return .refuse("share tokens log in over MQTT only") }
        let verified: (token: ShareToken, rules: [ShareToken.ACLRule])
        do {
            verified = try ShareToken.verifyWithRules(request.password, key: tokenKey, nowSeconds: nowSeconds, expectedShare: share)
        } catch {
            return .refuse(error.description)
        }
        guard let clientID = request.mqttClientID, ClientIDs.isAllowed(clientID, share: share, role: verified.token.role) else {
            return .refuse("client id is not one this token may use")
        }
        do {
            if try !isActive(share) { return .refuse("share has ended") }
        } catch {
            return .refuse("store unavailable, try again")
        }
        guard let permissions = NATSPermissions(rules: verified.rules) else {
            return .refuse("token rules cannot be enforced by NATS")
        }
        let names = LoginNames(tokenKey: tokenKey)
        return .grant(Grant(name: names.name(share), permissions: permissions,
                            expiresAt: verified.token.expiresAt, subscriptions: shareSubscriptionLimit, payloadBytes: sharePayloadLimit))
    }

    /// The signed answer to `request`: a user JWT for `account` with the grant, or the refusal's reason.
    public static func response(to request: Request, decision: Decision, account: String, issuerSeed: [UInt8],
                                nowSeconds: Int64) -> [UInt8] {
        guard let issuerKey = Ed25519.publicKey(seed: issuerSeed) else { preconditionFailure("an account seed is 32 bytes") }
        let issuer = NKey.encodePublic(issuerKey, kind: .account)
        var nats = JSONWriter(capacity: 2048)
        nats.beginObject()
        switch decision {
        case .grant(let grant):
            var user = JSONWriter(capacity: 1024)
            user.beginObject()
            claimsHeader(&user, issuer: issuer, subject: request.userKey, audience: account, nowSeconds: nowSeconds)
            user.field("name", grant.name)
            if let expiresAt = grant.expiresAt { user.field("exp", expiresAt) }
            user.key("nats")
            user.beginObject()
            grant.permissions.write(to: &user)
            user.field("subs", grant.subscriptions ?? -1); user.field("data", -1); user.field("payload", grant.payloadBytes ?? -1)
            user.field("type", "user"); user.field("version", 2)
            user.endObject()
            user.endObject()
            nats.field("jwt", signed(user.bytes, seed: issuerSeed))
        case .refuse(let reason):
            nats.field("error", reason)
        }
        nats.field("type", "authorization_response"); nats.field("version", 2)
        nats.endObject()
        var claims = JSONWriter(capacity: 3072)
        claims.beginObject()
        claimsHeader(&claims, issuer: issuer, subject: request.userKey, audience: request.serverID, nowSeconds: nowSeconds)
        claims.key("nats"); claims.raw(nats.bytes)
        claims.endObject()
        return Array(signed(claims.bytes, seed: issuerSeed).utf8)
    }

    // MARK: JWT

    private static let header = Base64URL.encode(#"{"typ":"JWT","alg":"ed25519-nkey"}"#)

    private static func claimsHeader(_ writer: inout JSONWriter, issuer: String, subject: String, audience: String, nowSeconds: Int64) {
        writer.field("jti", Base64URL.encode(Crypto.randomBytes(16)))
        writer.field("iat", nowSeconds)
        writer.field("iss", issuer)
        writer.field("sub", subject)
        writer.field("aud", audience)
    }

    private static func signed(_ claims: [UInt8], seed: [UInt8]) -> String {
        let input = header + "." + Base64URL.encode(claims)
        guard let signature = Ed25519.sign(Array(input.utf8), seed: seed) else { preconditionFailure("OpenSSL could not sign with Ed25519") }
        return input + "." + Base64URL.encode(signature)
    }

    private static func split(_ bytes: [UInt8]) throws(RequestError) -> (JSONValue, [UInt8], [UInt8]) {
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerBytes = Base64URL.decode(String(decoding: parts[0], as: UTF8.self)),
              let claimBytes = Base64URL.decode(String(decoding: parts[1], as: UTF8.self)),
              let signature = Base64URL.decode(String(decoding: parts[2], as: UTF8.self)),
              let header = try? JSONValue.parse(headerBytes), header["alg"]?.stringValue == "ed25519-nkey",
              let claims = try? JSONValue.parse(claimBytes)
        else { throw .malformed }
        return (claims, Array(bytes[..<(parts[0].count + 1 + parts[1].count)]), signature)
    }
}

/// A token's MQTT rules as NATS permissions. The plugin reads a token's rules in order, first match wins, no match
/// refused; NATS lets a deny win over any allow, and with no allow list allows everything. The two agree exactly when
/// no deny rule comes after an allow rule of an action it shares (every Flare token: they hold allow rules only), so
/// any other list is not translated (the login is refused) rather than enforced differently. An action with no allow
/// rule is denied `>`. MQTT `a/+/c` is NATS `a.*.c`; `a/#` is `a.>` and `a` (MQTT's `#` takes the parent level too);
/// a topic level NATS would read differently (`.`, `*`, `>`, space, empty) makes the list untranslatable.
public struct NATSPermissions: Sendable, Equatable {
    public var publishAllow: [String] = [], publishDeny: [String] = []
    public var subscribeAllow: [String] = [], subscribeDeny: [String] = []

    public static let everything = NATSPermissions(publishAllow: [">"], subscribeAllow: [">"])

    public init(publishAllow: [String] = [], publishDeny: [String] = [], subscribeAllow: [String] = [], subscribeDeny: [String] = []) {
        self.publishAllow = publishAllow; self.publishDeny = publishDeny
        self.subscribeAllow = subscribeAllow; self.subscribeDeny = subscribeDeny
    }

    public init?(rules: [ShareToken.ACLRule]) {
        var allowSeen = (publish: false, subscribe: false)
        for rule in rules {
            guard let subjects = Self.subjects(ofTopic: rule.topic) else { return nil }
            let publish = rule.action == "publish" || rule.action == "all"
            let subscribe = rule.action == "subscribe" || rule.action == "all"
            if rule.allow {
                if publish { publishAllow += subjects; allowSeen.publish = true }
                if subscribe { subscribeAllow += subjects; allowSeen.subscribe = true }
            } else {
                if (publish && allowSeen.publish) || (subscribe && allowSeen.subscribe) { return nil }
                if publish { publishDeny += subjects }
                if subscribe { subscribeDeny += subjects }
            }
        }
        if publishAllow.isEmpty { publishDeny = [">"] }
        if subscribeAllow.isEmpty { subscribeDeny = [">"] }
    }

    /// The NATS subjects an MQTT topic filter covers; nil if NATS cannot say it the same way.
    public static func subjects(ofTopic topic: String) -> [String]? {
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard !levels.isEmpty, topic.utf8.count <= 255 else { return nil }
        var tokens: [String] = []
        for (index, level) in levels.enumerated() {
            if level == "#" {
                guard index == levels.count - 1 else { return nil }
                let parent = tokens.joined(separator: ".")
                return parent.isEmpty ? [">"] : [parent, parent + ".>"]
            }
            if level == "+" { tokens.append("*"); continue }
            guard !level.isEmpty, !level.utf8.contains(where: { $0 == 0x2E || $0 == 0x2A || $0 == 0x3E || $0 == 0x20 || $0 == 0x23 || $0 == 0x2B || $0 < 0x20 })
            else { return nil }
            tokens.append(String(level))
        }
        return [tokens.joined(separator: ".")]
    }

    func write(to writer: inout JSONWriter) {
        func list(_ name: String, allow: [String], deny: [String]) {
            writer.key(name)
            writer.beginObject()
            if !allow.isEmpty { writer.key("allow"); writer.beginArray(); allow.forEach { writer.string($0) }; writer.endArray() }
            if !deny.isEmpty { writer.key("deny"); writer.beginArray(); deny.forEach { writer.string($0) }; writer.endArray() }
            writer.endObject()
        }
        list("pub", allow: publishAllow, deny: publishDeny)
        list("sub", allow: subscribeAllow, deny: subscribeDeny)
    }
}
