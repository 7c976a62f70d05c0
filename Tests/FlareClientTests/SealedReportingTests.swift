import FlareClient
import FlareCore
import FlareSodium
import FlareTestSupport
import Foundation
import Testing

/// What an app does for an end-to-end encrypted share: it supplies the secretbox (here Debian's libsodium, as an iOS
/// app would supply its own), and the reporter seals every fix once, before it leaves the phone.
@Suite struct SealedReportingTests {
    struct Sodium: LocationSealer {
        let key: [UInt8]
        func seal(_ plaintext: Data) throws -> Data { Data(SecretBox.seal(Array(plaintext), key: key)) }
    }

    @Test func theReporterSealsEachFixAndThePageKeyOpensIt() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = FlareClient(baseURL: URL(string: "http://127.0.0.1:\(flared.httpPort)")!, ownerKey: flared.ownerKey,
                                retry: RetryPolicy(maxAttempts: 3, initialDelay: 0.05, maxDelay: 0.2))
        let share = try await flare.createShare(name: "Anna", endToEnd: true)
        #expect(share.e2e == "true")
        let passphrase = E2EPassphrase.generate()
        let key = E2EPassphrase.key(passphrase)
        let reporter = LocationReporter(client: flare, share: share, sealer: Sodium(key: key))
        await reporter.report(Location(latitude: 47.42116, longitude: 10.98533, accuracy: 9, battery: 55))
        let stats = await reporter.statistics
        #expect(stats.sent == 1 && stats.rejected == 0, "\(stats)")
        // Unsealed, the same share refuses it: the server never takes a position in clear for it.
        let plain = LocationReporter(client: flare, share: share)
        await plain.report(Location(latitude: 1, longitude: 2))
        #expect(await plain.statistics.lastRejection == "not_encrypted")
        let view = try flared.request("GET", "/api/v1/view/\(share.shareURL.lastPathComponent)")
        #expect(!view.text.contains("47.42116"))
        let sealed = try #require((view.json?["sealed"] as? [[String: Any]])?.first?["data"] as? String)
        let box = try #require(Data(base64Encoded: sealed))
        let opened = try #require(SecretBox.open(Array(box), key: key))
        let location = try #require(try JSONSerialization.jsonObject(with: Data(opened)) as? [String: Any])
        #expect(location["_type"] as? String == "location" && location["lat"] as? Double == 47.42116 && location["batt"] as? Int == 55)
    }
}
