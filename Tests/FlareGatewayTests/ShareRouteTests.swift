import FlareAPI
import FlareCore
import FlareHTTP
import FlareTestSupport
import Foundation
import Testing

/// The owner API: POST/GET /api/v1/shares, GET /api/v1/shares/{id}, POST …/stop and …/extend.
@Suite struct ShareRouteTests {
    // MARK: POST /api/v1/shares

    @Test func creatingAShareAnswers201WithTheLinksTokensAndALocationHeader() throws {
        let fixture = try GatewayFixture()
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"name":"Anna","duration_s":1800}"#)
        #expect(reply.status == 201)
        #expect(reply.contentType == "application/json")
        let created = try reply.decode(CreatedShare.self)
        #expect(ShareID(created.shareID) != nil)
        #expect(reply.header("Location") == "/api/v1/shares/\(created.shareID)")
        #expect(created.shareURL.absoluteString.hasPrefix("https://sos.example.org/s/"))
        #expect(Secret.isWellFormed(created.viewToken))
        #expect(created.durationSeconds == 1800)
        #expect(abs(created.expiresAt.timeIntervalSinceNow - 1800) < 60)
        #expect(created.mqttURL == "mqtts://sos.example.org:8883")
        #expect(created.mqttUsername == created.shareID)
        #expect(created.mqttTopic == "flare/v1/shares/\(created.shareID)/location")
        #expect(created.statusTopic == "flare/v1/shares/\(created.shareID)/status")
        #expect(created.ingestURL?.absoluteString == "https://sos.example.org/api/v1/shares/\(created.shareID)/locations")
        #expect(created.ownTracksConfigURL?.absoluteString == "https://sos.example.org/api/v1/shares/\(created.shareID)/owntracks")
        #expect(!created.deviceToken.isEmpty)
    }

    @Test func theCreateAnswerIsAFlatObjectOfStringsAsTheOriginalIOSClientDecodesIt() throws {
        let fixture = try GatewayFixture()
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"duration_s":600}"#)
        #expect(reply.status == 201)
        let flat = try JSONDecoder().decode([String: String].self, from: Data(reply.bytes))
        #expect(flat["duration_s"] == "600")
        #expect(flat["share_id"] != nil && flat["device_token"] != nil && flat["share_url"] != nil && flat["expires_at"] != nil)
        let object = try #require(reply.jsonObject)
        #expect(object.count == flat.count)
        #expect(object.values.allSatisfy { $0 is String })
    }

    @Test func theServersOwnWriterAndTheAPITypesEncoderWriteTheSameCreateAnswer() throws {
        let fixture = try GatewayFixture()
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"name":"Anna \"A\" / Zoë","duration_s":600}"#)
        #expect(reply.status == 201)
        let written = try JSONDecoder().decode([String: String].self, from: Data(reply.bytes))
        let encoded = try JSONDecoder().decode([String: String].self, from: Data(APIJSON.encode(try reply.decode(CreatedShare.self))))
        #expect(written == encoded)
        #expect(written.count == 11)
    }

    @Test func creatingAShareWithAnEmptyBodyUsesTheDefaultDuration() throws {
        let fixture = try GatewayFixture()
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey)
        #expect(reply.status == 201)
        #expect(try reply.decode(CreatedShare.self).durationSeconds == 3600)
    }

    @Test func creatingAShareWithoutTheOwnerKeyIsUnauthorized() throws {
        let fixture = try GatewayFixture()
        let missing = fixture.send("POST", "/api/v1/shares", json: "{}")
        #expect(missing.status == 401)
        #expect(missing.errorCode == "unauthorized")
        #expect(missing.header("WWW-Authenticate") == "Bearer")
        let wrong = fixture.send("POST", "/api/v1/shares", bearer: OwnerKey.generate(), json: "{}")
        #expect(wrong.status == 401)
        #expect(wrong.errorCode == "unauthorized")
        let garbage = fixture.send("POST", "/api/v1/shares", bearer: "not-a-key", json: "{}")
        #expect(garbage.status == 401)
        #expect(garbage.errorCode == "unauthorized")
        // A device token is no owner key.
        let created = try fixture.createShare()
        let device = fixture.send("POST", "/api/v1/shares", bearer: created.deviceToken, json: "{}")
        #expect(device.status == 401)
        #expect(device.errorCode == "unauthorized")
    }

    @Test func creatingAShareRefusesABodyThatIsNotAJSONObject() throws {
        let fixture = try GatewayFixture()
        for body in ["{", "[1,2]", "\"share\"", "duration_s=60"] {
            let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: body)
            #expect(reply.status == 400, "body \(body)")
            #expect(reply.errorCode == "invalid_json", "body \(body)")
        }
    }

    @Test func creatingAShareRefusesADurationThatIsNotANumber() throws {
        let fixture = try GatewayFixture()
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"duration_s":"an hour"}"#)
        #expect(reply.status == 400)
        #expect(reply.errorCode == "invalid_duration")
    }

    @Test func creatingAShareRefusesANameThatIsNotAString() throws {
        let fixture = try GatewayFixture()
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"name":42}"#)
        #expect(reply.status == 400)
        #expect(reply.errorCode == "invalid_name")
    }

    @Test func creatingAShareRefusesADurationBeyondTheMaximumOrBelowOneSecond() throws {
        let fixture = try GatewayFixture()
        for duration in ["86401", "0", "-5", "1.5"] {
            let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"duration_s":\#(duration)}"#)
            #expect(reply.status == 400, "duration \(duration)")
            #expect(reply.errorCode == "invalid_request", "duration \(duration)")
        }
        let tooLongName = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey,
                                       json: #"{"name":"\#(String(repeating: "x", count: 81))"}"#)
        #expect(tooLongName.status == 400)
        #expect(tooLongName.errorCode == "invalid_name")
    }

    // MARK: GET /api/v1/shares

    @Test func listingSharesAnswersNewestFirst() throws {
        let fixture = try GatewayFixture()
        let created = try (1...3).map { try fixture.createShare(name: "Share \($0)") }
        let reply = fixture.send("GET", "/api/v1/shares", bearer: fixture.ownerKey)
        #expect(reply.status == 200)
        let list = try reply.decode(ShareList.self)
        #expect(list.shares.map(\.shareID) == created.reversed().map(\.shareID))
        #expect(list.shares.map(\.name) == ["Share 3", "Share 2", "Share 1"])
        #expect(list.shares.allSatisfy { $0.state == .active })
        #expect(list.nextCursor == nil)
        // next_cursor is there, and null, on the last page.
        let object = try #require(reply.jsonObject)
        #expect(object["next_cursor"] is NSNull)
    }

    @Test func listingSharesPagesWithLimitAndNextCursorUntilTheCursorIsNull() throws {
        let fixture = try GatewayFixture()
        let created = try (1...5).map { try fixture.createShare(name: "Share \($0)") }
        var seen: [String] = []
        var cursor: String?
        var pages: [Int] = []
        repeat {
            var query = ["limit": "2"]
            if let cursor { query["cursor"] = cursor }
            let reply = fixture.send("GET", "/api/v1/shares", query: query, bearer: fixture.ownerKey)
            try #require(reply.status == 200)
            let list = try reply.decode(ShareList.self)
            pages.append(list.shares.count)
            seen += list.shares.map(\.shareID)
            cursor = list.nextCursor
        } while cursor != nil && pages.count < 10
        #expect(pages == [2, 2, 1])
        #expect(seen == created.reversed().map(\.shareID))
    }

    @Test func listingSharesFiltersByState() throws {
        let fixture = try GatewayFixture()
        let first = try fixture.createShare(name: "First")
        let second = try fixture.createShare(name: "Second")
        let third = try fixture.createShare(name: "Third")
        try fixture.stop(second)
        let active = try fixture.send("GET", "/api/v1/shares", query: ["state": "active"], bearer: fixture.ownerKey).decode(ShareList.self)
        #expect(active.shares.map(\.shareID) == [third.shareID, first.shareID])
        let endedReply = fixture.send("GET", "/api/v1/shares", query: ["state": "ended"], bearer: fixture.ownerKey)
        #expect(endedReply.status == 200)
        let ended = try endedReply.decode(ShareList.self)
        #expect(ended.shares.map(\.shareID) == [second.shareID])
        #expect(ended.shares.first?.state == .ended)
        #expect(ended.shares.first?.reason == "stopped")
    }

    @Test func listingSharesRefusesAnUnknownStateABadLimitOrAForeignCursor() throws {
        let fixture = try GatewayFixture()
        let state = fixture.send("GET", "/api/v1/shares", query: ["state": "paused"], bearer: fixture.ownerKey)
        #expect(state.status == 400)
        #expect(state.errorCode == "invalid_state")
        for limit in ["0", "201", "ten", "-1"] {
            let reply = fixture.send("GET", "/api/v1/shares", query: ["limit": limit], bearer: fixture.ownerKey)
            #expect(reply.status == 400, "limit \(limit)")
            #expect(reply.errorCode == "invalid_limit", "limit \(limit)")
        }
        for cursor in ["not a cursor", "MjoxOjE", String(repeating: "A", count: 80)] {
            let reply = fixture.send("GET", "/api/v1/shares", query: ["cursor": cursor], bearer: fixture.ownerKey)
            #expect(reply.status == 400, "cursor \(cursor)")
            #expect(reply.errorCode == "invalid_cursor", "cursor \(cursor)")
        }
    }

    @Test func listingSharesWithoutTheOwnerKeyIsUnauthorized() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        for bearer in [nil, OwnerKey.generate(), created.deviceToken] {
            let reply = fixture.send("GET", "/api/v1/shares", bearer: bearer)
            #expect(reply.status == 401)
            #expect(reply.errorCode == "unauthorized")
        }
    }

    // MARK: GET /api/v1/shares/{id}

    @Test func showingAShareAnswersItsStatusAndItsLastPositionOnceAFixArrives() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(name: "Anna", durationSeconds: 900)
        let before = fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey)
        #expect(before.status == 200)
        let fresh = try before.decode(ShareStatus.self)
        #expect(fresh.shareID == created.shareID)
        #expect(fresh.name == "Anna")
        #expect(fresh.state == .active)
        #expect(fresh.expiresAt == created.expiresAt)
        #expect(fresh.expiresAt.timeIntervalSince(fresh.createdAt) >= 899 && fresh.expiresAt.timeIntervalSince(fresh.createdAt) <= 901)
        #expect(fresh.endedAt == nil && fresh.reason == nil && !fresh.historyDeleted && fresh.viewers == 0)
        #expect(fresh.last == nil)
        #expect(try #require(before.jsonObject)["last"] is NSNull)

        let tst = GatewayFixture.now
        try fixture.recordFix(created, latitude: 48.137, longitude: 11.575, tst: tst)
        let after = try fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        let last = try #require(after.last)
        #expect(last.latitude == 48.137)
        #expect(last.longitude == 11.575)
        #expect(Int64(last.timestamp.timeIntervalSince1970) == tst)
        #expect(last.accuracy == 12)
        #expect(last.battery == 80)
    }

    @Test func showingAnUnknownOrMalformedShareIdIsNotFound() throws {
        let fixture = try GatewayFixture()
        for id in [ShareID.generate().rawValue, "nope", String(repeating: "!", count: 22)] {
            let reply = fixture.send("GET", "/api/v1/shares/\(id)", bearer: fixture.ownerKey)
            #expect(reply.status == 404, "id \(id)")
            #expect(reply.errorCode == "not_found", "id \(id)")
        }
    }

    /// The owner key or the share's own device token (the phone asks who has seen its link); nothing else.
    @Test func showingAShareWithoutTheOwnerKeyOrItsDeviceTokenIsUnauthorized() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(), other = try fixture.createShare()
        for bearer in [nil, OwnerKey.generate(), other.deviceToken] {
            let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: bearer)
            #expect(reply.status == 401)
            #expect(reply.errorCode == "unauthorized")
        }
        #expect(fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: created.deviceToken).status == 200)
    }

    @Test func anEndedShareWhoseHistoryIsDeletedShowsHistoryDeleted() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_HISTORY_RETENTION_S": "0"])
        let created = try fixture.createShare(name: "Brief")
        try fixture.recordFix(created, latitude: 1, longitude: 2, tst: GatewayFixture.now)
        try fixture.stop(created)
        var status: ShareStatus?
        let purged = eventually {
            status = try? fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
            return status?.historyDeleted == true
        }
        #expect(purged)
        let shown = try #require(status)
        #expect(shown.state == .ended)
        #expect(shown.reason == "stopped")
        #expect(shown.endedAt != nil)
        #expect(shown.last == nil)
        // The name goes with the history: only that the share existed, and when, remains.
        #expect(shown.name == "")
        let listed = try fixture.send("GET", "/api/v1/shares", bearer: fixture.ownerKey).decode(ShareList.self)
        #expect(listed.shares.map(\.historyDeleted) == [true])
    }

    // MARK: POST /api/v1/shares/{id}/stop

    @Test func stoppingAShareWithTheOwnerKeyEndsItAndStoppingAgainAnswersTheSameEnd() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let first = fixture.send("POST", "/api/v1/shares/\(created.shareID)/stop", bearer: fixture.ownerKey)
        #expect(first.status == 200)
        let stopped = try first.decode(StoppedShare.self)
        #expect(stopped.shareID == created.shareID)
        #expect(stopped.state == .ended)
        #expect(stopped.reason == "stopped")
        let endedAt = try #require(stopped.endedAt)
        #expect(abs(endedAt.timeIntervalSinceNow) < 60)
        let again = fixture.send("POST", "/api/v1/shares/\(created.shareID)/stop", bearer: fixture.ownerKey)
        #expect(again.status == 200)
        #expect(try again.decode(StoppedShare.self) == stopped)
        let status = try fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        #expect(status.state == .ended)
        #expect(status.endedAt == stopped.endedAt)
    }

    @Test func stoppingAShareWithItsDeviceTokenEndsIt() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/stop", bearer: created.deviceToken)
        #expect(reply.status == 200)
        #expect(try reply.decode(StoppedShare.self).state == .ended)
    }

    @Test func theDeviceTokenOfAnEndedShareCannotStopItAgain() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.stop(created)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/stop", bearer: created.deviceToken)
        #expect(reply.status == 401)
        #expect(reply.errorCode == "unauthorized")
    }

    @Test func stoppingWithoutAValidCredentialOrAnotherSharesTokenIsUnauthorized() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let other = try fixture.createShare(name: "Other")
        for bearer in [nil, OwnerKey.generate(), other.deviceToken, "garbage"] {
            let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/stop", bearer: bearer)
            #expect(reply.status == 401)
            #expect(reply.errorCode == "unauthorized")
        }
        let status = try fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        #expect(status.state == .active)
    }

    @Test func stoppingAnUnknownShareIsNotFound() throws {
        let fixture = try GatewayFixture()
        for id in [ShareID.generate().rawValue, "short"] {
            let reply = fixture.send("POST", "/api/v1/shares/\(id)/stop", bearer: fixture.ownerKey)
            #expect(reply.status == 404, "id \(id)")
            #expect(reply.errorCode == "not_found", "id \(id)")
        }
    }

    // MARK: POST /api/v1/shares/{id}/extend

    @Test func extendingAShareMovesItsExpiryAndHandsOutANewDeviceToken() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(durationSeconds: 600)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/extend", bearer: fixture.ownerKey, json: #"{"duration_s":7200}"#)
        #expect(reply.status == 200)
        let extended = try reply.decode(ExtendedShare.self)
        #expect(extended.shareID == created.shareID)
        #expect(extended.state == .active)
        #expect(abs(extended.expiresAt.timeIntervalSinceNow - 7200) < 60)
        #expect(extended.deviceToken != created.deviceToken)
        let status = try fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        #expect(status.expiresAt == extended.expiresAt)
        // The new token works, and so does the one the share was created with.
        for token in [extended.deviceToken, created.deviceToken] {
            let again = fixture.send("POST", "/api/v1/shares/\(created.shareID)/extend", bearer: token)
            #expect(again.status == 200)
            #expect(abs(try again.decode(ExtendedShare.self).expiresAt.timeIntervalSinceNow - 3600) < 60)
        }
    }

    /// A device token past its `exp` (a QR code photographed before an extension) reports positions into its live
    /// share and does nothing else: no stop, no extension (which used to hand out a fresh token), no answers, no
    /// audience, no OwnTracks configuration, no check-in done or extended (issue: trust, second round, 3).
    @Test func aDeviceTokenPastItsExpiryOnlyReportsPositions() throws {
        let checkins = try CheckinRouteTests()
        let armed = try checkins.arm(#"{"in_s":7200,"contacts":["\#(try checkins.contact("Mum"))"]}"#).decode(CheckinInfo.self)
        let fixture = checkins.fixture
        let id = try #require(ShareID(armed.shareID))
        let expired = ShareToken(shareID: id, role: .device, issuedAt: GatewayFixture.now - 7200, expiresAt: GatewayFixture.now - 1)
            .signed(with: fixture.tokenKey)
        let fix = #"{"lat":48.1,"lon":11.5,"tst":\#(GatewayFixture.now)}"#
        #expect(fixture.send("POST", "/api/v1/shares/\(id)/locations", bearer: expired, json: fix).status == 202)
        for (method, path) in [("POST", "/api/v1/shares/\(id)/stop"), ("POST", "/api/v1/shares/\(id)/extend"), ("GET", "/api/v1/shares/\(id)"),
                               ("GET", "/api/v1/shares/\(id)/answers"), ("GET", "/api/v1/shares/\(id)/owntracks"),
                               ("GET", "/api/v1/shares/\(id)/owntracks/link"), ("POST", "/api/v1/checkins/\(armed.checkinID)/done"),
                               ("POST", "/api/v1/checkins/\(armed.checkinID)/extend"), ("GET", "/api/v1/checkins/\(armed.checkinID)")] {
            let reply = method == "POST" ? fixture.send(method, path, bearer: expired, json: "{}") : fixture.send(method, path, bearer: expired)
            #expect(reply.status == 401 && reply.errorCode == "token_expired", "\(method) \(path): \(reply.status) \(reply.text)")
            #expect(!reply.text.contains("device_token"))
        }
        let current = try #require(armed.deviceToken)
        #expect(fixture.send("GET", "/api/v1/shares/\(id)", bearer: current).status == 200, "the current token does all of it")
        #expect(try fixture.store.share(id: id)?.share.isActive == true, "nothing the old token asked was done")
    }

    @Test func extendingAnEndedShareIsAConflict() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.stop(created)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/extend", bearer: fixture.ownerKey, json: #"{"duration_s":60}"#)
        #expect(reply.status == 409)
        #expect(reply.errorCode == "share_ended")
    }

    @Test func extendingRefusesABadBody() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let path = "/api/v1/shares/\(created.shareID)/extend"
        let cases: [(body: String, code: String)] = [
            ("not json", "invalid_json"),
            (#"{"duration_s":true}"#, "invalid_duration"),
            (#"{"duration_s":999999}"#, "invalid_request"),
        ]
        for (body, code) in cases {
            let reply = fixture.send("POST", path, bearer: fixture.ownerKey, json: body)
            #expect(reply.status == 400, "body \(body)")
            #expect(reply.errorCode == code, "body \(body)")
        }
    }

    @Test func extendingWithoutAValidCredentialIsUnauthorizedAndAnUnknownShareIsNotFound() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let unauthorized = fixture.send("POST", "/api/v1/shares/\(created.shareID)/extend", bearer: OwnerKey.generate())
        #expect(unauthorized.status == 401)
        #expect(unauthorized.errorCode == "unauthorized")
        let unknown = fixture.send("POST", "/api/v1/shares/\(ShareID.generate().rawValue)/extend", bearer: fixture.ownerKey)
        #expect(unknown.status == 404)
        #expect(unknown.errorCode == "not_found")
    }
}
