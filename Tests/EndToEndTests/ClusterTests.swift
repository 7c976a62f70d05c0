import FlareCore
import FlareTestSupport
import Foundation
import Testing
import FlareCrypto

/// The broker a cluster test runs on: the cluster suite's main cases run on both.
enum BrokerKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case mosquitto, nats
    var testDescription: String { rawValue }
}

/// Two `flared` instances on one PostgreSQL database and one broker, as `make cluster` runs them: every instance
/// answers every link, whichever one stored the fixes or changed the share.
@Suite struct ClusterTests {
    struct Cluster {
        /// The mosquitto broker (nil on NATS).
        let broker: TestBroker?
        /// The NATS nodes (nil on mosquitto).
        let nats: TestNATSCluster?
        let a: FlaredProcess
        let b: FlaredProcess
        let databaseURL: String
        /// Where phones publish: mosquitto, or HAProxy in front of the NATS nodes.
        var mqttPort: Int { broker?.port ?? nats!.balancerPort! }
    }

    /// A and B share the data directory (token key, owner key, broker password) and the database; each has its own
    /// MQTT client id, so each keeps its own persistent session in the shared subscription.
    func cluster(_ extra: [String: String] = [:], on kind: BrokerKind = .mosquitto) throws -> Cluster {
        let database = try TestPostgres.shared.get().makeDatabase()
        let directory = try TempDirectory.make(prefix: "flare-cluster")
        var environment = ["FLARE_STORE_URL": database].merging(extra) { $1 }
        let broker: TestBroker?, nats: TestNATSCluster?
        switch kind {
        case .mosquitto:
            (broker, nats) = (try TestBroker(), nil)
        case .nats:
            // As scripts/nats-cluster.sh lays it out: the account seed and the password in DATA_DIR/nats.
            let issuer = NKey.newAccount()
            let cluster = try TestNATSCluster(issuer: issuer.publicKey, balancer: true)
            let files = directory.appendingPathComponent("nats")
            try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
            try (issuer.seed + "\n").write(to: files.appendingPathComponent("issuer.seed"), atomically: true, encoding: .utf8)
            for (name, secret) in [("password", cluster.password), ("callout.password", cluster.calloutPassword), ("system.password", cluster.systemPassword)] {
                try (secret + "\n").write(to: files.appendingPathComponent(name), atomically: true, encoding: .utf8)
            }
            environment["FLARE_BROKER"] = "nats"
            environment["FLARE_NATS_URLS"] = cluster.urls.joined(separator: ",")
            (broker, nats) = (nil, cluster)
        }
        let port = broker?.port ?? nats!.balancerPort!
        let a = try FlaredProcess(brokerPort: port, dataDirectory: directory, extraEnvironment: environment.merging(["FLARE_MQTT_CLIENT_ID": "flared-a"]) { $1 })
        let b = try FlaredProcess(brokerPort: port, dataDirectory: directory, extraEnvironment: environment.merging(["FLARE_MQTT_CLIENT_ID": "flared-b"]) { $1 })
        return Cluster(broker: broker, nats: nats, a: a, b: b, databaseURL: database)
    }

    func location(lat: Double, secondsAgo: Int = 0) -> String {
        #"{"_type":"location","lat":\#(lat),"lon":11.5,"tst":\#(Int(Date().timeIntervalSince1970) - secondsAgo)}"#
    }

    /// A phone's QoS 1 fix. On NATS as a phone logs in (MQTT 3.1.1, the share's device token, its client id); the
    /// test mosquitto admits anyone.
    func publish(_ cluster: Cluster, _ id: String, _ payload: String, deviceToken: String? = nil) throws {
        let sent: CommandResult
        if cluster.nats != nil {
            sent = try runCommand("/usr/bin/mosquitto_pub", ["-h", "127.0.0.1", "-p", String(cluster.mqttPort), "-V", "mqttv311", "-q", "1",
                                                             "-u", id, "-P", deviceToken ?? "", "-i", "flare-\(id)-cli",
                                                             "-t", "flare/v1/shares/\(id)/location", "-m", payload])
        } else {
            sent = try MosquittoClients.publish(port: cluster.mqttPort, topic: "flare/v1/shares/\(id)/location", payload: payload)
        }
        #expect(sent.status == 0, "\(sent.stderr)")
    }

