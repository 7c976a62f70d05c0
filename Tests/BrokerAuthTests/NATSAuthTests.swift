import FlareCore
import FlareCrypto
import FlareMQTT
import FlareNATS
import FlareNATSBroker
import FlareSQLite
import FlareStore
import FlareTestSupport
import Foundation
import Testing
import FlareSystem

/// Three real NATS 2.15.1 nodes whose auth callout is answered by flared's responder (two of them, one queue group),
/// a real SQLite store with the shares, and a key to mint share tokens with.
final class NATSAuthFixture: @unchecked Sendable {
    let key = Crypto.randomBytes(32)
    let cluster: TestNATSCluster
    let store: SQLiteShareStore
    let responders: [AuthCalloutResponder]
    let directory: URL

    init() throws {
        let issuer = NKey.newAccount(), key = key
        let cluster = try TestNATSCluster(issuer: issuer.publicKey)
        let directory = try TempDirectory.make(prefix: "flare-nats-auth")
        let store = try SQLiteShareStore(path: directory.appendingPathComponent("flare.db").path)
        let seed = NKey.decodeSeed(issuer.seed, kind: .account)!
        responders = try (1...2).map { index in
            try AuthCalloutResponder(servers: cluster.urls, calloutPassword: cluster.calloutPassword, servicePassword: cluster.password,
                                     issuerSeed: seed, tokenKey: key, shares: store,
                                     clock: SystemClock(), logger: Logger(label: "callout-\(index)", level: .error), instanceName: "test-\(index)")
        }
        (self.cluster, self.directory, self.store) = (cluster, directory, store)
    }

    deinit {
        responders.forEach { $0.close() }
        cluster.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// A new active share in the store.
    func share() throws -> (id: ShareID, row: Int64) {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let share = Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: now, expiresAt: now + 3_600_000)
        return (share.id, try store.insertShare(share))
    }

    func token(_ share: ShareID, _ role: ShareToken.Role, expiresIn seconds: Int64 = 3600) -> String {
        let now = Int64(Date().timeIntervalSince1970)
        return ShareToken(shareID: share, role: role, issuedAt: now, expiresAt: now + seconds).signed(with: key)
    }

    /// An MQTT 3.1.1 client (NATS refuses v5) on node `node`, with the client id its token may use unless told.
    func client(node: Int, share: ShareID, role: ShareToken.Role, password: String? = nil, clientID: String? = nil) throws -> Client {
        let id = clientID ?? (role == .device ? ClientIDs.device(share, suffix: String(UUID().uuidString.prefix(8)))
                                              : ClientIDs.watcher(share, suffix: String(UUID().uuidString.prefix(8))))
        return try Client(port: cluster.nodes[node].mqttPort, username: share.rawValue, password: password ?? token(share, role),
                          clientID: id, protocolVersion: .v311)
    }

    func service(node: Int) throws -> Client {
        try Client(port: cluster.nodes[node].mqttPort, username: NATSAuthCallout.serviceUsername, password: cluster.password,
                   clientID: "flared-test-\(UUID().uuidString.prefix(8))", protocolVersion: .v311)
    }
}

