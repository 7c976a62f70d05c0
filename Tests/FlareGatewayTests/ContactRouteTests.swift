import FlareAPI
import FlareCore
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway

/// `POST/GET /api/v1/contacts` and `GET/DELETE /api/v1/contacts/{id}`: owned by keys, checked, paged, bounded.
@Suite struct ContactRouteTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    func makeKey(_ label: String) throws -> CreatedKey {
        let reply = fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: #"{"label":"\#(label)"}"#)
        try #require(reply.status == 201, "\(reply.status): \(reply.text)")
        return try reply.decode(CreatedKey.self)
    }

    func add(_ key: String, _ json: String) -> Reply { fixture.send("POST", "/api/v1/contacts", bearer: key, json: json) }

    @Test func aContactIsAddedShownListedAndRemoved() throws {
        let created = add(fixture.ownerKey, #"{"name":" 安娜 ","email":"anna@example.org","phone":"+8613800138000","language":"zh-CN"}"#)
        try #require(created.status == 201, "\(created.status): \(created.text)")
        let contact = try created.decode(ContactInfo.self)
        #expect(contact.name == "安娜" && contact.email == "anna@example.org" && contact.phone == "+8613800138000" && contact.language == "zh-CN")
        #expect(ContactID(contact.id) != nil && created.header("Location") == "/api/v1/contacts/\(contact.id)")
        let plain = try add(fixture.ownerKey, #"{"name":"Ben"}"#).decode(ContactInfo.self)
        #expect(plain.language == "en" && plain.email == nil && plain.phone == nil)
        #expect(try fixture.send("GET", "/api/v1/contacts/\(contact.id)", bearer: fixture.ownerKey).decode(ContactInfo.self) == contact)
        #expect(try fixture.send("GET", "/api/v1/contacts", bearer: fixture.ownerKey).decode(ContactList.self).contacts.map(\.id)
                == [plain.id, contact.id])
        let removed = fixture.send("DELETE", "/api/v1/contacts/\(contact.id)", bearer: fixture.ownerKey)
        #expect(removed.status == 204)
        #expect(fixture.send("DELETE", "/api/v1/contacts/\(contact.id)", bearer: fixture.ownerKey).status == 404)
        #expect(fixture.send("GET", "/api/v1/contacts/\(contact.id)", bearer: fixture.ownerKey).errorCode == "not_found")
    }

    @Test func aLimitedKeySeesOnlyItsOwnAndAnothersIdIsUnknownToIt() throws {
        let anna = try makeKey("Anna"), ben = try makeKey("Ben")
        let annas = try add(anna.key, #"{"name":"Mum"}"#).decode(ContactInfo.self)
        let bens = try add(ben.key, #"{"name":"Dad"}"#).decode(ContactInfo.self)
        #expect(try fixture.send("GET", "/api/v1/contacts", bearer: anna.key).decode(ContactList.self).contacts.map(\.id) == [annas.id])
        for (method, path) in [("GET", "/api/v1/contacts/\(bens.id)"), ("DELETE", "/api/v1/contacts/\(bens.id)")] {
            let reply = fixture.send(method, path, bearer: anna.key)
            #expect(reply.status == 404 && reply.errorCode == "not_found", "\(method) \(path): \(reply.status)")
        }
        #expect(fixture.send("GET", "/api/v1/contacts/\(bens.id)", bearer: ben.key).status == 200, "Ben's contact is still there")
        // The admin key sees them all.
        #expect(try Set(fixture.send("GET", "/api/v1/contacts", bearer: fixture.ownerKey).decode(ContactList.self).contacts.map(\.id))
                == [annas.id, bens.id])
    }

    @Test(arguments: [
        (#"not json"#, "invalid_json"), (#"{}"#, "invalid_name"), (#"{"name":"  "}"#, "invalid_name"), (#"{"name":7}"#, "invalid_name"),
        (#"{"name":"A","email":"anna"}"#, "invalid_email"), (#"{"name":"A","email":5}"#, "invalid_email"),
        (#"{"name":"A","phone":"0151 2345678"}"#, "invalid_phone"), (#"{"name":"A","language":"de"}"#, "invalid_language"),
    ])
    func badInputIsRefusedWithANamedCodeAndStoresNothing(_ body: String, _ code: String) throws {
        let reply = add(fixture.ownerKey, body)
        #expect(reply.status == 400 && reply.errorCode == code, "\(body): \(reply.status) \(reply.text)")
        #expect(try fixture.send("GET", "/api/v1/contacts", bearer: fixture.ownerKey).decode(ContactList.self).contacts.isEmpty)
    }

    @Test func anOverlongNameIsRefused() {
        let reply = add(fixture.ownerKey, #"{"name":"\#(String(repeating: "a", count: 81))"}"#)
        #expect(reply.status == 400 && reply.errorCode == "invalid_name")
    }

    @Test func listingPagesWithACursorAndChecksItsQuery() throws {
        for index in 0..<5 { #expect(add(fixture.ownerKey, #"{"name":"C\#(index)"}"#).status == 201) }
        var seen: [String] = []
        var query = ["limit": "2"]
        while true {
            let page = try fixture.send("GET", "/api/v1/contacts", query: query, bearer: fixture.ownerKey).decode(ContactList.self)
            seen += page.contacts.map(\.name)
            guard let next = page.nextCursor else { break }
            query["cursor"] = next
        }
        #expect(seen == ["C4", "C3", "C2", "C1", "C0"])
        #expect(fixture.send("GET", "/api/v1/contacts", query: ["limit": "0"], bearer: fixture.ownerKey).errorCode == "invalid_limit")
        #expect(fixture.send("GET", "/api/v1/contacts", query: ["cursor": "nonsense!"], bearer: fixture.ownerKey).errorCode == "invalid_cursor")
    }

    @Test func withoutACurrentKeyItIsUnauthorizedAndGuessingIsCutOff() throws {
        #expect(fixture.send("GET", "/api/v1/contacts").status == 401)
        #expect(fixture.send("POST", "/api/v1/contacts", json: #"{"name":"A"}"#).status == 401)
        // A wrong key costs the address as an unknown link does: a guesser is soon answered 429.
        var statuses: [Int] = []
        for _ in 0..<8 { statuses.append(fixture.send("GET", "/api/v1/contacts", bearer: "flare_owner_" + Secret.generate().text).status) }
        #expect(statuses.contains(429), "\(statuses)")
        #expect(fixture.send("PUT", "/api/v1/contacts", bearer: fixture.ownerKey).status == 405)
    }

    @Test func oneKeyAddingContactsInABurstIsSlowedDown() throws {
        let key = try makeKey("script")
        var statuses: [Int] = []
        for index in 0..<40 { statuses.append(add(key.key, #"{"name":"C\#(index)"}"#).status) }
        #expect(statuses.prefix(30).allSatisfy { $0 == 201 } && statuses.suffix(10).allSatisfy { $0 == 429 }, "\(statuses)")
    }
}
