import FlareAPI
import FlareCore
import FlareShares
import FlareStore
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway

/// A link per contact: made with the share or later, listed, each withdrawn on its own, named in the audience, the
/// answers and `link.opened`; another key's contacts and shares out of reach.
@Suite struct PersonalLinkTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    func contact(_ name: String, key: String? = nil) throws -> ContactInfo {
        let reply = fixture.send("POST", "/api/v1/contacts", bearer: key ?? fixture.ownerKey, json: #"{"name":"\#(name)"}"#)
        try #require(reply.status == 201, "\(reply.text)")
        return try reply.decode(ContactInfo.self)
    }

    func create(contacts: [String], key: String? = nil) -> Reply {
        let list = contacts.map { "\"\($0)\"" }.joined(separator: ",")
        return fixture.send("POST", "/api/v1/shares", bearer: key ?? fixture.ownerKey, json: #"{"name":"Anna","contacts":[\#(list)]}"#)
    }

    static func token(_ url: String) -> String { String(url.split(separator: "/").last ?? "") }

    /// Every string in a JSON document, at any depth.
    static func stringValues(of body: [UInt8]) throws -> [String] {
        func strings(_ value: Any) -> [String] {
            switch value {
            case let text as String: [text]
            case let object as [String: Any]: object.values.flatMap(strings)
            case let array as [Any]: array.flatMap(strings)
            default: []
            }
        }
        return strings(try JSONSerialization.jsonObject(with: Data(body)))
    }

    @Test func aShareWithContactsAnswersALinkEachAndWithoutThemOnlyStrings() throws {
        let mum = try contact("Mum"), dad = try contact("Dad")
        let reply = create(contacts: [mum.id, dad.id])
        try #require(reply.status == 201, "\(reply.text)")
        let created = try reply.decode(CreatedShare.self)
        let links = try #require(created.links)
        #expect(links.map(\.name) == ["Mum", "Dad"] && links.map(\.contactID) == [mum.id, dad.id])
        #expect(Set(links.map(\.url)).count == 2 && !links.map(\.url).contains(created.shareURL.absoluteString))
        for link in links {
            #expect(link.url.hasPrefix(GatewayFixture.publicURL + "/s/") && Secret.isWellFormed(Self.token(link.url)))
            let view = fixture.send("GET", "/api/v1/view/\(Self.token(link.url))")
            #expect(try view.status == 200 && view.decode(ViewDocument.self).name == "Anna")
        }
        #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)").status == 200, "the share's own link works too")
        // The seed's iOS client decodes the answer as [String: String]: without contacts it still can.
        let plain = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"name":"Anna"}"#)
        #expect((try? JSONDecoder().decode([String: String].self, from: Data(plain.bytes))) != nil, "\(plain.text)")
        let listed = try fixture.send("GET", "/api/v1/shares/\(created.shareID)/links", bearer: fixture.ownerKey).decode(PersonalLinkList.self)
        #expect(listed.links.map(\.url) == links.map(\.url) && listed.links.allSatisfy { $0.withdrawnAt == nil && $0.firstOpenedAt != nil })
        // What an SMS gateway texts from: one link.created per contact, by ids only.
        let made = try fixture.store.dueEvents(now: Int64.max / 2, limit: 100).filter { $0.event.type == .linkCreated }
        #expect(Set(made.map { String(decoding: $0.event.body, as: UTF8.self) }.flatMap { body in links.filter { body.contains($0.linkID) }.map(\.linkID) })
                == Set(links.map(\.linkID)) && made.count == 2)
        // Compared value by value: a random id may well contain "Dad" by chance, but no value is a name or a link.
        for event in made {
            let values = try Self.stringValues(of: event.event.body)
            #expect(!values.isEmpty && values.allSatisfy { value in
                !["Mum", "Dad"].contains(value) && !value.contains("/s/") && links.allSatisfy { !value.contains(Self.token($0.url)) }
            }, "\(values)")
        }
    }

    @Test func withdrawingOneLinkEndsItAloneAndItsPageShowsNothingOfTheShare() throws {
        let mum = try contact("Mum"), dad = try contact("Dad")
        let created = try create(contacts: [mum.id, dad.id]).decode(CreatedShare.self)
        try fixture.recordFix(created, latitude: 52.52, longitude: 13.40, tst: GatewayFixture.now - 5)
        let links = try #require(created.links)
        let mumToken = Self.token(links[0].url), dadToken = Self.token(links[1].url)
        let stream = try #require(fixture.send("GET", "/api/v1/view/\(mumToken)/events").stream)
        let events = EventStreamReader(stream)
        let dadStream = EventStreamReader(try #require(fixture.send("GET", "/api/v1/view/\(dadToken)/events").stream))
        let withdrawn = fixture.send("DELETE", "/api/v1/shares/\(created.shareID)/links/\(links[0].linkID)", bearer: fixture.ownerKey)
        #expect(withdrawn.status == 204, "\(withdrawn.text)")
        var sawEnd = false
        while let event = events.next(timeout: .seconds(10)) {
            if event.name == "ended" { sawEnd = event.data?.contains("\"withdrawn\"") == true; break }
        }
        #expect(sawEnd, "Mum's live stream ended with reason withdrawn")
        #expect(!dadStream.finished, "Dad's stream goes on")
        let view = fixture.send("GET", "/api/v1/view/\(mumToken)")
        #expect(view.status == 410)
        let document = try view.decode(ViewDocument.self)
        #expect(document.reason == "withdrawn" && document.name == "" && document.last == nil && document.trail.isEmpty && document.answers == [])
        #expect(!view.text.contains("52.52") && !view.text.contains("Anna"))
        // Nor of its expiry: an extension is not seen through a withdrawn link.
        let before = try #require(view.jsonObject?["expires_at"] as? String)
        #expect(fixture.send("POST", "/api/v1/shares/\(created.shareID)/extend", bearer: fixture.ownerKey, json: #"{"duration_s":7200}"#).status == 200)
        let after = fixture.send("GET", "/api/v1/view/\(mumToken)")
        #expect(after.jsonObject?["expires_at"] as? String == before && !after.text.contains(RFC3339.format(created.expiresAt)))
        let page = fixture.send("GET", "/s/\(mumToken)")
        #expect(page.status == 200 && !page.text.contains("<title>Anna"), "the page names nothing of the share")
        #expect(fixture.send("POST", "/api/v1/view/\(mumToken)/answers", json: #"{"kind":"on_my_way"}"#).errorCode == "link_withdrawn")
        #expect(fixture.send("GET", "/api/v1/view/\(mumToken)/events").status == 410)
        #expect(fixture.send("GET", "/api/v1/view/\(dadToken)").status == 200)
        #expect(fixture.send("GET", "/api/v1/view/\(created.viewToken)").status == 200)
        #expect(fixture.send("DELETE", "/api/v1/shares/\(created.shareID)/links/\(LinkID.generate())", bearer: fixture.ownerKey).status == 404)
        let listed = try fixture.send("GET", "/api/v1/shares/\(created.shareID)/links", bearer: fixture.ownerKey).decode(PersonalLinkList.self)
        #expect(listed.links.first?.withdrawnAt != nil && listed.links.last?.withdrawnAt == nil)
    }

    /// Deleting a contact withdraws its links on every running share: the page says withdrawn, the live stream ends,
    /// the other contacts' links go on (issue: trust, second round, 3).
    @Test func deletingAContactWithdrawsItsLinks() throws {
        let mum = try contact("Mum"), dad = try contact("Dad")
        let first = try create(contacts: [mum.id, dad.id]).decode(CreatedShare.self)
        let second = try create(contacts: [mum.id]).decode(CreatedShare.self)
        let mumToken = Self.token(try #require(first.links)[0].url), dadToken = Self.token(try #require(first.links)[1].url)
        let mumSecond = Self.token(try #require(second.links)[0].url)
        let events = EventStreamReader(try #require(fixture.send("GET", "/api/v1/view/\(mumToken)/events").stream))
        #expect(fixture.send("DELETE", "/api/v1/contacts/\(mum.id)", bearer: fixture.ownerKey).status == 204)
        var sawEnd = false
        while let event = events.next(timeout: .seconds(10)) {
            if event.name == "ended" { sawEnd = event.data?.contains("\"withdrawn\"") == true; break }
        }
        #expect(sawEnd, "Mum's live stream ended with reason withdrawn")
        for token in [mumToken, mumSecond] {
            let view = fixture.send("GET", "/api/v1/view/\(token)")
            #expect(view.status == 410 && view.jsonObject?["reason"] as? String == "withdrawn", "\(view.text)")
        }
        #expect(fixture.send("GET", "/api/v1/view/\(dadToken)").status == 200)
        let listed = try fixture.send("GET", "/api/v1/shares/\(first.shareID)/links", bearer: fixture.ownerKey).decode(PersonalLinkList.self)
        #expect(listed.links.map { $0.withdrawnAt != nil } == [true, false])
    }

    @Test func theAudienceNamesWhoOpenedAndTheAnswersWhoAnswered() throws {
        let mum = try contact("Mum"), dad = try contact("Dad")
        let created = try create(contacts: [mum.id, dad.id]).decode(CreatedShare.self)
        let links = try #require(created.links)
        let viewer = "viewer-0123456789abcdef"
        #expect(fixture.send("GET", "/api/v1/view/\(Self.token(links[0].url))", query: ["v": viewer]).status == 200)
        #expect(fixture.send("GET", "/api/v1/view/\(Self.token(links[0].url))", query: ["v": viewer]).status == 200)
        let status = try fixture.send("GET", "/api/v1/shares/\(created.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        let audience = try #require(status.audience?.links)
        #expect(audience.map(\.name) == ["Mum", "Dad"] && audience.map(\.linkID) == links.map(\.linkID))
        #expect(audience[0].firstOpenedAt != nil && audience[0].watchingNow && audience[1].firstOpenedAt == nil && !audience[1].watchingNow)
        // Once per link, by id: never a name, a URL or its token.
        let opened = try fixture.store.dueEvents(now: Int64.max / 2, limit: 100).filter { $0.event.type == .linkOpened }
        #expect(opened.count == 1, "\(opened.map(\.event.type))")
        let values = try Self.stringValues(of: try #require(opened.first).event.body)
        #expect(values.contains(links[0].linkID) && values.contains(mum.id) && !values.contains("Mum")
                && values.allSatisfy { !$0.contains(Self.token(links[0].url)) }, "\(values)")
        // An answer through Dad's link is Dad's, whatever was typed.
        let answer = fixture.send("POST", "/api/v1/view/\(Self.token(links[1].url))/answers", json: #"{"kind":"on_my_way","name":"Someone else"}"#)
        #expect(try answer.status == 201 && answer.decode(ShareAnswer.self).name == "Dad", "\(answer.text)")
        let typed = fixture.send("POST", "/api/v1/view/\(created.viewToken)/answers", json: #"{"kind":"cannot_help","name":"Ben"}"#)
        #expect(try typed.decode(ShareAnswer.self).name == "Ben")
    }

    @Test func linksAreAddedToARunningShareAndNotToAnEndedOne() throws {
        let created = try fixture.createShare()
        let mum = try contact("Mum")
        let added = fixture.send("POST", "/api/v1/shares/\(created.shareID)/links", bearer: fixture.ownerKey, json: #"{"contacts":["\#(mum.id)"]}"#)
        #expect(added.status == 201, "\(added.text)")
        let link = try #require(try added.decode(CreatedLinks.self).links.first)
        #expect(fixture.send("GET", "/api/v1/view/\(Self.token(link.url))").status == 200)
        #expect(fixture.send("POST", "/api/v1/shares/\(created.shareID)/stop", bearer: fixture.ownerKey).status == 200)
        let late = fixture.send("POST", "/api/v1/shares/\(created.shareID)/links", bearer: fixture.ownerKey, json: #"{"contacts":["\#(mum.id)"]}"#)
        #expect(late.status == 409 || late.status == 410, "\(late.status) \(late.text)")
        #expect(fixture.send("GET", "/api/v1/view/\(Self.token(link.url))").status == 410, "an ended share's personal link says it ended")
    }

    @Test(arguments: [(#"{"contacts":"x"}"#, "invalid_contacts"), (#"{"contacts":[1]}"#, "invalid_contacts"), (#"{"contacts":["nope"]}"#, "invalid_contacts")])
    func malformedContactsAreRefused(_ body: String, _ code: String) {
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: body)
        #expect(reply.status == 400 && reply.errorCode == code, "\(reply.status) \(reply.text)")
    }

    @Test func unknownRepeatedTooManyAndOtherKeysContactsAreRefusedAndNothingIsMade() throws {
        let mum = try contact("Mum")
        #expect(create(contacts: [ContactID.generate().rawValue]).errorCode == "unknown_contact")
        #expect(create(contacts: [mum.id, mum.id]).errorCode == "invalid_contacts")
        let many = try (0...ShareService.linksPerShare).map { try contact("C\($0)").id }
        #expect(create(contacts: many).errorCode == "too_many_links")
        let key = try fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: #"{"label":"Ben"}"#).decode(CreatedKey.self)
        #expect(create(contacts: [mum.id], key: key.key).errorCode == "unknown_contact", "the admin key's contact is not Ben's")
        let listed = try fixture.send("GET", "/api/v1/shares", bearer: fixture.ownerKey).decode(ShareList.self)
        #expect(listed.shares.isEmpty, "no share was made")
        // Ben's key cannot reach the admin's share's links either.
        let shared = try create(contacts: [mum.id]).decode(CreatedShare.self)
        let linkID = try #require(shared.links?.first?.linkID)
        for (method, path) in [("GET", "/api/v1/shares/\(shared.shareID)/links"), ("DELETE", "/api/v1/shares/\(shared.shareID)/links/\(linkID)"),
                               ("POST", "/api/v1/shares/\(shared.shareID)/links")] {
            let reply = fixture.send(method, path, bearer: key.key, json: #"{"contacts":["\#(mum.id)"]}"#)
            #expect(reply.status == 404, "\(method) \(path): \(reply.status)")
        }
    }

    @Test func anotherInstanceServesALinkMadeHereAndKnowsItWithdrawn() throws {
        let mum = try contact("Mum"), dad = try contact("Dad")
        let created = try create(contacts: [mum.id, dad.id]).decode(CreatedShare.self)
        let links = try #require(created.links)
        #expect(fixture.send("DELETE", "/api/v1/shares/\(created.shareID)/links/\(links[0].linkID)", bearer: fixture.ownerKey).status == 204)
        // A second instance over the same database, which has heard of none of it: the store answers.
        let other = try GatewayFixture(sharingDatabaseOf: fixture)
        #expect(other.send("GET", "/api/v1/view/\(Self.token(links[1].url))").status == 200)
        let withdrawn = other.send("GET", "/api/v1/view/\(Self.token(links[0].url))")
        #expect(withdrawn.status == 410 && (try? withdrawn.decode(ViewDocument.self).reason) == "withdrawn", "\(withdrawn.text)")
        let listed = try other.send("GET", "/api/v1/shares/\(created.shareID)/links", bearer: fixture.ownerKey).decode(PersonalLinkList.self)
        #expect(listed.links.map(\.url) == links.map(\.url), "the URLs are the same on every instance (derived, not stored)")
    }
}
