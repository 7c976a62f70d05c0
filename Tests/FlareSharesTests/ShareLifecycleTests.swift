import FlareAPI
import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import FlareServiceTestSupport
import Testing
@testable import FlareShares
import FlareSystem
import FlareCodec

/// A share's life through the service's door (`ShareLifecycle`): created, extended, stopped, expired, purged.
@Suite struct ShareLifecycleTests {
    @Test func createStoresRemembersSchedulesAndAnnounces() throws {
        let fixture = try ServiceFixture()
        let created = try fixture.service.create(name: "Anna", durationSeconds: 600)
        let id = created.share.id
        #expect(try fixture.store.share(id: id)?.share == created.share)
        #expect(fixture.registry.snapshot(viewTokenHash: SecretHash(of: created.viewToken))?.share.id == id)
        #expect(fixture.registry.activeShareCount == 1)
        let status = try #require(fixture.publisher.lastJSON(on: Topics.status(id)))
        #expect(status["state"] == .string("active"))
        #expect(status["expires_at"] == .string(RFC3339.format(millis: created.share.expiresAt)))
        #expect(fixture.publisher.last(on: Topics.status(id))?.retain == true)
        let token = try ShareToken.verify(created.deviceToken, key: fixture.key, nowSeconds: created.share.createdAt / 1000, expectedShare: id)
        #expect(token.role == .device && token.expiresAt == created.share.expiresAt / 1000)
        #expect(try fixture.service.deviceTokenStanding(created.deviceToken, for: id) == .current)
        #expect(try fixture.service.deviceTokenStanding(created.deviceToken, for: ShareID.generate()) == .refused)
        // A token of the share past its own `exp` (issued before an extension): it reports positions, nothing else.
        let old = ShareToken(shareID: id, role: .device, issuedAt: created.share.createdAt / 1000 - 7200,
                             expiresAt: created.share.createdAt / 1000 - 3600).signed(with: fixture.key)
        #expect(try fixture.service.deviceTokenStanding(old, for: id) == .expired)
        let watch = fixture.service.watchToken(for: created.share)
        #expect(try fixture.service.deviceTokenStanding(watch, for: id) == .refused, "a watch token is no device token")
    }

    @Test func refusesBadRequests() throws {
        let fixture = try ServiceFixture()
        #expect(throws: ShareError.self) { try fixture.service.create(name: nil, durationSeconds: 0) }
        #expect(throws: ShareError.self) { try fixture.service.create(name: String(repeating: "x", count: 200), durationSeconds: nil) }
        #expect(throws: ShareError.notFound) { try fixture.service.stop(ShareID.generate()) }
        #expect(throws: ShareError.notFound) { try fixture.service.extend(ShareID.generate(), durationSeconds: 60) }
        #expect(fixture.registry.shareCount == 0)
    }

    @Test func stopEndsEverywhereAndTellsViewers() throws {
        let fixture = try ServiceFixture()
        let created = try fixture.service.create(name: nil, durationSeconds: nil)
        let id = created.share.id
        let events = Mutex<[LiveEvent]>([])
        _ = fixture.registry.subscribe(id) { event in events.withLock { $0.append(event) } }

        let stopped = try fixture.service.stop(id)
        #expect(stopped.endReason == .stopped && !stopped.isActive)
        #expect(try fixture.store.share(id: id)?.share.endReason == .stopped)
        #expect(fixture.registry.activeShareCount == 0)
        #expect(fixture.publisher.last(on: Topics.location(id)) == .init(topic: Topics.location(id), payload: [], retain: true))
        #expect(fixture.publisher.lastJSON(on: Topics.status(id))?["state"] == .string("ended"))
        #expect(fixture.publisher.lastJSON(on: Topics.status(id))?["reason"] == .string("stopped"))
        #expect(events.withLock { $0.count } == 1)
        if case .ended(.stopped, _) = events.withLock({ $0[0] }) {} else { Issue.record("viewer was not told") }

        // Stopping again is harmless; extending an ended share is refused; its device token is dead.
        #expect(try fixture.service.stop(id).endReason == .stopped)
        #expect(throws: ShareError.ended) { try fixture.service.extend(id, durationSeconds: 60) }
        #expect(try fixture.service.deviceTokenStanding(created.deviceToken, for: id) == .refused)
        #expect(fixture.registry.subscribe(id) { _ in } == nil)
    }