    /// An instance whose clock runs an hour fast (Debian's libfaketime) holds the check-in lease: it fires no check-in
    /// early, since PostgreSQL's clock decides what is due; killed, its lease is taken by the other within the lease's
    /// normal time, not an hour later (trust, second round, 5).
    @Test func aFastClockNeitherFiresACheckinEarlyNorHoldsItsLeaseAfterItDies() throws {
        let faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
        try #require(FileManager.default.fileExists(atPath: faketime), "Debian's faketime (scripts/deps.sh installs it)")
        // Only A's wall clock runs ahead (its monotonic clock, for its timers, is left alone); started first, it holds
        // the leases.
        let cluster = try cluster()
        cluster.a.stop()
        let fast = try FlaredProcess(brokerPort: cluster.mqttPort, dataDirectory: cluster.a.dataDirectory,
                                     extraEnvironment: cluster.a.environment.filter { $0.key.hasPrefix("FLARE_STORE") || $0.key == "FLARE_MQTT_CLIENT_ID" }
                                         .merging(["LD_PRELOAD": faketime, "FAKETIME": "+1h", "FAKETIME_DONT_FAKE_MONOTONIC": "1"]) { $1 })
        cluster.b.stop()
        let b = try FlaredProcess(brokerPort: cluster.mqttPort, dataDirectory: cluster.b.dataDirectory,
                                  extraEnvironment: cluster.b.environment.filter { $0.key.hasPrefix("FLARE_STORE") || $0.key == "FLARE_MQTT_CLIENT_ID" })
        defer { b.stop() }
        #expect(eventually(timeout: .seconds(15)) { fast.log.contains("watching check-in deadlines") }, "the fast instance holds the lease")

        let mum = try #require(try b.request("POST", "/api/v1/contacts", body: #"{"name":"Mum"}"#, bearer: b.ownerKey).json?["id"] as? String)
        func arm(inSeconds: Int) throws -> String {
            let armed = try b.request("POST", "/api/v1/checkins", body: #"{"in_s":\#(inSeconds),"grace_s":0,"contacts":["\#(mum)"]}"#, bearer: b.ownerKey)
            return try #require(armed.json?["checkin_id"] as? String, "\(armed.text)")
        }
        func state(_ id: String) -> String? { (try? b.request("GET", "/api/v1/checkins/\(id)", bearer: b.ownerKey))?.json?["state"] as? String }
        // Both deadlines passed long ago by the fast clock. The witness, due a second from now by the database's
        // clock, is fired by one of the fast instance's rounds; the same rounds leave the other armed.
        let later = try arm(inSeconds: 60), witness = try arm(inSeconds: 1)
        #expect(eventually(timeout: .seconds(15)) { state(witness) == "missed" }, "the fast instance fired no check-in at all")
        #expect(state(later) == "armed", "fired early by a clock an hour fast: \(state(later) ?? "?")")

        // Killed: the other instance takes the lease within its ten seconds.
        fast.kill()
        #expect(eventually(timeout: .seconds(20)) { b.log.contains("watching check-in deadlines") }, "B did not take the lease")
    }

    @Test(arguments: BrokerKind.allCases)
    func anyInstanceAnswersForSharesAndFixesTheOtherHandled(on kind: BrokerKind) throws {
        let cluster = try cluster(on: kind)
        let created = try cluster.a.request("POST", "/api/v1/shares", body: #"{"duration_s":600,"name":"Anna"}"#, bearer: cluster.a.ownerKey)
        #expect(created.status == 201, "\(created.text)")
        let id = try #require(created.json?["share_id"] as? String)
        let deviceToken = created.json?["device_token"] as? String
        let token = try #require((created.json?["share_url"] as? String)?.split(separator: "/").last.map(String.init))

        // Created on A: B answers the link at once (from the store if its change feed has not told it yet).
        #expect(try cluster.b.request("GET", "/api/v1/view/\(token)").status == 200)
        let onB = try EventStreamReader(port: cluster.b.httpPort, path: "/api/v1/view/\(token)/events")
        #expect(onB.waitFor { $0.contains { $0.name == "status" } })

        // Fixes go to whichever instance the broker hands them to; both links and B's live viewers see each one,
        // and the last position is the newest by tst, whoever stored it.
        for (index, lat) in [48.1, 48.2, 48.3, 48.4].enumerated() { try publish(cluster, id, location(lat: lat, secondsAgo: 10 - index), deviceToken: deviceToken) }
        try publish(cluster, id, location(lat: 47.0, secondsAgo: 60), deviceToken: deviceToken)  // older, delivered late: not the last position
        for instance in [cluster.a, cluster.b] {
            #expect(eventually(timeout: .seconds(15)) {
                let view = try? instance.request("GET", "/api/v1/view/\(token)")
                let trail = (view?.json?["trail"] as? [[String: Any]]) ?? []
                return trail.count == 5 && ((view?.json?["last"] as? [String: Any])?["lat"] as? Double) == 48.4
            }, "\(instance.httpPort): \((try? instance.request("GET", "/api/v1/view/\(token)").text) ?? "")")
        }
        #expect(onB.waitFor { events in events.contains { $0.name == "fix" && $0.data.contains("48.4") } })
        #expect(!onB.events.contains { $0.name == "fix" && $0.data.contains("47.0") })
        let stored = try TestPostgres.shared.get().query(cluster.databaseURL, "SELECT count(*) FROM fixes")
        #expect(stored == "5")

        // Extended on A: B shows the new expiry.
        let extended = try cluster.a.request("POST", "/api/v1/shares/\(id)/extend", body: #"{"duration_s":7200}"#, bearer: cluster.a.ownerKey)
        let newExpiry = try #require(extended.json?["expires_at"] as? String)
        #expect(eventually(timeout: .seconds(5)) {
            (try? cluster.b.request("GET", "/api/v1/view/\(token)"))?.json?["expires_at"] as? String == newExpiry
        })
        #expect(onB.waitFor { $0.contains { $0.name == "status" && $0.data.contains(newExpiry) } })

