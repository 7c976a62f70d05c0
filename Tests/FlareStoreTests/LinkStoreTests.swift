import FlareCore
import FlarePostgres
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import Testing
import FlareSystem

/// Personal links in both engines: kept as given, added only to an active share, withdrawn and first opened once
/// each, left out of what is loaded once their share's history is purged (and deleted with it), and named in the
/// audience with whoever watches through each.
@Suite struct LinkStoreTests {
    let base: ShareStoreTests

    init() throws { base = try ShareStoreTests() }

    func link(_ shareRow: Int64, name: String = "Anna", contact: ContactID? = .generate(), at: UnixMillis = 1_000_000,
              token: Secret = .generate()) -> ShareLink {
        ShareLink(id: .generate(), shareRow: shareRow, contactID: contact, name: name, viewTokenHash: token.hash, createdAt: at)
    }

    @Test(arguments: Engine.allCases) func linksRoundTripAndSurviveReopening(engine: Engine) throws {
        let row: Int64
        let first: ShareLink, second: ShareLink
        var third: ShareLink
        do {
            let store = try base.open(engine)
            row = try store.insertShare(base.makeShare())
            first = link(row, name: "安娜 ✓")
            second = link(row, name: "Li", contact: nil, at: 1_000_001)
            third = link(row, name: "Mum", at: 1_000_002)
            #expect(try store.insertLinks([first, second]))
            #expect(try store.insertLinks([third]))
            #expect(try store.insertLinks([]), "nothing to add is no refusal")
        }
        let store = try base.open(engine)
        #expect(try store.links(shareRow: row) == [first, second, third], "oldest first")
        #expect(try store.openLinks() == [first, second, third])
        #expect(try store.link(viewTokenHash: second.viewTokenHash) == second)
        #expect(try store.links(shareRow: row + 1).isEmpty)

        // Withdrawn and first opened: kept too, as of then.
        #expect(try store.withdrawLink(shareRow: row, id: third.id, at: 2_000_000))
        #expect(try store.noteLinkOpened(shareRow: row, id: third.id, at: 1_500_000, event: nil))
        third.withdrawnAt = 2_000_000
        third.firstOpenedAt = 1_500_000
        #expect(try base.open(engine).links(shareRow: row) == [first, second, third])
    }

    /// Deleting a contact withdraws its links on every active share in the same transaction, and only those: an
    /// ended share's link stays as it was, another contact's is untouched (issue: trust, second round, 3).
    @Test(arguments: Engine.allCases) func deletingAContactWithdrawsItsLinksOnActiveShares(engine: Engine) throws {
        let store = try base.open(engine)
        let mum = Contact(id: .generate(), ownerKeyID: 1, name: "Mum", email: "mum@example.org", phone: nil, language: .en, createdAt: 1)
        #expect(try store.insertContact(mum, limit: 10))
        let active = try store.insertShare(base.makeShare()), other = try store.insertShare(base.makeShare())
        let ended = try store.insertShare(base.makeShare())
        let first = link(active, contact: mum.id), second = link(other, contact: mum.id), dad = link(active, name: "Dad")
        let old = link(ended, contact: mum.id)
        #expect(try store.insertLinks([first, dad]) && store.insertLinks([second]) && store.insertLinks([old]))
        try store.markEnded(row: ended, at: 2_000_000, reason: .stopped)
        let withdrawn = try #require(try store.deleteContact(id: mum.id, withdrawingLinksAt: 3_000_000))
        #expect(Set(withdrawn.map(\.link)) == [first.id, second.id] && Set(withdrawn.map(\.shareRow)) == [active, other])
        #expect(try store.links(shareRow: active).map(\.withdrawnAt) == [3_000_000, nil])
        #expect(try store.links(shareRow: other).first?.withdrawnAt == 3_000_000)
        #expect(try store.links(shareRow: ended).first?.withdrawnAt == nil)
        #expect(try store.contact(id: mum.id) == nil)
        #expect(try store.deleteContact(id: mum.id, withdrawingLinksAt: 4_000_000) == nil, "once")
    }

    /// A token-key rotation gives links new hashes: the old one finds nothing, the new one the link.
    @Test(arguments: Engine.allCases) func rekeyedLinksAreFoundByTheirNewHashOnly(engine: Engine) throws {
        let store = try base.open(engine)
        let row = try store.insertShare(base.makeShare())
        let first = link(row), second = link(row)
        #expect(try store.insertLinks([first, second]))
        let newHash = Secret.generate().hash
        try store.rekeyLinks([(row, first.id, newHash)])
        #expect(try store.link(viewTokenHash: first.viewTokenHash) == nil)
        #expect(try store.link(viewTokenHash: newHash)?.id == first.id)
        #expect(try store.link(viewTokenHash: second.viewTokenHash)?.id == second.id, "the others as they were")
        try store.rekeyLinks([])
    }

