import FlareCrypto
import Testing
@testable import FlareCore
import FlareSystem
import FlareCodec

/// Events, their signatures (Standard Webhooks), the webhook address rule and the retry schedule.
@Suite struct EventTests {
    let share = ShareID("AAAAAAAAAAAAAAAAAAAAAA")!

    @Test func theStandardWebhooksReferenceVectorIsReproduced() throws {
        // The reference implementations' test vector: a receiver's existing library verifies what Flare sends.
        let secret = try #require(WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
        let body = Array(#"{"test": 2432232314}"#.utf8)
        #expect(WebhookSignature.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1614265330, body: body, secret: secret)
                == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(WebhookSignature.verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1614265330, body: body,
                                        signatures: "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", secret: secret, now: 1614265400))
        // Another body, an old timestamp, or another secret: refused.
        #expect(!WebhookSignature.verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1614265330, body: body + [32],
                                         signatures: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", secret: secret, now: 1614265330))
        #expect(!WebhookSignature.verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1614265330, body: body,
                                         signatures: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", secret: secret, now: 1614266000))
        #expect(!WebhookSignature.verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1614265330, body: body,
                                         signatures: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", secret: WebhookSecret.generate(), now: 1614265330))
    }

    @Test func aDeliveryIsSignedWithEverySecretSoThatOneCanBeRotated() throws {
        let old = WebhookSecret.generate(), new = WebhookSecret.generate()
        let body = Array("{}".utf8)
        let headers = WebhookSignature.headers(id: "msg_1", timestamp: 1_800_000_000, body: body, secrets: [new, old])
        #expect(headers.map(\.name) == ["webhook-id", "webhook-timestamp", "webhook-signature"])
        #expect(headers[0].value == "msg_1" && headers[1].value == "1800000000")
        #expect(headers[2].value.split(separator: " ").count == 2)
        for secret in [old, new] {
            #expect(WebhookSignature.verify(id: "msg_1", timestamp: 1_800_000_000, body: body, signatures: headers[2].value, secret: secret, now: 1_800_000_000))
        }
    }

    @Test func secretsAreWhsecAndTwentyFourToSixtyFourBytes() throws {
        let secret = WebhookSecret.generate()
        #expect(secret.bytes.count == 32 && secret.text.hasPrefix("whsec_"))
        #expect(WebhookSecret(secret.text) == secret)
        #expect("\(secret)" == "whsec_…")  // never logged
        #expect(WebhookSecret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == nil)  // no prefix
        #expect(WebhookSecret("whsec_" + Base64URL.encodeStandard([UInt8](repeating: 1, count: 23))) == nil)
        #expect(WebhookSecret("whsec_" + Base64URL.encodeStandard([UInt8](repeating: 1, count: 65))) == nil)
        #expect(WebhookSecret("whsec_not*base64") == nil)
        #expect(WebhookSecret.list("\(secret.text)  \(WebhookSecret.generate().text)")?.count == 2)
        #expect(WebhookSecret.list("\(secret.text) whsec_x") == nil)
        #expect(WebhookSecret.list("  ") == nil)
    }

    @Test func eventBodiesCarryIdTypeShareAndTimeAndNoCoordinate() throws {
        let answered = ShareEvent.answered(share, answer: Answer(id: 7, kind: .onMyWay, name: "Mum", at: 1_800_000_000_000))
        let object = try #require(try JSONValue.parse(answered.body).objectValue)
        #expect(object["id"]?.stringValue == answered.id && answered.id.hasPrefix("msg_") && answered.id.count == 26)
        #expect(object["type"]?.stringValue == "share.answered")
        #expect(object["share_id"]?.stringValue == share.rawValue)
        #expect(object["at"]?.stringValue == "2027-01-15T08:00:00Z")
        #expect(object["answer"]?.objectValue?["kind"]?.stringValue == "on_my_way")
        #expect(object["answer"]?.objectValue?["name"]?.stringValue == "Mum")
        #expect(ShareEvent.opened(share, at: 1).id != ShareEvent.opened(share, at: 1).id)
        let battery = try #require(try JSONValue.parse(ShareEvent.batteryLow(share, at: 5, level: 9).body).objectValue)
        #expect(Set(battery.keys) == ["id", "type", "share_id", "at", "battery"])
    }

