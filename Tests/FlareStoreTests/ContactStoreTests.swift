import FlareCore
import FlareStore
import FlareStoreOpener
import FlareTestSupport
import Foundation
import Testing
import FlareSystem

/// Contacts in both engines: kept as given, listed newest first in pages per key, the per-key limit, deletion once.
@Suite struct ContactStoreTests {
    let base: ShareStoreTests

    init() throws { base = try ShareStoreTests() }

    func contact(owner: Int64?, at: UnixMillis, name: String = "Anna", email: String? = "anna@example.org", phone: String? = "+4915123456789",
                 language: ContactLanguage = .zhCN) -> Contact {
        Contact(id: .generate(), ownerKeyID: owner, name: name, email: email, phone: phone, language: language, createdAt: at)
    }

    @Test(arguments: Engine.allCases) func contactsRoundTripAndSurviveReopening(engine: Engine) throws {
        let full = contact(owner: 7, at: 1_000, name: "安娜 ✓")
        let bare = contact(owner: 7, at: 2_000, email: nil, phone: nil, language: .en)
        do {
            let store = try base.open(engine)
            #expect(try store.insertContact(full, limit: 10))
            #expect(try store.insertContact(bare, limit: 10))
        }
        let store = try base.open(engine)
        #expect(try store.contact(id: full.id) == full)
        #expect(try store.contact(id: bare.id) == bare)
        #expect(try store.contact(id: .generate()) == nil)
    }

