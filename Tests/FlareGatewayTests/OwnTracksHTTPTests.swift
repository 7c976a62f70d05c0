import FlareAPI
import FlareBridge
import FlareShares
import FlareCore
import FlareHTTP
import FlareTestSupport
import Foundation
import Testing
import FlareSystem

/// The OwnTracks apps' HTTP mode: the configuration that selects it, and `POST /api/v1/shares/{id}/owntracks/http`
/// with Basic auth, answered with a JSON array of messages for the app.
@Suite struct OwnTracksHTTPTests {
    static var tst: Int64 { GatewayFixture.now - 2 }
    /// Android's location message with extended data (its MessageLocation), as it posts it.
    static func androidLocation(lat: Double = 48.1371, tst: Int64 = tst, trigger: String = "u") -> String {
        #"{"_type":"location","_id":"8e2c41f0","acc":12,"alt":521,"batt":81,"bs":2,"conn":"m","created_at":\#(tst + 1),"lat":\#(lat),"lon":11.5754,"m":2,"t":"\#(trigger)","tid":"AN","tst":\#(tst),"vac":4,"vel":3}"#
    }
    /// iOS, which names the Wi-Fi `SSID` (since 2025) and adds the topic it would have used.
    static func iOSLocation(lat: Double = 48.1372, tst: Int64 = tst) -> String {
        #"{"_type":"location","BSSID":"a4:2b:b0:11:22:33","SSID":"Home","acc":5,"alt":519,"batt":64,"bs":1,"conn":"w","created_at":\#(tst),"lat":\#(lat),"lon":11.576124,"m":2,"t":"t","tid":"AN","tst":\#(tst),"topic":"owntracks/user/sos"}"#
    }

    func basic(_ user: String, _ password: String) -> [String: String] {
        ["Authorization": "Basic " + Data("\(user):\(password)".utf8).base64EncodedString(), "X-Limit-U": user, "X-Limit-D": "sos"]
    }

    func post(_ fixture: GatewayFixture, _ created: CreatedShare, _ body: String, user: String? = nil, password: String? = nil,
              from address: String = "127.0.0.1") -> Reply {
        fixture.send("POST", "/api/v1/shares/\(created.shareID)/owntracks/http",
                     body: Array(body.utf8), headers: basic(user ?? created.shareID, password ?? created.deviceToken), from: address)
    }

    func messages(_ reply: Reply) -> [[String: Any]]? {
        (try? JSONSerialization.jsonObject(with: Data(reply.bytes))) as? [[String: Any]]
    }

