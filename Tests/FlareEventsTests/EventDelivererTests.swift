import FlareCore
import FlareCrypto
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import FlareServiceTestSupport
import FlareShares
import Testing
@testable import FlareEvents
import FlareSystem
import FlareCodec

/// Answers every webhook with the status it is set to, and keeps what it got.
final class ScriptedPoster: WebhookPosting, @unchecked Sendable {
    struct Request { let url: String; let headers: [(name: String, value: String)]; let body: [UInt8] }
    private let state = Mutex<(requests: [Request], answer: WebhookResponse)>(([], .status(204)))
    func post(_ url: WebhookURL, connectingTo addresses: [IPAddress], headers: [(name: String, value: String)], body: [UInt8],
              timeout: Duration) -> WebhookResponse {
        state.withLock { state in
            state.requests.append(Request(url: url.text, headers: headers, body: body))
            return state.answer
        }
    }
    func answer(_ response: WebhookResponse) { state.withLock { $0.answer = response } }
    var requests: [Request] { state.withLock { $0.requests } }
}

/// Answers every webhook 204, after `seconds`.
final class SlowPoster: WebhookPosting, @unchecked Sendable {
    private let seconds: Double
    private let answered = Mutex(0)
    init(seconds: Double) { self.seconds = seconds }
    func post(_ url: WebhookURL, connectingTo addresses: [IPAddress], headers: [(name: String, value: String)], body: [UInt8],
              timeout: Duration) -> WebhookResponse {
        Thread.sleep(forTimeInterval: seconds)
        answered.withLock { $0 += 1 }
        return .status(204)
    }
    var count: Int { answered.withLock { $0 } }
}

/// The outbox as the share service fills it and the deliverer empties it: tracker and battery events, retries with
/// backoff, the lease, and what a key's webhook needs.
@Suite struct EventDelivererTests {
    let secret = WebhookSecret.generate()

    func deliverer(_ fixture: ServiceFixture, poster: ScriptedPoster, holder: String = "a") throws -> EventDeliverer {
        EventDeliverer(store: fixture.store, publisher: fixture.publisher, poster: poster, resolver: FixedResolver.public,
                       serverWebhook: ServerWebhook(url: try WebhookURL("https://hooks.example.org/flare"), secrets: [secret]),
                       sealer: WebhookSecretSealer(tokenKey: fixture.key), holder: holder, clock: fixture.clock, metrics: fixture.metrics,
                       logger: Logger(label: "test", level: .error))
    }

    func eventTypes(_ fixture: ServiceFixture, _ id: ShareID) -> [String] {
        fixture.publisher.messages.filter { $0.topic == Topics.events(id) }.compactMap { try? JSONValue.parse($0.payload).objectValue?["type"]?.stringValue }
    }

