import FlareAPI
import FlareBridge
import FlareShares
import FlareCore
import FlareHTTP
import FlareTestSupport
import Foundation
import FlareServiceTestSupport
import Testing
import FlareSystem
import FlareCodec

/// POST /api/v1/shares/{id}/locations: HTTP ingest, validated, stored through the batched writer (202 = committed),
/// then published to the share's topic for integrators; the answer carries the commands waiting for the tracker.
@Suite struct IngestRouteTests {
    static func location(lat: Double = 52.52, lon: Double = 13.405, tst: Int64 = GatewayFixture.now) -> String {
        #"{"_type":"location","lat":\#(lat),"lon":\#(lon),"tst":\#(tst),"acc":8}"#
    }

    /// The fixes published to the share's topic (a stop publishes an empty retained message there, to clear it).
    func locationMessages(_ fixture: GatewayFixture, _ created: CreatedShare) -> [RecordingPublisher.Message] {
        fixture.brokerPublisher.messages.filter { $0.topic == created.mqttTopic && !$0.payload.isEmpty }
    }

    @Test func postingALocationWithTheDeviceTokenAnswers202OnceStoredAndPublishesIt() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let tst = GatewayFixture.now
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken,
                                 json: Self.location(tst: tst))
        #expect(reply.status == 202)
        #expect(reply.contentType == "application/json")
        #expect(try reply.decode(IngestReceipt.self) == IngestReceipt(status: "accepted", tst: tst, commands: []))
        #expect(reply.text.contains(#""commands":[]"#))
        // Stored and known to viewers before the answer: no waiting.
        let id = try #require(ShareID(created.shareID))
        guard case .live(let snapshot) = try fixture.service.share(id) else { Issue.record("share not live"); return }
        #expect(snapshot.last?.timestamp == tst)
        #expect(try fixture.store.fixCount(row: snapshot.row) == 1)
        // Over HTTP, a tracker sends no will: its state can only become stale, and the page says so.
        #expect(eventually { (try? fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self))?.tracker?.transport == "http" })
        let published = try #require(locationMessages(fixture, created).last)
        #expect(published.retain)
        let message = try APIJSON.decode(Location.self, from: published.payload)
        #expect(message.latitude == 52.52 && message.longitude == 13.405 && message.accuracy == 8)
        #expect(Int64(message.timestamp.timeIntervalSince1970) == tst)

        // A retry of the same fix (its 202 was lost) is accepted again and stored once, published once.
        #expect(fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken,
                             json: Self.location(tst: tst)).status == 202)
        #expect(try fixture.store.fixCount(row: snapshot.row) == 1)
        #expect(locationMessages(fixture, created).count == 1)
    }

    @Test func aLocateRequestReachesAnHTTPTrackerInTheAnswerToItsNextFixOnce() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_STALE_AFTER_S": "1"])
        let created = try fixture.createShare()
        let path = "/api/v1/shares/\(created.shareID)/locations"
        #expect(fixture.send("POST", path, bearer: created.deviceToken, json: Self.location(tst: GatewayFixture.now)).status == 202)
        // Someone following the link asks once the phone has gone quiet (stale after a second here).
        fixture.clock.advance(by: 1_200)
        #expect(fixture.send("POST", "/api/v1/view/\(created.viewToken)/locate").status == 202)
        let first = try fixture.send("POST", path, bearer: created.deviceToken, json: Self.location(lat: 52.6, tst: GatewayFixture.now))
            .decode(IngestReceipt.self)
        #expect(first.commands == [.reportLocation])
        let second = try fixture.send("POST", path, bearer: created.deviceToken, json: Self.location(lat: 52.7, tst: GatewayFixture.now))
            .decode(IngestReceipt.self)
        #expect(second.commands.isEmpty)
        // The tracker answers with `t: "r"`; the page shows the answer.
        let answer = #"{"_type":"location","lat":52.8,"lon":13.4,"tst":\#(GatewayFixture.now),"t":"r"}"#
        #expect(fixture.send("POST", path, bearer: created.deviceToken, json: answer).status == 202)
        #expect(eventually { (try? fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self))?.tracker?.locateAnsweredAt != nil })
    }

    @Test func postingALocationWithoutTheDeviceTokenOfThatShareIsUnauthorized() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let other = try fixture.createShare(name: "Other")
        // The owner key is no device token either: ingest takes the share's publish capability only.
        for bearer in [nil, "wrong", other.deviceToken, fixture.ownerKey] {
            let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: bearer, json: Self.location())
            #expect(reply.status == 401)
            #expect(reply.errorCode == "unauthorized")
        }
        #expect(locationMessages(fixture, created).isEmpty)
    }

    @Test func postingALocationToAStoppedShareIsGone() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.stop(created)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: Self.location())
        #expect(reply.status == 410)
        #expect(reply.errorCode == "share_ended")
        #expect(locationMessages(fixture, created).isEmpty)
    }

    @Test func postingALocationToAnUnknownShareIdIsNotFoundOrUnauthorized() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let malformed = fixture.send("POST", "/api/v1/shares/xyz/locations", bearer: created.deviceToken, json: Self.location())
        #expect(malformed.status == 404)
        #expect(malformed.errorCode == "not_found")
        // A well-formed id that names no share: the token cannot be for it.
        let unknown = fixture.send("POST", "/api/v1/shares/\(ShareID.generate().rawValue)/locations", bearer: created.deviceToken,
                                   json: Self.location())
        #expect(unknown.status == 401)
        #expect(unknown.errorCode == "unauthorized")
    }

    @Test func postingInvalidCoordinatesIsABadRequest() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let path = "/api/v1/shares/\(created.shareID)/locations"
        let cases: [(body: String, code: String)] = [
            (Self.location(lat: 91), "invalid_coordinates"),
            (Self.location(lon: -180.5), "invalid_coordinates"),
            (#"{"_type":"location","lon":13.4}"#, "missing_coordinates"),
            ("not json", "malformed"),
            (Self.location(tst: GatewayFixture.now + 3600), "future_timestamp"),
            (Self.location(tst: GatewayFixture.now - 86_400), "stale_timestamp"),
        ]
        for (body, code) in cases {
            let reply = fixture.send("POST", path, bearer: created.deviceToken, json: body)
            #expect(reply.status == 400, "body \(body)")
            #expect(reply.errorCode == code, "body \(body)")
        }
        #expect(locationMessages(fixture, created).isEmpty)
    }

    @Test func postingAPayloadOverTheSizeLimitIsTooLarge() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let padding = String(repeating: "x", count: 4096)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken,
                                 json: #"{"_type":"location","lat":1,"lon":2,"pad":"\#(padding)"}"#)
        #expect(reply.status == 413)
        #expect(reply.errorCode == "too_large")
    }

    @Test func postingAnOwnTracksMessageThatIsNotALocationIsUnprocessable() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken,
                                 json: #"{"_type":"lwt","tst":1700000000}"#)
        #expect(reply.status == 422)
        #expect(reply.errorCode == "ignored_type")
    }

    /// A broker outage is no reason to refuse a fix: it is stored, answered 202, and published from the outbox, in
    /// order, when the broker is back.
    @Test func fixesReceivedWhileTheBrokerIsUnavailableAreStoredAndPublishedOnReconnect() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        fixture.brokerPublisher.setDown(true)
        let tst = GatewayFixture.now
        for offset in [2, 1, 0] {
            let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken,
                                     json: Self.location(tst: tst - Int64(offset)))
            #expect(reply.status == 202)
        }
        #expect(try fixture.send("GET", "/api/v1/view/\(created.viewToken)").decode(ViewDocument.self).last != nil)
        #expect(fixture.metrics.value(FlareMetrics.httpFixesUnpublished) == 3)
        let topic = "flare/v1/shares/\(created.shareID)/location"
        #expect(!fixture.brokerPublisher.messages.contains { $0.topic == topic })
        fixture.brokerPublisher.setDown(false)
        fixture.service.flushUnsent()
        let published = fixture.brokerPublisher.messages.filter { $0.topic == topic }
        #expect(published.allSatisfy(\.isOwnPosition) && published.count == 3)
        #expect(published.compactMap { (try? JSONValue.parse($0.payload))?["tst"]?.doubleValue } == [2, 1, 0].map { Double(tst - $0) })
        fixture.service.flushUnsent()
        #expect(fixture.brokerPublisher.messages.filter { $0.topic == topic }.count == 3)  // sent once
    }

    @Test func aFixTheStoreCannotTakeNowAsksToRetryAndIsNotLost() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let id = try #require(ShareID(created.shareID))
        guard case .live(let snapshot) = try fixture.service.share(id) else { Issue.record("share not live"); return }
        let lock = try SQLiteLock(path: fixture.directory.appendingPathComponent("flare.db").path)
        let tst = GatewayFixture.now
        // Queued, not committed within the wait (the writer waits out SQLite's busy timeout, then retries).
        let slow = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: Self.location(tst: tst))
        #expect(slow.status == 503 && slow.errorCode == "store_slow" && slow.header("Retry-After") == "2")
        // Once the writer has seen the store fail, nothing more is queued: the answer comes at once.
        #expect(eventually(timeout: .seconds(15)) { !fixture.ingestor.isStoreHealthy })
        let refused = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: Self.location(lat: 1, tst: tst))
        #expect(refused.status == 503 && refused.errorCode == "store_unavailable" && refused.header("Retry-After") == "5")
        lock.release()
        // The queued fix is written when the store is back; the client's retry is absorbed.
        // (The writer says it is healthy again just after the commit that made the row visible.)
        #expect(eventually(timeout: .seconds(15)) { (try? fixture.store.fixCount(row: snapshot.row)) == 1 && fixture.ingestor.isStoreHealthy })
        #expect(fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: Self.location(tst: tst)).status == 202)
        #expect(try fixture.store.fixCount(row: snapshot.row) == 1)
    }
}

