import FlareAPI
import FlareBridge
import FlareShares
import FlareCore
import FlareHTTP
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import Testing
import FlareSystem
import FlareIngest

/// A store that fails is answered as a failure: every route, with each store call it makes failing in turn, answers
/// 503 `store_unavailable` with `Retry-After`, or the answer it gives with a healthy store (when the call was only a
/// side effect: noting a viewer, a key's last use); never 401, 404, 410 or a refusal for good in its place. With the
/// store back, the same request answers as it would have at once: nothing was remembered of the failure.
///
/// Each route runs twice: on the instance that made the share (memory knows it) and on another over the same
/// database that has not heard of it yet (every lookup goes to the store), as after a restart or on a second instance.
@Suite struct StoreFailureTests {
    /// What a request is sent with: the share, its tokens, a limited key's share (its limits are read when its phone
    /// extends it) and a second key to act on.
    struct Setup {
        let share: CreatedShare
        let limitedShare: CreatedShare
        let limitedKey: String
        let otherKeyID: Int64
        /// A contact of the admin key.
        let contactID: String
        /// A share made with that contact, and its personal link.
        let linkedShare: CreatedShare
        let link: PersonalLink
        /// A check-in armed for that contact, and its share's device token.
        let checkin: CheckinInfo

        var linkToken: String { String(link.url.split(separator: "/").last ?? "") }
    }

    struct Probe: CustomStringConvertible, Sendable {
        let description: String
        /// The share's tracker has sent nothing yet (so that "locate now" is open: a live tracker refuses it).
        var quietTracker = false
        let send: @Sendable (GatewayFixture, Setup) -> Reply
    }

    /// The fix writer's own calls: a failing write is retried by the writer (the HTTP client is told to come back when
    /// it has waited 5 s for its commit); `IngestRouteTests` and `make chaos` test that path.
    static let writerCalls: Set<String> = ["insertFixes", "recordHandledSequences"]