    @Test(arguments: Engine.allCases) func listsNewestFirstInPagesPerKey(engine: Engine) throws {
        let store = try base.open(engine)
        let mine = (0..<5).map { contact(owner: 1, at: 1_000 + Int64($0 / 2)) }  // two share a millisecond: the order taken orders them
        let theirs = contact(owner: 2, at: 5_000)
        for item in mine + [theirs] { #expect(try store.insertContact(item, limit: 100)) }
        let expected = Array(mine.reversed())
        var listed: [Contact] = []
        var position: ContactListPosition?
        repeat {
            let page = try store.listContacts(owner: 1, after: position, limit: 2)
            listed += page.map(\.contact)
            position = page.count == 2 ? page.last.map { ContactListPosition(row: $0.row) } : nil
        } while position != nil
        #expect(listed == expected)
        #expect(try store.listContacts(owner: nil, after: nil, limit: 100).first?.contact == theirs)
        #expect(try store.listContacts(owner: nil, after: nil, limit: 100).count == 6)
        #expect(try store.listContacts(owner: 3, after: nil, limit: 100).isEmpty)
    }

    /// A key's mail budget: full at first, taken in part when it holds less than asked, refilled evenly over the hour,
    /// each key's its own, counted in the store (so both instances of a cluster take from one).
    @Test(arguments: Engine.allCases) func aKeysMailBudgetIsTakenAndRefilled(engine: Engine) throws {
        let store = try base.open(engine)
        #expect(try store.takeMailBudget(key: 1, count: 40, perHour: 60, now: 1_000_000) == 40)
        #expect(try store.takeMailBudget(key: 1, count: 40, perHour: 60, now: 1_000_000) == 20, "what is left")
        #expect(try store.takeMailBudget(key: 1, count: 1, perHour: 60, now: 1_000_000) == 0)
        #expect(try store.takeMailBudget(key: 2, count: 5, perHour: 60, now: 1_000_000) == 5, "another key's is its own")
        #expect(try store.takeMailBudget(key: 1, count: 10, perHour: 60, now: 1_000_000 + 300_000) == 5, "five minutes: five more")
        #expect(try base.open(engine).takeMailBudget(key: 1, count: 100, perHour: 60, now: 1_000_000 + 7_200_000) == 60, "never more than an hour's")
        #expect(try store.takeMailBudget(key: 1, count: 0, perHour: 60, now: 1_000_000) == 0)
    }

    @Test(arguments: Engine.allCases) func theLimitIsPerKeyAndDeletionHappensOnce(engine: Engine) throws {
        let store = try base.open(engine)
        #expect(try store.insertContact(contact(owner: 1, at: 1), limit: 2))
        let second = contact(owner: 1, at: 2)
        #expect(try store.insertContact(second, limit: 2))
        #expect(try !store.insertContact(contact(owner: 1, at: 3), limit: 2))
        #expect(try store.insertContact(contact(owner: 2, at: 3), limit: 2), "another key's count is its own")
        #expect(try store.deleteContact(id: second.id, withdrawingLinksAt: 5) == [])
        #expect(try store.deleteContact(id: second.id, withdrawingLinksAt: 6) == nil)
        #expect(try store.contact(id: second.id) == nil)
        #expect(try store.insertContact(contact(owner: 1, at: 4), limit: 2), "a place freed by a deletion is free")
    }
}

@Suite struct ContactRulesTests {
    @Test(arguments: ["anna@example.org", "a.b+c@mail.example.co.uk", "x@y.zz"])
    func takesAddresses(_ text: String) throws { #expect(try ContactRules.validEmail(text) == text) }

    @Test(arguments: ["", "anna", "anna@", "@example.org", "anna@example", "an na@example.org", "a@b@example.org", "anna@.example.org",
                      "anna@example.org.", "\"a\"@example.org", "anna@exa,mple.org", "<anna@example.org>", String(repeating: "a", count: 250) + "@x.org",
                      // What would make the operator's relay send elsewhere than the address says (issue: trust, second round):
                      // an address literal, source routes in the local part, a domain that is not a host name.
                      "x@[10.0.0.5]", "x@[IPv6:::1]", "a%b@c.d", "relay!anna@example.org", "anna@exa_mple.org", "anna@-example.org",
                      "anna@example..org", "anna@(comment)example.org"])
    func refusesWhatIsNotAnAddress(_ text: String) {
        #expect(throws: ContactRules.Refusal.self) { try ContactRules.validEmail(text) }
    }

    @Test(arguments: ["+4915123456789", "+12025550123", "+86138001380000"])
    func takesE164(_ text: String) throws { #expect(try ContactRules.validPhone(text) == text) }

    @Test(arguments: ["", "4915123456789", "+0151234567", "+49 151 2345678", "+1234567", "+1234567890123456", "+49-151-234567", "＋4915123456789"])
    func refusesWhatIsNotE164(_ text: String) {
        #expect(throws: ContactRules.Refusal.self) { try ContactRules.validPhone(text) }
    }

    @Test func namesAreBoundedInScalarsAndBytes() throws {
        #expect(try ContactRules.validName("  Anna  ") == "Anna")
        #expect(throws: ContactRules.Refusal.self) { try ContactRules.validName("   ") }
        #expect(throws: ContactRules.Refusal.self) { try ContactRules.validName("M" + String(repeating: "\u{301}", count: 200)) }
        #expect(throws: ContactRules.Refusal.self) { try ContactRules.validName("Anna\u{7}") }
        #expect(try ContactRules.validName(String(repeating: "安", count: 80)).unicodeScalars.count == 80)
        // Text that reads as another: a right-to-left override, an isolate, a zero-width space. The joiner inside an
        // emoji sequence stays.
        for hidden in ["Anna\u{202E}lrig", "Mum\u{2066}x", "Da\u{200B}d"] {
            #expect(performing: { try ContactRules.validName(hidden) }, throws: { ($0 as? ContactRules.Refusal)?.code == "invalid_name" })
        }
        #expect(try ContactRules.validName("Family 👨\u{200D}👩\u{200D}👧") == "Family 👨\u{200D}👩\u{200D}👧")
        #expect(try ContactRules.language("zh-CN") == .zhCN)
        #expect(throws: ContactRules.Refusal.self) { try ContactRules.language("de") }
    }
}