/// One bound for the fixes a share's devices send over HTTP (`FLARE_FIX_RATE_PER_SHARE`, which the broker applies
/// over MQTT too): Flare's ingest and the OwnTracks apps' HTTP mode draw on the same budget, and beyond it the answer
/// is 429 with `Retry-After`, never a 2xx for a fix that was not taken. Another share's budget is its own.
@Suite struct FixRateTests {
    @Test func aSharesHTTPFixesShareOneBudgetAndBeyondItAre429() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_FIX_RATE_PER_SHARE": "0.01/4"])
        let created = try fixture.createShare(), other = try fixture.createShare()
        let ingest = "/api/v1/shares/\(created.shareID)/locations"
        for n in 0..<3 {
            #expect(fixture.send("POST", ingest, bearer: created.deviceToken, json: IngestRouteTests.location(tst: GatewayFixture.now - Int64(n))).status == 202)
        }
        let basic = ["Authorization": "Basic " + Data("\(created.shareID):\(created.deviceToken)".utf8).base64EncodedString()]
        let ownTracks = "/api/v1/shares/\(created.shareID)/owntracks/http"
        #expect(fixture.send("POST", ownTracks, body: Array(IngestRouteTests.location(tst: GatewayFixture.now - 5).utf8), headers: basic).status == 200)
        for (path, headers, bearer) in [(ingest, [String: String](), created.deviceToken as String?), (ownTracks, basic, nil)] {
            let refused = fixture.send("POST", path, bearer: bearer, body: Array(IngestRouteTests.location(tst: GatewayFixture.now - 9).utf8), headers: headers)
            #expect(refused.status == 429 && refused.errorCode == "rate_limited" && refused.header("Retry-After") != nil, "\(path): \(refused.status) \(refused.text)")
        }
        #expect(fixture.send("POST", "/api/v1/shares/\(other.shareID)/locations", bearer: other.deviceToken, json: IngestRouteTests.location()).status == 202)
        #expect(fixture.metrics.renderText().contains(#"flare_http_rate_limited_total{scope="share"} 2"#))
    }

    /// The phone may extend its share, now and then: ten at once, then one a minute. The owner key is not limited.
    @Test func extendingWithTheDeviceTokenIsRateLimited() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let path = "/api/v1/shares/\(created.shareID)/extend"
        for _ in 0..<10 { #expect(fixture.send("POST", path, bearer: created.deviceToken, json: #"{"duration_s":600}"#).status == 200) }
        let refused = fixture.send("POST", path, bearer: created.deviceToken, json: #"{"duration_s":600}"#)
        #expect(refused.status == 429 && refused.header("Retry-After") != nil)
        #expect(fixture.send("POST", path, bearer: fixture.ownerKey, json: #"{"duration_s":600}"#).status == 200)
    }
}