        // Stopped on B: A answers 410, and A's live viewers hear the end.
        let onA = try EventStreamReader(port: cluster.a.httpPort, path: "/api/v1/view/\(token)/events")
        #expect(onA.waitFor { $0.contains { $0.name == "status" } })
        #expect(try cluster.b.request("POST", "/api/v1/shares/\(id)/stop", bearer: cluster.b.ownerKey).status == 200)
        #expect(onA.waitFor { $0.contains { $0.name == "ended" && $0.data.contains("stopped") } })
        #expect(eventually(timeout: .seconds(5)) { (try? cluster.a.request("GET", "/api/v1/view/\(token)"))?.status == 410 })
        #expect(onB.waitFor { $0.contains { $0.name == "ended" } })
    }

    /// A share whose creator is down when it expires is ended by the other instance, once: one row update, one
    /// ended status on the broker.
    @Test(arguments: BrokerKind.allCases)
    func anExpiryIsEndedByAnotherInstanceWhenItsCreatorIsDown(on kind: BrokerKind) throws {
        let cluster = try cluster(on: kind)
        let created = try cluster.a.request("POST", "/api/v1/shares", body: #"{"duration_s":3}"#, bearer: cluster.a.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        let token = try #require((created.json?["share_url"] as? String)?.split(separator: "/").last.map(String.init))
        #expect(try cluster.b.request("GET", "/api/v1/view/\(token)").status == 200)
        cluster.a.kill()
        #expect(eventually(timeout: .seconds(20)) {
            let view = try? cluster.b.request("GET", "/api/v1/view/\(token)")
            return view?.status == 410 && view?.json?["reason"] as? String == "expired"
        })
        if let broker = cluster.broker {
            #expect(eventually { (try? Retained.message(port: broker.port, topic: "flare/v1/shares/\(id)/status"))?.contains(#""state":"ended""#) == true })
        }
        #expect(try TestPostgres.shared.get().query(cluster.databaseURL, "SELECT end_reason FROM shares WHERE share_id = '\(id)'") == "expired")
        #expect(cluster.b.log.contains("share \(id) ended: expired"))
    }

    /// An instance that is stopped leaves the shared subscription first: what is published after goes to the others
    /// at once, instead of waiting in its session for it to come back.
    @Test func aStoppedInstanceLeavesTheStreamToTheOthers() throws {
        let cluster = try cluster()
        let created = try cluster.a.request("POST", "/api/v1/shares", body: "{}", bearer: cluster.a.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        #expect(cluster.b.stop() == 0)
        #expect(cluster.b.log.contains("left the shared subscription and ended this instance's broker session"), "\(cluster.b.log)")
        for index in 0..<20 { try publish(cluster, id, location(lat: 40 + Double(index) / 100, secondsAgo: 30 - index)) }
        #expect(eventually(timeout: .seconds(15)) {
            (try? TestPostgres.shared.get().query(cluster.databaseURL, "SELECT count(*) FROM fixes")) == "20"
        })
    }

    /// An instance that dies for good (kill -9, never restarted) holds its turn of the shared subscription in its
    /// broker session. Once it has been silent for FLARE_INSTANCE_STALE_AFTER_S, the other takes that session over,
    /// stores what it held, and ends it: nothing lost, nothing twice.
    @Test func theSessionOfAnInstanceThatDiedIsTakenOverAndDrained() throws {
        let cluster = try cluster(["FLARE_INSTANCE_STALE_AFTER_S": "3"])
        let created = try cluster.a.request("POST", "/api/v1/shares", body: "{}", bearer: cluster.a.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        cluster.b.kill()
        for index in 0..<40 { try publish(cluster, id, location(lat: 30 + Double(index) / 100, secondsAgo: 60 - index)) }
        #expect(eventually(timeout: .seconds(30)) {
            (try? TestPostgres.shared.get().query(cluster.databaseURL, "SELECT count(*) FROM fixes")) == "40"
        }, "\(cluster.a.log)")
        #expect(eventually(timeout: .seconds(10)) { cluster.a.log.contains("took over instance flared-b") }, "\(cluster.a.log)")
        #expect(try TestPostgres.shared.get().query(cluster.databaseURL, "SELECT count(*) FROM instances WHERE client_id = 'flared-b'") == "0")
    }

    /// An answer given through one instance reaches the viewers of the other: the store's change feed tells it.
    @Test func anAnswerGivenOnOneInstanceIsShownByTheOther() throws {
        let cluster = try cluster()
        let created = try cluster.a.request("POST", "/api/v1/shares", body: "{}", bearer: cluster.a.ownerKey)
        let token = try #require((created.json?["share_url"] as? String)?.split(separator: "/").last.map(String.init))
        #expect(try cluster.b.request("GET", "/api/v1/view/\(token)").status == 200)  // B knows the share
        let answered = try cluster.a.request("POST", "/api/v1/view/\(token)/answers", body: #"{"kind":"on_my_way","name":"Ben"}"#)
        #expect(answered.status == 201, "\(answered.text)")
        #expect(eventually(timeout: .seconds(5)) {
            let view = try? cluster.b.request("GET", "/api/v1/view/\(token)")
            return (view?.json?["answers"] as? [[String: Any]])?.first?["name"] as? String == "Ben"
        })
    }

    /// One instance keeps the broker's retained state (the store's lease); when it dies the other takes the job over,
    /// and when the broker then crashes (SIGKILL, nothing saved since it started), puts every share's retained status
    /// and last position back, whichever instance stored them.
    @Test func anotherInstanceKeepsTheBrokerAfterTheKeeperDies() throws {
        let cluster = try cluster()
        let keeps = "keeping the broker's retained state"
        #expect(eventually(timeout: .seconds(15)) { [cluster.a, cluster.b].filter { $0.log.contains(keeps) }.count == 1 })
        let keeper = cluster.a.log.contains(keeps) ? cluster.a : cluster.b
        let other = keeper === cluster.a ? cluster.b : cluster.a
        let created = try other.request("POST", "/api/v1/shares", body: "{}", bearer: other.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        try publish(cluster, id, location(lat: 47.5))
        let locationTopic = "flare/v1/shares/\(id)/location", statusTopic = "flare/v1/shares/\(id)/status"
        #expect(eventually { (try? Retained.message(port: cluster.broker!.port, topic: locationTopic))?.contains("47.5") == true })
        #expect(eventually { (try? TestPostgres.shared.get().query(cluster.databaseURL, "SELECT count(*) FROM fixes")) == "1" })

        keeper.kill()
        #expect(eventually(timeout: .seconds(30)) { other.log.contains(keeps) }, "\(other.log)")
        // The new keeper has recorded a mark the broker acknowledged (its gauge shows what it recorded, 0 until then): a
        // mark only published, by a keeper killed before it could record it, would leave a store that knows of none,
        // which is a new installation with nothing to restore.
        #expect(eventually(timeout: .seconds(20)) {
            (other.metric("flare_broker_epoch") ?? 0) >= 2
        })
        cluster.broker!.kill()
        try cluster.broker!.start()
        #expect(eventually(timeout: .seconds(30)) {
            (try? Retained.message(port: cluster.broker!.port, topic: statusTopic))?.contains(#""state":"active""#) == true
                && (try? Retained.message(port: cluster.broker!.port, topic: locationTopic))?.contains("47.5") == true
        }, "\(other.log)\n--- the first keeper:\n\(keeper.log)")
        #expect(other.log.contains("the broker lost retained messages"), "\(other.log)")
    }

    /// Two processes with one client id would take the broker session from each other: the second is refused.
    @Test func aSecondProcessWithTheSameClientIDIsRefused() throws {
        let cluster = try cluster(["FLARE_INSTANCE_STALE_AFTER_S": "3"])
        var environment = cluster.a.environment
        environment["FLARE_HTTP_ADDR"] = "127.0.0.1:\(try FreePort.next())"
        environment["FLARE_METRICS_ADDR"] = "127.0.0.1:\(try FreePort.next())"
        let third = try runCommand(try BuiltProducts.path("flared"), [], environment: environment, timeout: .seconds(60))
        #expect(third.status == 1)
        #expect(third.stderr.contains("another flared is running with FLARE_MQTT_CLIENT_ID=flared-a"), "\(third.stderr)")
    }

    /// `flare keys create` writes to whichever store FLARE_STORE_URL names; the key works on every instance at once.
    @Test func keysMadeByTheCommandLineWorkOnEveryInstance() throws {
        let cluster = try cluster()
        let made = try cluster.a.flare(["keys", "create", "--label", "ops"])
        #expect(made.status == 0, "\(made.stderr)")
        let key = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        for instance in [cluster.a, cluster.b] {
            #expect(try instance.request("POST", "/api/v1/shares", body: "{}", bearer: key).status == 201)
        }
        #expect(try TestPostgres.shared.get().query(cluster.databaseURL, "SELECT count(*) FROM owner_keys WHERE label = 'ops'") == "1")
    }
}