    @Test(arguments: Engine.allCases) func anEndedShareTakesNoLinks(engine: Engine) throws {
        let store = try base.open(engine)
        let row = try store.insertShare(base.makeShare())
        try store.markEnded(row: row, at: 2_000_000, reason: .stopped)
        let refused = [link(row), link(row)]
        #expect(try !store.insertLinks(refused))
        #expect(try store.links(shareRow: row).isEmpty)
        #expect(try store.link(viewTokenHash: refused[0].viewTokenHash) == nil)
        #expect(try !store.insertLinks([link(row + 1000)]), "nor does a share that does not exist")
        #expect(try store.openLinks().isEmpty)
    }

    @Test(arguments: Engine.allCases) func theLinksEventsAreRecordedWithThemOrNotAtAll(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare()
        let row = try store.insertShare(share)
        let links = [link(row), link(row)]
        let events = links.map { PendingEvent(.linkCreated(share.id, link: $0), destinations: [.mqtt]) }
        #expect(try store.insertLinks(links, events: events))
        let due = try store.dueEvents(now: 10_000_000, limit: 10)
        #expect(due.map(\.event.type) == [.linkCreated, .linkCreated] && Set(due.map(\.event.id)) == Set(events.map(\.event.id)))
        try store.markEnded(row: row, at: 2_000_000, reason: .stopped)
        let late = link(row)
        #expect(try !store.insertLinks([late], events: [PendingEvent(.linkCreated(share.id, link: late), destinations: [.mqtt])]))
        #expect(try store.dueEvents(now: 10_000_000, limit: 10).count == 2, "a refused insertion records nothing")
    }

    /// A contact's mail ends with the event that reports it, in one transaction, once: a second holder finishing the
    /// same delivery reports nothing.
    @Test(arguments: Engine.allCases) func aMailsEndIsRecordedWithTheEventThatReportsItOnce(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare()
        let row = try store.insertShare(share)
        let personal = link(row)
        let created = PendingEvent(.linkCreated(share.id, link: personal), destinations: [.mqtt, .mail(personal.id)])
        #expect(try store.insertLinks([personal], events: [created]))
        let mail = try #require(try store.dueEvents(now: 10_000_000, limit: 10).first { $0.destination == .mail(personal.id) })
        #expect(mail.event.id == created.event.id)
        let report = PendingEvent(.contactNotice(share.id, at: 3_000_000, link: personal.id, contact: personal.contactID, cause: mail.event,
                                                 failure: nil), destinations: [.mqtt])
        try store.eventDelivered(row: mail.row, destination: mail.destination, reporting: report)
        try store.eventDelivered(row: mail.row, destination: mail.destination, reporting: report)
        let due = try store.dueEvents(now: 10_000_000, limit: 10)
        #expect(due.map(\.event.type).sorted { $0.rawValue < $1.rawValue } == [.contactNotified, .linkCreated])
        #expect(due.first { $0.event.type == .contactNotified }?.destination == .mqtt)
        #expect(!due.contains { $0.destination == .mail(personal.id) })
    }

    @Test(arguments: Engine.allCases) func aLinkIsFoundByItsTokenWithdrawnOrNot(engine: Engine) throws {
        let store = try base.open(engine), other = try base.open(engine)
        let row = try store.insertShare(base.makeShare())
        let token = Secret.generate()
        var anna = link(row, token: token)
        #expect(try store.insertLinks([anna]))
        #expect(try store.link(viewTokenHash: token.hash) == anna)
        #expect(try store.link(viewTokenHash: Secret.generate().hash) == nil)

        // Withdrawn once, by whichever connection comes first; still found, as withdrawn.
        #expect(try store.withdrawLink(shareRow: row, id: anna.id, at: 5_000))
        #expect(try !other.withdrawLink(shareRow: row, id: anna.id, at: 6_000))
        #expect(try !store.withdrawLink(shareRow: row + 1, id: anna.id, at: 6_000), "another share's link is not withdrawn")
        #expect(try !store.withdrawLink(shareRow: row, id: .generate(), at: 6_000))
        anna.withdrawnAt = 5_000
        let found = try #require(try other.link(viewTokenHash: token.hash))
        #expect(found == anna && found.isWithdrawn)
    }