    @Test func extendKeepsTheLinkAndMovesTheEnd() throws {
        let fixture = try ServiceFixture()
        let created = try fixture.service.create(name: nil, durationSeconds: 60)
        let events = Mutex<[LiveEvent]>([])
        _ = fixture.registry.subscribe(created.share.id) { event in events.withLock { $0.append(event) } }
        let (share, token) = try fixture.service.extend(created.share.id, durationSeconds: 7200)
        #expect(share.expiresAt > created.share.expiresAt + 7_000_000)
        #expect(try fixture.store.share(id: share.id)?.share.expiresAt == share.expiresAt)
        #expect(fixture.registry.snapshot(viewTokenHash: SecretHash(of: created.viewToken))?.share.expiresAt == share.expiresAt)
        #expect(try ShareToken.verify(token, key: fixture.key, nowSeconds: 0).expiresAt == share.expiresAt / 1000)
        #expect(try fixture.service.deviceTokenStanding(created.deviceToken, for: share.id) == .current)
        #expect(events.withLock { $0 } == [.extended(expiresAt: share.expiresAt)])
        #expect(fixture.publisher.lastJSON(on: Topics.status(share.id))?["expires_at"] == .string(RFC3339.format(millis: share.expiresAt)))
    }

    /// The expiry job of before the extension still runs at the old time (it is untracked) and must do nothing. A
    /// share made after it and ending a second later is the witness: the scheduler runs jobs in deadline order, so
    /// once that one has ended, the old job has run.
    @Test func anExtendedShareOutlivesItsFirstExpiry() throws {
        let fixture = try ServiceFixture()
        let extended = try fixture.service.create(name: nil, durationSeconds: 1)
        _ = try fixture.service.extend(extended.share.id, durationSeconds: 3600)
        let witness = try fixture.service.create(name: nil, durationSeconds: 2)
        fixture.clock.advance(by: 2_100)
        #expect(eventually { fixture.registry.snapshot(witness.share.id)?.share.isActive == false })
        #expect(fixture.registry.snapshot(extended.share.id)?.share.isActive == true)
        #expect(try fixture.store.share(id: extended.share.id)?.share.isActive == true)
    }

    @Test func expiresByItsTimer() throws {
        let fixture = try ServiceFixture()
        let created = try fixture.service.create(name: nil, durationSeconds: 1)
        #expect(fixture.registry.snapshot(created.share.id)?.share.isActive == true)
        fixture.clock.advance(by: 1_100)
        #expect(eventually { fixture.registry.snapshot(created.share.id)?.share.isActive == false })
        #expect(fixture.registry.snapshot(created.share.id)?.share.endReason == .expired)
        #expect(try fixture.store.share(id: created.share.id)?.share.endReason == .expired)
        #expect(fixture.publisher.lastJSON(on: Topics.status(created.share.id))?["reason"] == .string("expired"))
    }

