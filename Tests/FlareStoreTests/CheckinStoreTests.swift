import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import Testing
import FlareSystem

/// Check-ins in both engines: kept as given, found by their deadline once it and its grace have passed, and moved out
/// of `armed` once, with their events and (when missed) their links in the same transaction.
@Suite struct CheckinStoreTests {
    let base: ShareStoreTests

    init() throws { base = try ShareStoreTests() }

    func checkin(_ row: Int64, _ share: Share, due: UnixMillis = 2_000_000, arrive: ArrivalZone? = nil) -> Checkin {
        Checkin(id: .generate(), shareRow: row, shareID: share.id, ownerKeyID: nil, dueAt: due, graceMillis: 600_000, message: "Hike, back by 22:00 ✓",
                contacts: [.generate(), .generate()], arrive: arrive, notifyOnArrival: arrive != nil, durationSeconds: 3600, createdAt: 1_000_000)
    }

    @Test(arguments: Engine.allCases) func aCheckinRoundTripsAndIsDueOnlyAfterItsGrace(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare()
        let row = try store.insertShare(share)
        let zone = ArrivalZone(latitude: 48.137154, longitude: 11.576124, radiusMeters: 200)
        let stored = checkin(row, share, arrive: zone)
        try store.insertCheckin(stored)
        #expect(try store.checkin(id: stored.id) == stored)
        #expect(try store.checkin(shareRow: row) == stored)
        #expect(try store.checkin(id: .generate()) == nil)
        // SQLite goes by the caller's clock, moved by hand here; PostgreSQL by its own, which is decades past these
        // deadlines (`ShareStoreTests.leasesAndDeadlinesGoByTheDatabasesClock`).
        let byCallersClock = engine == .sqlite
        if byCallersClock {
            #expect(try store.dueCheckins(now: stored.dueAt, limit: 10).isEmpty, "the grace is not over")
            #expect(try store.dueCheckins(now: stored.firesAt, limit: 10) == [stored])
        }
        #expect(try store.armedArrivals(afterShareRow: 0, limit: 10) == [stored])
        #expect(try store.armedArrivals(afterShareRow: row, limit: 10).isEmpty)
        // Moved later: not due at the old time any more.
        #expect(try store.moveCheckin(stored.id, dueAt: stored.dueAt + 3_600_000))
        if byCallersClock { #expect(try store.dueCheckins(now: stored.firesAt, limit: 10).isEmpty) }
        #expect(try store.checkin(id: stored.id)?.dueAt == stored.dueAt + 3_600_000)
    }

    /// A revoked key's queued work (trust, second round, 1): it is listed until noted done; its armed check-ins are
    /// cancelled and the mail waiting for its shares' contacts dropped, in one transaction; another key's stays.
    @Test(arguments: Engine.allCases) func aRevokedKeysCheckinsAndQueuedMailAreStopped(engine: Engine) throws {
        let store = try base.open(engine)
        let revoked = try store.insertOwnerKey(hash: SecretHash(of: "revoked"), label: "lost phone", createdAt: 1, admin: false, limits: .none)
        let kept = try store.insertOwnerKey(hash: SecretHash(of: "kept"), label: "other", createdAt: 1, admin: false, limits: .none)
        var made: [(row: Int64, checkin: Checkin)] = []
        for key in [revoked, kept] {
            let share = Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "Anna", createdAt: 1_000_000, expiresAt: 4_600_000, ownerKeyID: key)
            let row = try store.insertShare(share)
            let armed = Checkin(id: .generate(), shareRow: row, shareID: share.id, ownerKeyID: key, dueAt: 2_000_000, graceMillis: 0, message: "",
                                contacts: [], arrive: nil, notifyOnArrival: false, durationSeconds: 3600, createdAt: 1_000_000)
            try store.insertCheckin(armed)
            let link = ShareLink(id: .generate(), shareRow: row, contactID: .generate(), name: "Mum", viewTokenHash: Secret.generate().hash, createdAt: 1_000_000)
            #expect(try store.insertLinks([link], events: [PendingEvent(.linkCreated(share.id, link: link), destinations: [.mqtt, .mail(link.id)])]))
            made.append((row, armed))
        }
        #expect(try store.keysWithWorkToStop().isEmpty)
        #expect(try store.revokeOwnerKey(id: revoked, at: 1_500_000))
        #expect(try store.keysWithWorkToStop() == [revoked])
        let stopped = try store.cancelQueuedWork(ofKey: revoked, at: 1_600_000)
        #expect(stopped.checkins == 1 && stopped.mails == 1)
        #expect(try store.checkin(id: made[0].checkin.id)?.state == .cancelled)
        #expect(try store.checkin(id: made[1].checkin.id)?.state == .armed)
        let mails = try store.dueEvents(now: .max, limit: 50).filter { if case .mail = $0.destination { true } else { false } }
        #expect(mails.count == 1 && mails[0].ownerKey == kept)
        #expect(try store.dueEvents(now: .max, limit: 50).filter { $0.destination == .mqtt }.count == 2, "the topic still hears of both")
        #expect(try store.dueCheckins(now: 3_000_000, limit: 10).map(\.id) == [made[1].checkin.id])
        let again = try store.cancelQueuedWork(ofKey: revoked, at: 1_700_000)
        #expect(again.checkins == 0 && again.mails == 0, "once")
        try store.noteKeyWorkStopped(revoked, at: 1_700_000)
        #expect(try store.keysWithWorkToStop().isEmpty)
    }

