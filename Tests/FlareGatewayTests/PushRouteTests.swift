import FlareAPI
import FlareCore
import FlareCrypto
import FlareCodec
import FlareEvents
import FlareShares
import FlareStore
import FlareSystem
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway

/// Web Push's endpoints (the key, a link's viewers subscribing, a contact's alerts and their link, the link's manifest
/// and service worker) with their bounds, bad input, unknown secrets charged as unknown links, a store failure answered
/// as one; and the escalation ladder as the check-in lease's holder climbs it: each step at its time, once across
/// instances, ended by an answer, with a push and a mail per contact.
@Suite struct PushRouteTests {
    static let vapid = VAPIDKey.generate()

    static func pushOn(_ configuration: inout GatewayConfiguration) {
        configuration.push = .init(publicKey: vapid.publicKey, allowsLoopback: false)
    }

    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture(pushes: true, adjust: Self.pushOn) }

    /// A subscription as a browser makes it: its own P-256 key and auth secret.
    static func subscription(_ endpoint: String = "https://push.example.org/\(UUID().uuidString)", lang: String? = nil) -> String {
        let key = Base64URL.encode(P256.publicKey(privateKey: P256.newPrivateKey())!)
        let auth = Base64URL.encode(Crypto.randomBytes(16))
        return #"{"endpoint":"\#(endpoint)","expirationTime":null,"keys":{"p256dh":"\#(key)","auth":"\#(auth)"}\#(lang.map { #","lang":"\#($0)""# } ?? "")}"#
    }

    func contact(_ name: String, key: String? = nil) throws -> String {
        let reply = fixture.send("POST", "/api/v1/contacts", bearer: key ?? fixture.ownerKey, json: #"{"name":"\#(name)","email":"\#(name.lowercased())@example.org"}"#)
        try #require(reply.status == 201, "\(reply.status): \(reply.text)")
        return try reply.decode(ContactInfo.self).id
    }

    func alertsSecret(_ contact: String) throws -> String {
        let reply = fixture.send("GET", "/api/v1/contacts/\(contact)/alerts-link", bearer: fixture.ownerKey)
        try #require(reply.status == 200, "\(reply.status): \(reply.text)")
        let url = try reply.decode(AlertsLink.self).url
        #expect(url.hasPrefix("\(GatewayFixture.publicURL)/alerts#c="))
        return String(url.split(separator: "=").last!)
    }

    @Test func theKeyIsServedAndEverythingAnswersPushOffWithoutIt() throws {
        let key = try fixture.send("GET", "/api/v1/push/key").decode(PushKey.self)
        #expect(Base64URL.decode(key.publicKey) == Self.vapid.publicKey && P256.isValidPublicKey(Self.vapid.publicKey))
        #expect(fixture.send("POST", "/api/v1/push/key").status == 405)
        let off = try GatewayFixture()
        let share = try off.createShare()
        for reply in [off.send("GET", "/api/v1/push/key"), off.send("POST", "/api/v1/view/\(share.viewToken)/push", json: Self.subscription()),
                      off.send("GET", "/api/v1/alerts", bearer: Secret.generate().text)] {
            #expect(reply.status == 404 && reply.errorCode == "push_off", "\(reply.text)")
        }
        let id = try DeviceRouteTests(fixture: off).contact("Mum")
        #expect(off.send("GET", "/api/v1/contacts/\(id)/alerts-link", bearer: off.ownerKey).errorCode == "push_off")
    }

    @Test func aLinkTakesFiveBrowsersEachOnceAndLetsThemGo() throws {
        let share = try fixture.createShare()
        let path = "/api/v1/view/\(share.viewToken)/push"
        let first = Self.subscription("https://push.example.org/first")
        #expect(fixture.send("POST", path, json: first).status == 201)
        let again = fixture.send("POST", path, json: first)
        #expect(try again.status == 200 && again.decode(PushSubscribed.self) == PushSubscribed(subscribed: false), "the same browser again")
        for index in 2...5 { #expect(fixture.send("POST", path, json: Self.subscription("https://push.example.org/\(index)")).status == 201) }
        let full = fixture.send("POST", path, json: Self.subscription())
        #expect(full.status == 409 && full.errorCode == "push_full")
        #expect(fixture.send("DELETE", path, json: #"{"endpoint":"https://push.example.org/first"}"#).status == 204)
        let gone = fixture.send("DELETE", path, json: #"{"endpoint":"https://push.example.org/first"}"#)
        #expect(gone.status == 404)
        #expect(fixture.send("POST", path, json: Self.subscription()).status == 201, "a place was freed")
        try fixture.stop(share)
        #expect(fixture.send("POST", path, json: Self.subscription()).errorCode == "share_ended")
        #expect(fixture.send("POST", "/api/v1/view/\(Secret.generate().text)/push", json: Self.subscription()).status == 404)
    }

    static let badBodies: [(String, String)] = [
        (#"{"endpoint":"http://push.example.org/a","keys":{"p256dh":"x","auth":"y"}}"#, "invalid_endpoint"),
        (#"{"endpoint":"http://127.0.0.1:9/a","keys":{"p256dh":"x","auth":"y"}}"#, "invalid_endpoint"),
        (#"{"endpoint":"https://user:pw@push.example.org/a"}"#, "invalid_endpoint"),
        (#"{"endpoint":"ftp://push.example.org/a"}"#, "invalid_endpoint"),
        (#"{"endpoint":"https://push.example.org/\#(String(repeating: "a", count: 1100))"}"#, "invalid_endpoint"),
        (#"{"endpoint":42}"#, "invalid_endpoint"),
        (#"{"endpoint":"https://push.example.org/a"}"#, "invalid_keys"),
        (#"{"endpoint":"https://push.example.org/a","keys":{"p256dh":"AAAA","auth":"AAAAAAAAAAAAAAAAAAAAAA"}}"#, "invalid_keys"),
        (#"{"endpoint":"https://push.example.org/a","keys":"nope"}"#, "invalid_keys"),
        ("[]", "invalid_json"),
        ("{", "invalid_json"),
    ]

    @Test(arguments: badBodies) func aBadSubscriptionIsRefusedWithItsCode(body: String, code: String) throws {
        let share = try fixture.createShare()
        let reply = fixture.send("POST", "/api/v1/view/\(share.viewToken)/push", json: body)
        #expect(reply.status == 400 && reply.errorCode == code, "\(body.prefix(80)): \(reply.status) \(reply.text)")
    }

    @Test func aKeyOffTheCurveOrAShortAuthIsRefused() throws {
        let share = try fixture.createShare()
        var point = P256.publicKey(privateKey: P256.newPrivateKey())!
        point[64] ^= 1  // no longer on the curve
        let offCurve = #"{"endpoint":"https://push.example.org/a","keys":{"p256dh":"\#(Base64URL.encode(point))","auth":"\#(Base64URL.encode(Crypto.randomBytes(16)))"}}"#
        let shortAuth = #"{"endpoint":"https://push.example.org/a","keys":{"p256dh":"\#(Base64URL.encode(P256.publicKey(privateKey: P256.newPrivateKey())!))","auth":"\#(Base64URL.encode(Crypto.randomBytes(15)))"}}"#
        for body in [offCurve, shortAuth] {
            #expect(fixture.send("POST", "/api/v1/view/\(share.viewToken)/push", json: body).errorCode == "invalid_keys")
        }
        #expect(fixture.send("POST", "/api/v1/view/\(share.viewToken)/push", json: Self.subscription(lang: "fr")).errorCode == "invalid_language")
    }

    @Test func aContactsAlertsLinkWorksForThemAloneAndEndsWithThem() throws {
        let mum = try contact("Mum")
        let secret = try alertsSecret(mum)
        #expect(try alertsSecret(mum) == secret, "the same link every time")
        let card = try fixture.send("GET", "/api/v1/alerts", bearer: secret).decode(AlertsCard.self)
        #expect(card == AlertsCard(name: "Mum", language: "en"))
        #expect(fixture.send("POST", "/api/v1/alerts/push", bearer: secret, body: Array(Self.subscription("https://push.example.org/m").utf8)).status == 201)
        #expect(fixture.send("DELETE", "/api/v1/alerts/push", bearer: secret, body: Array(#"{"endpoint":"https://push.example.org/m"}"#.utf8)).status == 204)
        #expect(fixture.send("PUT", "/api/v1/alerts/push", bearer: secret).status == 405)
        // Another key's contact is not this key's to make a link for.
        let other = OwnerKey.generate()
        _ = try fixture.store.insertOwnerKey(hash: SecretHash(of: other), label: "other", createdAt: fixture.clock.now(), admin: false, limits: KeyLimits(maxLive: 1))
        #expect(fixture.send("GET", "/api/v1/contacts/\(mum)/alerts-link", bearer: other).status == 404)
        #expect(fixture.send("GET", "/api/v1/contacts/\(mum)/alerts-link").status == 401)
        #expect(fixture.send("DELETE", "/api/v1/contacts/\(mum)", bearer: fixture.ownerKey).status == 204)
        let ended = fixture.send("GET", "/api/v1/alerts", bearer: secret)
        #expect(ended.status == 404 && ended.errorCode == "unknown_alerts")
    }

    @Test func guessingAlertsSecretsCostsAsUnknownLinksDo() throws {
        var statuses: [Int] = []
        for _ in 0..<12 { statuses.append(fixture.send("GET", "/api/v1/alerts", bearer: Secret.generate().text, from: "203.0.113.9").status) }
        #expect(statuses.first == 404 && statuses.last == 429, "\(statuses)")
        #expect(fixture.send("GET", "/api/v1/alerts", from: "203.0.113.10").status == 401)
    }

    @Test func aStoreFailureIsAnsweredAsOne() throws {
        let faulty = try GatewayFixture(faulty: true, pushes: true, adjust: Self.pushOn)
        let share = try faulty.createShare()
        faulty.faults?.fail(["addPushSubscription"])
        let reply = faulty.send("POST", "/api/v1/view/\(share.viewToken)/push", json: Self.subscription())
        #expect(reply.status == 503 && reply.header("Retry-After") != nil, "\(reply.status) \(reply.text)")
        faulty.faults?.fail(["contact(alertsHash:)"])
        #expect(faulty.send("GET", "/api/v1/alerts", bearer: Secret.generate().text).status == 503)
    }

    @Test func aLinksPageIsAnAppThatOpensThatLinkAndItsWorkerMayControlIt() throws {
        let share = try fixture.createShare(name: "Anna")
        let manifest = fixture.send("GET", "/s/\(share.viewToken)/manifest.webmanifest")
        #expect(manifest.status == 200 && manifest.header("Content-Type") == "application/manifest+json")
        let fields = try #require(manifest.jsonObject)
        #expect(fields["start_url"] as? String == "/s/\(share.viewToken)" && fields["scope"] as? String == "/s/\(share.viewToken)")
        #expect(fields["name"] as? String == "Flare: Anna" && fields["display"] as? String == "standalone")
        #expect(fixture.send("GET", "/s/\(Secret.generate().text)/manifest.webmanifest").status == 404)
        let worker = fixture.send("GET", "/viewer/sw.js")
        #expect(worker.status == 200 && worker.header("Service-Worker-Allowed") == "/")
        let page = fixture.send("GET", "/s/\(share.viewToken)")
        #expect(page.header("Content-Security-Policy")?.contains("worker-src 'self'") == true)
        #expect(page.header("Content-Security-Policy")?.contains("manifest-src 'self'") == true)
        let alerts = fixture.send("GET", "/alerts")
        #expect(alerts.status == 200 && alerts.text.contains("/viewer/alerts.js") && alerts.header("Cache-Control") == "no-store")
    }

    @Test func anAlarmGoesToPushAndNewsOfNoInterestDoesNot() throws {
        let share = try fixture.createShare()
        let types = try fixture.store.dueEvents(now: .max, limit: 100).filter { $0.destination == .pushFanOut }.map(\.event.type)
        #expect(types.isEmpty, "a share's start is pushed to nobody: \(types)")
        try fixture.stop(share)
        let ended = try fixture.store.dueEvents(now: .max, limit: 100).filter { $0.destination == .pushFanOut }.map(\.event.type)
        #expect(ended == [.ended])
    }

    // MARK: The ladder

    /// The check-in lease's holder, as `flared` runs it.
    func watcher(_ on: GatewayFixture, holder: String = "a") -> CheckinWatcher {
        CheckinWatcher(shares: on.service, store: on.store, holder: holder, clock: on.clock, logger: Logger(label: "test", level: .error))
    }

    func escalations(_ on: GatewayFixture) throws -> [ShareEvent] {
        var seen: [String: ShareEvent] = [:]
        for delivery in try on.store.dueEvents(now: .max, limit: 500) where delivery.event.type == .sosEscalated { seen[delivery.event.id] = delivery.event }
        return seen.values.sorted { $0.at < $1.at }
    }

    @Test func nobodyAnsweringClimbsTwoStepsOnceEachAcrossInstances() throws {
        let devices = DeviceRouteTests(fixture: fixture)
        let created = try devices.device(#","escalate_after_s":5"#)
        #expect(try fixture.send("GET", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey).decode(DeviceInfo.self).escalateAfterSeconds == 5)
        _ = try devices.press(created.secret)
        let other = try GatewayFixture(sharingDatabaseOf: fixture, pushes: true, adjust: Self.pushOn)
        let here = watcher(fixture, holder: "a"), there = watcher(other, holder: "b")
        let state = { () throws -> SOSState in try self.fixture.send("GET", "/api/v1/devices/sos", bearer: created.secret).decode(SOSState.self) }
        #expect(try state().escalation?.step == 0 && state().escalation?.nextAt != nil, "nobody has answered yet")
        fixture.clock.advance(by: 4_900)
        here.step()
        there.step()
        #expect(try escalations(fixture).isEmpty)
        fixture.clock.advance(by: 200)
        here.step()
        there.step()
        #expect(try escalations(fixture).count == 1)
        fixture.clock.advance(seconds: 10)
        here.step()
        there.step()
        let steps = try escalations(fixture)
        #expect(steps.count == 2 && String(decoding: steps[1].body, as: UTF8.self).contains(#""step":2"#))
        let destinations = try fixture.store.dueEvents(now: .max, limit: 500).filter { $0.event.type == .sosEscalated }.map(\.destination)
        #expect(destinations.contains(.pushFanOut))
        #expect(try state().escalation == SOSEscalation(step: 2, nextAt: nil))
        fixture.clock.advance(seconds: 60)
        here.step()
        #expect(try escalations(fixture).count == 2, "two steps, no more")
    }

    @Test func anOnMyWayEndsTheLadderAndTheLadderCanBeOff() throws {
        let devices = DeviceRouteTests(fixture: fixture)
        let created = try devices.device(#","escalate_after_s":5"#)
        let sos = try devices.press(created.secret)
        let token = try #require(sos.links.first?.url.split(separator: "/").last.map(String.init))
        #expect(fixture.send("POST", "/api/v1/view/\(token)/answers", json: #"{"kind":"on_my_way"}"#).status == 201)
        #expect(try fixture.send("GET", "/api/v1/devices/sos", bearer: created.secret).decode(SOSState.self).escalation == nil, "somebody answered")
        fixture.clock.advance(seconds: 20)
        watcher(fixture).step()
        #expect(try escalations(fixture).isEmpty)
        let off = fixture.send("PATCH", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey, json: #"{"escalate_after_s":0}"#)
        #expect(try off.status == 200 && off.decode(DeviceInfo.self).escalateAfterSeconds == 0)
        for bad in ["4", "3601", "5.5", "-1", "\"300\""] {
            let reply = fixture.send("PATCH", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey, json: #"{"escalate_after_s":\#(bad)}"#)
            #expect(reply.status == 400 && reply.errorCode == "invalid_escalation", "\(bad): \(reply.text)")
        }
    }

    @Test func aMissedCheckinStartsItsLadderWhenItIsMissed() throws {
        let mum = try contact("Mum")
        let armed = fixture.send("POST", "/api/v1/checkins", bearer: fixture.ownerKey,
                                 json: #"{"in_s":60,"grace_s":0,"contacts":["\#(mum)"],"escalate_after_s":10}"#)
        try #require(armed.status == 201, "\(armed.text)")
        #expect(try armed.decode(CheckinInfo.self).escalateAfterSeconds == 10)
        let refused = fixture.send("POST", "/api/v1/checkins", bearer: fixture.ownerKey, json: #"{"in_s":60,"contacts":["\#(mum)"],"escalate_after_s":2}"#)
        #expect(refused.errorCode == "invalid_escalation")
        let lease = watcher(fixture)
        fixture.clock.advance(seconds: 50)
        lease.step()
        fixture.clock.advance(seconds: 20)
        lease.step()
        #expect(try escalations(fixture).isEmpty, "no ladder before the check-in is missed")
        fixture.clock.advance(seconds: 10)
        lease.step()
        #expect(try escalations(fixture).count == 1, "10 s after the miss")
        let types = try fixture.store.dueEvents(now: .max, limit: 500).filter { $0.destination == .pushFanOut }.map(\.event.type)
        #expect(types.contains(.checkinMissed) && types.contains(.sosEscalated))
    }
}