    @Test func trackerChangesGiveTheirEventsAndALiveStateStayingLiveNone() {
        let offline = TrackerRecord(state: .offline, since: 10, reason: TrackerRecord.connectionLost, transport: .mqtt)
        #expect(ShareEvent.tracker(share, record: offline, before: .live)?.type == .trackerOffline)
        #expect(ShareEvent.tracker(share, record: TrackerRecord(state: .stale, since: 10), before: .live)?.type == .trackerStale)
        #expect(ShareEvent.tracker(share, record: TrackerRecord(state: .live, since: 10), before: .offline)?.type == .trackerOnline)
        #expect(ShareEvent.tracker(share, record: TrackerRecord(state: .live, since: 10), before: .stale)?.type == .trackerOnline)
        // A new share's tracker is online from the start: its first fix (recorded only for its transport) says nothing new.
        #expect(ShareEvent.tracker(share, record: TrackerRecord(state: .live, since: 10, transport: .http), before: nil) == nil)
        // Live over HTTP after live over MQTT: the transport changed, the tracker did not come back.
        #expect(ShareEvent.tracker(share, record: TrackerRecord(state: .live, since: 10, transport: .http), before: .live) == nil)
    }

    @Test func theBatteryFlagIsRaisedOnceAndClearedOnlyByChargingOrOverTwentyPercent() {
        #expect(TrackerRules.batteryFlagChange(level: 15, status: 1, recordedLow: false) == true)
        #expect(TrackerRules.batteryFlagChange(level: 15, status: 2, recordedLow: false) == nil)  // charging
        #expect(TrackerRules.batteryFlagChange(level: 16, status: 1, recordedLow: false) == nil)
        #expect(TrackerRules.batteryFlagChange(level: 18, status: 1, recordedLow: true) == nil)  // wavering: no new event
        #expect(TrackerRules.batteryFlagChange(level: 21, status: 1, recordedLow: true) == false)
        #expect(TrackerRules.batteryFlagChange(level: 5, status: 2, recordedLow: true) == false)
        #expect(TrackerRules.batteryFlagChange(level: nil, status: nil, recordedLow: true) == nil)
    }

    @Test func destinationsRoundTripThroughTheirStoreNames() {
        for destination in [EventDestination.mqtt, .serverWebhook, .keyWebhook(42)] {
            #expect(EventDestination(name: destination.name) == destination)
        }
        #expect(EventDestination(name: "key:0") == nil)
        #expect(EventDestination(name: "key:x") == nil)
        #expect(EventDestination(name: "smtp") == nil)
    }

    @Test func retriesBackOffExponentiallyToAnHourAndStopAfterADay() {
        let at: UnixMillis = 1_000_000
        #expect(EventRetry.nextAttempt(after: 1, now: at, eventAt: at) == at + 5_000)
        #expect(EventRetry.nextAttempt(after: 2, now: at, eventAt: at) == at + 10_000)
        #expect(EventRetry.nextAttempt(after: 5, now: at, eventAt: at) == at + 80_000)
        #expect(EventRetry.nextAttempt(after: 15, now: at, eventAt: at) == at + 3_600_000)
        #expect(EventRetry.nextAttempt(after: 1_000, now: at, eventAt: at) == at + 3_600_000)
        // The last attempt falls at 24 h; after it, none.
        #expect(EventRetry.nextAttempt(after: 30, now: at + 86_000_000, eventAt: at) == at + 86_400_000)
        #expect(EventRetry.nextAttempt(after: 31, now: at + 86_400_000, eventAt: at) == nil)
    }

    @Test func sealedBytesOpenOnlyWithTheirKeyAndContext() throws {
        let key = Crypto.randomBytes(32)
        let secret = Crypto.randomBytes(32)
        let sealed = try #require(Crypto.seal(secret, key: key, context: Array("key:1".utf8)))
        #expect(sealed.count == 12 + 32 + 16)
        #expect(Crypto.open(sealed, key: key, context: Array("key:1".utf8)) == secret)
        #expect(Crypto.open(sealed, key: key, context: Array("key:2".utf8)) == nil)
        #expect(Crypto.open(sealed, key: Crypto.randomBytes(32), context: Array("key:1".utf8)) == nil)
        var tampered = sealed
        tampered[20] ^= 1
        #expect(Crypto.open(tampered, key: key, context: Array("key:1".utf8)) == nil)
        #expect(Crypto.open(Array(sealed.prefix(20)), key: key, context: []) == nil)
        // A fresh nonce each time: the same secret never seals to the same bytes.
        #expect(Crypto.seal(secret, key: key, context: []) != Crypto.seal(secret, key: key, context: []))
    }
}
