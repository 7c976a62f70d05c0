import FlareAPI
import FlareCore
import FlareHTTP
import Foundation
import Testing

/// POST /api/v1/shares/{id}/locations: HTTP ingest, validated here and published through the broker.
@Suite struct IngestRouteTests {
    static func location(lat: Double = 52.52, lon: Double = 13.405, tst: Int64 = GatewayFixture.now) -> String {
        #"{"_type":"location","lat":\#(lat),"lon":\#(lon),"tst":\#(tst),"acc":8}"#
    }

    @Test func postingALocationWithTheDeviceTokenAnswers202AndTheFixIsPublishedAndStored() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let tst = GatewayFixture.now
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken,
                                 json: Self.location(tst: tst))
        #expect(reply.status == 202)
        #expect(reply.contentType == "application/json")
        #expect(try reply.decode(IngestReceipt.self) == IngestReceipt(status: "accepted", tst: tst))
        let published = try #require(fixture.ingestPublisher.messages.last)
        #expect(published.topic == created.mqttTopic)
        let message = try APIJSON.decode(Location.self, from: published.payload)
        #expect(message.latitude == 52.52 && message.longitude == 13.405 && message.accuracy == 8)
        #expect(Int64(message.timestamp.timeIntervalSince1970) == tst)
        try fixture.waitForLast(created, tst: tst)
        let status = try fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        #expect(status.last?.latitude == 52.52)
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
        #expect(fixture.ingestPublisher.messages.isEmpty)
    }

    @Test func postingALocationToAStoppedShareIsGone() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.stop(created)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: Self.location())
        #expect(reply.status == 410)
        #expect(reply.errorCode == "share_ended")
        #expect(fixture.ingestPublisher.messages.isEmpty)
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
        #expect(fixture.ingestPublisher.messages.isEmpty)
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

    @Test func postingALocationWhileTheBrokerIsUnavailableAsksToRetry() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        fixture.ingestPublisher.setFailing(true)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: created.deviceToken, json: Self.location())
        #expect(reply.status == 503)
        #expect(reply.errorCode == "broker_unavailable")
        #expect(reply.header("Retry-After") == "2")
    }
}
