import FlareAPI
import FlareCore
import FlareHTTP
import Foundation
import FlareTestSupport
import Testing

/// The link holder's endpoints: GET /api/v1/view/{token}, …/events and the page at /s/{token}.
@Suite struct LinkRouteTests {
    // MARK: GET /api/v1/view/{token}

    @Test func theViewDocumentOfAnActiveShareShowsItsNameExpiryLastPositionAndTrail() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(name: "Anna")
        let empty = fixture.send("GET", "/api/v1/view/\(created.viewToken)")
        #expect(empty.status == 200)
        #expect(empty.contentType == "application/json")
        #expect(empty.header("Cache-Control") == "no-store")
        let fresh = try empty.decode(ViewDocument.self)
        #expect(fresh.state == .active && fresh.name == "Anna" && fresh.last == nil && fresh.trail.isEmpty)
        #expect(fresh.reason == nil && fresh.endedAt == nil)
        #expect(fresh.expiresAt == created.expiresAt)
        #expect(abs(fresh.serverTime.timeIntervalSinceNow) < 60)

        let now = GatewayFixture.now
        try fixture.recordFix(created, latitude: 48.1, longitude: 11.5, tst: now - 20)
        try fixture.recordFix(created, latitude: 48.2, longitude: 11.6, tst: now - 10)
        let reply = fixture.send("GET", "/api/v1/view/\(created.viewToken)")
        #expect(reply.status == 200)
        let view = try reply.decode(ViewDocument.self)
        let last = try #require(view.last)
        #expect(last.latitude == 48.2 && last.longitude == 11.6 && Int64(last.timestamp.timeIntervalSince1970) == now - 10)
        #expect(last.accuracy == 12 && last.battery == 80)
        #expect(view.trail.map(\.lat) == [48.1, 48.2])
        #expect(view.trail.map(\.lon) == [11.5, 11.6])
        #expect(view.trail.map(\.tst) == [now - 20, now - 10])
    }

    @Test func theViewDocumentOfAStoppedShareIsGoneWithTheReason() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(name: "Anna")
        try fixture.stop(created)
        let reply = fixture.send("GET", "/api/v1/view/\(created.viewToken)")
        #expect(reply.status == 410)
        let view = try reply.decode(ViewDocument.self)
        #expect(view.state == .ended)
        #expect(view.reason == "stopped")
        #expect(view.endedAt != nil)
        #expect(view.name == "Anna")
    }

    @Test func theViewDocumentOfAnUnknownOrMalformedTokenIsNotFound() throws {
        let fixture = try GatewayFixture()
        for token in [Secret.generate().text, "short", String(repeating: "*", count: 32)] {
            let reply = fixture.send("GET", "/api/v1/view/\(token)")
            #expect(reply.status == 404, "token \(token)")
            #expect(reply.errorCode == "not_found", "token \(token)")
        }
    }

    @Test func aBurstOnOneViewTokenIsRateLimitedWithRetryAfterWhateverTheAddress() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_LINK_RATE_PER_TOKEN": "0.001/3", "FLARE_LINK_RATE_PER_ADDRESS": "100/1000"])
        let created = try fixture.createShare()
        for index in 1...3 {
            #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "10.0.0.\(index)").status == 200)
        }
        let limited = fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "10.0.0.9")
        #expect(limited.status == 429)
        #expect(limited.errorCode == "rate_limited")
        let retryAfter = try #require(limited.header("Retry-After").flatMap { Int($0) })
        #expect(retryAfter >= 1)
        // Another share's link is not held back by this one's bucket.
        let other = try fixture.createShare(name: "Other")
        #expect(fixture.send("GET", "/api/v1/view/\(other.viewToken)", from: "10.0.0.9").status == 200)
    }

    @Test func aBurstFromOneAddressIsRateLimitedWhileOtherAddressesAreServed() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_LINK_RATE_PER_ADDRESS": "0.001/3"])
        let created = try fixture.createShare()
        for _ in 1...3 {
            #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "192.0.2.1").status == 200)
        }
        let limited = fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "192.0.2.1")
        #expect(limited.status == 429)
        #expect(limited.errorCode == "rate_limited")
        #expect(limited.header("Retry-After").flatMap { Int($0) }.map { $0 >= 1 } == true)
        // The page and the live events share the address bucket.
        #expect(fixture.send("GET", "/s/\(created.viewToken)", from: "192.0.2.1").status == 429)
        #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)/events", from: "192.0.2.1").status == 429)
        #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "192.0.2.2").status == 200)
    }

    @Test func unknownTokensCostTheAddressSeveralRequests() throws {
        // A burst of 12: the first guess costs 1 + 10, the second the last token, the third is refused, even
        // though a valid link would have been served twelve times.
        let fixture = try GatewayFixture(settings: ["FLARE_LINK_RATE_PER_ADDRESS": "0.001/12"])
        let created = try fixture.createShare()
        #expect(fixture.send("GET", "/api/v1/view/\(Secret.generate().text)", from: "192.0.2.7").status == 404)
        #expect(fixture.send("GET", "/api/v1/view/not-a-token", from: "192.0.2.7").status == 404)
        let third = fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "192.0.2.7")
        #expect(third.status == 429)
        #expect(third.errorCode == "rate_limited")
        for _ in 1...12 {
            #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "192.0.2.8").status == 200)
        }
    }

    // MARK: GET /api/v1/view/{token}/events

    @Test func theLiveEventsOfAnActiveShareStreamStatusFixAndEndedEvents() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(name: "Anna")
        let now = GatewayFixture.now
        try fixture.recordFix(created, latitude: 10, longitude: 20, tst: now - 30)
        let reply = fixture.send("GET", "/api/v1/view/\(created.viewToken)/events")
        #expect(reply.status == 200)
        #expect(reply.contentType == "text/event-stream")
        #expect(reply.header("Cache-Control") == "no-store")
        let stream = try #require(reply.stream)
        let events = EventStreamReader(stream)

        #expect(events.next() == ServerSentEvent(name: nil, data: nil, retry: 3000))
        let status = try #require(events.next())
        #expect(status.name == "status")
        let live = try APIJSON.decode(LiveStatus.self, from: Array(try #require(status.data).utf8))
        #expect(live == LiveStatus(expiresAt: created.expiresAt))
        let tracker = try #require(events.next())
        #expect(tracker.name == "tracker")
        let report = try APIJSON.decode(TrackerReport.self, from: Array(try #require(tracker.data).utf8))
        #expect(report.state == .live && report.battery == 80 && report.batteryLow == false)
        // The last fix closes the gap since the page fetched the view JSON.
        let catchUp = try #require(events.next())
        #expect(catchUp.name == "fix")
        let caught = try APIJSON.decode(ReportedLocation.self, from: Array(try #require(catchUp.data).utf8))
        #expect(caught.latitude == 10 && caught.longitude == 20)

        // The viewer is counted while connected.
        let shown = try fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        #expect(shown.viewers == 1)

        try fixture.recordFix(created, latitude: 11, longitude: 21, tst: now - 10)
        let fix = try #require(events.next())
        #expect(fix.name == "fix")
        let reported = try APIJSON.decode(ReportedLocation.self, from: Array(try #require(fix.data).utf8))
        #expect(reported == ReportedLocation(latitude: 11, longitude: 21, timestamp: Date(timeIntervalSince1970: Double(now - 10)),
                                             accuracy: 12, battery: 80))

        let extended = try fixture.send("POST", "/api/v1/shares/\(created.shareID)/extend", bearer: fixture.ownerKey,
                                        json: #"{"duration_s":7200}"#).decode(ExtendedShare.self)
        let statusAgain = try #require(events.next())
        #expect(statusAgain.name == "status")
        #expect(try APIJSON.decode(LiveStatus.self, from: Array(try #require(statusAgain.data).utf8)).expiresAt == extended.expiresAt)

        try fixture.stop(created)
        let endedEvent = try #require(events.next())
        #expect(endedEvent.name == "ended")
        let ended = try APIJSON.decode(LiveEnded.self, from: Array(try #require(endedEvent.data).utf8))
        #expect(ended.state == .ended && ended.reason == "stopped")
        #expect(events.next() == nil)
        #expect(events.finished)
    }

    @Test func theLiveEventsOfAStoppedShareAreGoneWithTheViewDocument() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.stop(created)
        let reply = fixture.send("GET", "/api/v1/view/\(created.viewToken)/events")
        #expect(reply.status == 410)
        #expect(reply.stream == nil)
        let view = try reply.decode(ViewDocument.self)
        #expect(view.state == .ended && view.reason == "stopped")
    }

    @Test func theLiveEventsOfAnUnknownTokenAreNotFound() throws {
        let fixture = try GatewayFixture()
        for token in [Secret.generate().text, "bad"] {
            let reply = fixture.send("GET", "/api/v1/view/\(token)/events")
            #expect(reply.status == 404)
            #expect(reply.errorCode == "not_found")
        }
    }

    // MARK: GET /s/{token}

    @Test func theViewerPageIsHTMLTitledWithTheShareNameEscaped() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(name: "Anna <3")
        let reply = fixture.send("GET", "/s/\(created.viewToken)")
        #expect(reply.status == 200)
        #expect(reply.contentType == "text/html; charset=utf-8")
        #expect(reply.header("Content-Security-Policy")?.contains("default-src 'none'") == true)
        #expect(reply.header("X-Frame-Options") == "DENY")
        #expect(reply.text.contains("Anna &lt;3"))
        #expect(!reply.text.contains("Anna <3"))
        #expect(!reply.text.contains("{{"))
    }

    @Test func theViewerPageOfAnUnknownTokenIsANotFoundPage() throws {
        let fixture = try GatewayFixture()
        for token in [Secret.generate().text, "nope"] {
            let reply = fixture.send("GET", "/s/\(token)")
            #expect(reply.status == 404)
            #expect(reply.contentType == "text/html; charset=utf-8")
            #expect(reply.text.contains("<html"))
        }
    }
}

/// `POST /api/v1/view/{token}/locate` and the tracker object of the view document.
@Suite struct LocateRouteTests {
    func view(_ fixture: GatewayFixture, _ created: CreatedShare) throws -> ViewDocument {
        try fixture.send("GET", "/api/v1/view/\(created.viewToken)", from: "192.0.2.50").decode(ViewDocument.self)
    }

    func loseConnection(_ fixture: GatewayFixture, _ created: CreatedShare) throws {
        let id = try #require(ShareID(created.shareID))
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(#"{"_type":"lwt"}"#.utf8), retained: false) == nil)
        #expect(eventually { (try? view(fixture, created))?.tracker?.state == .offline })
    }

    @Test func locateAsksAnOfflinePhoneOnceIn30SecondsAndIsRefusedWhileLive() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.recordFix(created, latitude: 1, longitude: 2, tst: GatewayFixture.now - 5)
        let whileLive = fixture.send("POST", "/api/v1/view/\(created.viewToken)/locate")
        #expect(whileLive.status == 409 && whileLive.errorCode == "tracker_live")

        try loseConnection(fixture, created)
        let offline = try #require(try view(fixture, created).tracker)
        #expect(offline.reason == "connection_lost" && offline.transport == "mqtt" && offline.battery == 80)
        let asked = fixture.send("POST", "/api/v1/view/\(created.viewToken)/locate")
        #expect(asked.status == 202, "\(asked.text)")
        let receipt = try asked.decode(LocateReceipt.self)
        let command = try #require(fixture.brokerPublisher.messages.last)
        #expect(command.topic == Topics.command(ShareID(created.shareID)!) && !command.retain)
        #expect(command.payload == Array(#"{"_type":"cmd","action":"reportLocation"}"#.utf8))
        #expect(try view(fixture, created).tracker?.locateRequestedAt == receipt.requestedAt)

        let again = fixture.send("POST", "/api/v1/view/\(created.viewToken)/locate")
        #expect(again.status == 429 && again.errorCode == "locate_too_soon")
        #expect(Int(again.header("Retry-After") ?? "") ?? 0 >= 1)
    }

    @Test func locateRefusesUnknownTokensEndedSharesAndFloods() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_LINK_RATE_PER_ADDRESS": "0.001/5"])
        let created = try fixture.createShare()
        #expect(fixture.send("POST", "/api/v1/view/not-a-token/locate").status == 404)
        #expect(fixture.send("POST", "/api/v1/view/\(Secret.generate().text)/locate", from: "192.0.2.9").status == 404)
        #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)/locate").status == 405)
        // The link's per-address limit holds for this endpoint too.
        let statuses = (0..<6).map { _ in fixture.send("POST", "/api/v1/view/\(created.viewToken)/locate", from: "192.0.2.10").status }
        #expect(statuses == [409, 409, 409, 409, 409, 429])
        try fixture.stop(created)
        #expect(fixture.send("POST", "/api/v1/view/\(created.viewToken)/locate", from: "192.0.2.11").status == 410)
    }
}