    @Test func historyIsDeletedAfterRetention() throws {
        let fixture = try ServiceFixture(retentionSeconds: 0)
        let created = try fixture.service.create(name: "Anna", durationSeconds: 600)
        let id = created.share.id
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: fixture.location(1, 2), retained: false) == nil)
        let row = try #require(fixture.registry.snapshot(id)?.row)
        #expect(eventually { (try? fixture.store.fixCount(row: row)) == 1 })
        try fixture.service.stop(id)
        #expect(eventually { fixture.registry.snapshot(id) == nil })
        #expect(try fixture.store.fixCount(row: row) == 0)
        let stored = try #require(try fixture.store.share(id: id))
        #expect(stored.share.historyPurged && stored.share.name.isEmpty && stored.share.endReason == .stopped)
        #expect(fixture.publisher.last(on: Topics.status(id))?.payload == [])
    }

    @Test func startUpEndsWhatExpiredWhileDownAndKeepsTheRest() throws {
        let directory = try TempDirectory.make(prefix: "flare-recover")
        let (expiredID, liveID, oldEndedID): (ShareID, ShareID, ShareID)
        do {
            let first = try ServiceFixture(directory: directory)
            let now = SystemClock().now()
            let expired = Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: now - 7_200_000, expiresAt: now - 1000)
            let oldEnded = Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: now - 300_000_000,
                                 expiresAt: now - 200_000_000, endedAt: now - 200_000_000, endReason: .expired)
            let expiredRow = try first.store.insertShare(expired)
            let oldRow = try first.store.insertShare(oldEnded)
            try first.store.markEnded(row: oldRow, at: now - 200_000_000, reason: .expired)
            _ = try first.store.insertFixes([PendingFix(shareRow: expiredRow, fix: Fix(latitude: 1, longitude: 2, timestamp: now / 1000 - 4000), receivedAt: now)])
            let live = try first.service.create(name: nil, durationSeconds: 600)
            (expiredID, liveID, oldEndedID) = (expired.id, live.share.id, oldEnded.id)
            first.ingestor.drain(failingStoreGraceSeconds: 20)
        }
        let second = try ServiceFixture(directory: directory)
        try second.service.recover()
        #expect(second.registry.snapshot(expiredID)?.share.endReason == .expired)
        #expect(second.registry.snapshot(expiredID)?.last?.latitude == 1)  // the last position stays visible after the end
        #expect(second.publisher.last(on: Topics.location(expiredID))?.payload == [])
        #expect(second.publisher.lastJSON(on: Topics.status(expiredID))?["state"] == .string("ended"))
        #expect(second.registry.snapshot(liveID)?.share.isActive == true)
        #expect(second.registry.snapshot(oldEndedID) == nil)
        #expect(try second.store.share(id: oldEndedID)?.share.historyPurged == true)
    }

    @Test func announcementsMissedWhileTheBrokerIsDownAreSentOnReconnect() throws {
        let fixture = try ServiceFixture()
        fixture.publisher.setDown(true)
        let created = try fixture.service.create(name: nil, durationSeconds: 60)
        try fixture.service.stop(created.share.id)
        #expect(fixture.publisher.messages.isEmpty)
        fixture.publisher.setDown(false)
        fixture.service.flushUnsent()
        #expect(fixture.publisher.lastJSON(on: Topics.status(created.share.id))?["state"] == .string("ended"))
        #expect(fixture.publisher.last(on: Topics.location(created.share.id))?.payload == [])
        #expect(fixture.publisher.lastJSON(on: Topics.brokerControl)?["share_id"] == .string(created.share.id.rawValue))
        #expect(fixture.publisher.messages.count == 3)  // newest per topic only, and the revocation
    }

    @Test func stoppingAShareRevokesItsTokensAtTheBrokerAndExpiringDoesNot() throws {
        let fixture = try ServiceFixture()
        let stopped = try fixture.service.create(name: nil, durationSeconds: 600)
        let expiring = try fixture.service.create(name: nil, durationSeconds: 600)
        try fixture.service.stop(stopped.share.id)
        let revocation = try #require(fixture.publisher.last(on: Topics.brokerControl))
        #expect(revocation.retain == false)
        let json = try JSONValue.parse(revocation.payload)
        #expect(json["op"] == .string("revoke"))
        #expect(json["share_id"] == .string(stopped.share.id.rawValue))
        #expect(json["until"]?.doubleValue == Double((stopped.share.expiresAt + 999) / 1000))
        fixture.service.lifecycle.end(expiring.share.id, reason: .expired)
        #expect(fixture.publisher.messages.filter { $0.topic == Topics.brokerControl }.count == 1)

        // A restarted flared says it again at its first connection (it cannot know the broker heard it).
        let restarted = try ServiceFixture(directory: fixture.directory, key: fixture.key)
        try restarted.service.recover()
        #expect(restarted.publisher.messages.filter { $0.topic == Topics.brokerControl }.isEmpty)
        restarted.service.flushUnsent()
        let again = try #require(restarted.publisher.last(on: Topics.brokerControl))
        #expect(try JSONValue.parse(again.payload)["share_id"] == .string(stopped.share.id.rawValue))
        #expect(restarted.publisher.messages.filter { $0.topic == Topics.brokerControl }.count == 1)
    }
}

/// Tracker states and "locate now" through the service, the ingest and a real SQLite store.
/// `Trackers`: offline after a last will, stale after a silence, live again with a fix, and "locate now".
@Suite struct TrackersTests {
    func statusPayloads(_ fixture: ServiceFixture, _ id: ShareID) -> [JSONValue] {
        fixture.publisher.messages.filter { $0.topic == Topics.status(id) && !$0.payload.isEmpty }.compactMap { try? JSONValue.parse($0.payload) }
    }

