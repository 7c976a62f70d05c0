import FlareCrypto
import Testing
import FlareCore
@testable import FlareNATSBroker
import FlareCodec

@Suite struct NKeyTests {
    /// An account key made independently (PyNaCl and the nkeys encoding: base32 of prefix, key and CRC-16/XMODEM).
    static let seed = "SAAIF5ZQAA43QBXJIXDHPPJTMGGUWUJSOVCMVZOTYTMU7DUSA2LIUMQ67Y"
    static let publicKey = "ADXXLIRXQFOPOBKNM3XXDYQ76Q37BWUAPOWDVBYSIOSL4F3KZ2BA2WFF"

    @Test func readsAndWritesKeysAsNATSDoes() throws {
        let seedBytes = try #require(NKey.decodeSeed(Self.seed, kind: .account))
        #expect(NKey.encodeSeed(seedBytes, kind: .account) == Self.seed)
        let key = try #require(Ed25519.publicKey(seed: seedBytes))
        #expect(NKey.encodePublic(key, kind: .account) == Self.publicKey)
        #expect(NKey.decodePublic(Self.publicKey, kind: .account) == key)
    }

    @Test func refusesAnotherKindABadChecksumAndBadText() {
        #expect(NKey.decodePublic(Self.publicKey, kind: .user) == nil)
        #expect(NKey.decodeSeed(Self.seed, kind: .user) == nil)
        var altered = Array(Self.publicKey)
        altered[10] = altered[10] == "A" ? "B" : "A"
        #expect(NKey.decodePublic(String(altered), kind: .account) == nil)
        #expect(NKey.decodePublic("not-base32!", kind: .account) == nil)
        #expect(NKey.decodePublic("", kind: .account) == nil)
        #expect(NKey.decodePublic(String(repeating: "A", count: 500), kind: .account) == nil)
    }

    @Test func newAccountsAreFreshAndConsistent() throws {
        let one = NKey.newAccount(), two = NKey.newAccount()
        #expect(one.seed != two.seed)
        #expect(one.publicKey.hasPrefix("A") && one.seed.hasPrefix("SA"))
        let seed = try #require(NKey.decodeSeed(one.seed, kind: .account))
        #expect(Ed25519.publicKey(seed: seed).map { NKey.encodePublic($0, kind: .account) } == one.publicKey)
    }

    @Test func ed25519VerifiesItsOwnSignaturesOnly() throws {
        let seed = Crypto.randomBytes(32)
        let key = try #require(Ed25519.publicKey(seed: seed))
        let signature = try #require(Ed25519.sign(Array("message".utf8), seed: seed))
        #expect(Ed25519.verify(signature, of: Array("message".utf8), publicKey: key))
        #expect(!Ed25519.verify(signature, of: Array("messagE".utf8), publicKey: key))
        #expect(!Ed25519.verify(Array(signature.dropLast()), of: Array("message".utf8), publicKey: key))
        #expect(Ed25519.sign([], seed: [1, 2, 3]) == nil)
    }
}

@Suite struct NATSPermissionsTests {
    let share = ShareID.generate()
    var root: String { "flare.v1.shares." + share.rawValue }

    @Test func aDeviceTokenMayPublishItsLocationAndReadItsOwnTopicsOnly() throws {
        let rules = ShareToken(shareID: share, role: .device, issuedAt: 0, expiresAt: 1).acl
        let permissions = try #require(NATSPermissions(rules: rules))
        #expect(permissions.publishAllow == [root + ".location"])
        #expect(permissions.publishDeny.isEmpty)
        #expect(Set(permissions.subscribeAllow) == [root + ".location.cmd", root + ".status", root + ".answers", root + ".audience", root + ".stored"])
        #expect(permissions.subscribeDeny.isEmpty)
    }

    @Test func aWatchTokenMayPublishNothingAndReadTheWholeShareWithItsParentLevel() throws {
        let rules = ShareToken(shareID: share, role: .watch, issuedAt: 0, expiresAt: 1).acl
        let permissions = try #require(NATSPermissions(rules: rules))
        #expect(permissions.publishAllow.isEmpty)
        #expect(permissions.publishDeny == [">"])   // NATS allows everything to a list with no allow: deny it all
        #expect(permissions.subscribeAllow == [root, root + ".>"])
    }