    static func location(lat: Double) -> [UInt8] {
        Array(#"{"_type":"location","lat":\#(lat),"lon":13.4,"tst":\#(GatewayFixture.now),"acc":8}"#.utf8)
    }

    static func basic(_ share: CreatedShare) -> [String: String] {
        ["Authorization": "Basic " + Data("\(share.shareID):\(share.deviceToken)".utf8).base64EncodedString()]
    }

    static let probes: [Probe] = [
        Probe(description: "create a share") { f, _ in f.send("POST", "/api/v1/shares", bearer: f.ownerKey, json: #"{"name":"Anna"}"#) },
        Probe(description: "list shares") { f, _ in f.send("GET", "/api/v1/shares", bearer: f.ownerKey) },
        Probe(description: "show a share (owner)") { f, s in f.send("GET", "/api/v1/shares/\(s.share.shareID)", bearer: f.ownerKey) },
        Probe(description: "show a share (device)") { f, s in f.send("GET", "/api/v1/shares/\(s.share.shareID)", bearer: s.share.deviceToken) },
        Probe(description: "stop (owner)") { f, s in f.send("POST", "/api/v1/shares/\(s.share.shareID)/stop", bearer: f.ownerKey) },
        Probe(description: "stop (device)") { f, s in f.send("POST", "/api/v1/shares/\(s.share.shareID)/stop", bearer: s.share.deviceToken) },
        Probe(description: "extend (owner)") { f, s in
            f.send("POST", "/api/v1/shares/\(s.share.shareID)/extend", bearer: f.ownerKey, json: #"{"duration_s":600}"#)
        },
        Probe(description: "extend a limited key's share (device)") { f, s in
            f.send("POST", "/api/v1/shares/\(s.limitedShare.shareID)/extend", bearer: s.limitedShare.deviceToken, json: #"{"duration_s":600}"#)
        },
        Probe(description: "HTTP ingest") { f, s in
            f.send("POST", "/api/v1/shares/\(s.share.shareID)/locations", bearer: s.share.deviceToken, body: location(lat: 52.5))
        },
        Probe(description: "OwnTracks configuration (owner)") { f, s in f.send("GET", "/api/v1/shares/\(s.share.shareID)/owntracks", bearer: f.ownerKey) },
        Probe(description: "OwnTracks configuration (device)") { f, s in
            f.send("GET", "/api/v1/shares/\(s.share.shareID)/owntracks.otrc", bearer: s.share.deviceToken)
        },
        Probe(description: "OwnTracks link") { f, s in f.send("GET", "/api/v1/shares/\(s.share.shareID)/owntracks/link", bearer: f.ownerKey) },
        Probe(description: "OwnTracks QR code") { f, s in f.send("GET", "/api/v1/shares/\(s.share.shareID)/owntracks/qr.svg", bearer: f.ownerKey) },
        Probe(description: "OwnTracks HTTP mode") { f, s in
            f.send("POST", "/api/v1/shares/\(s.share.shareID)/owntracks/http", body: location(lat: 52.6), headers: basic(s.share))
        },
        Probe(description: "watch token") { f, s in f.send("POST", "/api/v1/shares/\(s.share.shareID)/watch-tokens", bearer: f.ownerKey) },
        Probe(description: "create a key") { f, _ in f.send("POST", "/api/v1/keys", bearer: f.ownerKey, json: #"{"label":"phone"}"#) },
        Probe(description: "list keys") { f, _ in f.send("GET", "/api/v1/keys", bearer: f.ownerKey) },
        Probe(description: "list keys (limited)") { f, s in f.send("GET", "/api/v1/keys", bearer: s.limitedKey) },
        Probe(description: "revoke a key") { f, s in f.send("DELETE", "/api/v1/keys/\(s.otherKeyID)", bearer: f.ownerKey) },
        Probe(description: "set a webhook") { f, s in
            f.send("PUT", "/api/v1/keys/\(s.otherKeyID)/webhook", bearer: f.ownerKey, json: #"{"url":"https://127.0.0.1:9/hook"}"#)
        },
        Probe(description: "remove a webhook") { f, s in f.send("DELETE", "/api/v1/keys/\(s.otherKeyID)/webhook", bearer: f.ownerKey) },
        Probe(description: "add a contact") { f, _ in f.send("POST", "/api/v1/contacts", bearer: f.ownerKey, json: #"{"name":"Mum"}"#) },
        Probe(description: "list contacts") { f, _ in f.send("GET", "/api/v1/contacts", bearer: f.ownerKey) },
        Probe(description: "show a contact") { f, s in f.send("GET", "/api/v1/contacts/\(s.contactID)", bearer: f.ownerKey) },
        Probe(description: "remove a contact") { f, s in f.send("DELETE", "/api/v1/contacts/\(s.contactID)", bearer: f.ownerKey) },
        Probe(description: "the viewer page") { f, s in f.send("GET", "/s/\(s.share.viewToken)") },
        Probe(description: "view JSON") { f, s in f.send("GET", "/api/v1/view/\(s.share.viewToken)") },
        Probe(description: "view JSON with a viewer id") { f, s in
            f.send("GET", "/api/v1/view/\(s.share.viewToken)", query: ["v": "viewer-0123456789abcdef"])
        },
        Probe(description: "live events") { f, s in
            f.send("GET", "/api/v1/view/\(s.share.viewToken)/events", query: ["v": "viewer-0123456789abcdef"])
        },
        Probe(description: "locate now", quietTracker: true) { f, s in f.send("POST", "/api/v1/view/\(s.share.viewToken)/locate") },
        Probe(description: "answer") { f, s in
            f.send("POST", "/api/v1/view/\(s.share.viewToken)/answers", json: #"{"kind":"on_my_way","name":"Mom"}"#)
        },
        Probe(description: "answers (device)") { f, s in f.send("GET", "/api/v1/shares/\(s.share.shareID)/answers", bearer: s.share.deviceToken) },
        Probe(description: "create a share with a contact") { f, s in
            f.send("POST", "/api/v1/shares", bearer: f.ownerKey, json: #"{"name":"Anna","contacts":["\#(s.contactID)"]}"#)
        },
        Probe(description: "list a share's links") { f, s in f.send("GET", "/api/v1/shares/\(s.linkedShare.shareID)/links", bearer: f.ownerKey) },
        Probe(description: "add a link") { f, s in
            f.send("POST", "/api/v1/shares/\(s.share.shareID)/links", bearer: f.ownerKey, json: #"{"contacts":["\#(s.contactID)"]}"#)
        },
        Probe(description: "withdraw a link") { f, s in
            f.send("DELETE", "/api/v1/shares/\(s.linkedShare.shareID)/links/\(s.link.linkID)", bearer: f.ownerKey)
        },
        Probe(description: "view JSON through a personal link") { f, s in f.send("GET", "/api/v1/view/\(s.linkToken)") },
        Probe(description: "the viewer page through a personal link") { f, s in f.send("GET", "/s/\(s.linkToken)") },
        Probe(description: "arm a check-in") { f, s in
            f.send("POST", "/api/v1/checkins", bearer: f.ownerKey, json: #"{"in_s":3600,"contacts":["\#(s.contactID)"]}"#)
        },
        Probe(description: "show a check-in (owner)") { f, s in f.send("GET", "/api/v1/checkins/\(s.checkin.checkinID)", bearer: f.ownerKey) },
        Probe(description: "show a check-in (device)") { f, s in
            f.send("GET", "/api/v1/checkins/\(s.checkin.checkinID)", bearer: s.checkin.deviceToken)
        },
        Probe(description: "check in (device)") { f, s in
            f.send("POST", "/api/v1/checkins/\(s.checkin.checkinID)/done", bearer: s.checkin.deviceToken)
        },
        Probe(description: "extend a check-in (owner)") { f, s in
            f.send("POST", "/api/v1/checkins/\(s.checkin.checkinID)/extend", bearer: f.ownerKey, json: #"{"in_s":7200}"#)
        },
    ]

    enum Instance: String, CaseIterable, CustomStringConvertible {
        /// The instance the share was made on: memory knows it.
        case same
        /// Another over the same database, which has not heard of it: every lookup asks the store.
        case other
        var description: String { rawValue }
    }

    /// A fresh world: the share made (and a fix stored, so that it has a position), and the fixture requests go to.
    /// The maker is returned too, to keep the database alive.
    static func world(_ instance: Instance, quietTracker: Bool) throws -> (maker: GatewayFixture, target: GatewayFixture, setup: Setup) {
        let maker = try GatewayFixture(faulty: instance == .same)
        let share = try maker.createShare()
        if !quietTracker { try maker.recordFix(share, latitude: 52.52, longitude: 13.40, tst: GatewayFixture.now - 5) }
        let limitedKey = OwnerKey.generate()
        try maker.store.insertOwnerKey(hash: SecretHash(of: limitedKey), label: "limited", createdAt: SystemClock().now(), admin: false,
                                       limits: KeyLimits(maxLive: nil, maxDurationSeconds: 7200, createsPerHour: nil))
        let created = maker.send("POST", "/api/v1/shares", bearer: limitedKey, json: #"{"duration_s":3600}"#)
        try #require(created.status == 201, "\(created.text)")
        let otherKeyID = try maker.store.insertOwnerKey(hash: SecretHash(of: OwnerKey.generate()), label: "other",
                                                        createdAt: SystemClock().now(), admin: false, limits: .none)
        let contact = Contact(id: .generate(), ownerKeyID: 1, name: "Dad", email: nil, phone: nil, language: .en, createdAt: GatewayFixture.now)
        _ = try maker.store.insertContact(contact, limit: 10)
        let linked = maker.send("POST", "/api/v1/shares", bearer: maker.ownerKey, json: #"{"name":"Anna","contacts":["\#(contact.id)"]}"#)
        try #require(linked.status == 201, "\(linked.text)")
        let linkedShare = try linked.decode(CreatedShare.self)
        let armed = maker.send("POST", "/api/v1/checkins", bearer: maker.ownerKey, json: #"{"in_s":3600,"contacts":["\#(contact.id)"]}"#)
        try #require(armed.status == 201, "\(armed.text)")
        let target = instance == .same ? maker : try GatewayFixture(faulty: true, sharingDatabaseOf: maker)
        return (maker, target, Setup(share: share, limitedShare: try created.decode(CreatedShare.self), limitedKey: limitedKey, otherKeyID: otherKeyID,
                                     contactID: contact.id.rawValue, linkedShare: linkedShare,
                                     link: try #require(linkedShare.links?.first), checkin: try armed.decode(CheckinInfo.self)))
    }

    @Test(arguments: Instance.allCases, probes)
    func aFailingStoreCallIsAnsweredAsAFailureAndTheRetrySucceeds(instance: Instance, probe: Probe) throws {
        // With the store healthy: the answer, and every store call the request made.
        let (healthyMaker, healthy, healthySetup) = try Self.world(instance, quietTracker: probe.quietTracker)
        let faults = try #require(healthy.faults)
        _ = faults.takeCalls()
        let expected = probe.send(healthy, healthySetup)
        let calls = Set(faults.takeCalls()).subtracting(Self.writerCalls)
        withExtendedLifetime(healthyMaker) {}
        #expect(expected.status < 500, "\(probe) answers \(expected.status) with a healthy store: \(expected.text)")

        for call in calls.sorted() {
            let (maker, fixture, setup) = try Self.world(instance, quietTracker: probe.quietTracker)
            let faults = try #require(fixture.faults)
            faults.fail([call])
            let failed = probe.send(fixture, setup)
            faults.fail([])
            if failed.status == 503 {
                #expect(failed.errorCode == "store_unavailable" && failed.header("Retry-After") != nil,
                        "\(probe) with \(call) failing: 503 \(failed.text), Retry-After \(failed.header("Retry-After") ?? "none")")
            } else {
                #expect(failed.status == expected.status,
                        "\(probe) with \(call) failing answers \(failed.status) (\(failed.text)); healthy: \(expected.status)")
            }
            // Asked again once the store is back, a refused request is answered as with a healthy store, at once. (One
            // that was answered as healthy did what it does: asking again is another request, like a second stop.)
            if failed.status == 503 {
                let again = probe.send(fixture, setup)
                #expect(again.status == expected.status,
                        "\(probe) after \(call) failed once answers \(again.status) (\(again.text)); healthy: \(expected.status)")
            }
            withExtendedLifetime(maker) {}
        }
    }

    /// The MQTT ingest path: a fix for a share the bridge must look up while the store cannot answer is held, not
    /// refused (the broker keeps it unacknowledged), and stored once the store is back.
    @Test func anMQTTFixWhoseShareCannotBeLookedUpIsHeldUntilTheStoreAnswers() throws {
        let (maker, fixture, setup) = try Self.world(.other, quietTracker: false)
        let faults = try #require(fixture.faults)
        let id = try #require(ShareID(setup.share.shareID))
        faults.fail(["share(id:)"])
        let tst = GatewayFixture.now
        let payload = Array(#"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(tst)}"#.utf8)
        /// What `handle` answered, once it has.
        final class Outcome: Sendable { let reason = Mutex<RejectReason??>(nil) }
        let outcome = Outcome()
        let handling = Thread { [ingestor = fixture.ingestor] in
            let reason = ingestor.handle(topic: Topics.location(id), payload: payload, retained: false)
            outcome.reason.withLock { $0 = .some(reason) }
        }
        handling.start()
        // Held: the bridge's thread waits (as for a full queue) instead of refusing the message.
        #expect(eventually { faults.takeCalls().contains("share(id:)") })
        #expect(outcome.reason.withLock { $0 } == nil)
        faults.fail([])
        #expect(eventually { outcome.reason.withLock { $0 } != nil })
        let answered = outcome.reason.withLock { $0 }
        #expect(answered == .some(nil), "the fix was refused: \(String(describing: answered))")
        try fixture.waitForLast(setup.share, tst: tst)
        withExtendedLifetime(maker) {}
    }
}