    func send(_ fixture: ServiceFixture, _ id: ShareID, _ payload: String, retained: Bool = false) {
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(payload.utf8), retained: retained) == nil)
        #expect(fixture.ingestor.waitUntilStored())
    }

    @Test func aLastWillRecordsTheTrackerOfflineAndTheNextFixLiveAgain() throws {
        let fixture = try ServiceFixture()
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        send(fixture, id, #"{"_type":"location","lat":1,"lon":2,"tst":\#(Int64(Date().timeIntervalSince1970))}"#)
        send(fixture, id, #"{"_type":"lwt"}"#)
        #expect(eventually { fixture.registry.snapshot(id)?.share.tracker?.state == .offline })
        let offline = try #require(fixture.registry.snapshot(id)?.share.tracker)
        #expect(offline.reason == TrackerRecord.connectionLost)
        #expect(try fixture.store.share(id: id)?.share.tracker == offline)
        #expect(statusPayloads(fixture, id).last?["tracker"]?["state"]?.stringValue == "offline")
        #expect(statusPayloads(fixture, id).last?["tracker"]?["reason"]?.stringValue == "connection_lost")
        #expect(fixture.metrics.value(FlareMetrics.lastWills) == 1)

        // A retained will (a replay) changes nothing; a fix ends offline at once.
        send(fixture, id, #"{"_type":"location","lat":1.5,"lon":2,"tst":\#(Int64(Date().timeIntervalSince1970))}"#)
        #expect(eventually { fixture.registry.snapshot(id)?.share.tracker?.state == .live })
        #expect(statusPayloads(fixture, id).last?["tracker"]?["state"]?.stringValue == "live")
        send(fixture, id, #"{"_type":"lwt"}"#, retained: true)
        #expect(fixture.metrics.value(FlareMetrics.lastWills) == 1)
    }

    @Test func aSilencePastTheLimitIsRecordedStaleOnce() throws {
        let fixture = try ServiceFixture(staleAfterSeconds: 60)
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let now = Int64(Date().timeIntervalSince1970) * 1000
        send(fixture, id, #"{"_type":"location","lat":1,"lon":2,"tst":\#(now / 1000)}"#)
        fixture.service.trackers.updateTracker(id, now: now + 30_000)
        #expect(fixture.registry.snapshot(id)?.share.tracker == nil)       // live, as a new share is: nothing written
        let heardAt = try #require(fixture.registry.snapshot(id)?.lastHeardAt)
        fixture.service.trackers.updateTracker(id, now: heardAt + 60_001)
        let stale = try #require(fixture.registry.snapshot(id)?.share.tracker)
        #expect(stale.state == .stale && stale.since == heardAt + 60_000 && stale.transport == .mqtt)
        let announced = statusPayloads(fixture, id).count
        fixture.service.trackers.updateTracker(id, now: heardAt + 90_000)
        #expect(statusPayloads(fixture, id).count == announced)            // recorded and announced once
    }

    @Test func locateNowIsRefusedWhileLiveLimitedAcrossCallsAndItsAnswerIsShownEvenForAKnownPosition() throws {
        let fixture = try ServiceFixture()
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let tst = Int64(Date().timeIntervalSince1970)
        let cached = #"{"_type":"location","lat":1,"lon":2,"tst":\#(tst)}"#
        send(fixture, id, cached)
        var snapshot = try #require(fixture.registry.snapshot(id))
        #expect(throws: ShareService.LocateRefusal.trackerLive) { try fixture.service.requestLocate(snapshot) }

        send(fixture, id, #"{"_type":"lwt"}"#)
        #expect(eventually { fixture.registry.snapshot(id)?.share.tracker?.state == .offline })
        snapshot = try #require(fixture.registry.snapshot(id))
        let askedAt = try fixture.service.requestLocate(snapshot)
        let command = try #require(fixture.publisher.messages.last)
        #expect(command.topic == Topics.command(id) && !command.retain)
        #expect(command.payload == Array(#"{"_type":"cmd","action":"reportLocation"}"#.utf8))
        #expect(fixture.registry.snapshot(id)?.share.locateRequestedAt == askedAt)
        #expect { try fixture.service.requestLocate(snapshot) } throws: { error in
            guard case ShareService.LocateRefusal.tooSoon(let seconds) = error else { return false }
            return (1...30).contains(seconds)
        }

        // iOS answers with its cached position, already stored: the answer is recorded all the same.
        send(fixture, id, #"{"_type":"location","lat":1,"lon":2,"tst":\#(tst),"t":"r"}"#)
        #expect(eventually { fixture.registry.snapshot(id)?.share.locateAnsweredAt != nil })
        #expect(try fixture.store.share(id: id)?.share.locateAnsweredAt != nil)
        #expect(try fixture.store.fixCount(row: snapshot.row) == 1)
        #expect(eventually { fixture.registry.snapshot(id)?.share.tracker?.state == .live })
    }
}
