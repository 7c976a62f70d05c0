import FlareAPI
import FlareCore
import FlareCrypto
import FlareStore
import FlareTestSupport
import Foundation
import FlareServiceTestSupport
import FlareShares
import Testing
@testable import FlareEvents

import FlareSystem
import FlareCodec
#if canImport(Glibc)
import Glibc
#endif

/// Mail to contacts, through a real SMTP server (aiosmtpd) the test starts: each contact gets their own link in their
/// own language, once, also when the server was down at first; what cannot be sent is reported, never retried
/// forever.
@Suite struct ContactMailTests {
    let publicURL = "https://flare.example.org"

    func contact(_ fixture: ServiceFixture, _ name: String, email: String?, language: ContactLanguage = .en, owner: Int64? = nil) throws -> Contact {
        let contact = Contact(id: .generate(), ownerKeyID: owner, name: name, email: email, phone: nil, language: language,
                              createdAt: Int64(Date().timeIntervalSince1970 * 1000))
        #expect(try fixture.store.insertContact(contact, limit: ContactRules.maximumPerKey))
        return contact
    }

    /// A limited owner key of the fixture's store, with no limits beside the mail budget.
    func key(_ fixture: ServiceFixture, _ label: String) throws -> OwnerKeyRecord {
        try #require(try fixture.store.ownerKey(id: try fixture.store.insertOwnerKey(hash: SecretHash(of: label), label: label, createdAt: 1,
                                                                                      admin: false, limits: .none)))
    }

    func mailing(_ fixture: ServiceFixture, url: String) throws -> ContactMailing {
        let server = try MailServer(url: url, from: "flare@example.org")
        return ContactMailing(server: server, sender: SMTPMailer(server: server),
                              composer: ContactNotices(store: fixture.store, tokenKey: fixture.key, publicURL: publicURL, clock: fixture.clock))
    }

    func deliverer(_ fixture: ServiceFixture, mailing: ContactMailing?) -> EventDeliverer {
        EventDeliverer(store: fixture.store, publisher: fixture.publisher, poster: ScriptedPoster(), resolver: FixedResolver.public,
                       requestTimeout: .seconds(5), serverWebhook: nil, mailing: mailing, sealer: WebhookSecretSealer(tokenKey: fixture.key),
                       holder: "a", clock: fixture.clock, metrics: fixture.metrics, logger: Logger(label: "test", level: .error))
    }

    func events(_ fixture: ServiceFixture, _ id: ShareID) -> [[String: JSONValue]] {
        fixture.publisher.messages.filter { $0.topic == Topics.events(id) }.compactMap { try? JSONValue.parse($0.payload).objectValue }
    }

    /// The mails in the outbox, sent or not yet.
    func waitingMails(_ fixture: ServiceFixture) throws -> [OutboxDelivery] {
        try fixture.store.dueEvents(now: .max, limit: 50).filter { if case .mail = $0.destination { true } else { false } }
    }

    /// Deliveries that failed once are due again now, instead of after their backoff.
    func retryNow(_ fixture: ServiceFixture, _ deliveries: [OutboxDelivery]) throws {
        for delivery in deliveries { try fixture.store.eventFailed(row: delivery.row, destination: delivery.destination, attempts: 1, retryAt: 0) }
    }

    /// One delivery round that ran (on a busy machine the lease's short wait for the database may skip one).
    func round(_ deliverer: EventDeliverer) {
        deliverer.endRests()
        #expect(eventually { deliverer.step() })
        deliverer.drain()
    }

    @Test func eachContactIsMailedTheirOwnLinkInTheirLanguageOnceTheServerIsBack() throws {
        let fixture = try ServiceFixture(mailsContacts: true)
        let anna = try contact(fixture, "李娜", email: "lina@example.org", language: .zhCN)
        let ben = try contact(fixture, "Ben \"B\" Ng", email: "ben@example.org")
        let gone = try contact(fixture, "Nobody", email: "refused@example.org")
        let noMail = try contact(fixture, "Phone only", email: nil)
        // Down at first: the port refuses connections until the server takes it.
        let (held, port) = try FreePort.refusing()
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: "smtp://flare:s%3Acret@127.0.0.1:\(port)"))
        let created = try fixture.service.create(name: "Anna", durationSeconds: 3600, contacts: [anna.id, ben.id, gone.id, noMail.id])
        let id = created.share.id
        let links = Dictionary(uniqueKeysWithValues: created.links.map { ($0.link.contactID!, $0) })

        round(deliverer)
        let waiting = try waitingMails(fixture)
        // A mail for each contact with an address, none for the one without; each failed once, none given up.
        #expect(Set(waiting.map(\.destination)) == Set([anna, ben, gone].map { EventDestination.mail(links[$0.id]!.link.id) }))
        #expect(waiting.allSatisfy { $0.attempts == 1 })
        #expect(!events(fixture, id).contains { $0["type"]?.stringValue?.hasPrefix("contact.") == true })

        close(held)
        let server = try TestSMTPServer(port: port, username: "flare", password: "s:cret")
        defer { server.stop() }
        try retryNow(fixture, waiting)
        round(deliverer)
        round(deliverer)  // the reports of how each mail went reach the topic
        round(deliverer)  // and nothing is sent twice
        let mails = server.received
        #expect(mails.count == 2)
        #expect(Set(mails.flatMap(\.envelopeTo)) == ["lina@example.org", "ben@example.org"])
        #expect(mails.allSatisfy { $0.envelopeFrom == "flare@example.org" })

        let chinese = try #require(mails.first { $0.envelopeTo == ["lina@example.org"] })
        #expect(chinese.headers["subject"]?.hasPrefix("=?UTF-8?B?") == true)
        #expect(chinese.decodedHeader("subject") == "Anna 正在与你共享实时位置")
        #expect(chinese.decodedHeader("to") == "李娜 <lina@example.org>")
        #expect(chinese.headers["content-type"] == "text/plain; charset=utf-8")
        #expect(chinese.headers["content-language"] == "zh-CN")
        #expect(chinese.body.contains("李娜，你好"))
        #expect(chinese.body.contains("直到 "))
        let english = try #require(mails.first { $0.envelopeTo == ["ben@example.org"] })
        #expect(english.headers["subject"] == "Anna is sharing a live location with you")
        #expect(english.headers["to"] == #""Ben \"B\" Ng" <ben@example.org>"#)
        #expect(english.body.contains("Hello Ben \"B\" Ng,"))

        // Each mail holds its own contact's link, and no other.
        for (mail, contact) in [(chinese, anna), (english, ben)] {
            let link = links[contact.id]!
            #expect(mail.body.contains("\(publicURL)/s/\(link.token)"))
            #expect(SecretHash(of: link.token) == link.link.viewTokenHash)
            for other in links.values where other.link.id != link.link.id { #expect(!mail.body.contains(other.token)) }
        }

        // Reported once each, by link and contact, naming the event the mail told of; never an address or a token.
        let reports = events(fixture, id).filter { $0["type"]?.stringValue?.hasPrefix("contact.") == true }
        #expect(reports.count == 3)
        let notified = reports.filter { $0["type"]?.stringValue == "contact.notified" }
        #expect(Set(notified.compactMap { $0["contact_id"]?.stringValue }) == [anna.id.rawValue, ben.id.rawValue])
        let failed = try #require(reports.first { $0["type"]?.stringValue == "contact.notification_failed" })
        #expect(failed["contact_id"]?.stringValue == gone.id.rawValue)
        #expect(failed["link_id"]?.stringValue == links[gone.id]!.link.id.rawValue)
        #expect(failed["reason"]?.stringValue?.contains("550") == true)
        #expect(failed["cause"]?.stringValue == "link.created")
        for message in fixture.publisher.messages where message.topic == Topics.events(id) {
            let body = String(decoding: message.payload, as: UTF8.self)
            #expect(!body.contains("@example.org") && !links.values.contains { body.contains($0.token) })
        }
        // The Message-ID is the event's and the link's: the same at every attempt.
        let cause = try #require(notified.first { $0["contact_id"]?.stringValue == anna.id.rawValue }?["cause_id"]?.stringValue)
        #expect(chinese.headers["message-id"] == "<\(cause.dropFirst(4)).\(links[anna.id]!.link.id.rawValue)@example.org>")
        #expect(fixture.metrics.value(FlareMetrics.contactNotices, labels: [("channel", "email"), ("result", "notified")]) == 2)
        #expect(fixture.metrics.value(FlareMetrics.contactNotices, labels: [("channel", "email"), ("result", "failed")]) == 1)
        #expect(try fixture.store.dueEvents(now: .max, limit: 50).isEmpty)
    }

    /// A key cannot use Flare as a mail cannon: twenty contacts with one address get one mail a share, and the key's
    /// hourly budget, counted in the store, bounds the rest; the links are made all the same and say why they were not
    /// mailed (issue: trust, second round, 1).
    @Test func oneKeysMailIsBoundedByItsBudgetAndOneMailAnAddressAShare() throws {
        let fixture = try ServiceFixture(mailsContacts: true, mailPerKeyPerHour: 3)
        let server = try TestSMTPServer()
        defer { server.stop() }
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        let keyID = try fixture.store.insertOwnerKey(hash: SecretHash(of: "k"), label: "k", createdAt: 1, admin: false, limits: .none)
        let key = try #require(try fixture.store.ownerKey(id: keyID))
        var strangers: [Contact] = []
        for index in 0..<5 {
            strangers.append(try contact(fixture, "Stranger \(index)", email: index == 0 ? "victim@example.org" : "Victim@Example.org", owner: keyID))
        }
        let other = try contact(fixture, "Other", email: "other@example.org", owner: keyID)

        let first = try fixture.service.create(name: "Account locked", durationSeconds: 600, owner: key, contacts: strangers.map(\.id) + [other.id])
        let mailing = first.links.map { first.mailing[$0.link.id] }
        #expect(mailing == [.queued] + Array(repeating: .notMailed(reason: "same_address"), count: 4) + [.queued], "\(mailing)")
        let second = try fixture.service.create(name: "Account locked", durationSeconds: 600, owner: key, contacts: strangers.map(\.id))
        #expect(second.links.map { second.mailing[$0.link.id] } == [.queued] + Array(repeating: .notMailed(reason: "same_address"), count: 4))
        // The budget of three is spent: the third share's links are made, and not mailed.
        let third = try fixture.service.create(name: "Account locked", durationSeconds: 600, owner: key, contacts: [strangers[0].id, other.id])
        #expect(third.links.count == 2 && third.links.allSatisfy { third.mailing[$0.link.id] == .notMailed(reason: "mail_budget") })
        #expect(fixture.metrics.value(FlareMetrics.mailRefused, labels: [("reason", "mail_budget")]) == 2)
        #expect(fixture.metrics.value(FlareMetrics.mailRefused, labels: [("reason", "same_address")]) == 8)
        // A share made without a key (the demo) has no budget; a contact with no address is not a mail at all.
        let phoneOnly = try contact(fixture, "Phone only", email: nil, owner: keyID)
        let keyless = try fixture.service.create(name: "Demo", durationSeconds: 600, contacts: [other.id, phoneOnly.id])
        #expect(keyless.links.map { keyless.mailing[$0.link.id] } == [.queued, nil])

        round(deliverer)
        round(deliverer)
        #expect(server.received.count == 4, "three of the key's budget and the keyless share's")
        #expect(server.received.filter { $0.envelopeTo.map { $0.lowercased() } == ["victim@example.org"] }.count == 2)
    }

    /// A revoked key (a lost phone's, a stolen one) leaves nothing running: its live shares end, its armed check-in
    /// is cancelled and never mails at its deadline, and its queued mail is dropped and counted; another key's goes on
    /// (issue: trust, second round, 1).
    @Test func aRevokedKeysSharesCheckinsAndQueuedMailStop() throws {
        let fixture = try ServiceFixture(mailsContacts: true)
        let server = try TestSMTPServer()
        defer { server.stop() }
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        let lost = try key(fixture, "lost"), other = try key(fixture, "other")
        let stranger = try contact(fixture, "Stranger", email: "stranger@example.org", owner: lost.id)
        let mum = try contact(fixture, "Mum", email: "mum@example.org", owner: other.id)
        let spam = try fixture.service.create(name: "Account locked", durationSeconds: 600, owner: lost, contacts: [stranger.id])
        let armed = try fixture.service.armCheckin(.init(inSeconds: 1, graceSeconds: 0, contacts: [stranger.id], name: "Walk"), owner: lost)
        let kept = try fixture.service.create(name: "Anna", durationSeconds: 600, owner: other, contacts: [mum.id])

        #expect(try fixture.service.keys.revoke(id: lost.id))
        try fixture.service.revocations.sweep()
        #expect(try fixture.store.share(id: spam.share.id)?.share.endReason == .stopped)
        #expect(try fixture.store.share(id: armed.share.id)?.share.endReason == .stopped)
        #expect(try fixture.store.checkin(id: armed.checkin.id)?.state == .cancelled)
        #expect(try fixture.store.share(id: kept.share.id)?.share.isActive == true)
        #expect(fixture.metrics.value(FlareMetrics.mailRefused, labels: [("reason", "key_revoked")]) == 1)
        #expect(try fixture.store.keysWithWorkToStop().isEmpty)
        // Past the check-in's deadline: a watcher's round fires nothing; only the other key's mail goes out.
        let watcher = CheckinWatcher(shares: fixture.service, store: fixture.store, holder: "a", clock: fixture.clock, logger: Logger(label: "test", level: .error))
        fixture.clock.advance(by: 1_100)
        #expect(watcher.step())
        round(deliverer)
        round(deliverer)
        #expect(server.received.map(\.envelopeTo) == [["mum@example.org"]])
        #expect(try fixture.store.checkin(id: armed.checkin.id)?.state == .cancelled)
    }

    /// The mail lane is served key by key: a key with a hundred mails waiting holds another key's mail up by one
    /// send at most (before, every link was a lane of its own, taken in no order of keys).
    @Test func eachKeysMailTakesItsTurn() throws {
        let fixture = try ServiceFixture(mailsContacts: true, mailPerKeyPerHour: 1_000)
        let server = try TestSMTPServer()
        defer { server.stop() }
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        let busy = try key(fixture, "busy"), quiet = try key(fixture, "quiet")
        for share in 0..<5 {
            var contacts: [ContactID] = []
            for index in 0..<20 { contacts.append(try contact(fixture, "C\(share)-\(index)", email: "c\(share)-\(index)@example.org", owner: busy.id).id) }
            _ = try fixture.service.create(name: "Busy", durationSeconds: 600, owner: busy, contacts: contacts)
        }
        let mum = try contact(fixture, "Mum", email: "mum@example.org", owner: quiet.id)
        _ = try fixture.service.create(name: "Anna", durationSeconds: 600, owner: quiet, contacts: [mum.id])
        round(deliverer)
        let order = server.received.map(\.envelopeTo)
        #expect(order.count == 101)
        let place = try #require(order.firstIndex(of: ["mum@example.org"]))
        #expect(place <= 1, "the quiet key's mail went out at place \(place) of \(order.count)")
    }

    /// The server took the mail and the connection broke before its answer: Flare cannot know it went out, so it
    /// sends it again, and the copy carries the same Message-ID, so the contact's mail program shows one mail.
    @Test func aMailWhoseAnswerWasLostIsSentAgainWithTheSameMessageID() throws {
        let server = try TestSMTPServer()
        defer { server.stop() }
        let fixture = try ServiceFixture(mailsContacts: true)
        let ben = try contact(fixture, "Ben", email: "lost-answer@example.org")
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        let created = try fixture.service.create(name: "Anna", durationSeconds: 3600, contacts: [ben.id])
        round(deliverer)
        #expect(server.received.count == 1, "taken once, its answer lost")
        let waiting = try waitingMails(fixture)
        #expect(waiting.count == 1 && waiting.allSatisfy { $0.attempts == 1 }, "not reported as sent, and not given up")
        #expect(!events(fixture, created.share.id).contains { $0["type"]?.stringValue?.hasPrefix("contact.") == true })
        try retryNow(fixture, waiting)
        round(deliverer)
        round(deliverer)
        let mails = server.received
        #expect(mails.count == 2)
        let ids = Set(mails.compactMap { $0.headers["message-id"] })
        #expect(ids.count == 1 && mails.allSatisfy { $0.body == mails[0].body }, "\(ids)")
        let reports = events(fixture, created.share.id).compactMap { $0["type"]?.stringValue }.filter { $0.hasPrefix("contact.") }
        #expect(reports == ["contact.notified"], "\(reports)")
    }

    @Test func aLinkWithdrawnBeforeItsMailIsNotMailedAndTheFailureIsReported() throws {
        let server = try TestSMTPServer()
        defer { server.stop() }
        let fixture = try ServiceFixture(mailsContacts: true)
        let ben = try contact(fixture, "Ben", email: "ben@example.org")
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        let created = try fixture.service.create(name: "Anna", durationSeconds: 3600, contacts: [ben.id])
        let snapshot = try #require(fixture.registry.snapshot(created.share.id))
        try fixture.service.withdrawLink(snapshot, link: created.links[0].link.id)
        round(deliverer)
        round(deliverer)
        #expect(server.received.isEmpty)
        let failed = events(fixture, created.share.id).filter { $0["type"]?.stringValue == "contact.notification_failed" }
        #expect(failed.count == 1 && failed.first?["reason"]?.stringValue == "the link was withdrawn")
    }

    @Test func withoutAnSMTPServerNoMailIsAskedForAndOneAskedForElsewhereIsReportedFailed() throws {
        // An instance without FLARE_SMTP_URL asks for no mail.
        let plain = try ServiceFixture(mailsContacts: false)
        let ben = try contact(plain, "Ben", email: "ben@example.org")
        _ = try plain.service.create(name: "Anna", durationSeconds: 3600, contacts: [ben.id])
        #expect(try plain.store.dueEvents(now: .max, limit: 50).allSatisfy { if case .mail = $0.destination { false } else { true } })
        // One that mails made the event; the delivering instance has no server: reported, not retried.
        let fixture = try ServiceFixture(mailsContacts: true)
        let other = try contact(fixture, "Ben", email: "ben@example.org")
        let id = try fixture.service.create(name: "Anna", durationSeconds: 3600, contacts: [other.id]).share.id
        let deliverer = deliverer(fixture, mailing: nil)
        round(deliverer)
        round(deliverer)
        let failed = events(fixture, id).filter { $0["type"]?.stringValue == "contact.notification_failed" }
        #expect(failed.first?["reason"]?.stringValue == "no FLARE_SMTP_URL is set on the delivering instance")
        #expect(try fixture.store.dueEvents(now: .max, limit: 50).isEmpty)
    }

    @Test func aMissedCheckinMailsEachContactTheLastPositionTheMessageAndTheirLink() throws {
        let server = try TestSMTPServer()
        defer { server.stop() }
        let fixture = try ServiceFixture(mailsContacts: true)
        let lina = try contact(fixture, "李娜", email: "lina@example.org", language: .zhCN)
        let ben = try contact(fixture, "Ben", email: "ben@example.org")
        let armed = try fixture.service.armCheckin(.init(inSeconds: 1, graceSeconds: 0, contacts: [lina.id, ben.id], message: "Zugspitze, back by ten",
                                                         name: "Anna"), owner: nil)
        let now = Int64(Date().timeIntervalSince1970)
        let payload = Array(#"{"_type":"location","lat":47.42116,"lon":10.98533,"tst":\#(now),"acc":12}"#.utf8)
        #expect(fixture.ingestor.handle(topic: Topics.location(armed.share.id), payload: payload, retained: false) == nil)
        #expect(eventually { ((try? fixture.store.recentFixes(row: armed.checkin.shareRow, limit: 1)) ?? []).count == 1 })
        let watcher = CheckinWatcher(shares: fixture.service, store: fixture.store, holder: "a", clock: fixture.clock,
                                     logger: Logger(label: "test", level: .error))
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        round(deliverer)
        #expect(server.received.isEmpty, "nobody is told before the deadline")
        fixture.clock.advance(by: 1_100)
        #expect(eventually { watcher.step() })
        round(deliverer)
        round(deliverer)
        let mails = server.received
        #expect(mails.count == 2)
        let chinese = try #require(mails.first { $0.envelopeTo == ["lina@example.org"] })
        #expect(chinese.decodedHeader("subject")?.hasPrefix("Anna 未在 ") == true)
        #expect(chinese.body.contains("Zugspitze, back by ten") && chinese.body.contains("47.42116, 10.98533") && chinese.body.contains("±12 m"))
        let english = try #require(mails.first { $0.envelopeTo == ["ben@example.org"] })
        #expect(english.headers["subject"]?.hasPrefix("Anna did not check in by ") == true)
        #expect(english.body.contains("Last position, at ") && english.body.contains("±12 m: 47.42116, 10.98533"))
        // How long the link stays live: the share's end, as the share's own mail says it.
        let expires = RFC3339.format(millis: armed.share.expiresAt)
        let until = "\(expires.prefix(10)) \(expires.dropFirst(11).prefix(5)) UTC"
        #expect(english.body.contains("(live until \(until))") && chinese.body.contains("有效至 \(until)"), "\(english.body)")
        // Each with the contact's own link, now live.
        let links = try fixture.store.links(shareRow: armed.checkin.shareRow)
        for (mail, contact) in [(chinese, lina), (english, ben)] {
            let link = try #require(links.first { $0.contactID == contact.id })
            #expect(mail.body.contains("\(publicURL)/s/\(ShareLink.viewToken(tokenKey: fixture.key, share: armed.share.id, link: link.id))"))
        }
        let types = events(fixture, armed.share.id).compactMap { $0["type"]?.stringValue }
        #expect(types.filter { $0 == "checkin.missed" }.count == 1 && types.filter { $0 == "contact.notified" }.count == 2, "\(types)")
        // The events carry no coordinate, no message.
        for message in fixture.publisher.messages where message.topic == Topics.events(armed.share.id) {
            let body = String(decoding: message.payload, as: UTF8.self)
            #expect(!body.contains("47.42") && !body.contains("Zugspitze"))
        }
        #expect(eventually { watcher.step() })
        round(deliverer)
        #expect(server.received.count == 2, "fired once")
    }

    @Test func anArrivalIsMailedOnlyWhenTheSharerAskedForIt() throws {
        let server = try TestSMTPServer()
        defer { server.stop() }
        let fixture = try ServiceFixture(mailsContacts: true)
        let ben = try contact(fixture, "Ben", email: "ben@example.org")
        let zone = ArrivalZone(latitude: 47.42116, longitude: 10.98533, radiusMeters: 200)
        let told = try fixture.service.armCheckin(.init(inSeconds: 3600, contacts: [ben.id], arrive: zone, notifyOnArrival: true, name: "Anna"), owner: nil)
        let quiet = try fixture.service.armCheckin(.init(inSeconds: 3600, contacts: [ben.id], arrive: zone, name: "Anna"), owner: nil)
        let now = Int64(Date().timeIntervalSince1970)
        for armed in [told, quiet] {
            let payload = Array(#"{"_type":"location","lat":47.4212,"lon":10.9854,"tst":\#(now),"acc":10}"#.utf8)
            #expect(fixture.ingestor.handle(topic: Topics.location(armed.share.id), payload: payload, retained: false) == nil)
            #expect(eventually { ((try? fixture.store.recentFixes(row: armed.checkin.shareRow, limit: 1)) ?? []).count == 1 })
        }
        let watcher = CheckinWatcher(shares: fixture.service, store: fixture.store, holder: "a", clock: fixture.clock,
                                     logger: Logger(label: "test", level: .error))
        #expect(eventually { watcher.step() })
        #expect(try fixture.store.checkin(id: told.checkin.id)?.state == .arrived && fixture.store.checkin(id: quiet.checkin.id)?.state == .arrived)
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        round(deliverer)
        round(deliverer)
        let mails = server.received
        #expect(mails.count == 1 && mails.first?.headers["subject"] == "Anna has arrived", "\(mails.map(\.headers))")
        let notified = events(fixture, told.share.id).filter { $0["type"]?.stringValue == "contact.notified" }
        #expect(notified.count == 1 && notified.first?["contact_id"]?.stringValue == ben.id.rawValue && notified.first?["link_id"] == nil)
        #expect(events(fixture, quiet.share.id).allSatisfy { $0["type"]?.stringValue?.hasPrefix("contact.") != true })
    }

    /// Stopping a check-in's share is not checking in (whoever holds the phone can stop it): at the deadline the
    /// contacts are still told, with the last position and no link, since an ended share takes none.
    @Test func aCheckinWhoseShareWasStoppedIsStillToldWithoutALink() throws {
        let server = try TestSMTPServer()
        defer { server.stop() }
        let fixture = try ServiceFixture(mailsContacts: true)
        let ben = try contact(fixture, "Ben", email: "ben@example.org")
        let armed = try fixture.service.armCheckin(.init(inSeconds: 1, graceSeconds: 0, contacts: [ben.id], name: "Anna"), owner: nil)
        let payload = Array(#"{"_type":"location","lat":47.42116,"lon":10.98533,"tst":\#(Int64(Date().timeIntervalSince1970)),"acc":12}"#.utf8)
        #expect(fixture.ingestor.handle(topic: Topics.location(armed.share.id), payload: payload, retained: false) == nil)
        #expect(eventually { ((try? fixture.store.recentFixes(row: armed.checkin.shareRow, limit: 1)) ?? []).count == 1 })
        _ = try fixture.service.stop(armed.share.id)
        fixture.clock.advance(by: 1_100)
        let watcher = CheckinWatcher(shares: fixture.service, store: fixture.store, holder: "a", clock: fixture.clock,
                                     logger: Logger(label: "test", level: .error))
        #expect(eventually { watcher.step() })
        #expect(try fixture.store.checkin(id: armed.checkin.id)?.state == .missed)
        #expect(try fixture.store.links(shareRow: armed.checkin.shareRow).isEmpty)
        let deliverer = deliverer(fixture, mailing: try mailing(fixture, url: server.url))
        round(deliverer)
        round(deliverer)
        let mail = try #require(server.received.first)
        #expect(server.received.count == 1 && mail.envelopeTo == ["ben@example.org"])
        #expect(mail.body.contains("47.42116, 10.98533") && mail.body.contains("stopped before the deadline") && !mail.body.contains("/s/"))
        let types = events(fixture, armed.share.id).compactMap { $0["type"]?.stringValue }
        #expect(types.contains("checkin.missed") && types.contains("contact.notified"), "\(types)")
    }
}
