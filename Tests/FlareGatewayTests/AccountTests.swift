import FlareAPI
import FlareBridge
import FlareShares
import FlareCore
import FlareEvents
import FlareSQLite
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway

/// Keys own the shares they create: two limited keys and an admin key through the gateway's routes.
@Suite struct AccountTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    /// A new key through `POST /api/v1/keys` as the fixture's (admin) key.
    func makeKey(_ json: String) throws -> CreatedKey {
        let reply = fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: json)
        try #require(reply.status == 201, "\(reply.status): \(reply.text)")
        return try reply.decode(CreatedKey.self)
    }

    func create(_ key: String, _ json: String = "{}") -> Reply {
        fixture.send("POST", "/api/v1/shares", bearer: key, json: json)
    }

    func listed(_ key: String, query: [String: String] = [:]) throws -> [String] {
        let reply = fixture.send("GET", "/api/v1/shares", query: query, bearer: key)
        try #require(reply.status == 200, "\(reply.status): \(reply.text)")
        return try reply.decode(ShareList.self).shares.map(\.shareID)
    }

    @Test func eachLimitedKeySeesOnlyItsOwnSharesAndTheOthersAnswerNotFound() throws {
        let anna = try makeKey(#"{"label":"Anna's phone"}"#), ben = try makeKey(#"{"label":"Ben's phone"}"#)
        #expect(anna.info.kind == .limited && anna.info.label == "Anna's phone" && anna.key.hasPrefix("flare_owner_"))
        let annas = try create(anna.key).decode(CreatedShare.self)
        let bens = try create(ben.key).decode(CreatedShare.self)
        let admins = try fixture.createShare()
        #expect(try listed(anna.key) == [annas.shareID])
        #expect(try listed(ben.key) == [bens.shareID])
        #expect(try Set(listed(fixture.ownerKey)) == [annas.shareID, bens.shareID, admins.shareID])
        #expect(try listed(fixture.ownerKey, query: ["key": anna.info.id]) == [annas.shareID])
        #expect(try listed(anna.key, query: ["key": ben.info.id]).isEmpty)

        // Every endpoint answers for Ben's share as for one that does not exist, and leaves it alone.
        let base = "/api/v1/shares/\(bens.shareID)"
        for (method, path) in [("GET", base), ("POST", base + "/stop"), ("POST", base + "/extend"), ("POST", base + "/watch-tokens"),
                               ("GET", base + "/owntracks"), ("GET", base + "/owntracks.otrc"), ("GET", base + "/owntracks/link"),
                               ("GET", base + "/owntracks/qr.png")] {
            let reply = fixture.send(method, path, bearer: anna.key)
            #expect(reply.status == 404 && reply.errorCode == "not_found", "\(method) \(path): \(reply.status)")
        }
        #expect(fixture.send("GET", base, bearer: ben.key).status == 200)
        // Also once it has ended, where its owner hears 409 or 410.
        #expect(fixture.send("POST", base + "/stop", bearer: ben.key).status == 200)
        #expect(fixture.send("POST", base + "/extend", bearer: ben.key).status == 409)
        #expect(fixture.send("POST", base + "/extend", bearer: anna.key).status == 404)
        #expect(fixture.send("GET", base + "/owntracks", bearer: anna.key).status == 404)
        // The admin key controls them all.
        #expect(fixture.send("POST", "/api/v1/shares/\(annas.shareID)/extend", bearer: fixture.ownerKey, json: #"{"duration_s":600}"#).status == 200)
    }

    @Test func quotasAreHitNamedAndRecover() throws {
        let phone = try makeKey(#"{"label":"phone","max_live":1,"max_duration_s":600,"create_rate_per_hour":3}"#)
        #expect(phone.info.maxLive == 1 && phone.info.maxDurationSeconds == 600 && phone.info.createRatePerHour == 3)
        // Longer than the key allows: refused, and waiting does not help.
        let long = create(phone.key, #"{"duration_s":3600}"#)
        #expect(long.status == 429 && long.errorCode == "quota_exceeded" && long.header("Retry-After") == nil)
        #expect(try long.decode(QuotaErrorBody.self).limit == "max_duration_s")
        // No duration: the server's default (3600 s) is shortened to the key's bound.
        let first = try create(phone.key).decode(CreatedShare.self)
        #expect(first.durationSeconds == 600)
        // One live share at a time: the second waits for the first to end.
        let second = create(phone.key)
        let secondBody = try second.decode(QuotaErrorBody.self)
        #expect(second.status == 429 && secondBody.limit == "max_live")
        #expect(Int(second.header("Retry-After") ?? "") ?? 0 > 500)
        // The phone may extend, but not past the key's bound on the whole length.
        let extended = fixture.send("POST", "/api/v1/shares/\(first.shareID)/extend", bearer: first.deviceToken, json: #"{"duration_s":3000}"#)
        let extendedBody = try extended.decode(QuotaErrorBody.self)
        #expect(extended.status == 429 && extendedBody.limit == "max_duration_s")
        #expect(fixture.send("POST", "/api/v1/shares/\(first.shareID)/extend", bearer: first.deviceToken, json: #"{"duration_s":300}"#).status == 200)
        // Once it has ended, the next one is created; then the hourly rate is spent.
        #expect(fixture.send("POST", "/api/v1/shares/\(first.shareID)/stop", bearer: phone.key).status == 200)
        let again = try create(phone.key).decode(CreatedShare.self)
        #expect(fixture.send("POST", "/api/v1/shares/\(again.shareID)/stop", bearer: phone.key).status == 200)
        _ = try create(phone.key).decode(CreatedShare.self)
        // Three created this hour (the refused ones do not count); the live one ends, and the rate holds.
        let live = try listed(phone.key, query: ["state": "active"]).first ?? ""
        #expect(fixture.send("POST", "/api/v1/shares/\(live)/stop", bearer: phone.key).status == 200)
        let fourth = create(phone.key)
        let fourthBody = try fourth.decode(QuotaErrorBody.self)
        #expect(fourth.status == 429 && fourthBody.limit == "create_rate")
        #expect(Int(fourth.header("Retry-After") ?? "") ?? 0 > 3000)
        #expect(fixture.metrics.renderText().contains(#"flare_quota_refusals_total{limit="create_rate"} 1"#))
        #expect(fixture.metrics.renderText().contains(#"flare_quota_refusals_total{limit="max_live"} 1"#))
    }

    /// A revoked key (a lost phone's) stops at once, and so do its live shares: nobody keeps an SOS running with a key
    /// that is gone (trust, second round, 1; before, its shares ran on until they ended).
    @Test func aRevokedKeyStopsAtOnceAndSoDoItsShares() throws {
        let phone = try makeKey(#"{"label":"lost phone"}"#)
        let share = try create(phone.key).decode(CreatedShare.self)
        let revoked = fixture.send("DELETE", "/api/v1/keys/\(phone.info.id)", bearer: fixture.ownerKey)
        let revokedInfo = try revoked.decode(KeyInfo.self)
        #expect(revoked.status == 200 && revokedInfo.revokedAt != nil)
        #expect(fixture.send("GET", "/api/v1/shares/\(share.shareID)", bearer: phone.key).status == 401)
        #expect(create(phone.key).status == 401)
        // The share ended with it: its link says so, its phone's positions are refused, an admin sees it stopped.
        #expect(fixture.send("GET", "/api/v1/view/\(share.shareURL.lastPathComponent)").status == 410)
        #expect(fixture.send("POST", "/api/v1/shares/\(share.shareID)/locations", bearer: share.deviceToken,
                             json: #"{"lat":48.1,"lon":11.5}"#).status == 410)
        let keys = try fixture.send("GET", "/api/v1/keys", bearer: fixture.ownerKey).decode(KeyList.self).keys
        #expect(keys.first { $0.id == phone.info.id }?.liveShares == 0)
        #expect(try fixture.send("GET", "/api/v1/shares/\(share.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self).state == .ended)
        #expect(fixture.send("DELETE", "/api/v1/keys/\(phone.info.id)", bearer: fixture.ownerKey).status == 200)  // again: the same
        #expect(fixture.send("DELETE", "/api/v1/keys/999999", bearer: fixture.ownerKey).status == 404)
    }

    /// A key's times are RFC 3339, as every time of the API (they were seconds since 2001, Foundation's reference date,
    /// which the OpenAPI document would have had to call a number).
    @Test func aKeysTimesAreRFC3339() throws {
        let phone = try makeKey(#"{"label":"phone"}"#)
        #expect(create(phone.key).status == 201)
        let revoked = fixture.send("DELETE", "/api/v1/keys/\(phone.info.id)", bearer: fixture.ownerKey)
        let listed = try #require(fixture.send("GET", "/api/v1/keys", bearer: fixture.ownerKey).jsonObject?["keys"] as? [[String: Any]])
        for key in [try #require(revoked.jsonObject), try #require(listed.first { $0["id"] as? String == phone.info.id })] {
            for field in ["created_at", "last_used_at", "revoked_at"] {
                let text = try #require(key[field] as? String, "\(field): \(String(describing: key[field]))")
                #expect(RFC3339.parse(text) != nil, "\(field): \(text)")
            }
        }
    }

    /// The daemon remembers a key it found (a lookup per request cost as much as a share's insert), so the test is
    /// that a revocation from the command line, another connection to the file, still ends it at the next request.
    @Test func aKeyRevokedFromTheCommandLineStopsAtTheNextRequest() throws {
        let phone = try makeKey(#"{"label":"lost phone"}"#)
        #expect(create(phone.key).status == 201)
        #expect(create(phone.key).status == 201, "now answered from what the daemon remembers")
        let commandLine = try SQLiteShareStore(path: fixture.store.path)
        #expect(try commandLine.revokeOwnerKey(id: try #require(Int64(phone.info.id)), at: GatewayFixture.now * 1000))
        #expect(create(phone.key).status == 401)
        #expect(fixture.send("GET", "/api/v1/keys", bearer: phone.key).status == 401)
        #expect(create(fixture.ownerKey).status == 201, "another key goes on")
    }

    @Test func onlyAdminKeysManageKeysAndTheKeyItselfIsNeverListed() throws {
        let phone = try makeKey(#"{"label":"phone"}"#)
        #expect(fixture.send("POST", "/api/v1/keys", bearer: phone.key, json: #"{"admin":true}"#).status == 403)
        #expect(fixture.send("DELETE", "/api/v1/keys/\(phone.info.id)", bearer: phone.key).status == 403)
        #expect(fixture.send("POST", "/api/v1/keys", json: "{}").status == 401)
        // A limited key lists itself only; nobody sees a key again.
        let own = try fixture.send("GET", "/api/v1/keys", bearer: phone.key).decode(KeyList.self).keys
        #expect(own.map(\.id) == [phone.info.id])
        let all = fixture.send("GET", "/api/v1/keys", bearer: fixture.ownerKey)
        #expect(try all.decode(KeyList.self).keys.count == 2 && !all.text.contains(phone.key) && !all.text.contains(fixture.ownerKey))
        #expect(try all.decode(KeyList.self).keys.first?.kind == .admin)
        // The enrolment link carries the public URL and the key, for the phone to scan.
        let enrollment = try #require(Enrollment(link: phone.enrollmentURL))
        #expect(enrollment.key == phone.key && enrollment.server.absoluteString == GatewayFixture.publicURL)
    }

    /// Setting a limited key's webhook while its host name's DNS does not answer: 503 with `Retry-After` (the request
    /// does not wait for the lookup), and once the name has answered, the retry sets it.
    @Test func aWebhookWhoseNameHasNotResolvedYetIsAnsweredRetry() throws {
        let resolver = HeldResolver()
        defer { resolver.release() }
        let fixture = try GatewayFixture(hostResolver: resolver)
        let created = fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: #"{"label":"phone"}"#)
        let phone = try created.decode(CreatedKey.self)
        let path = "/api/v1/keys/\(phone.info.id)/webhook"

        let waiting = fixture.send("PUT", path, bearer: phone.key, json: #"{"url":"https://hooks.example.org/flare"}"#)
        #expect(waiting.status == 503 && waiting.errorCode == "webhook_lookup_unfinished" && waiting.header("Retry-After") == "5", "\(waiting.text)")
        resolver.release()
        #expect(eventually(timeout: .seconds(30)) { resolver.answered == 1 })
        let set = fixture.send("PUT", path, bearer: phone.key, json: #"{"url":"https://hooks.example.org/flare"}"#)
        #expect(set.status == 200, "\(set.text)")
        #expect(try set.decode(WebhookCreated.self).url == "https://hooks.example.org/flare")
    }

    @Test func badKeyRequestsAreRefusedClearly() throws {
        for (body, code) in [(#"{"max_live":0}"#, "invalid_max_live"), (#"{"max_live":1.5}"#, "invalid_max_live"),
                             (#"{"max_duration_s":99999999}"#, "invalid_max_duration_s"), (#"{"create_rate_per_hour":"3"}"#, "invalid_create_rate_per_hour"),
                             (#"{"admin":"yes"}"#, "invalid_admin"), (#"{"label":"a\u0007b"}"#, "invalid_label"),
                             ("{\"label\":\"" + String(repeating: "x", count: 81) + "\"}", "invalid_label"), ("[1]", "invalid_json"), ("{", "invalid_json")] {
            let reply = fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: body)
            #expect(reply.status == 400 && reply.errorCode == code, "\(body): \(reply.status) \(reply.text)")
        }
        #expect(fixture.send("PUT", "/api/v1/keys", bearer: fixture.ownerKey).status == 405)
        #expect(fixture.send("GET", "/api/v1/shares", query: ["key": "x"], bearer: fixture.ownerKey).errorCode == "invalid_key")
        // Guessing keys costs the address like guessing links: cut off with 429.
        var statuses: [Int] = []
        for _ in 0..<30 { statuses.append(fixture.send("GET", "/api/v1/keys", bearer: OwnerKey.generate(), from: "127.0.0.9").status) }
        #expect(statuses.first == 401 && statuses.last == 429)
    }
}

/// A host name whose DNS does not answer until `release`; then every lookup answers a public address.
final class HeldResolver: HostResolving, @unchecked Sendable {
    // @unchecked: everything is behind `condition`.
    private let condition = NSCondition()
    private var released = false
    private var returned = 0

    func addresses(of host: String) -> [IPAddress] {
        condition.lock()
        defer { condition.unlock() }
        while !released { condition.wait() }
        returned += 1
        return [IPAddress("93.184.215.14")!]
    }

    func release() {
        condition.lock()
        released = true
        condition.broadcast()
        condition.unlock()
    }

    var answered: Int { condition.lock(); defer { condition.unlock() }; return returned }
}
