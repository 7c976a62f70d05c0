import FlareCore
import FlareCrypto
import FlareStore
import FlareStoreOpener
import FlareTestSupport
import Foundation
import Testing
import FlareSystem

/// Web Push subscriptions and the escalation ladder in both engines: subscriptions per link and per contact, bounded,
/// renewed by the same browser; an event's `push` delivery split once into one per subscription it goes to (a
/// withdrawn link's viewers and another share's left out); the VAPID key's row the same for every instance; the ladder's
/// steps due at their times, taken once, ended by an answer.
@Suite struct PushStoreTests {
    let base: ShareStoreTests

    init() throws { base = try ShareStoreTests() }

    func browser() -> (p256dh: [UInt8], auth: [UInt8]) {
        (P256.publicKey(privateKey: P256.newPrivateKey())!, Crypto.randomBytes(16))
    }

    func subscribe(_ store: any ShareStore, _ subscriber: PushSubscriber, _ endpoint: String, limit: Int = 5) throws -> PushSubscribing {
        let keys = browser()
        return try store.addPushSubscription(subscriber, endpoint: endpoint, p256dh: keys.p256dh, auth: keys.auth, language: .en, at: 1_000, limit: limit)
    }

    /// A share with a personal link for each contact (stored, with its contact), as a device's SOS has them.
    func shareWithLinks(_ store: any ShareStore, contacts: [Contact], now: UnixMillis = 1_000_000) throws -> (row: Int64, share: Share, links: [ShareLink]) {
        let share = base.makeShare(now: now)
        let row = try store.insertShare(share)
        let links = contacts.map { contact in
            ShareLink(id: .generate(), shareRow: row, contactID: contact.id, name: contact.name, viewTokenHash: Secret.generate().hash, createdAt: now)
        }
        for contact in contacts { _ = try store.insertContact(contact, limit: 100) }
        #expect(try store.insertLinks(links))
        return (row, share, links)
    }

    func contact(_ name: String) -> Contact {
        Contact(id: .generate(), ownerKeyID: 1, name: name, email: "\(name.lowercased())@example.org", phone: nil, language: .en, createdAt: 1_000)
    }

    /// Records `event` with the `push` destination and splits it; the destinations it was split into.
    func fanOut(_ store: any ShareStore, _ event: ShareEvent, row: Int64, alerts: Bool) throws -> (made: Int, destinations: Set<String>) {
        try store.recordEvent(PendingEvent(event, destinations: [.mqtt, .pushFanOut]), shareRow: row)
        let due = try store.dueEvents(now: .max, limit: 100).filter { $0.event.id == event.id }
        let split = try #require(due.first { $0.destination == .pushFanOut })
        let made = try store.fanOutPush(eventRow: split.row, alerts: alerts)
        #expect(try store.fanOutPush(eventRow: split.row, alerts: alerts) == 0, "an event is split once")
        let after = try store.dueEvents(now: .max, limit: 100).filter { $0.event.id == event.id }.map(\.destination)
        #expect(!after.contains(.pushFanOut))
        return (made, Set(after.compactMap { if case .push = $0 { $0.name } else { nil } }))
    }