/// A share keeps at most `FLARE_MAX_FIXES_PER_SHARE` fixes: beyond it, every path refuses the next with the named code
/// `fix_limit_reached`, counted; another share is not affected. An instance that did not store them counts them from
/// the store before it refuses.
@Suite struct FixLimitTests {
    @Test func aShareBeyondItsFixBoundIsRefusedOnEveryPath() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_MAX_FIXES_PER_SHARE": "1000"])
        let created = try fixture.createShare(), other = try fixture.createShare()
        let id = try #require(ShareID(created.shareID))
        // Within the times a share takes (10 minutes before it to 5 after now): two fixes a second, apart by position.
        let start = GatewayFixture.now - 500
        for n in 0..<1_000 {
            let payload = #"{"_type":"location","lat":\#(48 + Double(n) / 10_000),"lon":11.5,"tst":\#(start + Int64(n / 2))}"#
            #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(payload.utf8), retained: false) == nil)
        }
        #expect(fixture.ingestor.waitUntilStored())
        let over = #"{"_type":"location","lat":47.5,"lon":11.5,"tst":\#(start + 1)}"#
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(over.utf8), retained: false) == .fixLimitReached)
        let http = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: over)
        #expect(http.status == 409 && http.errorCode == "fix_limit_reached", "\(http.status) \(http.text)")
        let basic = ["Authorization": "Basic " + Data("\(created.shareID):\(created.deviceToken)".utf8).base64EncodedString()]
        let ownTracks = fixture.send("POST", "/api/v1/shares/\(created.shareID)/owntracks/http", body: Array(over.utf8), headers: basic)
        #expect(ownTracks.status == 200 && ownTracks.text == "[]" && ownTracks.header("X-Flare-Refused") == "fix_limit_reached")
        #expect(fixture.metrics.renderText().contains(#"flare_fixes_rejected_total{reason="fix_limit_reached"} 3"#))
        let row = try #require(try fixture.service.share(id)).liveRow
        #expect(try fixture.store.fixCount(row: row) == 1_000)
        #expect(fixture.send("POST", "/api/v1/shares/\(other.shareID)/locations", bearer: other.deviceToken, json: over).status == 202)

        // Another instance over the same database, which stored none of them: it counts them before it refuses.
        let second = try GatewayFixture(settings: ["FLARE_MAX_FIXES_PER_SHARE": "1000"], sharingDatabaseOf: fixture)
        #expect(eventually {
            let next = #"{"_type":"location","lat":48.3,"lon":11.5,"tst":\#(GatewayFixture.now)}"#
            return second.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: next).status == 409
        })
    }
}

extension ShareLookup {
    /// The store row of a share with history (tests only).
    var liveRow: Int64 {
        if case .live(let snapshot) = self { return snapshot.row }
        return -1
    }
}