    @Test(arguments: Engine.allCases) func theFirstOpeningIsRecordedOnceWithItsEvent(engine: Engine) throws {
        let store = try base.open(engine), other = try base.open(engine)
        let share = base.makeShare(now: 1_000)
        let row = try store.insertShare(share)
        let anna = link(row), li = link(row, name: "Li")
        #expect(try store.insertLinks([anna, li]))
        let opened = { (at: UnixMillis) in PendingEvent(.opened(share.id, at: at), destinations: [.mqtt]) }
        #expect(try store.noteLinkOpened(shareRow: row, id: anna.id, at: 5_000, event: opened(5_000)))
        #expect(try !other.noteLinkOpened(shareRow: row, id: anna.id, at: 6_000, event: opened(6_000)))
        #expect(try !store.noteLinkOpened(shareRow: row, id: anna.id, at: 7_000, event: opened(7_000)))
        #expect(try !store.noteLinkOpened(shareRow: row, id: .generate(), at: 7_000, event: opened(7_000)), "an unknown link records nothing")
        let due = try store.dueEvents(now: 10_000_000, limit: 10)
        #expect(due.map(\.event.type) == [.opened])
        #expect(due.first?.event.at == 5_000)
        #expect(try store.links(shareRow: row).map(\.firstOpenedAt) == [5_000, nil])

        // Without an event: recorded the same, nothing in the outbox.
        #expect(try other.noteLinkOpened(shareRow: row, id: li.id, at: 8_000, event: nil))
        #expect(try store.dueEvents(now: 10_000_000, limit: 10).count == 1)
        #expect(try store.links(shareRow: row).map(\.firstOpenedAt) == [5_000, 8_000])
    }