    @Test(arguments: Engine.allCases) func subscriptionsAreBoundedPerLinkAndRenewedByTheSameBrowser(engine: Engine) throws {
        let store = try base.open(engine)
        let (row, _, links) = try shareWithLinks(store, contacts: [contact("Mum")])
        let own = PushSubscriber.link(shareRow: row, link: nil), mums = PushSubscriber.link(shareRow: row, link: links[0].id)
        guard case .added(let first) = try subscribe(store, own, "https://push.example.org/a") else { Issue.record("not added"); return }
        let keys = browser()
        #expect(try store.addPushSubscription(own, endpoint: "https://push.example.org/a", p256dh: keys.p256dh, auth: keys.auth, language: .zhCN,
                                              at: 2_000, limit: 5) == .renewed(row: first))
        let renewed = try #require(try store.pushSubscription(row: first))
        #expect(renewed.p256dh == keys.p256dh && renewed.auth == keys.auth && renewed.language == .zhCN && renewed.subscriber == own)
        for index in 1..<3 { #expect(try subscribe(store, own, "https://push.example.org/\(index)", limit: 3) != .full) }
        #expect(try subscribe(store, own, "https://push.example.org/x", limit: 3) == .full)
        #expect(try subscribe(store, mums, "https://push.example.org/a", limit: 3) != .full, "each link has its own")
        #expect(try store.pushSubscriptionCount() == 4)
        #expect(try store.removePushSubscription(own, endpoint: "https://push.example.org/a"))
        #expect(try !store.removePushSubscription(own, endpoint: "https://push.example.org/a"))
        #expect(try store.pushSubscription(row: first) == nil)
        #expect(try store.pushSubscriptionCount() == 3)
    }

    @Test(arguments: Engine.allCases) func anEventIsSplitForItsLinksViewersAndItsContactsAlertsOnly(engine: Engine) throws {
        let store = try base.open(engine)
        let mum = contact("Mum"), dad = contact("Dad"), stranger = contact("Stranger")
        let (row, share, links) = try shareWithLinks(store, contacts: [mum, dad])
        let other = try shareWithLinks(store, contacts: [stranger])
        _ = try subscribe(store, .link(shareRow: row, link: nil), "https://push.example.org/own")
        _ = try subscribe(store, .link(shareRow: row, link: links[1].id), "https://push.example.org/dad-viewer")
        _ = try subscribe(store, .contact(mum.id), "https://push.example.org/mum-alerts")
        _ = try subscribe(store, .contact(stranger.id), "https://push.example.org/stranger-alerts")
        _ = try subscribe(store, .link(shareRow: other.row, link: nil), "https://push.example.org/other")
        let alarm = try fanOut(store, .sos(.sosRepeated, share.id, device: .generate(), at: 2_000_000), row: row, alerts: true)
        #expect(alarm.made == 3 && alarm.destinations.count == 3, "the two viewers and Mum's alerts: \(alarm.destinations)")
        let news = try fanOut(store, .ended(share.id, at: 2_000_001, reason: .stopped), row: row, alerts: false)
        #expect(news.made == 2, "the end is for the viewers")
        // Dad's link withdrawn: his viewer's subscription ends at the next split.
        #expect(try store.withdrawLink(shareRow: row, id: links[1].id, at: 2_000_002))
        let after = try fanOut(store, .sos(.sosRepeated, share.id, device: .generate(), at: 2_000_003), row: row, alerts: true)
        #expect(after.made == 2)
        #expect(try store.pushSubscriptionCount() == 4)
    }

    @Test(arguments: Engine.allCases) func theContactsAlertsAreFoundByTheirSecretsHashAndEndWithTheContact(engine: Engine) throws {
        let store = try base.open(engine)
        let mum = contact("Mum")
        #expect(try store.insertContact(mum, limit: 10))
        let secret = Secret.generate()
        #expect(try store.contact(alertsHash: secret.hash) == nil)
        try store.setAlertsHash(contact: mum.id, hash: secret.hash)
        try store.setAlertsHash(contact: mum.id, hash: secret.hash)
        #expect(try store.contact(alertsHash: secret.hash)?.id == mum.id)
        #expect(try store.contact(alertsHash: Secret.generate().hash) == nil)
        _ = try subscribe(store, .contact(mum.id), "https://push.example.org/mum")
        #expect(try store.deleteContact(id: mum.id, withdrawingLinksAt: 2_000) != nil)
        #expect(try store.contact(alertsHash: secret.hash) == nil)
        #expect(try store.pushSubscriptionCount() == 0, "the contact's alerts end with it")
    }

    @Test(arguments: Engine.allCases) func everyInstanceGetsTheServerSecretStoredFirst(engine: Engine) throws {
        let first = try base.open(engine).serverSecret("vapid-test", storingIfAbsent: [1, 2, 3])
        let second = try base.open(engine).serverSecret("vapid-test", storingIfAbsent: [4, 5, 6])
        #expect(first == [1, 2, 3] && second == [1, 2, 3])
    }

    @Test(arguments: Engine.allCases) func theLadderClimbsAtItsTimesOnceAndEndsWithAHelpfulAnswer(engine: Engine) throws {
        let store = try base.open(engine)
        var device = Device(id: .generate(), ownerKeyID: 1, name: "Anna", secretHash: Secret.generate().hash, contacts: [], durationSeconds: 3_600,
                            message: "", pin: nil, duressPin: nil, escalateAfterSeconds: 10, createdAt: 1_000)
        #expect(try store.insertDevice(device, limit: 5))
        let now: UnixMillis = 1_000_000
        let share = base.makeShare(now: now)
        guard case .started(let row) = try store.startSOS(device: device.id, share: share, perHour: 6, now: now,
                                                         events: [PendingEvent(.started(share), destinations: [.mqtt])]) else {
            Issue.record("not started")
            return
        }
        #expect(try store.escalation(shareRow: row) == EscalationState(step: 0, nextAt: now + 10_000))
        #expect(try store.dueEscalations(now: now + 9_999, limit: 10).isEmpty)
        let due = try store.dueEscalations(now: now + 10_000, limit: 10)
        #expect(due == [EscalationDue(shareRow: row, shareID: share.id, step: 1, over: false)])
        let step1 = PendingEvent(.escalated(share.id, step: 1, at: now + 10_000), destinations: [.mqtt])
        #expect(try store.escalate(shareRow: row, step: 1, event: step1))
        #expect(try !store.escalate(shareRow: row, step: 1, event: step1), "a second holder takes the step no more")
        #expect(try store.escalation(shareRow: row) == EscalationState(step: 1, nextAt: now + 30_000))
        #expect(try store.dueEscalations(now: now + 29_999, limit: 10).isEmpty)
        // "Cannot help" is no help: the ladder goes on; "on my way" ends it.
        _ = try store.insertAnswer(row: row, kind: .cannotHelp, name: "Dad", at: now + 20_000)
        #expect(try store.dueEscalations(now: now + 30_000, limit: 10).map(\.over) == [false])
        _ = try store.insertAnswer(row: row, kind: .onMyWay, name: "Mum", at: now + 25_000)
        #expect(try store.dueEscalations(now: now + 30_000, limit: 10).map(\.over) == [true])
        try store.endEscalation(shareRow: row)
        #expect(try store.dueEscalations(now: .max, limit: 10).isEmpty)
        #expect(try store.escalation(shareRow: row) == EscalationState(step: 1, nextAt: nil))
        #expect(try store.dueEvents(now: .max, limit: 100).filter { $0.event.type == .sosEscalated }.count == 1)
        // Off: no ladder at all.
        device.escalateAfterSeconds = 0
        #expect(try store.updateDevice(device))
        #expect(try store.device(id: device.id)?.device.escalateAfterSeconds == 0)
    }
}