    @Test func denyBeforeAllowAgreesAndIsTranslated() throws {
        // The rules of a device token signed before exact topics: deny the command topic, then allow below location.
        let rules = [ShareToken.ACLRule(allow: false, action: "publish", topic: "flare/v1/shares/\(share.rawValue)/location/cmd"),
                     ShareToken.ACLRule(action: "publish", topic: "flare/v1/shares/\(share.rawValue)/location/#"),
                     ShareToken.ACLRule(action: "subscribe", topic: "flare/v1/shares/\(share.rawValue)/+")]
        let permissions = try #require(NATSPermissions(rules: rules))
        #expect(permissions.publishDeny == [root + ".location.cmd"])
        #expect(permissions.publishAllow == [root + ".location", root + ".location.>"])
        #expect(permissions.subscribeAllow == [root + ".*"])
    }

    @Test func denyAfterAnAllowOfTheSameActionIsNotTranslated() {
        // First match would allow `…/location/cmd` here; NATS would deny it. Refused rather than enforced differently.
        let rules = [ShareToken.ACLRule(action: "publish", topic: "a/#"), ShareToken.ACLRule(allow: false, action: "publish", topic: "a/b")]
        #expect(NATSPermissions(rules: rules) == nil)
        let all = [ShareToken.ACLRule(action: "subscribe", topic: "a/#"), ShareToken.ACLRule(allow: false, action: "all", topic: "a/b")]
        #expect(NATSPermissions(rules: all) == nil)
        // A deny of another action after an allow is fine: the two lists are separate.
        let other = [ShareToken.ACLRule(action: "subscribe", topic: "a/#"), ShareToken.ACLRule(allow: false, action: "publish", topic: "a/b")]
        #expect(NATSPermissions(rules: other) != nil)
    }

    @Test func topicsNATSWouldReadDifferentlyAreRefused() {
        for topic in ["a/b.c", "a/*", "a/>", "a//b", "a/#/b", "a b/c", "/a", "a/b#", "a/b+"] {
            #expect(NATSPermissions.subjects(ofTopic: topic) == nil, "\(topic)")
        }
        #expect(NATSPermissions.subjects(ofTopic: "#") == [">"])
        #expect(NATSPermissions.subjects(ofTopic: "a/+/c") == ["a.*.c"])
    }
}

@Suite struct NATSAuthCalloutTests {
    let key = Crypto.randomBytes(32)
    let share = ShareID.generate()
    let servicePassword = Array("service-secret".utf8)
    let serverSeed = Crypto.randomBytes(32)
    let issuerSeed = Crypto.randomBytes(32)
    let userKey = NKey.encodePublic(Crypto.randomBytes(32), kind: .user)

    func token(_ role: ShareToken.Role, expiresAt: Int64 = 2_000) -> String {
        ShareToken(shareID: share, role: role, issuedAt: 1_000, expiresAt: expiresAt).signed(with: key)
    }

    func request(user: String, password: String, clientID: String?, type: String = "mqtt") -> NATSAuthCallout.Request {
        NATSAuthCallout.Request(serverID: "NSERVER", userKey: userKey, clientType: type, mqttClientID: clientID, username: user, password: password)
    }

    func decide(_ request: NATSAuthCallout.Request, active: Bool = true) -> NATSAuthCallout.Decision {
        NATSAuthCallout.decide(request, tokenKey: key, servicePassword: servicePassword, nowSeconds: 1_500) { _ in active }
    }

    @Test func aDeviceTokenWithItsClientIDIsGrantedItsRulesUntilItExpires() throws {
        let decision = decide(request(user: share.rawValue, password: token(.device), clientID: ClientIDs.device(share)))
        guard case .grant(let grant) = decision else { Issue.record("refused: \(decision)"); return }
        #expect(grant.expiresAt == 2_000)
        #expect(grant.permissions == NATSPermissions(rules: ShareToken(shareID: share, role: .device, issuedAt: 0, expiresAt: 1).acl))
        #expect(grant.name == NATSAuthCallout.LoginNames(tokenKey: key).name(share))
        #expect(grant.subscriptions == NATSAuthCallout.shareSubscriptionLimit && grant.payloadBytes == NATSAuthCallout.sharePayloadLimit)
    }

