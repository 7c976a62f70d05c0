import FlareAPI
import FlareClient
import FlareTestSupport
import Foundation
import Testing

/// Keys for phones from the command line, against the built flared: `flare keys create … --enroll`, the link decoded
/// by `FlareClient`, which then sees only its own shares; `flare keys list` and `flare keys revoke`.
@Suite struct EnrollmentTests {
    @Test func aPhoneEnrolledFromTheCommandLineSeesOnlyItsOwnSharesUntilRevoked() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_PUBLIC_URL": "http://127.0.0.1:0"])
        var environment = flared.environment
        environment["FLARE_PUBLIC_URL"] = "http://127.0.0.1:\(flared.httpPort)"
        let made = try runCommand(try BuiltProducts.path("flare"),
                                  ["keys", "create", "--label", "Anna's phone", "--max-live", "1", "--max-duration", "3600",
                                   "--create-rate", "6/h", "--enroll", "--qr", flared.dataDirectory.appendingPathComponent("enrol.png").path],
                                  environment: environment)
        #expect(made.status == 0, "\(made.stderr)")
        let lines = made.stdout.split(separator: "\n").map(String.init)
        let key = try #require(lines.first), link = try #require(lines.last)
        #expect(link.hasPrefix("flare://enroll?server=http%3A%2F%2F127.0.0.1%3A") && made.stderr.contains("limited"))
        #expect(FileManager.default.fileExists(atPath: flared.dataDirectory.appendingPathComponent("enrol.png").path))

        let phone = try #require(FlareClient(enrollmentLink: link, retry: RetryPolicy(maxAttempts: 1), timeout: 5))
        #expect(phone.key == key && phone.baseURL.port == flared.httpPort)
        #expect(FlareClient(enrollmentLink: "flare://enroll?server=ftp%3A%2F%2Fx&key=\(key)") == nil)
        #expect(FlareClient(enrollmentLink: "https://example.org/?key=\(key)") == nil)

        let owners = try await FlareClient(baseURL: phone.baseURL, ownerKey: flared.ownerKey).createShare()
        let own = try await phone.createShare()
        #expect(try await phone.listShares().shares.map(\.shareID) == [own.shareID])
        await #expect(throws: FlareClientError.self) { try await phone.share(owners.shareID) }
        await #expect(throws: FlareClientError.self) { try await phone.createShare() }  // one live share at a time

        let listed = try runCommand(try BuiltProducts.path("flare"), ["keys", "list"], environment: environment)
        #expect(listed.stdout.contains("Anna's phone") && listed.stdout.contains("1 live, 3600 s, 6/h") && !listed.stdout.contains(key))
        let id = try #require(listed.stdout.split(separator: "\n").first { $0.contains("Anna's phone") }?.split(separator: " ").first)
        let revoked = try runCommand(try BuiltProducts.path("flare"), ["keys", "revoke", String(id)], environment: environment)
        #expect(revoked.status == 0 && revoked.stdout.contains("revoked; flared stops its 1 live shares"), "\(revoked.stdout)\(revoked.stderr)")
        await #expect(throws: FlareClientError.self) { try await phone.listShares() }
        // The revoked key's share ends with it, within flared's next round (trust, second round, 1).
        #expect(eventually(timeout: .seconds(10)) {
            (try? flared.request("GET", "/api/v1/shares/\(own.shareID)", bearer: flared.ownerKey))?.json?["state"] as? String == "ended"
        })
        #expect(try flared.request("GET", "/api/v1/view/\(own.shareURL.lastPathComponent)").status == 410)
        let bad = try runCommand(try BuiltProducts.path("flare"), ["keys", "create", "--create-rate", "lots"], environment: environment)
        #expect(bad.status != 0 && bad.stderr.contains("--create-rate must look like 6/h"))
    }
}

/// The phone's side of the family's answers over HTTP: what it missed, and a sequence of them as they come.
@Suite struct AnswerClientTests {
    @Test func thePhoneReadsTheAnswersAndFollowsThemUntilTheShareEnds() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let owner = FlareClient(baseURL: URL(string: "http://127.0.0.1:\(flared.httpPort)")!, ownerKey: flared.ownerKey,
                                retry: RetryPolicy(maxAttempts: 1), timeout: 5)
        let share = try await owner.createShare()
        let link = "/api/v1/view/\(share.shareURL.lastPathComponent)/answers"
        #expect(try flared.request("POST", link, body: #"{"kind":"on_my_way","name":"Mum"}"#).status == 201)

        let phone = FlareClient(baseURL: owner.baseURL, retry: RetryPolicy(maxAttempts: 1), timeout: 5)
        // Seen by: the phone asks with its device token how many opened the link.
        #expect(try await phone.share(share.shareID, deviceToken: share.deviceToken).audience?.opened == 0)
        #expect(try flared.request("GET", "/api/v1/view/\(share.shareURL.lastPathComponent)?v=AAAAAAAAAAAAAAAAAAAAAA").status == 200)
        #expect(try await phone.share(share.shareID, deviceToken: share.deviceToken).audience?.opened == 1)
        let missed = try await phone.answers(share.shareID, deviceToken: share.deviceToken)
        #expect(missed.map(\.name) == ["Mum"] && missed.first?.kind == .onMyWay)
        #expect(try await phone.answers(share.shareID, deviceToken: share.deviceToken, after: missed.first?.id).isEmpty)

        var seen: [String] = []
        for try await answer in phone.answerUpdates(share.shareID, deviceToken: share.deviceToken, interval: 0.2) {
            seen.append(answer.name)
            if seen.count == 1 {
                #expect(try flared.request("POST", link, body: #"{"kind":"called_emergency","name":"Dad"}"#).status == 201)
            } else {
                _ = try await owner.stopShare(share.shareID)
            }
        }
        #expect(seen == ["Mum", "Dad"])  // and the sequence ended with the share
    }
}