extension ClusterTests {
    /// Events made on either instance are delivered once, by the instance that holds the delivery lease; when it dies,
    /// the other takes the lease over and delivers what waits, among it an event made while the receiver was away.
    @Test func eventsOfBothInstancesAreDeliveredOnceAndSurviveTheDeliverersDeath() throws {
        let secret = EventDeliveryTests.secret
        let receiver = try WebhookReceiver(port: try FreePort.next(), secret: secret)
        try receiver.start()
        defer { receiver.stop() }
        let cluster = try cluster(["FLARE_WEBHOOK_URL": "http://127.0.0.1:\(receiver.port)/flare", "FLARE_WEBHOOK_SECRET": secret])
        let delivering = "delivering events"
        #expect(eventually(timeout: .seconds(15)) { [cluster.a, cluster.b].filter { $0.log.contains(delivering) }.count == 1 })
        let deliverer = cluster.a.log.contains(delivering) ? cluster.a : cluster.b
        let other = deliverer === cluster.a ? cluster.b : cluster.a

        let created = try other.request("POST", "/api/v1/shares", body: "{}", bearer: other.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)
        let token = try #require((created.json?["share_url"] as? String)?.split(separator: "/").last.map(String.init))
        #expect(try deliverer.request("POST", "/api/v1/view/\(token)/answers", body: #"{"kind":"called_emergency"}"#).status == 201)
        #expect(eventually(timeout: .seconds(10)) { receiver.types(of: id) == ["share.started", "share.answered"] }, "\(receiver.types(of: id))")

        deliverer.kill()
        receiver.stop()
        #expect(try other.request("POST", "/api/v1/shares/\(id)/stop", bearer: other.ownerKey).status == 200)
        try receiver.start()
        // At least once: the deliverer may have died between a receiver's answer and recording it, and then the other
        // sends that event again, with its id.
        #expect(eventually(timeout: .seconds(40)) { receiver.distinctTypes(of: id) == ["share.started", "share.answered", "share.ended"] },
                "\(receiver.types(of: id))\n\(other.log)")
        #expect(other.log.contains(delivering))
        #expect(receiver.deliveries.allSatisfy { $0.signatureValid })
    }
}