    @Test func loginNamesTellTheRoleAndTheKey() {
        let names = NATSAuthCallout.LoginNames(tokenKey: key), other = NATSAuthCallout.LoginNames(tokenKey: Crypto.randomBytes(32))
        #expect(names.keyMark.count == 8 && names.keyMark != other.keyMark)
        #expect(!names.isFromAnotherKey(names.name(share)))
        #expect(names.isFromAnotherKey(other.name(share)))
        #expect(ClientIDs.isWatcherForm(ClientIDs.watcher(share, suffix: "x")) && !ClientIDs.isWatcherForm(ClientIDs.device(share, suffix: "x")))
        #expect(!ClientIDs.isWatcherForm(ClientIDs.device(share)) && !ClientIDs.isWatcherForm("flared"))
        // Service logins and anything else are no share token's.
        #expect(!names.isFromAnotherKey("flared") && !names.isFromAnotherKey("flare-auth") && !names.isFromAnotherKey("x@y"))
    }

    @Test func everyRuleOfThePluginRefusesHere() {
        let other = ShareID.generate()
        let cases: [(NATSAuthCallout.Request, String)] = [
            (request(user: share.rawValue, password: token(.device), clientID: "flared"), "client id"),
            (request(user: share.rawValue, password: token(.device), clientID: ClientIDs.watcher(share, suffix: "x")), "client id"),
            (request(user: share.rawValue, password: token(.watch), clientID: ClientIDs.device(share)), "client id"),
            (request(user: share.rawValue, password: token(.device), clientID: nil), "client id"),
            (request(user: share.rawValue, password: token(.device), clientID: ClientIDs.device(share), type: "nats"), "MQTT only"),
            (request(user: other.rawValue, password: token(.device), clientID: ClientIDs.device(other)), "another share"),
            (request(user: share.rawValue, password: token(.device, expiresAt: 1_400), clientID: ClientIDs.device(share)), "expired"),
            (request(user: share.rawValue, password: token(.device) + "x", clientID: ClientIDs.device(share)), "signature"),
            (request(user: "admin", password: "anything", clientID: "admin"), "unknown user"),
            (request(user: "flared", password: "wrong", clientID: "flared"), "service credentials"),
        ]
        for (request, expected) in cases {
            guard case .refuse(let reason) = decide(request) else { Issue.record("granted: \(expected)"); continue }
            #expect(reason.contains(expected), "\(reason) should say \(expected)")
        }
    }

    @Test func anEndedShareAndAnUnreadableStoreAreRefusedAndSaySo() {
        let login = request(user: share.rawValue, password: token(.device), clientID: ClientIDs.device(share))
        #expect(decide(login, active: false) == .refuse("share has ended"))
        struct Down: Error {}
        let failed = NATSAuthCallout.decide(login, tokenKey: key, servicePassword: servicePassword, nowSeconds: 1_500) { _ in throw Down() }
        #expect(failed == .refuse("store unavailable, try again"))
    }

    @Test func theServiceLoginGetsEverythingWithoutExpiry() {
        let decision = decide(request(user: "flared", password: "service-secret", clientID: nil, type: "nats"))
        #expect(decision == .grant(.init(name: "flared", permissions: .everything, expiresAt: nil)))
    }

