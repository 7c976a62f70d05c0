import FlareAPI
import FlareCore
import FlareShares
import FlareStore
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway
import FlareSystem

/// `POST /api/v1/checkins`, `GET …/{id}`, `…/done`, `…/extend`, and the watcher that fires a missed one from the
/// store: nothing live before the deadline, the contacts' links and events once after it, nothing armed for bad input.
@Suite struct CheckinRouteTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    func contact(_ name: String, key: String? = nil, email: String? = nil) throws -> String {
        let json = email.map { #"{"name":"\#(name)","email":"\#($0)"}"# } ?? #"{"name":"\#(name)"}"#
        let reply = fixture.send("POST", "/api/v1/contacts", bearer: key ?? fixture.ownerKey, json: json)
        try #require(reply.status == 201, "\(reply.text)")
        return try reply.decode(ContactInfo.self).id
    }

    func arm(_ json: String, key: String? = nil) -> Reply { fixture.send("POST", "/api/v1/checkins", bearer: key ?? fixture.ownerKey, json: json) }

    func watcher() -> CheckinWatcher {
        CheckinWatcher(shares: fixture.service, store: fixture.store, holder: "test", clock: fixture.clock, logger: Logger(label: "test", level: .error))
    }

    @Test func anArmedCheckinRecordsPositionsWithNoLiveLinkAndIsDoneFromThePhone() throws {
        let mum = try contact("Mum")
        let reply = arm(#"{"in_s":7200,"grace_s":300,"contacts":["\#(mum)"],"message":"Hike, back by ten","duration_s":1800,"name":"Anna"}"#)
        try #require(reply.status == 201, "\(reply.status): \(reply.text)")
        let armed = try reply.decode(CheckinInfo.self)
        #expect(armed.state == "armed" && armed.graceSeconds == 300 && armed.contacts == [mum] && armed.message == "Hike, back by ten")
        #expect(reply.header("Location") == "/api/v1/checkins/\(armed.checkinID)")
        #expect(abs(armed.firesAt.timeIntervalSince(armed.dueAt) - 300) < 1)
        // The device token's exp covers the deadline, the grace and the share's time once missed.
        let token = try #require(armed.deviceToken)
        let claims = try ShareToken.verify(token, key: fixture.tokenKey, nowSeconds: GatewayFixture.now)
        #expect(claims.expiresAt >= Int64(armed.firesAt.timeIntervalSince1970) + 1800 - 2)
        #expect(armed.mqttTopic == Topics.location(ShareID(armed.shareID)!) && armed.ownTracksConfigURL?.hasSuffix("/owntracks") == true)
        // No live link: the share has no personal links, and its answer holds no view URL.
        #expect(!reply.text.contains("/s/"))
        #expect(try fixture.send("GET", "/api/v1/shares/\(armed.shareID)/links", bearer: fixture.ownerKey).decode(PersonalLinkList.self).links.isEmpty)
        // An unchanged OwnTracks app is provisioned for it as for any share, with the owner key or the device token.
        for bearer in [fixture.ownerKey, token] {
            let configuration = try #require(fixture.send("GET", "/api/v1/shares/\(armed.shareID)/owntracks", bearer: bearer).jsonObject)
            #expect(configuration["username"] as? String == armed.shareID && configuration["password"] as? String == token)
            #expect(configuration["pubTopicBase"] as? String == armed.mqttTopic)
        }
        // The phone's positions are recorded meanwhile.
        let ingest = fixture.send("POST", "/api/v1/shares/\(armed.shareID)/locations", bearer: token,
                                  json: #"{"lat":48.1,"lon":11.5,"tst":\#(GatewayFixture.now)}"#)
        #expect(ingest.status == 202 || ingest.status == 200, "\(ingest.status): \(ingest.text)")
        // The phone checks in: done, the share ends, nobody is told; done again is still done (owner key).
        let done = fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/done", bearer: token)
        try #require(done.status == 200, "\(done.status): \(done.text)")
        #expect(try done.decode(CheckinInfo.self).state == "done")
        #expect(try fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/done", bearer: fixture.ownerKey).decode(CheckinInfo.self).state == "done")
        #expect(try fixture.send("GET", "/api/v1/checkins/\(armed.checkinID)", bearer: fixture.ownerKey).decode(CheckinInfo.self).state == "done")
        let share = try fixture.send("GET", "/api/v1/shares/\(armed.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        #expect(share.state == .ended)
        let types = try fixture.store.dueEvents(now: .max, limit: 50).map(\.event.type)
        #expect(types.contains(.checkinDone) && !types.contains(.checkinMissed) && !types.contains(.linkCreated))
    }

    @Test func aMissedCheckinFiresOnceFromTheStoreAndItsLinksGoLive() throws {
        let mum = try contact("Mum", email: "mum@example.org"), dad = try contact("Dad")
        let armed = try arm(#"{"in_s":3600,"grace_s":0,"contacts":["\#(mum)","\#(dad)"],"message":"Late shift"}"#).decode(CheckinInfo.self)
        let watcher = watcher()
        // Not yet due: nothing happens.
        #expect(eventually { watcher.step() })
        #expect(try fixture.send("GET", "/api/v1/checkins/\(armed.checkinID)", bearer: fixture.ownerKey).decode(CheckinInfo.self).state == "armed")
        // The deadline passes.
        fixture.clock.advance(seconds: 3_601)
        #expect(eventually { watcher.step() })
        #expect(eventually { watcher.step() })
        let after = try fixture.send("GET", "/api/v1/checkins/\(armed.checkinID)", bearer: fixture.ownerKey).decode(CheckinInfo.self)
        #expect(after.state == "missed" && after.stateAt != nil)
        let links = try fixture.send("GET", "/api/v1/shares/\(armed.shareID)/links", bearer: fixture.ownerKey).decode(PersonalLinkList.self).links
        #expect(Set(links.map(\.contactID)) == [mum, dad])
        // Each link shows the share now.
        for link in links {
            let token = String(link.url.split(separator: "/").last!)
            #expect(fixture.send("GET", "/api/v1/view/\(token)").status == 200)
        }
        let events = try fixture.store.dueEvents(now: .max, limit: 50).map(\.event.type)
        #expect(events.filter { $0 == .checkinMissed }.count == 1 && events.filter { $0 == .linkCreated }.count == 2, "\(events)")
        // Done after the miss: the contacts have been told; it stays missed.
        let late = fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/done", bearer: fixture.ownerKey)
        #expect(late.status == 409 && late.errorCode == "checkin_missed")
    }

    @Test func arrivingInTheZoneEndsTheCheckinWithoutTellingAnyone() throws {
        let mum = try contact("Mum")
        let armed = try arm(#"{"in_s":3600,"contacts":["\#(mum)"],"arrive":{"lat":48.13715,"lon":11.57612,"radius_m":200}}"#).decode(CheckinInfo.self)
        let share = CreatedShare(shareID: armed.shareID, shareURL: URL(string: "https://x")!, expiresAt: Date(), durationSeconds: 1, deviceToken: "",
                                 mqttURL: "", mqttUsername: "", mqttTopic: "", statusTopic: nil, ingestURL: nil, ownTracksConfigURL: nil)
        let watcher = watcher()
        // Near, but its accuracy is coarser than the zone: no arrival.
        try fixture.recordFix(share, latitude: 48.1372, longitude: 11.5762, tst: GatewayFixture.now, accuracy: 2000)
        #expect(eventually { watcher.step() })
        #expect(try fixture.store.checkin(id: CheckinID(armed.checkinID)!)?.state == .armed)
        // 2 km away: no arrival.
        try fixture.recordFix(share, latitude: 48.155, longitude: 11.576, tst: GatewayFixture.now + 1, accuracy: 10)
        #expect(eventually { watcher.step() })
        #expect(try fixture.store.checkin(id: CheckinID(armed.checkinID)!)?.state == .armed)
        try fixture.recordFix(share, latitude: 48.1378, longitude: 11.5765, tst: GatewayFixture.now + 2, accuracy: 12)
        #expect(eventually { watcher.step() })
        #expect(try fixture.store.checkin(id: CheckinID(armed.checkinID)!)?.state == .arrived)
        #expect(try fixture.store.dueEvents(now: .max, limit: 50).contains { $0.event.type == .checkinArrived })
    }

    @Test func extendMovesTheDeadlineAndHandsOutATokenThatCoversIt() throws {
        let mum = try contact("Mum")
        let armed = try arm(#"{"in_s":600,"grace_s":60,"duration_s":600,"contacts":["\#(mum)"]}"#).decode(CheckinInfo.self)
        let reply = fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/extend", bearer: armed.deviceToken, json: #"{"in_s":7200}"#)
        try #require(reply.status == 200, "\(reply.status): \(reply.text)")
        let moved = try reply.decode(CheckinInfo.self)
        #expect(moved.dueAt.timeIntervalSince(armed.dueAt) > 6500)
        let claims = try ShareToken.verify(try #require(moved.deviceToken), key: fixture.tokenKey, nowSeconds: GatewayFixture.now)
        #expect(claims.expiresAt >= Int64(moved.firesAt.timeIntervalSince1970) + 600 - 2)
        let stored = try #require(try fixture.store.checkin(id: CheckinID(armed.checkinID)!))
        #expect(abs(Double(stored.dueAt) / 1000 - moved.dueAt.timeIntervalSince1970) < 1)
        // A check-in that is no longer armed is not moved.
        _ = fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/done", bearer: fixture.ownerKey)
        let late = fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/extend", bearer: fixture.ownerKey, json: #"{"in_s":60}"#)
        #expect(late.status == 409 && late.errorCode == "checkin_done")
    }

    @Test func anotherKeysCheckinIsUnknownAndItsContactsCannotBeNamed() throws {
        let anna = try fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: #"{"label":"Anna"}"#).decode(CreatedKey.self)
        let ben = try fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: #"{"label":"Ben"}"#).decode(CreatedKey.self)
        let bensContact = try contact("Dad", key: ben.key)
        let refused = arm(#"{"in_s":600,"contacts":["\#(bensContact)"]}"#, key: anna.key)
        #expect(refused.status == 400 && refused.errorCode == "unknown_contact", "\(refused.text)")
        let annas = try arm(#"{"in_s":600,"contacts":["\#(try contact("Mum", key: anna.key))"]}"#, key: anna.key).decode(CheckinInfo.self)
        for (method, path) in [("GET", ""), ("POST", "/done"), ("POST", "/extend")] {
            let reply = fixture.send(method, "/api/v1/checkins/\(annas.checkinID)\(path)", bearer: ben.key, json: #"{"in_s":60}"#)
            #expect(reply.status == 404 && reply.errorCode == "not_found", "\(method) \(path): \(reply.status)")
        }
        #expect(fixture.send("GET", "/api/v1/checkins/\(annas.checkinID)").status == 401)
        #expect(fixture.send("GET", "/api/v1/checkins/\(annas.checkinID)", bearer: "nonsense").status == 401)
        #expect(fixture.send("GET", "/api/v1/checkins/\(CheckinID.generate())", bearer: anna.key).status == 404)
        // A wrong credential hears the same for an id that exists and one that does not.
        #expect(fixture.send("GET", "/api/v1/checkins/\(CheckinID.generate())", bearer: "nonsense").status == 401)
        #expect(fixture.send("POST", "/api/v1/checkins/\(annas.checkinID)/done", bearer: annas.deviceToken! + "x").status == 401)
    }

    @Test(arguments: [
        (#"{"contacts":["C"]}"#, "invalid_deadline"),
        (#"{"in_s":600,"due_at":"2030-01-01T00:00:00Z","contacts":["C"]}"#, "invalid_deadline"),
        (#"{"due_at":"2001-01-01T00:00:00Z","contacts":["C"]}"#, "deadline_in_past"),
        (#"{"due_at":"yesterday","contacts":["C"]}"#, "invalid_deadline"),
        (#"{"in_s":-5,"contacts":["C"]}"#, "invalid_deadline"),
        (#"{"in_s":99999999,"contacts":["C"]}"#, "deadline_too_far"),
        (#"{"in_s":600,"grace_s":-1,"contacts":["C"]}"#, "invalid_grace"),
        (#"{"in_s":600,"contacts":[]}"#, "no_contacts"),
        (#"{"in_s":600}"#, "invalid_contacts"),
        (#"{"in_s":600,"contacts":["not-an-id"]}"#, "invalid_contacts"),
        (#"{"in_s":600,"contacts":["C"],"arrive":{"lat":48,"lon":11,"radius_m":50001}}"#, "invalid_radius"),
        (#"{"in_s":600,"contacts":["C"],"arrive":{"lat":91,"lon":11,"radius_m":100}}"#, "invalid_arrive"),
        (#"{"in_s":600,"contacts":["C"],"arrive":{"lat":48}}"#, "invalid_arrive"),
        (#"{"in_s":600,"contacts":["C"],"notify_on_arrival":true}"#, "invalid_notify_on_arrival"),
        (#"{"in_s":600,"contacts":["C"],"message":7}"#, "invalid_message"),
        ("MESSAGE", "invalid_message"),
        ("MESSAGE_BYTES", "invalid_message"),
        ("NAME", "invalid_name"),
        ("NAME_BYTES", "invalid_name"),
        ("not json", "invalid_json"),
    ])
    func badInputIsRefusedWithANamedCodeAndArmsNothing(_ template: String, _ code: String) throws {
        let mum = try contact("Mum")
        let body: String
        switch template {
        case "MESSAGE": body = #"{"in_s":600,"contacts":["\#(mum)"],"message":"\#(String(repeating: "漢", count: 281))"}"#
        case "NAME": body = #"{"in_s":600,"contacts":["\#(mum)"],"name":"\#(String(repeating: "e\u{301}", count: 60))"}"#
        // Within the characters allowed (280 and 80), over the bytes (840 and 240): four-byte emoji.
        case "MESSAGE_BYTES": body = #"{"in_s":600,"contacts":["\#(mum)"],"message":"\#(String(repeating: "🆘", count: 211))"}"#
        case "NAME_BYTES": body = #"{"in_s":600,"contacts":["\#(mum)"],"name":"\#(String(repeating: "🆘", count: 61))"}"#
        default: body = template.replacingOccurrences(of: #"["C"]"#, with: #"["\#(mum)"]"#)
        }
        let before = try fixture.store.listShares(state: nil, after: nil, limit: 100).count
        let reply = arm(body)
        #expect(reply.status == 400 && reply.errorCode == code, "\(body): \(reply.status) \(reply.text)")
        #expect(try fixture.store.listShares(state: nil, after: nil, limit: 100).count == before, "nothing armed")
    }

    /// A limited key's check-in ends, its grace and the share's time once missed included, within the longest share the
    /// key may run: arming past it and moving the deadline past it are refused alike, and nothing changes.
    @Test func aLimitedKeysCheckinEndsWithinItsLongestShare() throws {
        let limited = OwnerKey.generate()
        try fixture.store.insertOwnerKey(hash: SecretHash(of: limited), label: "limited", createdAt: fixture.clock.now(), admin: false,
                                         limits: KeyLimits(maxLive: nil, maxDurationSeconds: 7200, createsPerHour: nil))
        let mum = try contact("Mum", key: limited)
        let tooFar = arm(#"{"in_s":6000,"grace_s":600,"duration_s":1800,"contacts":["\#(mum)"]}"#, key: limited)
        #expect(tooFar.status == 400 && tooFar.errorCode == "deadline_too_far", "\(tooFar.status) \(tooFar.text)")
        let armed = try arm(#"{"in_s":3600,"grace_s":600,"duration_s":1800,"contacts":["\#(mum)"]}"#, key: limited).decode(CheckinInfo.self)
        for bearer in [limited, try #require(armed.deviceToken)] {
            let moved = fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/extend", bearer: bearer, json: #"{"in_s":6000}"#)
            #expect(moved.status == 400 && moved.errorCode == "deadline_too_far", "\(moved.status) \(moved.text)")
        }
        let stored = try #require(try fixture.store.checkin(id: CheckinID(armed.checkinID)!))
        #expect(abs(Double(stored.dueAt) / 1000 - armed.dueAt.timeIntervalSince1970) < 1, "the deadline did not move")
        // Within the bound it moves.
        let within = fixture.send("POST", "/api/v1/checkins/\(armed.checkinID)/extend", bearer: limited, json: #"{"in_s":4000}"#)
        #expect(within.status == 200, "\(within.status) \(within.text)")
    }

    /// Arming is bounded per key (30 at once, then one every 6 s), and the phone's check-in calls per check-in (10 at
    /// once, then one a minute): past either, 429 with Retry-After, and nothing more is armed.
    @Test func armingAndThePhonesCallsAreRateLimited() throws {
        let mum = try contact("Mum")
        var statuses: [Int] = []
        var limitedReply: Reply?
        for _ in 0..<40 {
            let reply = arm(#"{"in_s":3600,"contacts":["\#(mum)"]}"#)
            statuses.append(reply.status)
            if reply.status == 429 { limitedReply = reply }
        }
        // A second a refill: however slow the machine, 40 in a row cannot all pass a bucket of 30 that refills every 6 s.
        #expect(statuses.filter { $0 == 201 }.count >= 30 && statuses.contains(429), "\(statuses)")
        #expect(limitedReply?.errorCode == "rate_limited" && limitedReply?.header("Retry-After") != nil)
        let armed = try #require(try fixture.store.dueCheckins(now: .max / 2, limit: 100).first)
        let info = try fixture.send("GET", "/api/v1/checkins/\(armed.id)", bearer: fixture.ownerKey).decode(CheckinInfo.self)
        let token = try #require(try fixture.send("POST", "/api/v1/checkins/\(info.checkinID)/extend", bearer: fixture.ownerKey,
                                                  json: #"{"in_s":3600}"#).decode(CheckinInfo.self).deviceToken)
        var phone: [Int] = []
        for _ in 0..<15 {
            phone.append(fixture.send("POST", "/api/v1/checkins/\(info.checkinID)/extend", bearer: token, json: #"{"in_s":3600}"#).status)
        }
        #expect(phone.filter { $0 == 200 }.count >= 10 && phone.contains(429), "\(phone)")
    }

    /// A device token is a capability for its own share only: another share's, even a check-in's, opens nothing here,
    /// and is answered as any credential that is not current (401), for an id that exists and one that does not; each
    /// try is charged to the caller's address, so that guessing is cut off (429).
    @Test func anotherSharesDeviceTokenCannotTouchACheckin() throws {
        let mum = try contact("Mum")
        let mine = try arm(#"{"in_s":3600,"contacts":["\#(mum)"]}"#).decode(CheckinInfo.self)
        let theirs = try arm(#"{"in_s":3600,"contacts":["\#(mum)"]}"#).decode(CheckinInfo.self)
        let share = try fixture.createShare()
        var statuses: [Int] = []
        for token in [try #require(theirs.deviceToken), share.deviceToken] {
            for (method, path) in [("GET", ""), ("POST", "/done"), ("POST", "/extend")] {
                for id in [mine.checkinID, CheckinID.generate().rawValue] {
                    statuses.append(fixture.send(method, "/api/v1/checkins/\(id)\(path)", bearer: token, json: #"{"in_s":60}"#).status)
                }
            }
        }
        #expect(statuses.first == 401 && statuses.allSatisfy { $0 == 401 || $0 == 429 }, "\(statuses)")
        let cutOff = try #require(statuses.firstIndex(of: 429), "guessing is never cut off: \(statuses)")
        #expect(statuses[cutOff...].allSatisfy { $0 == 429 }, "\(statuses)")
        let after = try #require(try fixture.store.checkin(id: CheckinID(mine.checkinID)!))
        #expect(after.state == .armed && abs(Double(after.dueAt) / 1000 - mine.dueAt.timeIntervalSince1970) < 1, "neither checked in nor moved")
    }

    @Test func aStoreThatFailsIsA503AndNeverUnknown() throws {
        let faulty = try GatewayFixture(faulty: true)
        let mum = try faulty.send("POST", "/api/v1/contacts", bearer: faulty.ownerKey, json: #"{"name":"Mum"}"#).decode(ContactInfo.self).id
        let armed = try faulty.send("POST", "/api/v1/checkins", bearer: faulty.ownerKey, json: #"{"in_s":600,"contacts":["\#(mum)"]}"#).decode(CheckinInfo.self)
        faulty.faults?.fail(["checkin"])
        for (method, path) in [("GET", ""), ("POST", "/done"), ("POST", "/extend")] {
            let reply = faulty.send(method, "/api/v1/checkins/\(armed.checkinID)\(path)", bearer: faulty.ownerKey, json: #"{"in_s":60}"#)
            #expect(reply.status == 503 && reply.header("Retry-After") != nil, "\(method) \(path): \(reply.status)")
        }
        faulty.faults?.fail(["insertCheckin"])
        let refused = faulty.send("POST", "/api/v1/checkins", bearer: faulty.ownerKey, json: #"{"in_s":600,"contacts":["\#(mum)"]}"#)
        #expect(refused.status == 503)
        faulty.faults?.fail([])
    }
}