extension ClusterTests {
    /// A check-in's deadline lives in the store: when the instance that watches the deadlines dies (kill -9) before it
    /// passes, the other takes the lease over and fires it, once; the contact gets one mail.
    @Test func aMissedCheckinFiresOnceWhenTheInstanceWatchingItDies() throws {
        let smtp = try TestSMTPServer()
        defer { smtp.stop() }
        let cluster = try cluster(["FLARE_SMTP_URL": smtp.url, "FLARE_SMTP_FROM": "flare@example.org"])
        let watching = "watching check-in deadlines"
        #expect(eventually(timeout: .seconds(15)) { [cluster.a, cluster.b].filter { $0.log.contains(watching) }.count == 1 })
        let watcher = cluster.a.log.contains(watching) ? cluster.a : cluster.b
        let other = watcher === cluster.a ? cluster.b : cluster.a
        let contact = try other.request("POST", "/api/v1/contacts", body: #"{"name":"Mum","email":"mum@example.org"}"#, bearer: other.ownerKey)
        let contactID = try #require(contact.json?["id"] as? String, "\(contact.text)")
        let armed = try watcher.request("POST", "/api/v1/checkins", body: #"{"in_s":3600,"grace_s":0,"contacts":["\#(contactID)"],"message":"Night shift"}"#,
                                        bearer: watcher.ownerKey)
        let checkin = try #require(armed.json?["checkin_id"] as? String, "\(armed.text)")
        watcher.kill()
        // Its deadline passes after the watcher died, however slow the machine: moved into the past in the store.
        _ = try TestPostgres.shared.get().query(cluster.databaseURL, "UPDATE checkins SET due_at = \(Int64(Date().timeIntervalSince1970 * 1000) - 1_000)")
        // The lease runs out (10 s) and the other instance fires the deadline that passed meanwhile.
        #expect(eventually(timeout: .seconds(40)) {
            (try? other.request("GET", "/api/v1/checkins/\(checkin)", bearer: other.ownerKey))?.json?["state"] as? String == "missed"
        }, "\(other.log)")
        #expect(eventually(timeout: .seconds(20)) { smtp.received.count == 1 }, "\(other.log)")
        Thread.sleep(forTimeInterval: 2)
        #expect(smtp.received.count == 1 && smtp.received.first?.envelopeTo == ["mum@example.org"])
        #expect(smtp.received.first?.body.contains("Night shift") == true)
        #expect(other.log.contains(watching) && other.log.contains("check-in \(checkin) missed"))
    }

    /// Every instance down when the deadline passes: it fires at the next start.
    @Test func aDeadlineThatPassedWhileEveryInstanceWasDownFiresAtTheNextStart() throws {
        let cluster = try cluster()
        let contact = try cluster.a.request("POST", "/api/v1/contacts", body: #"{"name":"Mum"}"#, bearer: cluster.a.ownerKey)
        let contactID = try #require(contact.json?["id"] as? String)
        let armed = try cluster.a.request("POST", "/api/v1/checkins", body: #"{"in_s":3600,"grace_s":0,"contacts":["\#(contactID)"]}"#,
                                          bearer: cluster.a.ownerKey)
        let checkin = try #require(armed.json?["checkin_id"] as? String)
        let shareID = try #require(armed.json?["share_id"] as? String)
        _ = cluster.a.stop()
        _ = cluster.b.stop()
        // The deadline passes while both are down: moved into the past in the store, however long the stops took.
        let postgres = try TestPostgres.shared.get()
        #expect(try postgres.query(cluster.databaseURL, "SELECT state FROM checkins") == "armed")
        _ = try postgres.query(cluster.databaseURL, "UPDATE checkins SET due_at = \(Int64(Date().timeIntervalSince1970 * 1000) - 60_000)")
        try cluster.b.start()
        #expect(eventually(timeout: .seconds(20)) {
            (try? cluster.b.request("GET", "/api/v1/checkins/\(checkin)", bearer: cluster.b.ownerKey))?.json?["state"] as? String == "missed"
        }, "\(cluster.b.log)")
        let links = try cluster.b.request("GET", "/api/v1/shares/\(shareID)/links", bearer: cluster.b.ownerKey)
        #expect((links.json?["links"] as? [[String: Any]])?.count == 1, "\(links.text)")
    }
}