    @Test func trackerAndBatteryChangesAreEventsDeliveredToTheTopicAndTheWebhookOnce() throws {
        let fixture = try ServiceFixture(eventDestinations: [.mqtt, .serverWebhook])
        let poster = ScriptedPoster()
        let deliverer = try deliverer(fixture, poster: poster)
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        let now = Int64(Date().timeIntervalSince1970)
        // Low and not charging: once, however many fixes say so, until it charges or passes 20 %.
        for (offset, battery) in [(0, 40), (1, 14), (2, 13), (3, 17), (4, 12)] {
            send(fixture, id, #"{"_type":"location","lat":1,"lon":2,"tst":\#(now + Int64(offset)),"batt":\#(battery),"bs":1}"#)
        }
        #expect(eventually { (try? fixture.store.share(id: id))??.share.batteryLowAt != nil })
        send(fixture, id, #"{"_type":"location","lat":1,"lon":2,"tst":\#(now + 5),"batt":12,"bs":2}"#)  // charging
        #expect(eventually { (try? fixture.store.share(id: id))??.share.batteryLowAt == nil })
        send(fixture, id, #"{"_type":"location","lat":1,"lon":2,"tst":\#(now + 6),"batt":11,"bs":1}"#)
        #expect(eventually { (try? fixture.store.share(id: id))??.share.batteryLowAt != nil })
        send(fixture, id, #"{"_type":"lwt"}"#)
        #expect(eventually { fixture.registry.snapshot(id)?.share.tracker?.state == .offline })
        send(fixture, id, #"{"_type":"location","lat":1.5,"lon":2,"tst":\#(now + 7),"batt":11,"bs":1}"#)
        #expect(eventually { fixture.registry.snapshot(id)?.share.tracker?.state == .live })

        let expected = ["share.started", "tracker.battery_low", "tracker.battery_low", "tracker.offline", "tracker.online"]
        #expect(deliver(deliverer) { eventTypes(fixture, id).count >= expected.count && poster.requests.count >= expected.count })
        #expect(eventTypes(fixture, id) == expected)
        #expect(poster.requests.count == expected.count)
        // Each webhook carries its event's id and a signature of exactly its body.
        for request in poster.requests {
            let headers = Dictionary(request.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { $1 })
            let event = try #require(try JSONValue.parse(request.body).objectValue)
            #expect(headers["webhook-id"] == event["id"]?.stringValue)
            #expect(WebhookSignature.verify(id: headers["webhook-id"] ?? "", timestamp: Int64(headers["webhook-timestamp"] ?? "") ?? 0, body: request.body,
                                            signatures: headers["webhook-signature"] ?? "", secret: secret, now: Int64(Date().timeIntervalSince1970)))
            #expect(headers["content-type"] == "application/json")
        }
        #expect(try fixture.store.dueEvents(now: .max, limit: 10).isEmpty)
        deliverer.step()
        deliverer.drain()
        #expect(poster.requests.count == expected.count)  // delivered once
    }

    @Test func aFailingReceiverIsRetriedWithBackoffWhileTheTopicGetsItsEventAtOnce() throws {
        let fixture = try ServiceFixture(eventDestinations: [.mqtt, .serverWebhook])
        let poster = ScriptedPoster()
        poster.answer(.status(503))
        let deliverer = try deliverer(fixture, poster: poster)
        let id = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        #expect(deliver(deliverer) { poster.requests.count == 1 })
        #expect(eventTypes(fixture, id) == ["share.started"])
        let waiting = try #require(try fixture.store.dueEvents(now: .max, limit: 10).first)
        #expect(waiting.destination == .serverWebhook && waiting.attempts == 1)
        // Not due again before its backoff: another round sends nothing.
        deliverer.step()
        deliverer.drain()
        #expect(poster.requests.count == 1)
        #expect(fixture.metrics.value(FlareMetrics.eventDeliveries, labels: [("destination", "server"), ("result", "failed")]) == 1)

        poster.answer(.status(200))
        try fixture.store.eventFailed(row: waiting.row, destination: .serverWebhook, attempts: 1, retryAt: 0)  // its time comes
        #expect(deliver(deliverer) { poster.requests.count == 2 })
        #expect(Set(poster.requests.map { String(decoding: $0.body, as: UTF8.self) }).count == 1)  // the same event, the same id
        #expect(try fixture.store.dueEvents(now: .max, limit: 10).isEmpty)
    }

    /// A receiver that takes seconds to answer holds up only its own deliveries: the topic's events go out meanwhile,
    /// also once that receiver has more waiting than the deliverer reads at once, and creating shares (which records
    /// their events) does not wait for it.
    @Test func aSlowReceiverHoldsUpOnlyItsOwnDeliveries() throws {
        let fixture = try ServiceFixture(eventDestinations: [.mqtt, .serverWebhook])
        let poster = SlowPoster(seconds: 1)
        let deliverer = EventDeliverer(store: fixture.store, publisher: fixture.publisher, poster: poster, resolver: FixedResolver.public,
                                       serverWebhook: ServerWebhook(url: try WebhookURL("https://hooks.example.org/flare"), secrets: [secret]),
                                       sealer: WebhookSecretSealer(tokenKey: fixture.key), holder: "a", clock: fixture.clock,
                                       metrics: fixture.metrics, logger: Logger(label: "test", level: .error))
        deliverer.start()
        defer { deliverer.stop() }
        let started = ContinuousClock.now
        var ids: [ShareID] = []
        for _ in 0..<(EventDeliverer.batch + 100) { ids.append(try fixture.service.create(name: nil, durationSeconds: 600).share.id) }
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(eventually(timeout: .seconds(10)) { ids.allSatisfy { eventTypes(fixture, $0) == ["share.started"] } })
        // The webhook's backlog is longer than one read: a new share's event still reaches the topic at once.
        let late = try fixture.service.create(name: nil, durationSeconds: 600).share.id
        #expect(eventually(timeout: .seconds(3)) { eventTypes(fixture, late) == ["share.started"] })
        #expect(poster.count < 20)  // the webhook is still on its first ones
    }

    @Test func oneInstanceDeliversAtATime() throws {
        let fixture = try ServiceFixture(eventDestinations: [.mqtt, .serverWebhook])
        let first = ScriptedPoster(), second = ScriptedPoster()
        let a = try deliverer(fixture, poster: first, holder: "a"), b = try deliverer(fixture, poster: second, holder: "b")
        _ = try fixture.service.create(name: nil, durationSeconds: 600)
        #expect(deliver(a, b) { first.requests.count + second.requests.count >= 1 })
        #expect(first.requests.count == 1 && second.requests.isEmpty)
    }

    @Test func aKeysWebhookIsSignedWithItsSealedSecretAndDroppedWhenRemoved() throws {
        let fixture = try ServiceFixture(eventDestinations: [.mqtt, .serverWebhook])
        let poster = ScriptedPoster()
        let deliverer = try deliverer(fixture, poster: poster)
        let (_, key) = try fixture.service.keys.create(label: "admin", admin: true, limits: .none)
        let set = try fixture.service.keys.setWebhook(id: key.id, url: "http://127.0.0.1:9/k")  // an admin key may point inside
        // The store holds it sealed: neither the secret nor its base64 is in the row.
        let stored = try #require(try fixture.store.keyWebhook(id: key.id))
        #expect(stored.sealedSecret != set.secret.bytes && stored.sealedSecret.count == 12 + 32 + 16)
        let owner = try #require(try fixture.store.ownerKey(id: key.id))
        let id = try fixture.service.create(name: nil, durationSeconds: 600, owner: owner).share.id
        #expect(deliver(deliverer) { poster.requests.count == 2 })
        let toKey = try #require(poster.requests.first { $0.url == "http://127.0.0.1:9/k" })
        let headers = Dictionary(toKey.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { $1 })
        #expect(WebhookSignature.verify(id: headers["webhook-id"] ?? "", timestamp: Int64(headers["webhook-timestamp"] ?? "") ?? 0, body: toKey.body,
                                        signatures: headers["webhook-signature"] ?? "", secret: set.secret, now: Int64(Date().timeIntervalSince1970)))

        // A limited key may not point inside, and a delivery checks again.
        let (_, limited) = try fixture.service.keys.create(label: "phone", admin: false, limits: .none)
        #expect(throws: OwnerKeyService.WebhookRefusal.invalid(.notPublic("127.0.0.1"))) {
            try fixture.service.keys.setWebhook(id: limited.id, url: "http://127.0.0.1:9/k")
        }

        try fixture.service.keys.removeWebhook(id: key.id)
        _ = try fixture.service.stop(id)
        #expect(deliver(deliverer) { poster.requests.count == 3 && (try? fixture.store.dueEvents(now: .max, limit: 10).isEmpty) == true })
        #expect(poster.requests.filter { $0.url == "http://127.0.0.1:9/k" }.count == 1)
        #expect(try fixture.store.dueEvents(now: .max, limit: 10).isEmpty)
    }

