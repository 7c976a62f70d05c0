import FlareTestSupport
import Foundation
import Testing

/// What an old credential could still do after the emergency stop, tried against the built binaries.
@Suite struct TrustTests {
    /// `flare token-key rotate` is the documented emergency stop. Personal links' tokens are derived from the token
    /// key; after the rotation and the restart it asks for, every personal link's old URL answers 404 and
    /// `flare share links` shows new URLs that open (issue: trust, second round, 3).
    @Test func aTokenKeyRotationEndsThePersonalLinksOldURLs() throws {
        let broker = try TestBroker()
        var flared = try FlaredProcess(broker: broker)
        let contact = try flared.request("POST", "/api/v1/contacts", body: #"{"name":"Mum"}"#, bearer: flared.ownerKey)
        let contactID = try #require(contact.json?["id"] as? String, "\(contact.text)")
        let created = try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":3600,"contacts":["\#(contactID)"]}"#, bearer: flared.ownerKey)
        let shareID = try #require(created.json?["share_id"] as? String, "\(created.text)")
        let oldURL = try #require(((created.json?["links"] as? [[String: Any]])?.first?["url"] as? String))
        let oldToken = String(try #require(oldURL.split(separator: "/").last))
        #expect(try flared.request("GET", "/api/v1/view/\(oldToken)").status == 200)
        let directory = flared.dataDirectory
        flared.stop()

        let rotated = try runCommand(try BuiltProducts.path("flare"), ["token-key", "rotate", "--data-dir", directory.path])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        flared = try FlaredProcess(broker: broker, dataDirectory: directory)
        defer { flared.stop() }
        #expect(try flared.request("GET", "/api/v1/view/\(oldToken)").status == 404, "the old URL is dead")
        #expect(try flared.request("GET", "/s/\(oldToken)").status == 404)
        let listed = try flared.flare(["share", "links", shareID, "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let links = try #require((try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any])?["links"] as? [[String: Any]])
        let newURL = try #require(links.first?["url"] as? String)
        #expect(newURL != oldURL)
        #expect(try flared.request("GET", "/api/v1/view/\(String(try #require(newURL.split(separator: "/").last)))").status == 200)
        #expect(flared.log.contains("1 personal links given new URLs"))
    }
}
