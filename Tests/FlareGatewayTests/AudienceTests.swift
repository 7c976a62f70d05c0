import FlareAPI
import FlareCore
import Foundation
import Testing
@testable import FlareGateway
import FlareCodec

/// "Seen by": distinct browsers that opened the link, counted from the page's random viewer id, for the owner and
/// the phone; no address or user agent kept.
@Suite struct AudienceTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    static func viewerID() -> String { Base64URL.encode(Array(Secret.generate().text.utf8.prefix(16))) }

    func open(_ share: CreatedShare, viewer: String?, from address: String = "127.0.0.1") {
        #expect(fixture.send("GET", "/api/v1/view/\(share.viewToken)", query: viewer.map { ["v": $0] } ?? [:], from: address).status == 200)
    }

    func audience(_ share: CreatedShare, bearer: String? = nil) throws -> ShareAudience {
        let reply = fixture.send("GET", "/api/v1/shares/\(share.shareID)", bearer: bearer ?? fixture.ownerKey)
        try #require(reply.status == 200, "\(reply.text)")
        return try #require(try reply.decode(ShareStatus.self).audience)
    }

    @Test func distinctViewersAreCountedOnceAndThePhoneMayAsk() throws {
        let share = try fixture.createShare()
        #expect(try audience(share) == ShareAudience(firstOpenedAt: nil, opened: 0, watching: 0))
        let anna = Self.viewerID(), ben = Self.viewerID()
        open(share, viewer: anna)
        let first = try audience(share)
        #expect(first.opened == 1 && first.watching == 1 && first.firstOpenedAt != nil)
        open(share, viewer: anna)                      // a reload
        open(share, viewer: nil)                       // a client that sends none
        open(share, viewer: "not a viewer id!")        // malformed: ignored
        #expect(try audience(share).opened == 1)
        open(share, viewer: ben, from: "127.0.0.2")
        let both = try audience(share, bearer: share.deviceToken)  // the phone asks with its device token
        #expect(both.opened == 2 && both.firstOpenedAt == first.firstOpenedAt)
        #expect(try fixture.send("GET", "/api/v1/shares/\(share.shareID)", bearer: share.deviceToken).decode(ShareStatus.self).viewers == 2)
        // Retained for the phone on its MQTT topic.
        let retained = try #require(fixture.brokerPublisher.messages.last { $0.topic == "flare/v1/shares/\(share.shareID)/audience" })
        let published = try JSONValue.parse(retained.payload)
        #expect(retained.retain && published["opened"] == .number(2))
        // Nothing personal is kept: only the hash of share and viewer id.
        let database = try String(contentsOf: fixture.directory.appendingPathComponent("flare.db"), encoding: .isoLatin1)
        #expect(!database.contains(anna))
    }

    /// One address cannot inflate the count to falsely reassure the person who shared.
    @Test func oneAddressAddsAtMostAFewViewers() throws {
        let share = try fixture.createShare()
        for _ in 0..<9 { open(share, viewer: Self.viewerID(), from: "127.0.0.9") }
        #expect(try audience(share).opened == 5)
        open(share, viewer: Self.viewerID(), from: "127.0.0.10")
        #expect(try audience(share).opened == 6)
    }

    @Test func aLiveStreamCountsAsWatching() throws {
        let share = try fixture.createShare()
        let viewer = Self.viewerID()
        let events = fixture.send("GET", "/api/v1/view/\(share.viewToken)/events", query: ["v": viewer])
        #expect(events.status == 200)
        let now = try audience(share)
        #expect(now.opened == 1 && now.watching == 1)
        #expect(fixture.send("GET", "/api/v1/shares/\(share.shareID)").status == 401)
    }
}