    // MARK: Webhooks over the network

    /// A deliverer posting with libcurl (`WebhookClient`) to real receivers, its lookups answered by `resolver`.
    func networkDeliverer(_ fixture: ServiceFixture, resolver: any HostResolving, serverWebhook: ServerWebhook? = nil,
                          connectTimeout: Duration = .seconds(5), requestTimeout: Duration = EventDeliverer.defaultRequestTimeout) -> EventDeliverer {
        EventDeliverer(store: fixture.store, publisher: fixture.publisher, poster: WebhookClient(connectTimeout: connectTimeout),
                       resolver: resolver, requestTimeout: requestTimeout, serverWebhook: serverWebhook,
                       sealer: WebhookSecretSealer(tokenKey: fixture.key), holder: "a", clock: fixture.clock, metrics: fixture.metrics,
                       logger: Logger(label: "test", level: .error))
    }

    func shareIDs(_ requests: [RecordingReceiver.Request]) -> [String] {
        requests.compactMap { try? JSONValue.parse($0.body).objectValue?["share_id"]?.stringValue }
    }

    /// DNS rebinding: the one lookup a delivery makes answers a public address, and any later lookup would answer
    /// 127.0.0.1 (`localhost`, libcurl's own lookup, answers that too). The request goes to the address that was
    /// checked, so the receiver on loopback never sees it, and the failure shows in public metrics without the key.
    @Test func aNameThatTurnsToLoopbackAfterItsCheckNeverReachesLoopback() throws {
        let receiver = try RecordingReceiver()
        defer { receiver.stop() }
        let fixture = try ServiceFixture()  // setWebhook's own lookup answers a public address
        let resolver = RebindingResolver()
        let deliverer = networkDeliverer(fixture, resolver: resolver, connectTimeout: .seconds(1), requestTimeout: .seconds(2))
        let (_, key) = try fixture.service.keys.create(label: "phone", admin: false, limits: .none)
        _ = try fixture.service.keys.setWebhook(id: key.id, url: "http://localhost:\(receiver.port)/k")
        let owner = try #require(try fixture.store.ownerKey(id: key.id))
        let id = try fixture.service.create(name: nil, durationSeconds: 600, owner: owner).share.id

        #expect(try deliver(deliverer, timeout: .seconds(30)) {
            try fixture.store.dueEvents(now: .max, limit: 10).contains { $0.destination == .keyWebhook(key.id) && $0.attempts == 1 }
        })
        #expect(eventTypes(fixture, id) == ["share.started"])
        #expect(receiver.requests.isEmpty)
        #expect(resolver.lookups == 1)
        #expect(fixture.metrics.value(FlareMetrics.eventDeliveries, labels: [("destination", "key"), ("result", "failed")]) == 1)
        #expect(!fixture.metrics.renderText().contains(#"destination="key:"#))
    }

    /// An admin key's webhook may point at the operator's own network: a name on loopback gets its events, signed, at
    /// the address its lookup answered. No DNS knows the name, so a request that looked it up again would go nowhere.
    @Test func anAdminKeysWebhookOnLoopbackGetsItsEventsAtTheAddressLookedUp() throws {
        let receiver = try RecordingReceiver()
        defer { receiver.stop() }
        let fixture = try ServiceFixture()
        let deliverer = networkDeliverer(fixture, resolver: FixedResolver.loopback)
        let (_, key) = try fixture.service.keys.create(label: "desk", admin: true, limits: .none)
        let set = try fixture.service.keys.setWebhook(id: key.id, url: "http://receiver.flare.invalid:\(receiver.port)/k?desk=1")
        let owner = try #require(try fixture.store.ownerKey(id: key.id))
        let id = try fixture.service.create(name: nil, durationSeconds: 600, owner: owner).share.id

        #expect(deliver(deliverer, timeout: .seconds(30)) { receiver.requests.count == 1 })
        let request = try #require(receiver.requests.first)
        #expect(request.method == "POST" && request.path == "/k?desk=1")
        #expect(request.headers["host"] == "receiver.flare.invalid:\(receiver.port)")
        #expect(request.headers["content-type"] == "application/json")
        #expect(WebhookSignature.verify(id: request.headers["webhook-id"] ?? "", timestamp: Int64(request.headers["webhook-timestamp"] ?? "") ?? 0,
                                        body: request.body, signatures: request.headers["webhook-signature"] ?? "", secret: set.secret,
                                        now: Int64(Date().timeIntervalSince1970)))
        #expect(shareIDs(receiver.requests) == [id.rawValue])
        #expect(try fixture.store.dueEvents(now: .max, limit: 10).isEmpty)
    }

    /// A receiver that answers with a redirect gets no delivery out of it: the redirect is the answer (a failure, tried
    /// again later), and where it points gets nothing.
    @Test func aRedirectIsNotFollowed() throws {
        let elsewhere = try RecordingReceiver()
        defer { elsewhere.stop() }
        let redirecting = try RecordingReceiver(status: 307, headers: [("Location", "http://127.0.0.1:\(elsewhere.port)/inside")])
        defer { redirecting.stop() }
        let fixture = try ServiceFixture(eventDestinations: [.mqtt, .serverWebhook])
        let deliverer = networkDeliverer(fixture, resolver: FixedResolver.loopback,
                                         serverWebhook: ServerWebhook(url: try WebhookURL("http://127.0.0.1:\(redirecting.port)/flare"), secrets: [secret]))
        _ = try fixture.service.create(name: nil, durationSeconds: 600)

        #expect(deliver(deliverer, timeout: .seconds(30)) {
            fixture.metrics.value(FlareMetrics.eventDeliveries, labels: [("destination", "server"), ("result", "failed")]) == 1
        })
        #expect(redirecting.requests.count == 1)
        #expect(elsewhere.requests.isEmpty)
        #expect(try fixture.store.dueEvents(now: .max, limit: 10).map(\.destination) == [.serverWebhook])
    }

    /// Five keys whose receivers take the connection and never answer: the events topic and the operator's webhook go on
    /// delivering meanwhile, and so does a sixth key whose receiver answers. The silent keys' events wait in the outbox.
    @Test func silentKeyReceiversHoldUpOnlyTheirOwnDeliveries() throws {
        let silent = try (0..<5).map { _ in try SilentReceiver() }
        defer { for receiver in silent { receiver.stop() } }
        let server = try RecordingReceiver(), answering = try RecordingReceiver()
        defer { server.stop(); answering.stop() }
        let fixture = try ServiceFixture(eventDestinations: [.mqtt, .serverWebhook])
        let deliverer = networkDeliverer(fixture, resolver: FixedResolver.loopback,
                                         serverWebhook: ServerWebhook(url: try WebhookURL("http://127.0.0.1:\(server.port)/flare"), secrets: [secret]),
                                         requestTimeout: .seconds(4))
        deliverer.start()
        defer { deliverer.stop() }
        func key(webhook: String) throws -> OwnerKeyRecord {
            let (_, key) = try fixture.service.keys.create(label: "desk", admin: true, limits: .none)
            _ = try fixture.service.keys.setWebhook(id: key.id, url: webhook)
            return try #require(try fixture.store.ownerKey(id: key.id))
        }
        // More events each than a thread would get through in a minute if it waited out every one.
        let silentKeys = try silent.map { try key(webhook: "http://127.0.0.1:\($0.port)/k") }
        for owner in silentKeys {
            for _ in 0..<30 { _ = try fixture.service.create(name: nil, durationSeconds: 600, owner: owner) }
        }
        #expect(eventually(timeout: .seconds(60)) { silent.allSatisfy { $0.connections >= 1 } })

        // Every silent receiver holds a request now; new events come.
        let answeringKey = try key(webhook: "http://127.0.0.1:\(answering.port)/k")
        let probes = try (0..<3).map { _ in try fixture.service.create(name: nil, durationSeconds: 600, owner: answeringKey).share.id }
        #expect(eventually(timeout: .seconds(60)) { probes.allSatisfy { eventTypes(fixture, $0) == ["share.started"] } })
        #expect(eventually(timeout: .seconds(60)) { Set(probes.map(\.rawValue)).isSubset(of: shareIDs(server.requests)) },
                "\(shareIDs(server.requests).count) events reached the operator's webhook")
        #expect(eventually(timeout: .seconds(60)) { Set(probes.map(\.rawValue)) == Set(shareIDs(answering.requests)) })
        let waiting = try fixture.store.dueEvents(now: .max, limit: 1_000)
        for owner in silentKeys {
            #expect(waiting.filter { $0.destination == .keyWebhook(owner.id) }.count == 30)
        }
    }

    /// Setting a limited key's webhook looks its host name up on a thread of its own: while the name's DNS does not
    /// answer, the caller is told to retry (the lookup goes on, and no second one starts for the same name), names
    /// beyond the limit of lookups at once are told so without a lookup, and a retry after the answer is accepted.
    @Test func settingAWebhookDoesNotWaitForADNSThatDoesNotAnswer() throws {
        let resolver = BlockingResolver(answers: FixedResolver.public.answers)
        defer { resolver.release() }
        let fixture = try ServiceFixture(hostResolver: resolver)
        let (_, key) = try fixture.service.keys.create(label: "phone", admin: false, limits: .none)
        func set(_ url: String) throws -> Result<WebhookURL, OwnerKeyService.WebhookRefusal> {
            // On a thread of the test's own: a lookup on the caller's thread would never return.
            let outcome = Mutex<Result<WebhookURL, OwnerKeyService.WebhookRefusal>?>(nil)
            Thread.detachNewThread {
                let result: Result<WebhookURL, OwnerKeyService.WebhookRefusal>
                do throws(OwnerKeyService.WebhookRefusal) {
                    result = .success(try fixture.service.keys.setWebhook(id: key.id, url: url).url)
                } catch {
                    result = .failure(error)
                }
                outcome.withLock { $0 = result }
            }
            try #require(eventually(timeout: .seconds(30)) { outcome.withLock { $0 != nil } }, "setWebhook(\(url)) waited for the lookup")
            return outcome.withLock { $0! }
        }
        let unfinished = OwnerKeyService.WebhookRefusal.lookupUnfinished(retryAfterSeconds: 5)

        #expect(try set("https://hooks.example.org/flare") == .failure(unfinished))
        #expect(try set("https://HOOKS.example.org/again") == .failure(unfinished))
        #expect(resolver.lookups == 1)
        for index in 1...4 { #expect(try set("https://hooks\(index).example.org/") == .failure(unfinished)) }
        #expect(resolver.lookups == 4)  // at most four at once
        #expect(try fixture.store.keyWebhook(id: key.id) == nil)

        resolver.release()
        #expect(eventually(timeout: .seconds(30)) { resolver.answered == 4 })
        #expect(try set("https://hooks.example.org/flare") == .success(try WebhookURL("https://hooks.example.org/flare")))
        #expect(try fixture.store.keyWebhook(id: key.id)?.url == "https://hooks.example.org/flare")
    }

    /// Rounds of delivery until `done` holds (the fixture's clock, never reading the same millisecond twice, runs a
    /// little ahead of the system's: an event is due a moment after it was made).
    @discardableResult
    func deliver(_ deliverers: EventDeliverer..., timeout: Duration = .seconds(5), until done: () throws -> Bool) rethrows -> Bool {
        try eventually(timeout: timeout) {
            for deliverer in deliverers { deliverer.step() }
            for deliverer in deliverers { deliverer.drain() }
            return try done()
        }
    }

    func send(_ fixture: ServiceFixture, _ id: ShareID, _ payload: String) {
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(payload.utf8), retained: false) == nil)
        #expect(fixture.ingestor.waitUntilStored())
    }
}