    @Test(arguments: Engine.allCases) func purgedSharesLinksAreGone(engine: Engine) throws {
        let store = try base.open(engine)
        let kept = try store.insertShare(base.makeShare())
        let purged = try store.insertShare(base.makeShare())
        let ended = try store.insertShare(base.makeShare())
        let keptLink = link(kept), purgedLink = link(purged), endedLink = link(ended)
        for item in [keptLink, purgedLink, endedLink] { #expect(try store.insertLinks([item])) }
        try store.markEnded(row: purged, at: 2_000_000, reason: .stopped)
        try store.markEnded(row: ended, at: 2_000_000, reason: .expired)
        #expect(try store.openLinks() == [keptLink, purgedLink, endedLink], "an ended share's links stay until its history is purged")
        #expect(try store.purgeHistory(row: purged))
        #expect(try store.openLinks() == [keptLink, endedLink])
        #expect(try store.links(shareRow: purged).isEmpty)
        #expect(try store.link(viewTokenHash: purgedLink.viewTokenHash) == nil)
        #expect(try base.open(engine).openLinks() == [keptLink, endedLink])
        if engine == .postgresql {
            // Deleted, not only left out: the contact's name is nowhere in the database.
            let url = try ShareStoreTests.databaseURL(for: base.path)
            #expect(try TestPostgres.shared.get().query(url, "SELECT count(*) FROM share_links WHERE share = \(purged)") == "0")
        }
    }

    @Test(arguments: Engine.allCases) func theAudienceNamesWhoOpenedEachLinkAndWhoWatchesNow(engine: Engine) throws {
        let store = try base.open(engine), other = try base.open(engine)
        let row = try store.insertShare(base.makeShare())
        let a = link(row, name: "Anna"), b = link(row, name: "Li"), c = link(row, name: "Mum")
        #expect(try store.insertLinks([a, b, c]))
        #expect(try store.audience(row: row, watchingSince: 0) == Audience(firstOpenedAt: nil, opened: 0, watching: 0, links: [
            LinkAudience(id: a.id, name: "Anna", firstOpenedAt: nil, watchingNow: false, withdrawnAt: nil),
            LinkAudience(id: b.id, name: "Li", firstOpenedAt: nil, watchingNow: false, withdrawnAt: nil),
            LinkAudience(id: c.id, name: "Mum", firstOpenedAt: nil, watchingNow: false, withdrawnAt: nil),
        ]))

        // Through A, seen recently; through B, seen long ago; the share's own link, recently. C is withdrawn unopened.
        #expect(try store.noteLinkOpened(shareRow: row, id: a.id, at: 1_000, event: nil))
        #expect(try store.noteViewer(row: row, viewer: SecretHash(of: "a"), link: a.id, at: 1_000, firstViewEvent: nil))
        #expect(try !other.noteViewer(row: row, viewer: SecretHash(of: "a"), link: a.id, at: 5_000, firstViewEvent: nil))
        #expect(try other.noteLinkOpened(shareRow: row, id: b.id, at: 2_000, event: nil))
        #expect(try other.noteViewer(row: row, viewer: SecretHash(of: "b"), link: b.id, at: 2_000, firstViewEvent: nil))
        #expect(try store.noteViewer(row: row, viewer: SecretHash(of: "own"), at: 4_000))
        #expect(try store.withdrawLink(shareRow: row, id: c.id, at: 4_500))
        let audience = try other.audience(row: row, watchingSince: 3_000)
        #expect(audience.firstOpenedAt == 1_000 && audience.opened == 3 && audience.watching == 2, "the counts are the share's, every link included")
        #expect(audience.links == [
            LinkAudience(id: a.id, name: "Anna", firstOpenedAt: 1_000, watchingNow: true, withdrawnAt: nil),
            LinkAudience(id: b.id, name: "Li", firstOpenedAt: 2_000, watchingNow: false, withdrawnAt: nil),
            LinkAudience(id: c.id, name: "Mum", firstOpenedAt: nil, watchingNow: false, withdrawnAt: 4_500),
        ])

        // Seen again with no link named (a heartbeat): still A's. Through B now: B's, not A's any more.
        #expect(try !store.noteViewer(row: row, viewer: SecretHash(of: "a"), at: 6_000))
        #expect(try store.audience(row: row, watchingSince: 5_500).links.map(\.watchingNow) == [true, false, false])
        #expect(try !store.noteViewer(row: row, viewer: SecretHash(of: "a"), link: b.id, at: 7_000, firstViewEvent: nil))
        #expect(try store.audience(row: row, watchingSince: 5_500).links.map(\.watchingNow) == [false, true, false])

        // Purged: nobody, and no links.
        try store.markEnded(row: row, at: 8_000, reason: .stopped)
        try store.purgeHistory(row: row)
        #expect(try store.audience(row: row, watchingSince: 0) == .nobody)
    }

    @Test(arguments: Engine.allCases) func theFirstViewerThroughALinkIsTheSharesFirstViewer(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare(now: 1_000)
        let row = try store.insertShare(share)
        let anna = link(row)
        #expect(try store.insertLinks([anna]))
        let opened = { (at: UnixMillis) in PendingEvent(.opened(share.id, at: at), destinations: [.mqtt]) }
        #expect(try store.noteViewer(row: row, viewer: SecretHash(of: "a"), link: anna.id, at: 5_000, firstViewEvent: opened(5_000)))
        #expect(try store.noteViewer(row: row, viewer: SecretHash(of: "b"), link: nil, at: 6_000, firstViewEvent: opened(6_000)))
        #expect(try store.dueEvents(now: 10_000_000, limit: 10).map(\.event.at) == [5_000])
    }

    /// Another instance hears of a share whose links were added or withdrawn (the share marked changed), and of
    /// nothing when the change was refused or made already.
    @Test func otherInstancesHearOfAddedAndWithdrawnLinks() throws {
        let url = try TestPostgres.shared.get().makeDatabase()
        let writer = try PostgresShareStore(url: url, instance: "writer")
        let reader = try PostgresShareStore(url: url, instance: "reader")
        let heard = Mutex<[ShareID]>([])
        reader.watchChanges { change in
            if case .share(let id) = change { heard.withLock { $0.append(id) } }
        }
        defer { reader.stopWatching() }
        let share = base.makeShare(), ended = base.makeShare()
        let row = try writer.insertShare(share), endedRow = try writer.insertShare(ended)
        try writer.markEnded(row: endedRow, at: 2_000_000, reason: .stopped)
        let anna = link(row)
        #expect(try writer.insertLinks([anna, link(row)]))
        #expect(try !writer.insertLinks([link(endedRow)]))
        #expect(try writer.withdrawLink(shareRow: row, id: anna.id, at: 3_000_000))
        #expect(try !writer.withdrawLink(shareRow: row, id: anna.id, at: 3_000_001))
        #expect(try writer.noteLinkOpened(shareRow: row, id: anna.id, at: 3_000_002, event: nil))
        try writer.markEnded(row: row, at: 4_000_000, reason: .stopped)
        // A change of another share after all the others: once it is heard, everything before it has been (the feed
        // keeps the order of commits), so one heard too many fails the check below.
        let marker = base.makeShare()
        let markerRow = try writer.insertShare(marker)
        #expect(try writer.insertLinks([link(markerRow)]))
        #expect(eventually(timeout: .seconds(10)) { heard.withLock { $0.contains(marker.id) } })
        #expect(heard.withLock { $0 } == [ended.id, share.id, share.id, share.id, marker.id])
    }
}