    /// A watcher pages through every armed check-in with a zone, a batch a round: none is left out however many there are.
    @Test(arguments: Engine.allCases) func armedArrivalsArePagedByShare(engine: Engine) throws {
        let store = try base.open(engine)
        let zone = ArrivalZone(latitude: 48.137154, longitude: 11.576124, radiusMeters: 200)
        var armed: [Checkin] = []
        for index in 0..<7 {
            let share = base.makeShare()
            let row = try store.insertShare(share)
            let made = checkin(row, share, arrive: index == 3 ? nil : zone)  // one without a zone is never listed
            try store.insertCheckin(made)
            if index != 3 { armed.append(made) }
        }
        var seen: [Checkin] = []
        var cursor: Int64 = 0
        while true {
            let page = try store.armedArrivals(afterShareRow: cursor, limit: 4)
            seen += page
            guard page.count == 4, let last = page.last else { break }
            cursor = last.shareRow
        }
        #expect(seen.map(\.id) == armed.map(\.id))
    }

    @Test(arguments: Engine.allCases) func aCheckinLeavesArmedOnceWithItsEvent(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare()
        let row = try store.insertShare(share)
        let armed = checkin(row, share)
        try store.insertCheckin(armed)
        let done = PendingEvent(.checkin(.checkinDone, armed, at: 1_500_000), destinations: [.mqtt])
        #expect(try store.settleCheckin(armed.id, as: .done, at: 1_500_000, event: done))
        #expect(try !store.settleCheckin(armed.id, as: .arrived, at: 1_600_000, event: done), "once")
        #expect(try !store.missCheckin(armed.id, at: 3_000_000, links: [], events: [done]), "a settled check-in never fires")
        #expect(try !store.moveCheckin(armed.id, dueAt: 9_000_000))
        let after = try #require(try store.checkin(id: armed.id))
        #expect(after.state == .done && after.stateAt == 1_500_000)
        #expect(try store.dueEvents(now: 10_000_000, limit: 10).map(\.event.type) == [.checkinDone])
        #expect(try store.dueCheckins(now: .max / 2, limit: 10).isEmpty && store.armedArrivals(afterShareRow: 0, limit: 10).isEmpty)
    }

    @Test(arguments: Engine.allCases) func aMissedCheckinsLinksAndEventsGoInWithItOnce(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare()
        let row = try store.insertShare(share)
        let armed = checkin(row, share)
        try store.insertCheckin(armed)
        let links = armed.contacts.map {
            ShareLink(id: .generate(), shareRow: row, contactID: $0, name: "Mum", viewTokenHash: Secret.generate().hash, createdAt: 2_600_000)
        }
        let missed = PendingEvent(.checkin(.checkinMissed, armed, at: 2_600_000), destinations: [.mqtt] + links.map { .mail($0.id) })
        #expect(try store.missCheckin(armed.id, at: 2_600_000, links: links, events: [missed]))
        #expect(try !store.missCheckin(armed.id, at: 2_700_000, links: links, events: [missed]), "fired once, whoever else tries")
        #expect(try store.links(shareRow: row) == links)
        let due = try store.dueEvents(now: 10_000_000, limit: 10)
        #expect(Set(due.map(\.destination)) == Set([.mqtt] + links.map { .mail($0.id) }) && Set(due.map(\.event.id)) == [missed.event.id])
        #expect(try store.checkin(id: armed.id)?.state == .missed)
    }

    /// The message and the zone are personal: they go with the share's history.
    @Test(arguments: Engine.allCases) func aPurgedSharesCheckinIsGone(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare()
        let row = try store.insertShare(share)
        let kept = base.makeShare()
        let keptRow = try store.insertShare(kept)
        let purged = checkin(row, share), other = checkin(keptRow, kept)
        try store.insertCheckin(purged)
        try store.insertCheckin(other)
        try store.markEnded(row: row, at: 2_000_000, reason: .stopped)
        #expect(try store.purgeHistory(row: row))
        #expect(try store.checkin(id: purged.id) == nil && store.checkin(shareRow: row) == nil)
        #expect(try store.checkin(id: other.id) == other)
    }
}
