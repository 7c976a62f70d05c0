import FlareAPI
import FlareCore
import FlareGateway
import FlareHTTP
import FlareTestSupport
import Foundation
import Testing
import FlareCodec

/// Every JSON answer of the gateway, decoded with its FlareAPI type and encoded again, is the same JSON: the
/// contract types cover every field the server writes, including the bodies it renders by hand (the view
/// document and the live `fix` events).
@Suite struct RoundTripTests {
    /// Decodes `bytes` as `T`, encodes the result with `APIJSON`, and expects the same JSON value back.
    @discardableResult
    func roundTrip<T: Codable>(_ type: T.Type, _ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
        let decoded = try APIJSON.decode(type, from: bytes)
        let original = try JSONValue.parse(bytes)
        let again = try JSONValue.parse(try APIJSON.encode(decoded))
        #expect(again == original, "\(T.self) does not round-trip:\n\(String(decoding: bytes, as: UTF8.self))", sourceLocation: sourceLocation)
        return decoded
    }

    @discardableResult
    func roundTrip<T: Codable>(_ type: T.Type, _ reply: Reply, status: Int, sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
        #expect(reply.status == status, "\(T.self): \(reply.text)", sourceLocation: sourceLocation)
        return try roundTrip(type, reply.bytes, sourceLocation: sourceLocation)
    }

    @Test func everyResponseTypeRoundTripsThroughItsContractType() throws {
        let fixture = try GatewayFixture()
        let key = fixture.ownerKey

        let created = try roundTrip(CreatedShare.self, fixture.send("POST", "/api/v1/shares", bearer: key, json: #"{"name":"Anna","duration_s":1200}"#), status: 201)
        let id = created.shareID
        try roundTrip(ShareStatus.self, fixture.send("GET", "/api/v1/shares/\(id)", bearer: key), status: 200)
        try roundTrip(ViewDocument.self, fixture.send("GET", "/api/v1/view/\(created.viewToken)"), status: 200)

        let events = EventStreamReader(try #require(fixture.send("GET", "/api/v1/view/\(created.viewToken)/events").stream))
        #expect(events.next()?.retry == 3000)
        let status = try #require(events.next())
        #expect(status.name == "status")
        try roundTrip(LiveStatus.self, Array(try #require(status.data).utf8))
        let tracker = try #require(events.next())
        #expect(tracker.name == "tracker")
        try roundTrip(TrackerReport.self, Array(try #require(tracker.data).utf8))

        let tst = GatewayFixture.now - 5
        let receipt = try roundTrip(IngestReceipt.self, fixture.send("POST", "/api/v1/shares/\(id)/locations", bearer: created.deviceToken,
                                                                     json: #"{"_type":"location","lat":47.3769,"lon":8.5417,"tst":\#(tst),"acc":5.5,"alt":408,"vel":3,"cog":270,"batt":64}"#),
                                    status: 202)
        #expect(receipt.tst == tst)
        try fixture.waitForLast(created, tst: tst)
        let fix = try #require(events.next())
        #expect(fix.name == "fix")
        let reported = try roundTrip(ReportedLocation.self, Array(try #require(fix.data).utf8))
        #expect(reported == ReportedLocation(latitude: 47.3769, longitude: 8.5417, timestamp: Date(timeIntervalSince1970: Double(tst)),
                                             accuracy: 5.5, altitude: 408, velocity: 3, course: 270, battery: 64))
        // The first fix over HTTP records the tracker's transport, which viewers hear of.
        let overHTTP = try #require(events.next())
        #expect(overHTTP.name == "tracker")
        #expect(try roundTrip(TrackerReport.self, Array(try #require(overHTTP.data).utf8)).transport == "http")

        let withLast = try roundTrip(ShareStatus.self, fixture.send("GET", "/api/v1/shares/\(id)", bearer: key), status: 200)
        #expect(withLast.last == reported)
        let view = try roundTrip(ViewDocument.self, fixture.send("GET", "/api/v1/view/\(created.viewToken)"), status: 200)
        #expect(view.last == reported && view.trail.count == 1)
        try roundTrip(ShareList.self, fixture.send("GET", "/api/v1/shares", bearer: key), status: 200)
        _ = try fixture.createShare(name: "Second")
        let firstPage = try roundTrip(ShareList.self, fixture.send("GET", "/api/v1/shares", query: ["limit": "1"], bearer: key), status: 200)
        #expect(firstPage.nextCursor != nil)

        try roundTrip(OwnTracksLink.self, fixture.send("GET", "/api/v1/shares/\(id)/owntracks/link", bearer: key), status: 200)
        try roundTrip(WatchToken.self, fixture.send("POST", "/api/v1/shares/\(id)/watch-tokens", bearer: key), status: 201)
        try roundTrip(ExtendedShare.self, fixture.send("POST", "/api/v1/shares/\(id)/extend", bearer: key, json: #"{"duration_s":2400}"#), status: 200)
        let extendedStatus = try #require(events.next())
        try roundTrip(LiveStatus.self, Array(try #require(extendedStatus.data).utf8))

        try roundTrip(StoppedShare.self, fixture.send("POST", "/api/v1/shares/\(id)/stop", bearer: key), status: 200)
        let endedEvent = try #require(events.next())
        #expect(endedEvent.name == "ended")
        try roundTrip(LiveEnded.self, Array(try #require(endedEvent.data).utf8))
        try roundTrip(ShareStatus.self, fixture.send("GET", "/api/v1/shares/\(id)", bearer: key), status: 200)
        try roundTrip(ViewDocument.self, fixture.send("GET", "/api/v1/view/\(created.viewToken)"), status: 410)
        try roundTrip(ViewDocument.self, fixture.send("GET", "/api/v1/view/\(created.viewToken)/events"), status: 410)
        try roundTrip(ShareList.self, fixture.send("GET", "/api/v1/shares", query: ["state": "ended"], bearer: key), status: 200)

        try roundTrip(HealthStatus.self, fixture.send("GET", "/healthz"), status: 200)
        fixture.health.report = HealthReport(mqttConnected: false, storeHealthy: false)
        try roundTrip(HealthStatus.self, fixture.send("GET", "/healthz"), status: 503)

        for (method, path, expected) in [("GET", "/api/v1/shares", 401), ("GET", "/api/v1/nope", 404), ("DELETE", "/api/v1/shares", 405),
                                         ("POST", "/api/v1/shares/\(id)/extend", 409)] {
            let reply = fixture.send(method, path, bearer: expected == 401 ? nil : key)
            try roundTrip(APIErrorBody.self, reply, status: expected)
        }
    }

    @Test func theStatusAndViewOfAShareWhoseHistoryIsDeletedRoundTrip() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_HISTORY_RETENTION_S": "0"])
        let created = try fixture.createShare()
        try fixture.stop(created)
        var reply: Reply?
        let purged = eventually {
            reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey)
            return (try? reply?.decode(ShareStatus.self).historyDeleted) == true
        }
        #expect(purged)
        let status = try roundTrip(ShareStatus.self, try #require(reply), status: 200)
        #expect(status.historyDeleted)
        let view = try roundTrip(ViewDocument.self, fixture.send("GET", "/api/v1/view/\(created.viewToken)"), status: 410)
        #expect(view.state == .ended && view.last == nil && view.trail.isEmpty)
        try roundTrip(ViewDocument.self, fixture.send("GET", "/api/v1/view/\(created.viewToken)/events"), status: 410)
    }
}
