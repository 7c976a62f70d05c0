import FlareAPI
import FlareCore
import FlareHTTP
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import Testing
@testable import FlareGateway

/// Devices: the owner's endpoints, the device's SOS (start, repeat, positions, stop, PIN, lockout, duress) and the
/// OsmAnd protocol the tracking apps speak, each request rebuilt as the app builds it (docs/trackers.md names the files).
@Suite struct DeviceRouteTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    /// Its helpers over another suite's fixture.
    init(fixture: GatewayFixture) { self.fixture = fixture }

    func contact(_ name: String, key: String? = nil) throws -> String {
        let reply = fixture.send("POST", "/api/v1/contacts", bearer: key ?? fixture.ownerKey, json: #"{"name":"\#(name)","email":"\#(name.lowercased())@example.org"}"#)
        try #require(reply.status == 201, "\(reply.status): \(reply.text)")
        return try reply.decode(ContactInfo.self).id
    }

    func device(_ extra: String = "", key: String? = nil, contacts: [String]? = nil) throws -> CreatedDevice {
        let ids = try contacts ?? [contact("Mum"), contact("Dad")]
        let list = ids.map { "\"\($0)\"" }.joined(separator: ",")
        let reply = fixture.send("POST", "/api/v1/devices", bearer: key ?? fixture.ownerKey, json: #"{"name":"Anna","contacts":[\#(list)]\#(extra)}"#)
        try #require(reply.status == 201, "\(reply.status): \(reply.text)")
        return try reply.decode(CreatedDevice.self)
    }

    func press(_ secret: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> SOSStarted {
        let reply = fixture.send("POST", "/api/v1/devices/sos", bearer: secret, json: "{}")
        try #require(reply.status == 201 || reply.status == 200, "\(reply.status): \(reply.text)", sourceLocation: sourceLocation)
        return try reply.decode(SOSStarted.self)
    }

    func events() throws -> [ShareEventType] { try fixture.store.dueEvents(now: .max, limit: 200).map(\.event.type) }

    func fixCount(_ share: String) throws -> Int {
        guard let stored = try fixture.store.share(id: try #require(ShareID(share))) else { return 0 }
        return try fixture.store.recentFixes(row: stored.row, limit: 1000).count
    }

    // MARK: The owner's side

    @Test func aDeviceIsAddedWithASecretShownOnceThenShownListedChangedAndRemoved() throws {
        let created = try device(#","duration_s":1800,"message":"At the trailhead","pin":"4711""#)
        #expect(Secret.isWellFormed(created.secret) && created.setup.includesSecret)
        #expect(created.setup.apps.map(\.app) == ["traccar_client", "gpslogger", "osmand", "http", "sos_page"])
        #expect(created.setup.apps[0].fields.contains { $0.value == created.secret })
        let shown = try fixture.send("GET", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey).decode(DeviceInfo.self)
        #expect(shown.name == "Anna" && shown.durationSeconds == 1800 && shown.message == "At the trailhead" && shown.hasPin && !shown.hasDuressPin)
        #expect(shown.sos == "none" && shown.lastHeardAt == nil)
        let raw = fixture.send("GET", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey).text
        #expect(!raw.contains(created.secret) && !raw.contains("4711"), "neither the secret nor the PIN is ever shown again")
        let setup = try fixture.send("GET", "/api/v1/devices/\(created.deviceID)/setup", bearer: fixture.ownerKey).decode(DeviceSetup.self)
        #expect(!setup.includesSecret && setup.apps[0].fields.contains { $0.value == "<secret>" })
        let changed = fixture.send("PATCH", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey, json: #"{"name":"Anna B","pin":""}"#)
        #expect(changed.status == 200)
        let after = try changed.decode(DeviceInfo.self)
        #expect(after.name == "Anna B" && !after.hasPin && after.durationSeconds == 1800, "only what the PATCH names changes")
        #expect(try fixture.send("GET", "/api/v1/devices", bearer: fixture.ownerKey).decode(DeviceList.self).devices.map(\.deviceID) == [created.deviceID])
        #expect(fixture.send("DELETE", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey).status == 204)
        #expect(fixture.send("DELETE", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey).status == 404)
        #expect(fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret).errorCode == "unknown_device", "a removed device's secret is gone")
    }

    @Test func aNewSecretStopsTheOldOneAtOnce() throws {
        let created = try device()
        let renewed = fixture.send("POST", "/api/v1/devices/\(created.deviceID)/secret", bearer: fixture.ownerKey)
        try #require(renewed.status == 200)
        let next = try renewed.decode(CreatedDevice.self)
        #expect(next.secret != created.secret)
        let old = fixture.send("GET", "/api/v1/devices/sos", bearer: created.secret)
        #expect(old.status == 404 && old.errorCode == "unknown_device")
        #expect(fixture.send("GET", "/api/v1/devices/sos", bearer: next.secret).status == 200)
    }

    @Test func devicesAreListedNewestFirstAPageAtATime() throws {
        let mum = try contact("Mum")
        let made = try (0..<3).map { _ in try device(contacts: [mum]).deviceID }
        let first = try fixture.send("GET", "/api/v1/devices", query: ["limit": "2"], bearer: fixture.ownerKey).decode(DeviceList.self)
        let cursor = try #require(first.nextCursor)
        let second = try fixture.send("GET", "/api/v1/devices", query: ["limit": "2", "cursor": cursor], bearer: fixture.ownerKey).decode(DeviceList.self)
        #expect((first.devices + second.devices).map(\.deviceID) == made.reversed() && second.nextCursor == nil)
        #expect(fixture.send("GET", "/api/v1/devices", query: ["limit": "0"], bearer: fixture.ownerKey).errorCode == "invalid_limit")
        #expect(fixture.send("GET", "/api/v1/devices", query: ["cursor": "x"], bearer: fixture.ownerKey).errorCode == "invalid_cursor")
    }

    @Test func aLimitedKeySeesOnlyItsOwnDevicesAndOnlyItsOwnContacts() throws {
        let made = fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: #"{"label":"Anna","max_live":3}"#)
        let anna = try made.decode(CreatedKey.self).key
        let annas = try device(key: anna, contacts: [contact("Mum", key: anna)])
        let admins = try device()
        #expect(try fixture.send("GET", "/api/v1/devices", bearer: anna).decode(DeviceList.self).devices.map(\.deviceID) == [annas.deviceID])
        for (method, path) in [("GET", "/api/v1/devices/\(admins.deviceID)"), ("DELETE", "/api/v1/devices/\(admins.deviceID)"),
                               ("POST", "/api/v1/devices/\(admins.deviceID)/secret"), ("GET", "/api/v1/devices/\(admins.deviceID)/setup")] {
            #expect(fixture.send(method, path, bearer: anna).status == 404, "\(method) \(path)")
        }
        let others = try contact("Stranger")
        let refused = fixture.send("POST", "/api/v1/devices", bearer: anna, json: #"{"name":"Anna","contacts":["\#(others)"]}"#)
        #expect(refused.status == 400 && refused.errorCode == "unknown_contact")
    }

    @Test(arguments: [
        ("not json", "invalid_json"), (#"{"contacts":["x"]}"#, "invalid_name"), (#"{"name":"A"}"#, "no_contacts"),
        (#"{"name":"A","contacts":[]}"#, "no_contacts"), (#"{"name":"A","contacts":"x"}"#, "invalid_contacts"),
        (#"{"name":"A","contacts":["AAAAAAAAAAAAAAAAAAAAAA"]}"#, "unknown_contact"), (#"{"name":7,"contacts":["x"]}"#, "invalid_name"),
        (#"{"name":"  ","contacts":["x"]}"#, "invalid_name"), (#"{"name":"A","contacts":["C"],"pin":"12"}"#, "invalid_pin"),
        (#"{"name":"A","contacts":["C"],"pin":"12345678901234"}"#, "invalid_pin"), (#"{"name":"A","contacts":["C"],"pin":"12a4"}"#, "invalid_pin"),
        (#"{"name":"A","contacts":["C"],"pin":1234}"#, "invalid_pin"), (#"{"name":"A","contacts":["C"],"duress_pin":"9999"}"#, "duress_needs_pin"),
        (#"{"name":"A","contacts":["C"],"pin":"1234","duress_pin":"1234"}"#, "duress_pin_is_pin"),
        (#"{"name":"A","contacts":["C"],"duration_s":-5}"#, "invalid_duration"), (#"{"name":"A","contacts":["C"],"duration_s":"1h"}"#, "invalid_duration"),
        (#"{"name":"A","contacts":["C","C"]}"#, "invalid_contacts"),
    ])
    func badDevicesAreRefusedWithANamedCodeAndStoreNothing(_ body: String, _ code: String) throws {
        let id = try contact("Mum")
        let reply = fixture.send("POST", "/api/v1/devices", bearer: fixture.ownerKey, json: body.replacingOccurrences(of: "\"C\"", with: "\"\(id)\""))
        #expect(reply.status == 400 && reply.errorCode == code, "\(body): \(reply.status) \(reply.text)")
        #expect(try fixture.store.listDevices(owner: nil, after: nil, limit: 10).isEmpty)
    }

    // MARK: The SOS

    @Test func aPressStartsOneShareWithALinkPerContactAndAPressAgainFindsIt() throws {
        let created = try device()
        let first = fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret)
        #expect(first.status == 201)
        let sos = try first.decode(SOSStarted.self)
        #expect(sos.links.map(\.name) == ["Mum", "Dad"] && !sos.repeated && sos.mqttTopic == "flare/v1/shares/\(sos.shareID)/location")
        #expect(sos.shareURL.hasPrefix(GatewayFixture.publicURL + "/s/"))
        let again = fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret)
        #expect(again.status == 200)
        let second = try again.decode(SOSStarted.self)
        #expect(second.shareID == sos.shareID && second.shareURL == sos.shareURL && second.repeated && second.links.map(\.url) == sos.links.map(\.url))
        let view = fixture.send("GET", "/api/v1/view/\(String(sos.shareURL.split(separator: "/").last!))")
        #expect(view.status == 200, "the share's own link opens")
        let types = try events()
        #expect(types.filter { $0 == .sosStarted }.count == 1 && types.filter { $0 == .linkCreated }.count == 2 && types.contains(.sosRepeated))
        #expect(try fixture.store.listShares(state: nil, after: nil, limit: 10, owner: nil).count == 1)
        let info = try fixture.send("GET", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey).decode(DeviceInfo.self)
        #expect(info.sos == "live" && info.sosShareID == sos.shareID && info.lastHeardAt != nil)
    }

    @Test func positionsOutsideAnSOSAreAnsweredAndDroppedAndInsideGoIn() throws {
        let created = try device()
        let fix = #"{"_type":"location","lat":52.52,"lon":13.40,"tst":\#(GatewayFixture.now),"acc":8}"#
        let before = fixture.send("POST", "/api/v1/devices/locations", bearer: created.secret, json: fix)
        #expect(try before.status == 200 && before.decode(DevicePositionDropped.self).status == "not_sharing")
        #expect(try fixture.store.loadOpenShares().isEmpty, "nothing stored before the press")
        let sos = try press(created.secret)
        let during = fixture.send("POST", "/api/v1/devices/locations", bearer: created.secret, json: fix)
        #expect(during.status == 202, "\(during.text)")
        #expect(try fixCount(sos.shareID) == 1)
        #expect(fixture.metrics.renderText().contains("flare_device_fixes_dropped_total 1"))
    }

    @Test func aFirstFixTravelsWithThePress() throws {
        let created = try device()
        let reply = fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret,
                                 json: #"{"_type":"location","lat":52.52,"lon":13.40,"tst":\#(GatewayFixture.now),"acc":8}"#)
        #expect(reply.status == 201)
        #expect(try fixCount(try reply.decode(SOSStarted.self).shareID) == 1)
        let bad = fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret, json: #"{"_type":"location","lat":95,"lon":13.40,"tst":1}"#)
        #expect(bad.status == 400, "a first fix that is not one is refused before anything starts")
    }

    @Test func withAPinOnlyTheRightPinStopsAndFiveWrongOnesLockAndAlert() throws {
        let created = try device(#","pin":"4711""#)
        let sos = try press(created.secret)
        for attempt in 1...4 {
            let wrong = fixture.send("POST", "/api/v1/devices/sos/stop", bearer: created.secret, json: attempt == 1 ? "{}" : #"{"pin":"0000"}"#)
            #expect(wrong.status == 403 && wrong.errorCode == "wrong_pin", "attempt \(attempt)")
        }
        #expect(try !events().contains(.sosStopRefused))
        #expect(fixture.send("POST", "/api/v1/devices/sos/stop", bearer: created.secret, json: #"{"pin":"1111"}"#).errorCode == "wrong_pin")
        #expect(try events().contains(.sosStopRefused), "the fifth wrong PIN alerts the contacts")
        let locked = fixture.send("POST", "/api/v1/devices/sos/stop", bearer: created.secret, json: #"{"pin":"4711"}"#)
        #expect(locked.status == 403 && locked.errorCode == "stop_locked" && locked.header("Retry-After") != nil, "even the right PIN waits")
        #expect(fixture.service.registry.snapshot(try #require(ShareID(sos.shareID)))?.share.isActive == true)
        fixture.clock.advance(seconds: 15 * 60 + 1)
        let stopped = fixture.send("POST", "/api/v1/devices/sos/stop", bearer: created.secret, json: #"{"pin":"4711"}"#)
        #expect(try stopped.status == 200 && stopped.decode(SOSState.self).status == "stopped")
        #expect(fixture.service.registry.snapshot(try #require(ShareID(sos.shareID)))?.share.isActive == false)
    }

    @Test func theDuressPinAnswersAsAStopWhileTheShareGoesOnWithAWarning() throws {
        let real = try device(#","pin":"4711","duress_pin":"9999""#)
        let forced = try device(#","pin":"4711","duress_pin":"9999""#)
        _ = try press(real.secret)
        let sos = try press(forced.secret)
        let stop = fixture.send("POST", "/api/v1/devices/sos/stop", bearer: real.secret, json: #"{"pin":"4711"}"#)
        let duress = fixture.send("POST", "/api/v1/devices/sos/stop", bearer: forced.secret, json: #"{"pin":"9999"}"#)
        #expect(stop.status == duress.status && stop.status == 200)
        #expect(Set(try #require(stop.jsonObject).keys) == Set(try #require(duress.jsonObject).keys))
        #expect(stop.response.headers.map(\.name).sorted() == duress.response.headers.map(\.name).sorted())
        let read = try fixture.send("GET", "/api/v1/devices/sos", bearer: forced.secret).decode(SOSState.self)
        #expect(read.status == "stopped" && read.answers == nil, "the device reads stopped")
        let id = try #require(ShareID(sos.shareID))
        #expect(fixture.service.registry.snapshot(id)?.share.isActive == true && fixture.service.registry.snapshot(id)?.share.underDuress == true)
        let view = fixture.send("GET", "/api/v1/view/\(String(sos.shareURL.split(separator: "/").last!))")
        #expect(view.text.contains("\"duress\":true"), "the viewers are warned: \(view.text)")
        #expect(try events().contains(.sosDuress))
        let fix = #"{"_type":"location","lat":52.52,"lon":13.40,"tst":\#(GatewayFixture.now),"acc":8}"#
        let position = fixture.send("POST", "/api/v1/devices/locations", bearer: forced.secret, json: fix)
        #expect(position.status == 200 && position.text.contains("not_sharing"), "the device is told nothing is shared")
        #expect(try fixCount(sos.shareID) == 1, "and its positions still go in")
        let info = try fixture.send("GET", "/api/v1/devices/\(forced.deviceID)", bearer: fixture.ownerKey).decode(DeviceInfo.self)
        #expect(info.sos == "duress", "the owner sees it for what it is")
        // The device token the start handed out reads as a stopped share's does.
        for path in ["/api/v1/shares/\(sos.shareID)", "/api/v1/shares/\(sos.shareID)/answers"] {
            let read = fixture.send("GET", path, bearer: sos.deviceToken)
            #expect(read.status == 401 && read.errorCode == "unauthorized", "\(path): \(read.status) \(read.text)")
        }
        for secret in [real.secret, forced.secret] {
            #expect(fixture.send("POST", "/api/v1/devices/sos/extend", bearer: secret, json: "{}").errorCode == "not_sharing", "nothing to extend, either way")
        }
        // A press now answers as a press after a real stop: a new SOS (the contacts hear of it), the other goes on.
        let realAgain = fixture.send("POST", "/api/v1/devices/sos", bearer: real.secret, json: "{}")
        let forcedAgain = fixture.send("POST", "/api/v1/devices/sos", bearer: forced.secret, json: "{}")
        #expect(realAgain.status == 201 && forcedAgain.status == 201)
        let again = try forcedAgain.decode(SOSStarted.self)
        #expect(!again.repeated && again.shareID != sos.shareID)
        #expect(fixture.service.registry.snapshot(id)?.share.isActive == true, "the duress share goes on")
        #expect(fixture.send("POST", "/api/v1/shares/\(sos.shareID)/stop", bearer: fixture.ownerKey).status == 200, "the owner key can always stop")
    }

    @Test func aDeviceStartsAtMostItsHourlyNumberOfSOS() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_SOS_PER_DEVICE_PER_HOUR": "2"])
        let mum = try fixture.send("POST", "/api/v1/contacts", bearer: fixture.ownerKey, json: #"{"name":"Mum"}"#).decode(ContactInfo.self).id
        let created = try fixture.send("POST", "/api/v1/devices", bearer: fixture.ownerKey, json: #"{"name":"Anna","contacts":["\#(mum)"]}"#)
            .decode(CreatedDevice.self)
        for _ in 1...2 {
            #expect(fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret).status == 201)
            #expect(fixture.send("POST", "/api/v1/devices/sos/stop", bearer: created.secret).status == 200)
        }
        let third = fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret)
        #expect(third.status == 429 && third.errorCode == "sos_limit" && third.header("Retry-After") != nil)
        fixture.clock.advance(seconds: 1_800)
        #expect(fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret).status == 201, "the budget refills over the hour")
    }

    @Test func oneAddressStartsAndStopsAtMostAFewSOS() throws {
        let mum = try contact("Mum")
        let devices = try (0..<3).map { _ in try device(contacts: [mum]).secret }
        var replies: [Reply] = []
        for round in 0..<8 {
            for secret in devices {
                replies.append(fixture.send("POST", "/api/v1/devices/sos\(round % 2 == 0 ? "" : "/stop")", bearer: secret, json: "{}"))
            }
        }
        #expect(replies.prefix(20).allSatisfy { $0.status == 200 || $0.status == 201 }, "\(replies.map(\.status))")
        #expect(replies.dropFirst(20).contains { $0.status == 429 && $0.errorCode == "rate_limited" }, "\(replies.map(\.status))")
        let elsewhere = fixture.send("POST", "/api/v1/devices/sos", bearer: devices[0], body: Array("{}".utf8), from: "192.0.2.7")
        #expect(elsewhere.status != 429, "another address is not held up")
    }

    @Test func twoInstancesSeeingTheSamePressAtOnceStartOneShare() throws {
        let created = try device()
        let other = try GatewayFixture(sharingDatabaseOf: fixture)
        let replies = Mutex<[Reply]>([])
        let threads = [fixture.gateway, other.gateway, fixture.gateway, other.gateway].map { gateway in
            Thread { [secret = created.secret] in
                let response = gateway.handle(HTTPRequest(method: "POST", path: "/api/v1/devices/sos", headers: ["Authorization": "Bearer \(secret)"]))
                replies.withLock { $0.append(Reply(response)) }
            }
        }
        for thread in threads { thread.start() }
        #expect(eventually { replies.withLock { $0.count } == 4 })
        let started = replies.withLock { $0 }.compactMap { try? $0.decode(SOSStarted.self) }
        #expect(started.count == 4, "\(replies.withLock { $0.map(\.status) })")
        #expect(Set(started.map(\.shareID)).count == 1 && started.filter { !$0.repeated }.count == 1)
        #expect(try fixture.store.listShares(state: nil, after: nil, limit: 10, owner: nil).count == 1)
    }

    @Test func unknownSecretsAnswer404AndCostTheirAddress() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_LINK_RATE_PER_ADDRESS": "0.01/25"])
        var statuses: [Int] = []
        for _ in 0..<8 { statuses.append(fixture.send("POST", "/api/v1/devices/sos", bearer: Secret.generate().text).status) }
        #expect(statuses.first == 404 && statuses.contains(429), "\(statuses)")
        #expect(fixture.send("POST", "/api/v1/osmand/\(Secret.generate().text)", query: ["lat": "1", "lon": "2"]).status == 429)
        #expect(fixture.send("POST", "/api/v1/devices/sos").status == 401, "no credential at all")
    }

    @Test func aFailingStoreIsAFailureToRetry() throws {
        let fixture = try GatewayFixture(faulty: true)
        let mum = try fixture.send("POST", "/api/v1/contacts", bearer: fixture.ownerKey, json: #"{"name":"Mum"}"#).decode(ContactInfo.self).id
        let created = try fixture.send("POST", "/api/v1/devices", bearer: fixture.ownerKey, json: #"{"name":"Anna","contacts":["\#(mum)"]}"#)
            .decode(CreatedDevice.self)
        for failing in ["startSOS", "device(secretHash:)", "insertLinks"] {
            fixture.faults?.fail([failing])
            let reply = fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret)
            #expect(reply.status == 503 && reply.header("Retry-After") != nil, "\(failing): \(reply.status) \(reply.text)")
        }
        fixture.faults?.fail([])
        #expect(fixture.send("POST", "/api/v1/devices/sos", bearer: created.secret).status == 201, "the press after the outage starts it")
    }

    // MARK: What the SOS page reads

    @Test func thePageReadsItsCardAndCountdownAndExtendsTheLiveSOS() throws {
        let mum = try contact("Mum")
        let made = fixture.send("POST", "/api/v1/contacts", bearer: fixture.ownerKey, json: #"{"name":"Dad","phone":"+4915123456789"}"#)
        let dad = try made.decode(ContactInfo.self).id
        let created = try device(#","pin":"4711","countdown_s":3,"duration_s":1800"#, contacts: [mum, dad])
        let card = try fixture.send("GET", "/api/v1/devices/me", bearer: created.secret).decode(DeviceCard.self)
        #expect(card.name == "Anna" && card.countdownSeconds == 3 && card.hasPin)
        #expect(card.contacts == [DeviceCard.Contact(name: "Mum", phone: nil), DeviceCard.Contact(name: "Dad", phone: "+4915123456789")])
        #expect(fixture.send("GET", "/api/v1/devices/me", bearer: Secret.generate().text).status == 404)
        let changed = fixture.send("PATCH", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey, json: #"{"countdown_s":0}"#)
        #expect(try changed.decode(DeviceInfo.self).countdownSeconds == 0)
        for bad in [#"{"countdown_s":11}"#, #"{"countdown_s":-1}"#, #"{"countdown_s":2.5}"#, #"{"countdown_s":"5"}"#] {
            let reply = fixture.send("PATCH", "/api/v1/devices/\(created.deviceID)", bearer: fixture.ownerKey, json: bad)
            #expect(reply.status == 400 && reply.errorCode == "invalid_countdown", "\(bad): \(reply.text)")
        }
        #expect(fixture.send("POST", "/api/v1/devices/sos/extend", bearer: created.secret, json: "{}").errorCode == "not_sharing")
        let sos = try press(created.secret)
        fixture.clock.advance(seconds: 600)
        let extended = fixture.send("POST", "/api/v1/devices/sos/extend", bearer: created.secret, json: "{}")
        #expect(extended.status == 200, "\(extended.text)")
        let state = try extended.decode(SOSState.self)
        let newEnd = try #require(state.expiresAt)
        #expect(state.status == "live" && state.shareID == sos.shareID && newEnd > sos.expiresAt)
        #expect(fixture.send("POST", "/api/v1/devices/sos/extend", bearer: created.secret, json: #"{"duration_s":"x"}"#).errorCode == "invalid_duration")
        let setup = try fixture.send("GET", "/api/v1/devices/\(created.deviceID)/setup", bearer: fixture.ownerKey).decode(DeviceSetup.self)
        #expect(setup.apps.first { $0.app == "sos_page" }?.qr == "\(GatewayFixture.publicURL)/sos#d=<secret>", "the secret in the fragment only")
    }

    @Test func thePagesManifestAndIconAreServedWithoutTheSecretAnywhere() throws {
        let manifest = fixture.send("GET", "/sos/manifest.webmanifest")
        #expect(manifest.status == 200 && manifest.contentType == "application/manifest+json")
        let parsed = try #require(manifest.jsonObject)
        #expect(parsed["start_url"] as? String == "/sos" && parsed["display"] as? String == "standalone")
        #expect((parsed["shortcuts"] as? [[String: Any]])?.first?["url"] as? String == "/sos#press")
        #expect(fixture.send("GET", "/sos/icon.svg").contentType == "image/svg+xml")
        #expect(fixture.send("GET", "/sos/../Viewer/viewer.js").status == 404 && fixture.send("GET", "/sos/nothing.js").status == 404)
    }

    // MARK: The apps people already have

    /// Traccar Client for Android (ProtocolFormatter.kt): a POST with everything in the query and no body; the SOS
    /// shortcut adds `alarm=sos` last (ShortcutActivity.kt).
    @Test func traccarClientsSOSShortcutStartsTheSOSWithItsPosition() throws {
        let created = try device()
        let now = GatewayFixture.now
        let query = ["id": created.secret, "timestamp": String(now), "lat": "52.520008", "lon": "13.404954", "speed": "1.2441",
                     "bearing": "87.30000305175781", "altitude": "34.0", "accuracy": "0.0", "batt": "85.0", "charge": "true"]
        let ordinary = fixture.send("POST", "/api/v1/osmand", query: query)
        #expect(ordinary.status == 200 && ordinary.bytes.isEmpty)
        #expect(try fixture.store.loadOpenShares().isEmpty, "a position before the press is dropped")
        let sos = fixture.send("POST", "/api/v1/osmand", query: query.merging(["alarm": "sos"]) { $1 })
        #expect(sos.status == 200 && sos.bytes.isEmpty)
        let shares = try fixture.store.loadOpenShares()
        try #require(shares.count == 1)
        let fixes = try fixture.store.recentFixes(row: shares[0].row, limit: 10)
        #expect(fixes.count == 1 && fixes[0].latitude == 52.520008 && fixes[0].battery == 85)
        #expect(abs((fixes[0].velocity ?? 0) - 1.2441 * 1.852) < 0.1, "knots, as Traccar reads them")
        #expect(fixes[0].accuracy == nil, "0.0 is the app's 'from GPS, unknown'")
    }

    /// Traccar Client 9 (Flutter, flutter_background_geolocation): JSON with the SOS in `location.alarm`.
    @Test func traccarClient9sJSONBodyWithAnAlarmStartsTheSOS() throws {
        let created = try device()
        let body = #"{"location":{"timestamp":"\#(RFC3339.format(seconds: GatewayFixture.now))","coords":{"latitude":37.4219983,"longitude":-122.084,"accuracy":5,"speed":2,"heading":-1,"altitude":5},"is_moving":false,"odometer":0,"event":"motionchange","battery":{"level":0.5,"is_charging":false},"activity":{"type":"still"},"extras":{},"alarm":"sos","_":"&id=x&lat=1&lon=2&timestamp=x&"},"device_id":"\#(created.secret)"}"#
        let reply = fixture.send("POST", "/api/v1/osmand/", body: Array(body.utf8), headers: ["Content-Type": "application/json"])
        #expect(reply.status == 200, "\(reply.text)")
        let shares = try fixture.store.loadOpenShares()
        try #require(shares.count == 1)
        let fix = try #require(try fixture.store.recentFixes(row: shares[0].row, limit: 1).first)
        #expect(fix.latitude == 37.4219983 && fix.battery == 50 && fix.course == nil && abs((fix.velocity ?? 0) - 7.2) < 0.01)
    }

    /// Traccar Client 10 (its SDK's HttpUploader.kt): a form body, no query; heartbeats have no position.
    @Test func traccarClient10sFormBodyAndItsHeartbeats() throws {
        let created = try device()
        let form = "id=\(created.secret)&lat=37.4219983&lon=-122.084&timestamp=\(GatewayFixture.now)&accuracy=5.0&altitude=5.0&speed=1.94&bearing=90.0&batt=100&charge=false&alarm=sos"
        let reply = fixture.send("POST", "/api/v1/osmand", body: Array(form.utf8), headers: ["Content-Type": "application/x-www-form-urlencoded; charset=UTF-8"])
        #expect(reply.status == 200, "\(reply.text)")
        #expect(try fixture.store.loadOpenShares().count == 1)
        let heartbeat = fixture.send("POST", "/api/v1/osmand", body: Array("id=\(created.secret)&timestamp=\(GatewayFixture.now)".utf8),
                                     headers: ["Content-Type": "application/x-www-form-urlencoded; charset=UTF-8"])
        #expect(heartbeat.status == 200)
        let token = fixture.send("POST", "/api/v1/osmand", body: Array("id=\(created.secret)&notificationToken=abc%3A123".utf8),
                                 headers: ["Content-Type": "application/x-www-form-urlencoded"])
        #expect(token.status == 200)
    }

    /// GPSLogger's custom URL (Flare's setup template, its placeholders filled as CustomUrlLogger fills them) and
    /// OsmAnd's online tracking URL (LiveSender: `{2}` is milliseconds, speed in m/s), both with the secret in the path.
    @Test func gpsLoggerAndOsmAndPutTheSecretInThePath() throws {
        let created = try device()
        let sos = try press(created.secret)
        let gps = fixture.send("GET", "/api/v1/osmand/\(created.secret)", query: [
            "lat": "52.5", "lon": "13.4", "timestamp": String(GatewayFixture.now), "accuracy": "9.0", "altitude": "40.0", "speed_mps": "2.0",
            "bearing": "180.0", "batt": "77", "charge": "false", "alarm": "",
        ])
        #expect(gps.status == 200, "\(gps.text)")
        let osmand = fixture.send("GET", "/api/v1/osmand/\(created.secret)", query: [
            "lat": "52.51", "lon": "13.41", "timestamp": String(GatewayFixture.now * 1000 + 1000), "accuracy": "12.0", "altitude": "40.0",
            "speed_mps": "1.5", "bearing": "0.0",
        ])
        #expect(osmand.status == 200, "\(osmand.text)")
        #expect(try fixCount(sos.shareID) == 2)
    }

    @Test(arguments: [
        (["lat": "95", "lon": "13"], 400), (["lat": "x", "lon": "13"], 400), (["lat": "0x10", "lon": "13"], 400), (["lat": "nan", "lon": "1"], 400),
        (["lat": "52", "lon": "13", "timestamp": "yesterday"], 400), (["lat": "52", "lon": "13", "batt": "150"], 400),
        (["lat": "52", "lon": "13", "location": "1"], 400), (["lat": String(repeating: "1", count: 40), "lon": "13"], 400),
    ])
    func badOsmAndFieldsAreRefused(_ fields: [String: String], _ status: Int) throws {
        let created = try device()
        _ = try press(created.secret)
        let reply = fixture.send("GET", "/api/v1/osmand/\(created.secret)", query: fields)
        #expect(reply.status == status, "\(fields): \(reply.status) \(reply.text)")
    }

    @Test func aDoubledFieldOrAMissingIdIsRefused() throws {
        let created = try device()
        let doubled = fixture.send("GET", "/api/v1/osmand/\(created.secret)", query: ["lat": "1", "lon": "2", HTTPRequest.repeatedMark + "lat": ""])
        #expect(doubled.status == 400 && doubled.errorCode == "duplicate_field")
        let form = fixture.send("POST", "/api/v1/osmand/\(created.secret)", body: Array("lat=1&lat=2&lon=3".utf8))
        #expect(form.status == 400 && form.errorCode == "duplicate_field")
        #expect(fixture.send("GET", "/api/v1/osmand", query: ["lat": "1", "lon": "2"]).errorCode == "missing_id")
        let json = fixture.send("POST", "/api/v1/osmand", body: Array("{not json".utf8), headers: ["Content-Type": "application/json"])
        #expect(json.status == 400 && json.errorCode == "invalid_json")
    }
}
