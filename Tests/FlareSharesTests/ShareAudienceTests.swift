import FlareCore
import FlareServiceTestSupport
import FlareTestSupport
import Testing
@testable import FlareShares
import FlareSystem

/// Who has seen the link: counted in the store, capped per address, kept watching by the live streams' heartbeat.
@Suite struct ShareAudienceTests {
    static func viewer(_ n: Int) -> String { "viewer-\(n)-" + String(repeating: "x", count: 16) }

    /// One address adds at most `viewersPerAddress` viewers to a share: a script cannot inflate the count and falsely
    /// reassure the person who shared. Other addresses still count.
    @Test func oneAddressAddsAFewViewersAtMost() throws {
        let fixture = try ServiceFixture()
        let created = try fixture.service.create(name: "Anna", durationSeconds: 600)
        let snapshot = try #require(fixture.registry.snapshot(created.share.id))
        for n in 0..<(ShareAudience.viewersPerAddress + 3) { fixture.service.viewerSeen(snapshot, viewer: Self.viewer(n), address: "192.0.2.1") }
        fixture.service.viewerSeen(snapshot, viewer: Self.viewer(99), address: "192.0.2.2")
        #expect(try fixture.service.audience(of: snapshot).opened == ShareAudience.viewersPerAddress + 1)
        let published = try #require(fixture.publisher.lastJSON(on: Topics.audience(created.share.id)))
        #expect(published["opened"]?.doubleValue == Double(ShareAudience.viewersPerAddress + 1))
    }

    /// A viewer with a live stream stays "watching" past the window because this instance says so in the store every
    /// `heartbeatMillis`; once the stream closes, it stops counting when the window has passed.
    @Test func aLiveStreamKeepsItsViewerWatching() throws {
        let fixture = try ServiceFixture()
        let created = try fixture.service.create(name: "Anna", durationSeconds: 3600)
        let snapshot = try #require(fixture.registry.snapshot(created.share.id))
        fixture.service.viewerSeen(snapshot, viewer: Self.viewer(1), address: "192.0.2.1")
        fixture.service.watching(snapshot, viewer: Self.viewer(1), open: true)
        #expect(try fixture.service.audience(of: snapshot).watching == 1)
        // Two heartbeats later, past the window since the page itself was seen: still watching.
        // Without the heartbeat's writes, the viewer's last note (at 0) would be out of the window by then.
        for _ in 0..<3 {
            fixture.clock.advance(by: ShareAudience.heartbeatMillis)
            #expect(eventually { (try? fixture.service.audience(of: snapshot).watching) == 1 })
        }
        #expect(fixture.clock.now() - snapshot.share.createdAt > ShareAudience.watchingWindowMillis)
        #expect(try fixture.service.audience(of: snapshot).watching == 1)
        fixture.service.watching(snapshot, viewer: Self.viewer(1), open: false)
        fixture.clock.advance(by: ShareAudience.watchingWindowMillis + 1)
        #expect(try fixture.service.audience(of: snapshot).watching == 0)
    }
}