    @Test func theHTTPModeConfigurationPointsTheAppAtTheSharesURL() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks", query: ["mode": "http"], bearer: fixture.ownerKey)
        #expect(reply.status == 200)
        let object = try #require(reply.jsonObject)
        #expect(object["mode"] as? Int == 3)
        #expect(object["url"] as? String == GatewayFixture.publicURL + "/api/v1/shares/\(created.shareID)/owntracks/http")
        #expect(object["username"] as? String == created.shareID && object["password"] as? String == created.deviceToken)
        #expect(object["host"] == nil)
        // The device may fetch it too; the link and the QR code come in the same mode.
        #expect(fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks.otrc", query: ["mode": "http"], bearer: created.deviceToken).status == 200)
        let link = try fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/link", query: ["mode": "http"], bearer: fixture.ownerKey)
            .decode(OwnTracksLink.self)
        let inline = try #require(link.url.components(separatedBy: "inline=").last?.removingPercentEncoding)
        let inlineJSON = try #require(Data(base64Encoded: inline))
        let linked = try #require(try JSONSerialization.jsonObject(with: inlineJSON) as? [String: Any])
        #expect(linked["mode"] as? Int == 3)
        #expect(fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/qr.png", query: ["mode": "http"], bearer: fixture.ownerKey).status == 200)
        let bad = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks", query: ["mode": "carrier-pigeon"], bearer: fixture.ownerKey)
        #expect(bad.status == 400 && bad.errorCode == "invalid_mode")
    }

    @Test func bothAppsLocationsAreStoredAndAnsweredWithAnEmptyArray() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let id = try #require(ShareID(created.shareID))
        for (body, tst) in [(Self.androidLocation(tst: Self.tst - 1), Self.tst - 1), (Self.iOSLocation(), Self.tst)] {
            let reply = post(fixture, created, body)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.contentType == "application/json")
            #expect(reply.text == "[]")
            guard case .live(let snapshot) = try fixture.service.share(id) else { Issue.record("share not live"); return }
            #expect(snapshot.last?.timestamp == tst)
        }
        let view = try fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self)
        #expect(view.trail.count == 2 && view.last?.battery == 64)
        #expect(view.tracker?.connection == "wifi")
        // No will comes over HTTP: the page is told so by the transport.
        #expect(eventually { (try? fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self))?.tracker?.transport == "http" })
    }

    @Test func aWaitingLocateRequestIsHandedToThePhoneOnceAndItsAnswerShown() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_STALE_AFTER_S": "1"])
        let created = try fixture.createShare()
        #expect(post(fixture, created, Self.androidLocation()).text == "[]")
        fixture.clock.advance(by: 1_200)  // the phone goes quiet for longer than the stale limit
        #expect(fixture.send("POST", "/api/v1/view/\(created.viewToken)/locate").status == 202)
        // The next message the phone sends (any instance may answer it) carries the command, once.
        let withCommand = post(fixture, created, Self.androidLocation(lat: 48.2, tst: GatewayFixture.now))
        #expect(withCommand.status == 200)
        let commands = try #require(messages(withCommand))
        #expect(commands.count == 1)
        #expect(commands.first?["_type"] as? String == "cmd" && commands.first?["action"] as? String == "reportLocation")
        #expect(post(fixture, created, Self.androidLocation(lat: 48.3, tst: GatewayFixture.now)).text == "[]")
        // The app answers with `t: "r"`, even with a position it already sent: the page shows the answer.
        #expect(post(fixture, created, Self.androidLocation(lat: 48.3, tst: GatewayFixture.now, trigger: "r")).text == "[]")
        #expect(eventually { (try? fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self))?.tracker?.locateAnsweredAt != nil })
    }

    @Test func anEndedShareTellsItsPhoneToStopReportingWithoutAnError() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        #expect(post(fixture, created, Self.iOSLocation()).status == 200)
        try fixture.stop(created)
        let reply = post(fixture, created, Self.iOSLocation(lat: 48.5, tst: GatewayFixture.now))
        #expect(reply.status == 200)
        let commands = try #require(messages(reply))
        #expect(commands.count == 1)
        #expect(commands.first?["action"] as? String == "setConfiguration")
        #expect((commands.first?["configuration"] as? [String: Any])?["monitoring"] as? Int == -1)
        // Nothing is stored after the end.
        let view = try fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self)
        #expect(view.last?.latitude == 48.1372)
        // Only the share's own phone is told: a wrong password is still a 401.
        #expect(post(fixture, created, Self.iOSLocation(), password: "wrong").status == 401)
    }

    @Test func wrongCredentialsAre401WithABasicChallenge() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let other = try fixture.createShare(name: "Other")
        let cases: [(user: String, password: String)] = [
            (created.shareID, "wrong"),
            (created.shareID, other.deviceToken),             // another share's token
            (other.shareID, other.deviceToken),               // right pair, wrong share in the path
            (created.shareID, fixture.ownerKey),              // the owner key is no device token
            (created.shareID, ""),
        ]
        for (index, credentials) in cases.enumerated() {
            let reply = post(fixture, created, Self.androidLocation(), user: credentials.user, password: credentials.password, from: "10.0.0.\(index)")
            #expect(reply.status == 401, "\(index)")
            #expect(reply.errorCode == "unauthorized")
            #expect(reply.header("WWW-Authenticate")?.hasPrefix("Basic realm=") == true)
        }
        let anonymous = fixture.send("POST", "/api/v1/shares/\(created.shareID)/owntracks/http", body: Array(Self.androidLocation().utf8))
        #expect(anonymous.status == 401)
        let bearer = fixture.send("POST", "/api/v1/shares/\(created.shareID)/owntracks/http", bearer: created.deviceToken, body: Array(Self.androidLocation().utf8))
        #expect(bearer.status == 401)
        let garbled = fixture.send("POST", "/api/v1/shares/\(created.shareID)/owntracks/http", body: Array(Self.androidLocation().utf8),
                                   headers: ["Authorization": "Basic %%%not-base64"])
        #expect(garbled.status == 401)
        #expect(fixture.send("POST", "/api/v1/shares/nope/owntracks/http", body: [], headers: basic("nope", "x")).status == 401)
        #expect(fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/http").status == 405)
        // Nothing of it was stored.
        #expect(try fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self).last == nil)
    }

    @Test func guessingFromOneAddressIsRateLimited() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        var statuses: [Int] = []
        for _ in 0..<40 { statuses.append(post(fixture, created, Self.androidLocation(), password: "guess", from: "192.0.2.7").status) }
        #expect(statuses.first == 401)
        #expect(statuses.last == 429)
        // The phone itself, from another address, is not held back.
        #expect(post(fixture, created, Self.androidLocation(), from: "192.0.2.8").status == 200)
    }

    /// Everything else the apps send is taken without an error (an error would wedge Android's queue or alert the
    /// person on iOS), counted, and said in a header; what no app sends is a clear error.
    @Test func messagesFlareDoesNotTakeAreAnsweredWithoutAnErrorUnlessNoAppWouldSendThem() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let taken: [(body: String, reason: String)] = [
            (#"{"_type":"transition","wtst":1795900000,"lat":48.1,"lon":11.5,"tst":\#(Self.tst),"acc":10,"tid":"AN","event":"leave","desc":"Home","t":"c"}"#, "ignored_type"),
            (#"{"_type":"status","android":{"wifi":1,"ps":0,"bo":1,"loc":0,"hib":0}}"#, "ignored_type"),
            (#"{"_type":"waypoints","waypoints":[]}"#, "ignored_type"),
            (Self.androidLocation(tst: GatewayFixture.now - 86_400 * 3), "stale_timestamp"),   // queued long before the share
            (#"{"_type":"location","lat":91,"lon":11.5,"tst":\#(Self.tst)}"#, "invalid_coordinates"),
        ]
        for (body, reason) in taken {
            let reply = post(fixture, created, body)
            #expect(reply.status == 200 && reply.text == "[]", "\(body)")
            #expect(reply.header("X-Flare-Refused") == reason, "\(body)")
        }
        #expect(try fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self).last == nil)
        #expect(fixture.metrics.value(FlareMetrics.fixesRejected, labels: [("reason", "ignored_type")]) == 3)
        let notJSON = post(fixture, created, "lat=1&lon=2")
        #expect(notJSON.status == 400 && notJSON.errorCode == "malformed")
        let huge = post(fixture, created, #"{"_type":"location","lat":1,"lon":2,"pad":""# + String(repeating: "x", count: 70_000) + #""}"#)
        #expect(huge.status == 413)
    }
}
