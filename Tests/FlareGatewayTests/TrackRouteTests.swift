import FlareAPI
import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway

/// A track to hand over: every stored fix, in order, in GPX, GeoJSON and KML, for the owner key and through a link,
/// read a page at a time (more positions than a page here), over a live connection as a client gets it; the live KML
/// feed; what a withdrawn link, an end-to-end share, a purged history, another key and a store failure get.
@Suite struct TrackRouteTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    /// `count` fixes a second apart from `start`, stored as the writer stores them.
    func store(_ count: Int, in share: CreatedShare, start: Int64 = 1_780_000_000) throws -> [Fix] {
        let id = try #require(ShareID(share.shareID))
        let row = try #require(try fixture.store.share(id: id)).row
        var fixes: [Fix] = []
        for index in 0..<count {
            let latitude = 47 + Double(index) * 1e-5
            let longitude = 8.5 + Double(index % 7) * 1e-5
            let accuracy: Double? = index % 3 == 0 ? 8 : nil
            let altitude: Double? = index % 2 == 0 ? 412.5 : nil
            fixes.append(Fix(latitude: latitude, longitude: longitude, timestamp: start + Int64(index), accuracy: accuracy, altitude: altitude,
                             velocity: 3.6, battery: 80))
        }
        for chunk in stride(from: 0, to: fixes.count, by: 1_000) {
            _ = try fixture.store.insertFixes(fixes[chunk..<min(chunk + 1_000, fixes.count)].map { PendingFix(shareRow: row, fix: $0, receivedAt: 1_000) })
        }
        return fixes
    }

    func get(_ path: String, bearer: String? = nil) throws -> Reply {
        try fixture.request(.live, "GET", path, bearer: bearer)
    }

    @Test func everyStoredFixIsInEachFormatInOrderPastAPage() throws {
        let share = try fixture.createShare(name: "Anna <&>")
        let fixes = try store(Gateway.trackPage * 2 + 17, in: share)
        let gpx = try get("/api/v1/shares/\(share.shareID)/track.gpx", bearer: fixture.ownerKey)
        #expect(gpx.status == 200 && gpx.header("Content-Type") == "application/gpx+xml")
        #expect(gpx.header("Content-Disposition")?.contains("flare-\(share.shareID).gpx") == true)
        let points = gpx.text.components(separatedBy: "<trkpt ").dropFirst()
        #expect(points.count == fixes.count)
        #expect(points.first?.hasPrefix(#"lat="47" lon="8.5"><ele>412.5</ele><time>2026-05-28T20:26:40Z</time>"#) == true, "\(points.first ?? "")")
        let times = points.compactMap { point in point.range(of: "<time>").map { String(point[$0.upperBound...].prefix(20)) } }
        #expect(times == times.sorted() && Set(times).count == fixes.count, "in time order, each once")
        #expect(gpx.text.contains("<name>Anna &lt;&amp;&gt;</name>") && gpx.text.hasSuffix("</gpx>\n"))

        let geojson = try get("/api/v1/shares/\(share.shareID)/track.geojson", bearer: fixture.ownerKey)
        let document = try #require(try JSONSerialization.jsonObject(with: Data(geojson.bytes)) as? [String: Any])
        let features = try #require(document["features"] as? [[String: Any]])
        let line = try #require((features[0]["geometry"] as? [String: Any])?["coordinates"] as? [[Double]])
        #expect(line.count == fixes.count && line.first?[0] == 8.5 && line.first?[1] == 47)
        let point = try #require(features[1]["geometry"] as? [String: Any])
        #expect(point["type"] as? String == "Point" && (features[1]["properties"] as? [String: Any])?["time"] as? String == "2026-05-28T21:33:36Z")

        let kml = try get("/api/v1/shares/\(share.shareID)/track.kml", bearer: fixture.ownerKey)
        #expect(kml.text.components(separatedBy: "<TimeStamp>").count - 1 == fixes.count)
        #expect(kml.text.contains("<LineString>") && kml.text.hasSuffix("</kml>\n"))
    }

    @Test func aLinkGetsTheTrackAndTheLiveFeedUntilItIsWithdrawnOrTheHistoryGoes() throws {
        let mum = try DeviceRouteTests(fixture: fixture).contact("Mum")
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"name":"Anna","contacts":["\#(mum)"]}"#)
        let share = try reply.decode(CreatedShare.self)
        let link = try #require(share.links?.first)
        let token = String(link.url.split(separator: "/").last!)
        _ = try store(3, in: share)
        try fixture.recordFix(share, latitude: 47.5, longitude: 8.6, tst: fixture.clock.now() / 1000, accuracy: 9)
        #expect(try get("/api/v1/view/\(token)/track.gpx").text.components(separatedBy: "<trkpt ").count - 1 == 4)
        let feed = try get("/s/\(token)/feed.kml")
        #expect(feed.status == 200 && feed.header("Content-Type") == "application/vnd.google-earth.kml+xml")
        #expect(feed.text.contains("<coordinates>8.6,47.5</coordinates>") && feed.text.contains("accuracy 9 m") && feed.text.contains("Live:"))
        #expect(try get("/api/v1/view/\(token)/track.csv").status == 404)
        #expect(try get("/api/v1/view/\(Secret.generate().text)/track.gpx").status == 404)
        try fixture.stop(share)
        #expect(try get("/s/\(token)/feed.kml").text.contains("Anna (sharing ended)"))
        #expect(try get("/api/v1/view/\(token)/track.kml").status == 200, "an ended share's track until its history goes")
        #expect(fixture.send("DELETE", "/api/v1/shares/\(share.shareID)/links/\(link.linkID)", bearer: fixture.ownerKey).status == 204)
        #expect(try get("/api/v1/view/\(token)/track.gpx").status == 410)
        #expect(try get("/s/\(token)/feed.kml").status == 410)
        // With no retention, the history goes with the end: so do the track and the feed.
        let forgetful = try GatewayFixture(settings: ["FLARE_HISTORY_RETENTION_S": "0"])
        let gone = try forgetful.createShare()
        try forgetful.recordFix(gone, latitude: 47.5, longitude: 8.6, tst: forgetful.clock.now() / 1000)
        try forgetful.stop(gone)
        #expect(try forgetful.request(.live, "GET", "/s/\(gone.viewToken)/feed.kml").status == 410)
        let purged = try forgetful.request(.live, "GET", "/api/v1/shares/\(gone.shareID)/track.gpx", bearer: forgetful.ownerKey)
        #expect(purged.status == 410 && purged.errorCode == "history_purged")
    }

    @Test func whatTheServerCannotReadOrMayNotShowItDoesNotExport() throws {
        let sealed = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"name":"Anna","e2e":true}"#)
        let e2e = try sealed.decode(CreatedShare.self)
        let refused = try get("/api/v1/shares/\(e2e.shareID)/track.gpx", bearer: fixture.ownerKey)
        #expect(refused.status == 409 && refused.errorCode == "e2e_no_track")
        #expect(try get("/s/\(e2e.viewToken)/feed.kml").errorCode == "e2e_no_track")
        let share = try fixture.createShare()
        #expect(try get("/api/v1/shares/\(share.shareID)/track.gpx").status == 401)
        #expect(try get("/api/v1/shares/\(share.shareID)/track.gpx", bearer: share.deviceToken).status == 401, "the phone's token is not the owner's")
        let other = OwnerKey.generate()
        _ = try fixture.store.insertOwnerKey(hash: SecretHash(of: other), label: "other", createdAt: 1, admin: false, limits: KeyLimits(maxLive: 1))
        #expect(try get("/api/v1/shares/\(share.shareID)/track.gpx", bearer: other).status == 404)
    }

    @Test func aStoreThatCannotAnswerIsAnsweredAsOne() throws {
        let faulty = try GatewayFixture(faulty: true)
        let share = try faulty.createShare()
        faulty.faults?.fail(["fixes(row:after:limit:)"])
        let reply = faulty.send("GET", "/api/v1/shares/\(share.shareID)/track.gpx", bearer: faulty.ownerKey)
        #expect(reply.status == 503 && reply.header("Retry-After") != nil)
    }
}