    /// The answer is what the server checks: signed by the issuer, about the requesting user, for the asking server,
    /// with a user JWT for the APP account.
    @Test func theResponseIsASignedJWTTheServerCanCheck() throws {
        let login = request(user: share.rawValue, password: token(.watch), clientID: ClientIDs.watcher(share, suffix: "a"))
        let response = NATSAuthCallout.response(to: login, decision: decide(login), account: "APP", issuerSeed: issuerSeed, nowSeconds: 1_500)
        let issuer = try #require(Ed25519.publicKey(seed: issuerSeed))
        let claims = try verified(response, by: issuer)
        #expect(claims["sub"]?.stringValue == userKey)
        #expect(claims["aud"]?.stringValue == "NSERVER")
        #expect(claims["iss"]?.stringValue == NKey.encodePublic(issuer, kind: .account))
        #expect(claims["nats"]?["type"]?.stringValue == "authorization_response")
        let user = try verified(Array(try #require(claims["nats"]?["jwt"]?.stringValue).utf8), by: issuer)
        #expect(user["aud"]?.stringValue == "APP")
        #expect(user["sub"]?.stringValue == userKey)
        #expect(user["exp"]?.doubleValue == 2_000)
        #expect(user["nats"]?["pub"]?["deny"] == .array([.string(">")]))

        let refusal = NATSAuthCallout.response(to: login, decision: .refuse("share has ended"), account: "APP", issuerSeed: issuerSeed, nowSeconds: 1_500)
        let refused = try verified(refusal, by: issuer)
        #expect(refused["nats"]?["error"]?.stringValue == "share has ended")
        #expect(refused["nats"]?["jwt"] == nil)
    }

    @Test func requestsAreReadOnlyWhenTheServerSignedThem() throws {
        let signed = serverRequest(seed: serverSeed)
        let parsed = try NATSAuthCallout.parseRequest(signed, nowSeconds: 1_500)
        #expect(parsed.mqttClientID == "flare-x" && parsed.username == "u" && parsed.password == "p" && parsed.clientType == "mqtt")
        var forged = signed
        forged[forged.count - 5] ^= 1
        #expect(throws: NATSAuthCallout.RequestError.self) { try NATSAuthCallout.parseRequest(forged, nowSeconds: 1_500) }
        #expect(throws: NATSAuthCallout.RequestError.expired) { try NATSAuthCallout.parseRequest(signed, nowSeconds: 9_999) }
        #expect(throws: NATSAuthCallout.RequestError.malformed) { try NATSAuthCallout.parseRequest(Array("a.b".utf8), nowSeconds: 0) }
        #expect(throws: NATSAuthCallout.RequestError.malformed) { try NATSAuthCallout.parseRequest([UInt8](repeating: 46, count: 20_000), nowSeconds: 0) }
    }

    // MARK: helpers

    func serverRequest(seed: [UInt8]) -> [UInt8] {
        let server = NKey.encodePublic(Ed25519.publicKey(seed: seed)!, kind: .server)
        let claims = #"{"exp":2000,"iss":"\#(server)","nats":{"type":"authorization_request","server_id":{"id":"\#(server)"},"user_nkey":"\#(userKey)","client_info":{"type":"mqtt","mqtt_id":"flare-x"},"connect_opts":{"user":"u","pass":"p"}}}"#
        let input = Base64URL.encode(#"{"typ":"JWT","alg":"ed25519-nkey"}"#) + "." + Base64URL.encode(claims)
        return Array((input + "." + Base64URL.encode(Ed25519.sign(Array(input.utf8), seed: seed)!)).utf8)
    }

    func verified(_ jwt: [UInt8], by key: [UInt8]) throws -> JSONValue {
        let parts = jwt.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let input = Array(jwt[..<(parts[0].count + 1 + parts[1].count)])
        let signature = try #require(Base64URL.decode(String(decoding: parts[2], as: UTF8.self)))
        #expect(Ed25519.verify(signature, of: input, publicKey: key))
        return try JSONValue.parse(try #require(Base64URL.decode(String(decoding: parts[1], as: UTF8.self))))
    }
}

@Suite struct ClientIDRuleTests {
    let share = ShareID.generate()

    @Test func followsThePluginsRule() {
        let other = ShareID.generate()
        #expect(ClientIDs.isAllowed(ClientIDs.device(share), share: share, role: .device))
        #expect(ClientIDs.isAllowed(ClientIDs.device(share, suffix: "car.2_x-y"), share: share, role: .device))
        #expect(ClientIDs.isAllowed(ClientIDs.watcher(share, suffix: "a"), share: share, role: .watch))
        #expect(!ClientIDs.isAllowed(ClientIDs.device(share), share: share, role: .watch))
        #expect(!ClientIDs.isAllowed(ClientIDs.watcher(share, suffix: "a"), share: share, role: .device))
        #expect(!ClientIDs.isAllowed(ClientIDs.device(other), share: share, role: .device))
        #expect(!ClientIDs.isAllowed(ClientIDs.device(share) + "x", share: share, role: .device))
        #expect(!ClientIDs.isAllowed(ClientIDs.device(share) + "-", share: share, role: .device))
        #expect(!ClientIDs.isAllowed(ClientIDs.watcherPrefix(share), share: share, role: .watch))
        #expect(!ClientIDs.isAllowed(ClientIDs.device(share, suffix: String(repeating: "a", count: 65)), share: share, role: .device))
        #expect(ClientIDs.isAllowed(ClientIDs.device(share, suffix: String(repeating: "a", count: 64)), share: share, role: .device))
        #expect(!ClientIDs.isAllowed(ClientIDs.device(share, suffix: "a/b"), share: share, role: .device))
        #expect(!ClientIDs.isAllowed(ClientIDs.device(share, suffix: "é"), share: share, role: .device))
        #expect(!ClientIDs.isAllowed("flared", share: share, role: .device))
        #expect(!ClientIDs.isAllowed("", share: share, role: .device))
    }
}
