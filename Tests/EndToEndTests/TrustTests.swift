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

    /// A key revoked with `flare keys revoke` (straight into the store, flared running) or over HTTP leaves nothing
    /// running: its live shares end (their links say so), while another key's go on (issue: trust, second round, 1).
    @Test func aRevokedKeysSharesStopWhicheverWayItWasRevoked() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        defer { flared.stop() }
        func limitedKey(_ label: String) throws -> (id: String, key: String) {
            let made = try flared.request("POST", "/api/v1/keys", body: #"{"label":"\#(label)"}"#, bearer: flared.ownerKey)
            let info = try #require(made.json?["info"] as? [String: Any], "\(made.text)")
            return (try #require(info["id"] as? String), try #require(made.json?["key"] as? String))
        }
        func share(_ key: String) throws -> (id: String, link: String) {
            let created = try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":3600}"#, bearer: key)
            return (try #require(created.json?["share_id"] as? String, "\(created.text)"),
                    String(try #require((created.json?["share_url"] as? String)?.split(separator: "/").last)))
        }
        // Watched with the admin key (the link's own rate limit is not what this is about), then each link once.
        func state(_ share: (id: String, link: String)) -> String? {
            (try? flared.request("GET", "/api/v1/shares/\(share.id)", bearer: flared.ownerKey))?.json?["state"] as? String
        }
        let byCLI = try limitedKey("lost phone"), byHTTP = try limitedKey("stolen tablet"), kept = try limitedKey("kept")
        let cliShare = try share(byCLI.key), httpShare = try share(byHTTP.key), keptShare = try share(kept.key)

        let revoked = try flared.flare(["keys", "revoke", byCLI.id])
        #expect(revoked.status == 0 && revoked.stdout.contains("flared stops its 1 live shares"), "\(revoked.stdout)\(revoked.stderr)")
        #expect(eventually(timeout: .seconds(10)) { state(cliShare) == "ended" })
        #expect(try flared.request("DELETE", "/api/v1/keys/\(byHTTP.id)", bearer: flared.ownerKey).status == 200)
        #expect(state(httpShare) == "ended", "at once on the instance that revoked it")
        for (share, status) in [(cliShare, 410), (httpShare, 410), (keptShare, 200)] {
            #expect(try flared.request("GET", "/api/v1/view/\(share.link)").status == status)
        }
        #expect(flared.log.contains("owner key \(byCLI.id) revoked: 1 live shares stopped"))
    }
}
