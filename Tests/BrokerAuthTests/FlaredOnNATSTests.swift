import FlareCore
import FlareCrypto
import FlareMQTT
import FlareTestSupport
import Foundation
import Testing
import FlareCodec

/// The built `flared` with FLARE_BROKER=nats against three real NATS nodes behind HAProxy, as `make cluster
/// BROKER=nats` runs it: it answers the logins, stores what phones send at QoS 1 and 0, publishes retained state that
/// every node serves, and ending a share cuts its phone off.
final class NATSFlaredFixture: @unchecked Sendable {
    let cluster: TestNATSCluster
    let directory: URL
    var flared: [FlaredProcess] = []

    init(instances: Int = 1, extraEnvironment: [String: String] = [:]) throws {
        let issuer = NKey.newAccount()
        cluster = try TestNATSCluster(issuer: issuer.publicKey, balancer: true)
        directory = try TempDirectory.make(prefix: "flare-nats-flared")
        let nats = directory.appendingPathComponent("nats")
        try FileManager.default.createDirectory(at: nats, withIntermediateDirectories: true)
        try (issuer.seed + "\n").write(to: nats.appendingPathComponent("issuer.seed"), atomically: true, encoding: .utf8)
        for (name, secret) in [("password", cluster.password), ("callout.password", cluster.calloutPassword), ("system.password", cluster.systemPassword)] {
            try (secret + "\n").write(to: nats.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        var environment = extraEnvironment
        environment["FLARE_BROKER"] = "nats"
        environment["FLARE_NATS_URLS"] = cluster.urls.joined(separator: ",")
        for _ in 0..<instances {
            flared.append(try FlaredProcess(brokerPort: cluster.balancerPort!, dataDirectory: directory, extraEnvironment: environment))
        }
    }

    deinit {
        for process in flared { _ = process.stop() }
        cluster.stop()
    }

    /// A ten-minute share made on the first flared: its id and the creation's answer (strings only).
    func createShare() throws -> (id: ShareID, answer: [String: String]) { try flared[0].createShare() }

    func client(node: Int?, share: ShareID, token: String, clientID: String) throws -> Client {
        try Client(port: node.map { cluster.nodes[$0].mqttPort } ?? cluster.balancerPort!, username: share.rawValue, password: token,
                   clientID: clientID, protocolVersion: .v311)
    }
}

@Suite(.serialized) struct FlaredOnNATSTests {
    @Test func fixesAreStoredRetainedStateIsEverywhereAndStoppingCutsThePhoneOff() throws {
        let fixture = try NATSFlaredFixture()
        let flared = fixture.flared[0]
        let (id, share) = try fixture.createShare()
        let deviceToken = try #require(share["device_token"])
        #expect(share["mqtt_url"] == "mqtt://127.0.0.1:\(fixture.cluster.balancerPort!)")

        // QoS 1 through the balancer: stored (from the MQTT layer's stream), once.
        let phone = try fixture.client(node: nil, share: id, token: deviceToken, clientID: ClientIDs.device(id))
        #expect(phone.waitForOutcome() == .connected)
        let now = Int(Date().timeIntervalSince1970)
        #expect(try phone.publish(Topics.location(id), #"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(now - 5)}"#) == nil)
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey))?.json?["last"] as? [String: Any])?["lat"] as? Double == 48.1
        })
        // QoS 0: stored too (from the core subscription).
        try phone.mqtt.publish(topic: Topics.location(id), payload: Array(#"{"_type":"location","lat":48.2,"lon":11.5,"tst":\#(now - 4)}"#.utf8), qos: 0, retain: false)
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey))?.json?["last"] as? [String: Any])?["lat"] as? Double == 48.2
        })

        // The retained status and an HTTP fix's retained position, as a watcher on each node gets them.
        let ingested = try flared.request("POST", "/api/v1/shares/\(id.rawValue)/locations", body: #"{"lat":48.3,"lon":11.6}"#, bearer: deviceToken)
        #expect((200...299).contains(ingested.status), "\(ingested.text)")
        Thread.sleep(forTimeInterval: 2)
        let issued = try flared.request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens", bearer: flared.ownerKey)
        let watchToken = try #require(issued.json?["watch_token"] as? String)
        // A watcher on each node gets the retained status and position. (A subscription made while a retained message is
        // on its way to the node's copy gets neither the retained nor the live copy: NATS's MQTT layer stores and
        // delivers apart. So each try subscribes afresh.)
        for node in 0..<3 {
            #expect(eventually {
                guard let watcher = try? fixture.client(node: node, share: id, token: watchToken, clientID: ClientIDs.watcher(id, suffix: "n\(node)")),
                      watcher.waitForOutcome() == .connected, (try? watcher.subscribe(Topics.shareRoot(id) + "/#")) == true else { return false }
                return eventually(timeout: .seconds(2)) {
                    watcher.messages.contains { $0.topic == Topics.status(id) && $0.retain }
                        && watcher.messages.contains { $0.topic == Topics.location(id) && $0.retain && String(decoding: $0.payload, as: UTF8.self).contains("48.3") }
                }
            }, "node \(node)")
        }
        // flared's own position came back through the cluster's stream and was known as such (its mark), not taken for
        // a fix: no duplicate, and the tracker's transport is still what the last fix came over.
        #expect(eventually { (try? flared.metrics())?.contains("flare_own_positions_skipped_total 1") == true })
        let metrics = try flared.metrics()
        #expect(metrics.contains("flare_fixes_duplicate_total 0"), "\(metrics)")

        // Stop: the phone is cut off within a second, and its token refused from then on, on any node.
        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/stop", bearer: flared.ownerKey).status == 200)
        #expect(eventually(timeout: .seconds(2)) { !phone.mqtt.isConnected })
        for node in 0..<3 {
            #expect(try fixture.client(node: node, share: id, token: deviceToken, clientID: ClientIDs.device(id)).waitForOutcome() == .refused)
        }
        // What the cluster keeps of the share: its ended status, and no position (cleared at the end: NATS has no
        // message expiry, so flared clears what it retained).
        #expect(eventually {
            guard let reader = try? Client(port: fixture.cluster.nodes[2].mqttPort, username: "flared", password: fixture.cluster.password,
                                           clientID: "reader-\(UUID().uuidString.prefix(8))", protocolVersion: .v311),
                  reader.waitForOutcome() == .connected, (try? reader.subscribe(Topics.shareRoot(id) + "/#")) == true else { return false }
            return eventually(timeout: .seconds(2)) {
                reader.messages.contains { $0.topic == Topics.status(id) && $0.retain && String(decoding: $0.payload, as: UTF8.self).contains(#""state":"ended""#) }
            } && !reader.messages.contains { $0.topic == Topics.location(id) && $0.retain && !$0.payload.isEmpty }
        })
        #expect(!flared.log.contains(deviceToken) && !flared.log.contains(watchToken) && !flared.log.contains(fixture.cluster.password))
    }

    /// A copy of flared's own marked position, captured by a watcher and published again by the phone long after
    /// (here made with the token key, as it was two hours ago): flared drops it, stores nothing of it, and puts the
    /// share's newest position back on the cluster (trust, second round, 4).
    @Test func aReplayedOwnPositionIsDroppedAndTheNewestPutBack() throws {
        let fixture = try NATSFlaredFixture()
        let flared = fixture.flared[0]
        let (id, share) = try fixture.createShare()
        let phone = try fixture.client(node: 0, share: id, token: try #require(share["device_token"]), clientID: ClientIDs.device(id))
        #expect(phone.waitForOutcome() == .connected)
        let now = Int(Date().timeIntervalSince1970)
        #expect(try phone.publish(Topics.location(id), #"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(now - 5)}"#) == nil)
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey))?.json?["last"] as? [String: Any])?["lat"] as? Double == 48.1
        })
        let key = try #require(Base64URL.decode(try String(contentsOf: fixture.directory.appendingPathComponent("token.key"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        let old = #"{"_type":"location","lat":40.5,"lon":10.5,"tst":\#(now - 7200)}"#
        let replayed = OwnPositionMark(tokenKey: key).marked(Array(old.utf8), topic: Topics.location(id), at: Int64(now - 7200) * 1000)
        try phone.mqtt.publishAndWait(topic: Topics.location(id), payload: replayed, qos: 1, retain: true, timeout: .seconds(10))
        #expect(eventually { (try? flared.metrics())?.contains("flare_own_position_replays_total 1") == true })
        // What a watcher finds retained now is the newest stored position, not the replay.
        #expect(eventually {
            guard let reader = try? Client(port: fixture.cluster.nodes[1].mqttPort, username: "flared", password: fixture.cluster.password,
                                           clientID: "reader-\(UUID().uuidString.prefix(8))", protocolVersion: .v311),
                  reader.waitForOutcome() == .connected, (try? reader.subscribe(Topics.location(id))) == true else { return false }
            return eventually(timeout: .seconds(2)) {
                reader.messages.contains { $0.retain && String(decoding: $0.payload, as: UTF8.self).contains("48.1") }
            }
        })
        let view = try flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey).text
        #expect(!view.contains("40.5"), "never stored")
    }

    /// A position in clear published to an end-to-end encrypted share on the NATS cluster is refused, never stored, and
    /// taken off the cluster's retained store (trust, second round, 2, on both brokers).
    @Test func aClearPositionOnAnEncryptedShareDoesNotStayOnTheCluster() throws {
        let fixture = try NATSFlaredFixture()
        let flared = fixture.flared[0]
        let created = try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":600,"e2e":true}"#, bearer: flared.ownerKey)
        let share = try #require(created.json as? [String: String], "\(created.text)")
        let id = try #require(share["share_id"].flatMap { ShareID($0) })
        let phone = try fixture.client(node: 0, share: id, token: try #require(share["device_token"]), clientID: ClientIDs.device(id))
        #expect(phone.waitForOutcome() == .connected)
        let clear = #"{"_type":"location","lat":47.3769,"lon":8.5417,"tst":\#(Int(Date().timeIntervalSince1970))}"#
        try phone.mqtt.publishAndWait(topic: Topics.location(id), payload: Array(clear.utf8), qos: 1, retain: true, timeout: .seconds(10))
        #expect(eventually { (try? flared.metrics())?.contains("flare_e2e_clear_positions_cleared_total 1") == true })
        // What a new subscriber on another node finds retained: nothing in clear.
        #expect(eventually {
            guard let reader = try? Client(port: fixture.cluster.nodes[2].mqttPort, username: "flared", password: fixture.cluster.password,
                                           clientID: "reader-\(UUID().uuidString.prefix(8))", protocolVersion: .v311),
                  reader.waitForOutcome() == .connected, (try? reader.subscribe(Topics.shareRoot(id) + "/#")) == true,
                  eventually(timeout: .seconds(2), { reader.messages.contains { $0.topic == Topics.status(id) && $0.retain } }) else { return false }
            return !reader.messages.contains { $0.topic == Topics.location(id) && $0.retain && !$0.payload.isEmpty }
        })
        let view = try flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey).text
        #expect(!view.contains("47.3769"), "never stored")
    }

    /// Phones reach the cluster over TLS through HAProxy (as `make cluster BROKER=nats` and deploy/compose.nats.yaml
    /// serve it): a TLS client that checks the certificate publishes a fix, stored; the plain listener is on loopback
    /// only (trust, second round, 5).
    @Test func aPhoneReachesTheClusterOverTLS() throws {
        let fixture = try NATSFlaredFixture()
        let flared = fixture.flared[0]
        let (id, share) = try fixture.createShare()
        let now = Int(Date().timeIntervalSince1970)
        let tlsPort = String(try #require(fixture.cluster.balancerTLSPort)), token = try #require(share["device_token"])
        // As a phone does, it connects again when the connection is lost: on a loaded machine the callout's answer to a
        // login can miss the node's wait, and the node then drops the connection (the login itself is not refused).
        func publish() throws -> CommandResult {
            try runCommand("/usr/bin/mosquitto_pub", ["-h", "127.0.0.1", "-p", tlsPort, "--cafile", fixture.cluster.certificatePath,
                                                      "-V", "mqttv311", "-q", "1", "-u", id.rawValue, "-P", token, "-i", ClientIDs.device(id),
                                                      "-t", Topics.location(id), "-m", #"{"_type":"location","lat":48.7,"lon":11.5,"tst":\#(now)}"#])
        }
        var sent = try publish()
        for _ in 0..<4 where sent.status != 0 && sent.stderr.contains("connection was lost") { sent = try publish() }
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey))?.json?["last"] as? [String: Any])?["lat"] as? Double == 48.7
        })
        // A client that does not trust the certificate is not let in.
        let untrusting = try runCommand("/usr/bin/mosquitto_pub", ["-h", "127.0.0.1", "-p", String(try #require(fixture.cluster.balancerTLSPort)),
                                                                 "--capath", "/nonexistent", "-V", "mqttv311", "-u", id.rawValue, "-P", "x",
                                                                 "-t", Topics.location(id), "-m", "{}"])
        #expect(untrusting.status != 0)
        let config = try String(contentsOf: fixture.cluster.directory.appendingPathComponent("haproxy.cfg"), encoding: .utf8)
        #expect(config.contains("bind 127.0.0.1:\(try #require(fixture.cluster.balancerPort))\n"), "plain MQTT on loopback only")
    }

    /// Copies of flared's own marked position count against the share's rate like any message: a phone flooding the
    /// cluster with them is cut off (before, the mark was looked at first, and they passed uncounted).
    @Test func markedCopiesCountAgainstTheSharesRate() throws {
        let fixture = try NATSFlaredFixture(extraEnvironment: ["FLARE_FIX_RATE_PER_SHARE": "2/5"])
        let flared = fixture.flared[0]
        let (id, share) = try fixture.createShare()
        let phone = try fixture.client(node: 0, share: id, token: try #require(share["device_token"]), clientID: ClientIDs.device(id))
        #expect(phone.waitForOutcome() == .connected)
        let key = try #require(Base64URL.decode(try String(contentsOf: fixture.directory.appendingPathComponent("token.key"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        let now = Int64(Date().timeIntervalSince1970)
        let copy = OwnPositionMark(tokenKey: key).marked(Array(#"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(now)}"#.utf8),
                                                         topic: Topics.location(id), at: now * 1000)
        for _ in 0..<20 where phone.disconnectCount == 0 {
            _ = try? phone.mqtt.publishAndWait(topic: Topics.location(id), payload: copy, qos: 1, retain: false, timeout: .seconds(5))
        }
        #expect(eventually(timeout: .seconds(10)) { phone.disconnectCount > 0 })
        #expect(eventually { (try? flared.metrics())?.contains("flare_broker_rate_disconnects 1") == true })
    }

    /// FLARE_FIX_RATE_PER_SHARE on NATS: the cluster acknowledges before anyone looks, so what came is stored, and the
    /// share's phone is cut off (its watcher is not); it may log in again, and is cut off again while it keeps on.
    @Test func aPhoneBeyondItsSharesRateIsCutOffAndItsWatcherIsNot() throws {
        let fixture = try NATSFlaredFixture(extraEnvironment: ["FLARE_FIX_RATE_PER_SHARE": "2/5"])
        let flared = fixture.flared[0]
        let (id, share) = try fixture.createShare()
        let issued = try flared.request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens", bearer: flared.ownerKey)
        let watcher = try fixture.client(node: 1, share: id, token: try #require(issued.json?["watch_token"] as? String),
                                         clientID: ClientIDs.watcher(id, suffix: "w"))
        let phone = try fixture.client(node: 0, share: id, token: try #require(share["device_token"]), clientID: ClientIDs.device(id))
        #expect(watcher.waitForOutcome() == .connected && phone.waitForOutcome() == .connected)
        let now = Int(Date().timeIntervalSince1970)
        var acknowledged = 0
        for index in 0..<20 {
            let fix = #"{"_type":"location","lat":\#(48.0 + Double(index) / 1000),"lon":11.5,"tst":\#(now - 30 + index)}"#
            if (try? phone.publish(Topics.location(id), fix)) == .some(nil) { acknowledged += 1 }
            if phone.disconnectCount > 0 { break }
        }
        #expect(eventually(timeout: .seconds(10)) { phone.disconnectCount > 0 })
        #expect(watcher.disconnectCount == 0)
        #expect(eventually { (try? flared.metrics())?.contains("flare_broker_rate_disconnects 1") == true })
        // Everything the cluster acknowledged is stored.
        let token = try #require(share["share_url"]?.split(separator: "/").last.map(String.init))
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/view/\(token)"))?.json?["trail"] as? [Any])?.count ?? 0 >= min(acknowledged, 20)
        }, "\(acknowledged) acknowledged")
    }

    /// After `flare token-key rotate` and a restart, the tokens of the old key stop working at once on NATS too: their
    /// connections are ended, and logging in with them is refused.
    @Test func aRotatedTokenKeyEndsTheOldTokensConnections() throws {
        let fixture = try NATSFlaredFixture()
        let flared = fixture.flared[0]
        let (id, share) = try fixture.createShare()
        let oldToken = try #require(share["device_token"])
        let phone = try fixture.client(node: 2, share: id, token: oldToken, clientID: ClientIDs.device(id))
        #expect(phone.waitForOutcome() == .connected)
        _ = flared.stop()
        let rotated = try flared.flare(["token-key", "rotate"])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        try flared.start()
        #expect(eventually(timeout: .seconds(15)) { phone.disconnectCount > 0 })
        #expect(try fixture.client(node: 0, share: id, token: oldToken, clientID: ClientIDs.device(id)).waitForOutcome() == .refused)
        #expect(flared.log.contains("ended 1 connections whose tokens an earlier token key signed"))
    }

    /// A cluster that lost its retained messages (every node's store gone; a configuration reload does the same to the
    /// phones' retained positions): flared's keeper finds its epoch mark missing and publishes every share's retained
    /// status and last position again, the stream's consumer is made anew, and fixes are stored again.
    @Test func aClusterThatLostItsRetainedStateIsRestored() throws {
        let fixture = try NATSFlaredFixture()
        let flared = fixture.flared[0]
        let (id, share) = try fixture.createShare()
        let token = try #require(share["device_token"])
        let phone = try fixture.client(node: nil, share: id, token: token, clientID: ClientIDs.device(id))
        #expect(phone.waitForOutcome() == .connected)
        #expect(try phone.publish(Topics.location(id), #"{"_type":"location","lat":48.7,"lon":11.5,"tst":\#(Int(Date().timeIntervalSince1970) - 5)}"#) == nil)
        #expect(eventually { (try? flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey))?.json?["last"] != nil })
        phone.mqtt.disconnect()
        // The keeper has recorded a mark the cluster acknowledged (a store with none is a new installation: nothing to
        // restore).
        #expect(eventually {
            (flared.metric("flare_broker_epoch") ?? 0) >= 2
        })

        try fixture.cluster.restartEmpty()
        let retained = {
            guard let reader = try? Client(port: fixture.cluster.nodes[1].mqttPort, username: "flared", password: fixture.cluster.password,
                                           clientID: "reader-\(UUID().uuidString.prefix(8))", protocolVersion: .v311),
                  reader.waitForOutcome() == .connected, (try? reader.subscribe(Topics.shareRoot(id) + "/#")) == true else { return false }
            return eventually(timeout: .seconds(2)) {
                reader.messages.contains { $0.topic == Topics.status(id) && $0.retain }
                    && reader.messages.contains { $0.topic == Topics.location(id) && $0.retain && String(decoding: $0.payload, as: UTF8.self).contains("48.7") }
            }
        }
        #expect(eventually(timeout: .seconds(60)) { retained() })
        #expect(flared.log.contains("publishing every share's retained status and last position again"))

        let back = try fixture.client(node: nil, share: id, token: token, clientID: ClientIDs.device(id, suffix: "again"))
        #expect(back.waitForOutcome() == .connected)
        #expect(eventually(timeout: .seconds(30)) {
            _ = try? back.publish(Topics.location(id), #"{"_type":"location","lat":48.8,"lon":11.5,"tst":\#(Int(Date().timeIntervalSince1970))}"#)
            return ((try? flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey))?.json?["last"] as? [String: Any])?["lat"] as? Double == 48.8
        })
    }
}