/// The broker-auth rules on the NATS cluster: what the flare_auth plugin enforces on mosquitto (BrokerAuthTests), the
/// callout and the nodes' permissions enforce here.
@Suite(.serialized) struct NATSAuthTests {
    @Test func sharesAreIsolatedAndWatchTokensOnlyRead() throws {
        let fixture = try NATSAuthFixture()
        let (a, _) = try fixture.share(), (b, _) = try fixture.share()
        let device = try fixture.client(node: 0, share: a, role: .device)
        let watcher = try fixture.client(node: 1, share: a, role: .watch)
        let intruder = try fixture.client(node: 2, share: b, role: .watch)
        let otherDevice = try fixture.client(node: 2, share: b, role: .device)
        for client in [device, watcher, intruder, otherDevice] { #expect(client.waitForOutcome() == .connected) }

        #expect(try watcher.subscribe(Topics.shareRoot(a) + "/#"))
        #expect(try !intruder.subscribe(Topics.shareRoot(a) + "/#"))          // another share's topics: SUBACK 0x80
        #expect(try !intruder.subscribe("#"))
        #expect(try !device.subscribe(Topics.location(a)))                      // a phone reads its commands, not its fixes

        #expect(try device.publish(Topics.location(a), #"{"_type":"location","lat":1,"lon":2,"tst":1}"#) == nil)
        #expect(eventually(timeout: .seconds(10)) { watcher.messages.contains { $0.topic == Topics.location(a) } })

        // Refused publishes are acknowledged and dropped (MQTT 3.1.1 has no refusal): they never reach the watcher.
        #expect(try watcher.publish(Topics.location(a), "from the watcher") == nil)
        #expect(try otherDevice.publish(Topics.location(a), "from another share") == nil)
        #expect(try device.publish(Topics.command(a), "a command from the phone") == nil)
        // Then one more fix from the phone: once it is in, the refused ones would have been too.
        #expect(try device.publish(Topics.location(a), #"{"_type":"location","lat":1,"lon":2,"tst":2}"#) == nil)
        #expect(eventually(timeout: .seconds(10)) { watcher.messages.filter { $0.topic == Topics.location(a) }.count == 2 })
        let payloads = watcher.messages.map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(!payloads.contains("from the watcher") && !payloads.contains("from another share") && !payloads.contains("a command from the phone"))
    }

    @Test func badCredentialsClientIDsAndEndedSharesAreRefused() throws {
        let fixture = try NATSAuthFixture()
        let (a, row) = try fixture.share(), (b, _) = try fixture.share()
        let refusedLogins = [
            try fixture.client(node: 0, share: a, role: .device, password: fixture.token(b, .device)),            // another share's token
            try fixture.client(node: 1, share: a, role: .device, password: "not a token"),
            try fixture.client(node: 2, share: a, role: .device, password: fixture.token(a, .device, expiresIn: -5)),
            try fixture.client(node: 0, share: a, role: .device, clientID: "flared"),                            // a service's id
            try fixture.client(node: 1, share: a, role: .watch, clientID: ClientIDs.device(a)),                 // the phone's, with a watch token
            try fixture.client(node: 2, share: b, role: .device, clientID: ClientIDs.device(a)),                // another share's phone
        ]
        for client in refusedLogins { #expect(client.waitForOutcome() == .refused) }

        #expect(try fixture.client(node: 0, share: a, role: .device).waitForOutcome() == .connected)
        try fixture.store.markEnded(row: row, at: Int64(Date().timeIntervalSince1970 * 1000), reason: .stopped)
        #expect(try fixture.client(node: 1, share: a, role: .device).waitForOutcome() == .refused)
    }

    @Test func aLoginEndsWhenItsTokenExpires() throws {
        let fixture = try NATSAuthFixture()
        let (a, _) = try fixture.share()
        let device = try fixture.client(node: 0, share: a, role: .device, password: fixture.token(a, .device, expiresIn: 3))
        #expect(device.waitForOutcome() == .connected)
        #expect(eventually(timeout: .seconds(15)) { device.disconnectCount > 0 })
        // And it cannot come back with the same token.
        #expect(eventually(timeout: .seconds(15)) { device.refusedCount > 0 })
    }

    @Test func theServiceLoginReadsAndWritesEverythingAndAWrongPasswordIsRefused() throws {
        let fixture = try NATSAuthFixture()
        let (a, _) = try fixture.share()
        let service = try fixture.service(node: 0)
        let phone = try fixture.client(node: 2, share: a, role: .device)
        #expect(service.waitForOutcome() == .connected && phone.waitForOutcome() == .connected)
        #expect(try service.subscribe("flare/v1/shares/+/location"))
        #expect(try phone.subscribe(Topics.command(a)))
        #expect(try service.publish(Topics.command(a), #"{"_type":"cmd","action":"reportLocation"}"#) == nil)
        #expect(eventually(timeout: .seconds(10)) { phone.messages.contains { $0.topic == Topics.command(a) } })
        #expect(try phone.publish(Topics.location(a), #"{"_type":"location","lat":1,"lon":2,"tst":1}"#) == nil)
        #expect(eventually(timeout: .seconds(10)) { service.messages.contains { $0.topic == Topics.location(a) } })

        let impostor = try Client(port: fixture.cluster.nodes[1].mqttPort, username: NATSAuthCallout.serviceUsername, password: "guess",
                                  clientID: "flared-x", protocolVersion: .v311)
        #expect(impostor.waitForOutcome() == .refused)
    }

    /// Three credentials, each with only its rights (trust, second round, 5): the callout's and the system account's
    /// passwords do not log in as flared, nor flared's as either of them.
    @Test func eachOfFlaredsThreeLoginsHasAPasswordOfItsOwn() throws {
        let fixture = try NATSAuthFixture()
        let cluster = fixture.cluster
        for wrong in [cluster.calloutPassword, cluster.systemPassword] {
            let client = try Client(port: cluster.nodes[0].mqttPort, username: NATSAuthCallout.serviceUsername, password: wrong,
                                    clientID: "flared-\(UUID().uuidString.prefix(6))", protocolVersion: .v311)
            #expect(client.waitForOutcome() == .refused)
        }
        #expect(throws: NATSError.self) { try NATSConnection(servers: cluster.urls, user: "flare-sys", password: cluster.password, name: "t") }
        #expect(throws: NATSError.self) { try NATSConnection(servers: cluster.urls, user: "flare-sys", password: cluster.calloutPassword, name: "t") }
        #expect(throws: NATSError.self) { try NATSConnection(servers: cluster.urls, user: "flare-auth", password: cluster.systemPassword, name: "t") }
        let system = try NATSConnection(servers: cluster.urls, user: "flare-sys", password: cluster.systemPassword, name: "t")
        system.close()
    }

    /// Repeated wrong passwords for flared's full-access login, from one address, are slowed down: past ten on an
    /// instance, each further wrong one is refused only after two seconds; the right one still logs in at once, so
    /// nobody can lock flared out (behind the balancer every client has one address) (trust, second round, 5).
    @Test func guessingTheServicePasswordIsSlowedDownPerAddress() throws {
        let fixture = try NATSAuthFixture()
        let port = fixture.cluster.nodes[1].mqttPort
        func login(_ password: String) throws -> (Client.Outcome, Duration) {
            let started = ContinuousClock.now
            let outcome = try Client(port: port, username: NATSAuthCallout.serviceUsername, password: password,
                                     clientID: "flared-\(UUID().uuidString.prefix(6))", protocolVersion: .v311).waitForOutcome()
            return (outcome, ContinuousClock.now - started)
        }
        // Each instance counts the guesses it answers (two here, taking requests at random from one queue group): a
        // slowed answer comes after twenty quick ones at most (by then one of the two has had eleven).
        var quick = 0
        var slowed: Duration?
        while slowed == nil && quick <= 2 * 10 {
            let (outcome, took) = try login("guess-\(quick)")
            #expect(outcome == .refused)
            if took >= AuthCalloutResponder.guessDelay { slowed = took } else { quick += 1 }
        }
        #expect(slowed != nil, "\(quick) quick refusals, none slowed")
        #expect(try login(fixture.cluster.password).0 == .connected, "the right password, whatever the guesses before")
    }
}