/// Answers a public address and 127.0.0.1 by turns, as a name with a TTL of 0 can for whoever switches it between two
/// lookups; counts the lookups.
final class RebindingResolver: HostResolving, @unchecked Sendable {
    private let calls = Mutex(0)

    func addresses(of host: String) -> [IPAddress] {
        let call = calls.withLock { calls in
            calls += 1
            return calls
        }
        return call % 2 == 1 ? FixedResolver.public.answers : FixedResolver.loopback.answers
    }

    var lookups: Int { calls.withLock { $0 } }
}

/// A name whose DNS does not answer until the test says so: every lookup waits for `release`.
final class BlockingResolver: HostResolving, @unchecked Sendable {
    // @unchecked: everything is behind `condition`.
    private let condition = NSCondition()
    private var released = false
    private var calls = 0
    private var returned = 0
    private let answers: [IPAddress]

    init(answers: [IPAddress]) { self.answers = answers }

    func addresses(of host: String) -> [IPAddress] {
        condition.lock()
        defer { condition.unlock() }
        calls += 1
        while !released { condition.wait() }
        returned += 1
        return answers
    }

    func release() {
        condition.lock()
        released = true
        condition.broadcast()
        condition.unlock()
    }

    var lookups: Int { condition.lock(); defer { condition.unlock() }; return calls }
    var answered: Int { condition.lock(); defer { condition.unlock() }; return returned }
}
