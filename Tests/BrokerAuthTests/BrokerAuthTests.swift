import FlareCore
import FlareCrypto
import FlareMQTT
import FlareTestSupport
import Foundation
import Synchronization
import Testing
import FlareCodec

/// The broker itself enforces share tokens: a real mosquitto with the flare_auth plugin, real MQTT clients.
@Suite struct BrokerAuthTests {
    @Test func aDeviceTokenPublishesAndSubscribesOnlyWithinItsOwnShare() throws {
        let fixture = try AuthFixture()
        let a = ShareID.generate(), b = ShareID.generate()
        let device = try fixture.client(a.rawValue, fixture.token(a, .device))
        #expect(device.waitForOutcome() == .connected)
        #expect(try device.publish(Topics.location(a), #"{"lat":1,"lon":2}"#) == nil)
        #expect(try device.publish(Topics.location(b), #"{"lat":1,"lon":2}"#) == notAuthorized)
        #expect(try device.publish(Topics.status(a), #"{"state":"ended"}"#) == notAuthorized)  // only the bridge says that
        #expect(try device.publish("elsewhere", "x") == notAuthorized)
        #expect(try device.subscribe(Topics.status(a)))
        // Commands ("locate now") come only from flared: the device reads its command topic and cannot write it.
        #expect(try device.publish(Topics.command(a), #"{"_type":"cmd","action":"reportLocation"}"#) == notAuthorized)
        // Exact topics: nothing below the location topic (the apps' events, waypoints, or any number of retained
        // messages that would outlive the share).
        for below in ["/event", "/waypoint", "/x/1", "/x/2"] {
            #expect(try device.publish(Topics.location(a) + below, #"{"_type":"transition"}"#) == notAuthorized, "\(below)")
        }
        for topic in [Topics.command(a), Topics.answers(a), Topics.audience(a), Topics.stored(a)] {
            #expect(try device.subscribe(topic), "\(topic)")
        }
        let watcher = try fixture.client(a.rawValue, fixture.token(a, .watch))
        #expect(watcher.waitForOutcome() == .connected)
        #expect(try watcher.publish(Topics.command(a), #"{"_type":"cmd","action":"reportLocation"}"#) == notAuthorized)
        let flared = try fixture.flared()
        #expect(flared.waitForOutcome() == .connected)
        #expect(try flared.publish(Topics.command(a), #"{"_type":"cmd","action":"reportLocation"}"#) == nil)
        #expect(eventually { device.messages.contains { $0.topic == Topics.command(a) } })

        let snooper = try fixture.client(a.rawValue, fixture.token(a, .device))
        #expect(snooper.waitForOutcome() == .connected)
        #expect(try snooper.subscribe(Topics.status(b)) == false)
        let wildcard = try fixture.client(a.rawValue, fixture.token(a, .device))
        #expect(wildcard.waitForOutcome() == .connected)
        #expect(try wildcard.subscribe("flare/v1/shares/+/location") == false)
    }

    @Test func aTokenOnlyWorksWithItsOwnShareAsUsername() throws {
        let fixture = try AuthFixture()
        let a = ShareID.generate(), b = ShareID.generate()
        let impostor = try fixture.client(b.rawValue, fixture.token(a, .device))
        #expect(impostor.waitForOutcome() == .refused)
        #expect(fixture.broker.log.contains("token is for another share"))
    }

    /// A client id names a session, and whoever connects with it takes that session over, with what the broker
    /// queued for it: a token may use only its own share's ids, the phone's or a watcher's by its role.
    @Test func aTokenConnectsOnlyWithTheClientIDsItsRoleMayUse() throws {
        let fixture = try AuthFixture()
        let a = ShareID.generate(), b = ShareID.generate()
        let device = fixture.token(a, .device), watch = fixture.token(a, .watch)
        let cases: [(token: String, clientID: String, connects: Bool)] = [
            (device, "flare-\(a.rawValue)", true),
            (device, "flare-\(a.rawValue)-tablet.2", true),
            (watch, "flare-\(a.rawValue)-watch-dispatch_1", true),
            // The service accounts' sessions: the bridge, a cluster instance, the epoch probe.
            (device, "flared", false), (watch, "flared", false), (device, "flared-a", false), (device, "flared-epoch", false),
            // Another share's phone and watcher.
            (device, "flare-\(b.rawValue)", false), (watch, "flare-\(b.rawValue)-watch-x", false),
            // The phone's session for a watcher, a watcher's for the phone.
            (watch, "flare-\(a.rawValue)", false), (watch, "flare-\(a.rawValue)-tablet", false),
            (device, "flare-\(a.rawValue)-watch-x", false),
            // Near misses: an empty suffix, a longer share id, a character outside the suffix alphabet, an id the
            // broker would have assigned.
            (device, "flare-\(a.rawValue)-", false), (watch, "flare-\(a.rawValue)-watch-", false),
            (device, "flare-\(a.rawValue)x", false), (device, "flare-\(a.rawValue)-a/b", false),
            (device, "auto-5D3C2A10-0B1E-4F6A-8C7D-9E0F1A2B3C4D", false),
            (device, "flare-\(a.rawValue)-" + String(repeating: "x", count: 65), false),
        ]
        for (token, clientID, connects) in cases {
            let client = try fixture.client(a.rawValue, token, clientID: clientID)
            #expect(client.waitForOutcome() == (connects ? .connected : .refused), "\(clientID)")
        }
        #expect(fixture.broker.log.contains("client id is not one this token may use"))
        // The bridge's own id stays the bridge's: its connection was never closed by any of the attempts.
        let flared = try fixture.client("flared", fixture.flaredPassword, clientID: "flared")
        #expect(flared.waitForOutcome() == .connected)
        #expect(try fixture.client(a.rawValue, device, clientID: "flared").waitForOutcome() == .refused)
        #expect(flared.mqtt.isConnected && flared.disconnectCount == 0)
        #expect(!fixture.broker.log.contains("Client flared already connected"))
    }

    /// A share's devices share one publish budget. Beyond it the broker disconnects the device before it answers the
    /// publish, so the device is never told a message was taken that was then dropped: it sends it again once it has
    /// reconnected. Another share's budget is its own, and the service accounts have none.
    @Test func aShareBeyondItsPublishRateIsDisconnectedBeforeItsMessageIsAcknowledged() throws {
        let fixture = try AuthFixture(fixRate: "1/5")
        let a = ShareID.generate(), b = ShareID.generate()
        let flared = try fixture.flared()
        #expect(flared.waitForOutcome() == .connected)
        #expect(try flared.subscribe(Topics.location(a)))
        let phone = try fixture.client(a.rawValue, fixture.token(a, .device), clientID: ClientIDs.device(a))
        let tablet = try fixture.client(a.rawValue, fixture.token(a, .device), clientID: ClientIDs.device(a, suffix: "tablet"))
        #expect(phone.waitForOutcome() == .connected && tablet.waitForOutcome() == .connected)
        // The burst of five, between the share's two devices: all acknowledged and delivered.
        for n in 0..<5 { #expect(try (n % 2 == 0 ? phone : tablet).publish(Topics.location(a), #"{"n":\#(n)}"#) == nil) }
        // The sixth: the connection ends with no acknowledgement, so the phone keeps the message; reconnected (a second
        // later, when the budget has one more), it sends it again, and that one is taken: once, and acknowledged.
        try phone.mqtt.publishAndWait(topic: Topics.location(a), payload: Array(#"{"n":5}"#.utf8), qos: 1, retain: false, timeout: .seconds(15))
        #expect(phone.disconnectCount >= 1)
        #expect(fixture.broker.log.contains("share \(a.rawValue) over its publish rate"))
        let fromDevices = { flared.messages.filter { String(decoding: $0.payload, as: UTF8.self).hasPrefix(#"{"n""#) }.map { String(decoding: $0.payload, as: UTF8.self) } }
        #expect(eventually { fromDevices().count == 6 })
        #expect(Set(fromDevices()) == Set((0..<6).map { #"{"n":\#($0)}"# }) && fromDevices().count == 6, "\(fromDevices())")
        // Another share is not held up by this one; nor is flared, which has no budget.
        let other = try fixture.client(b.rawValue, fixture.token(b, .device))
        #expect(other.waitForOutcome() == .connected)
        #expect(try other.publish(Topics.location(b), #"{"n":0}"#) == nil)
        for n in 0..<10 { #expect(try flared.publish(Topics.location(a), #"{"flared":\#(n)}"#) == nil) }
    }

    @Test func aWatchTokenSubscribesToItsShareButCannotPublish() throws {
        let fixture = try AuthFixture()
        let a = ShareID.generate(), b = ShareID.generate()
        let flared = try fixture.flared()
        #expect(flared.waitForOutcome() == .connected)
        #expect(try flared.publish(Topics.status(a), #"{"state":"active"}"#) == nil)

        let watcher = try fixture.client(a.rawValue, fixture.token(a, .watch))
        #expect(watcher.waitForOutcome() == .connected)
        #expect(try watcher.subscribe(Topics.shareRoot(a) + "/#"))
        #expect(try flared.publish(Topics.location(a), #"{"lat":3,"lon":4}"#) == nil)
        #expect(eventually { watcher.messages.contains { $0.topic == Topics.location(a) } })
        #expect(try watcher.publish(Topics.location(a), #"{"lat":1,"lon":2}"#) == notAuthorized)

        // Integrators follow the share's lifecycle events on their own topic.
        let integrator = try fixture.client(a.rawValue, fixture.token(a, .watch))
        #expect(integrator.waitForOutcome() == .connected)
        #expect(try integrator.subscribe(Topics.events(a)))
        #expect(try flared.publish(Topics.events(a), #"{"type":"share.opened"}"#) == nil)
        #expect(eventually { integrator.messages.contains { $0.topic == Topics.events(a) } })
        #expect(try integrator.publish(Topics.events(a), #"{"type":"share.ended"}"#) == notAuthorized)

        let other = try fixture.client(a.rawValue, fixture.token(a, .watch))
        #expect(other.waitForOutcome() == .connected)
        #expect(try other.subscribe(Topics.shareRoot(b) + "/#") == false)
    }

    @Test func badTokensAreRefusedAtConnect() throws {
        let fixture = try AuthFixture()
        let id = ShareID.generate()
        let good = fixture.token(id, .device)
        let parts = good.split(separator: ".").map(String.init)
        let now = Int64(Date().timeIntervalSince1970)

        let expired = ShareToken(shareID: id, role: .device, issuedAt: now - 7200, expiresAt: now - 1).signed(with: fixture.key)
        // Claims rewritten to live longer, signature kept.
        let longer = ShareToken(shareID: id, role: .device, issuedAt: now, expiresAt: now + 999_999).signed(with: fixture.key)
        let tampered = parts[0] + "." + longer.split(separator: ".")[1] + "." + parts[2]
        let otherKey = ShareToken(shareID: id, role: .device, issuedAt: now, expiresAt: now + 3600).signed(with: Crypto.randomBytes(32))
        let noneHeader = Base64URL.encode(#"{"alg":"none","typ":"JWT"}"#)
        let algNone = noneHeader + "." + parts[1] + "."
        let algNoneSigned = noneHeader + "." + parts[1] + "." + Base64URL.encode(Crypto.hmacSHA256(key: fixture.key, message: Array((noneHeader + "." + parts[1]).utf8)))
        let hs512Header = Base64URL.encode(#"{"alg":"HS512","typ":"JWT"}"#)
        let hs512 = hs512Header + "." + parts[1] + "." + Base64URL.encode(Crypto.hmacSHA256(key: fixture.key, message: Array((hs512Header + "." + parts[1]).utf8)))
        let cases: [(String, String?)] = [
            ("expired", expired),
            ("tampered", tampered),
            ("signed with another key", otherKey),
            ("alg none, no signature", algNone),
            ("alg none, with a signature", algNoneSigned),
            ("alg HS512", hs512),
            ("truncated", String(good.dropLast(5))),
            ("header only", parts[0]),
            ("two segments", parts[0] + "." + parts[1]),
            ("four segments", good + ".x"),
            ("padding", good + "="),
            ("empty", ""),
            ("no password", nil),
            ("not base64", "!!!.???.***"),
            ("oversized", good + String(repeating: "A", count: 3000)),
        ]
        for (name, password) in cases {
            let client = try fixture.client(id.rawValue, password)
            #expect(client.waitForOutcome() == .refused, "\(name) token was not refused")
        }
        // The real one still works, and nothing of any token reached the log.
        let device = try fixture.client(id.rawValue, good)
        #expect(device.waitForOutcome() == .connected)
        let log = fixture.broker.log
        #expect(log.contains("token has expired"))
        #expect(log.contains("token algorithm is not HS256"))
        #expect(log.contains("token signature does not verify"))
        #expect(!log.contains(parts[1]) && !log.contains(parts[2]))
    }

    @Test func aTokenThatExpiresWhileConnectedStopsWorking() throws {
        let fixture = try AuthFixture()
        let id = ShareID.generate()
        // Five seconds: long enough to connect and publish once on a busy machine, short enough to wait for.
        let device = try fixture.client(id.rawValue, fixture.token(id, .device, expiresIn: 5))
        #expect(device.waitForOutcome() == .connected)
        #expect(try device.publish(Topics.location(id), #"{"lat":1,"lon":2}"#) == nil)
        #expect(try eventually(timeout: .seconds(20)) {
            try device.publish(Topics.location(id), #"{"lat":1,"lon":2}"#) == notAuthorized
        })
    }

    @Test func anonymousClientsAndUnknownAccountsAreRefused() throws {
        let fixture = try AuthFixture()
        #expect(try fixture.client(nil, nil).waitForOutcome() == .refused)
        #expect(try fixture.client("flared", "wrong").waitForOutcome() == .refused)
        #expect(try fixture.client("somebody", "x").waitForOutcome() == .refused)
        #expect(try fixture.flared().waitForOutcome() == .connected)
    }

    @Test func onlyFlaredMayWriteTheControlTopic() throws {
        let fixture = try AuthFixture()
        let id = ShareID.generate()
        let token = fixture.token(id, .device)
        let device = try fixture.client(id.rawValue, token)
        #expect(device.waitForOutcome() == .connected)
        let revoke = #"{"op":"revoke","share_id":"\#(id.rawValue)","until":\#(Int64(Date().timeIntervalSince1970) + 3600)}"#

        // The device itself, a watcher and the read-only admin account are refused, and nothing happens.
        #expect(try device.publish(Topics.brokerControl, revoke) == notAuthorized)
        let watcher = try fixture.client(id.rawValue, fixture.token(id, .watch))
        #expect(watcher.waitForOutcome() == .connected)
        #expect(try watcher.publish(Topics.brokerControl, revoke) == notAuthorized)
        let admin = try fixture.client("admin", fixture.adminPassword)
        #expect(admin.waitForOutcome() == .connected)
        #expect(try admin.publish(Topics.brokerControl, revoke) == notAuthorized)
        #expect(try device.publish(Topics.location(id), #"{"lat":1,"lon":2}"#) == nil)
        #expect(device.disconnectCount == 0)

        // Malformed control messages from flared are ignored without dropping flared.
        let flared = try fixture.flared()
        #expect(flared.waitForOutcome() == .connected)
        #expect(try flared.publish(Topics.brokerControl, "not json") == nil)
        #expect(try flared.publish(Topics.brokerControl, #"{"op":"revoke","share_id":"short","until":1}"#) == nil)
        #expect(try flared.publish(Topics.location(id), "{}") == nil)
        #expect(flared.disconnectCount == 0)
        #expect(device.disconnectCount == 0)
    }

    @Test func aRevokedShareIsCutOffAtOnceAndStaysRefusedAfterABrokerRestart() throws {
        let fixture = try AuthFixture()
        let id = ShareID.generate(), bystanderID = ShareID.generate()
        let token = fixture.token(id, .device)
        let device = try fixture.client(id.rawValue, token)
        let bystander = try fixture.client(bystanderID.rawValue, fixture.token(bystanderID, .device))
        let flared = try fixture.flared()
        #expect(device.waitForOutcome() == .connected)
        #expect(bystander.waitForOutcome() == .connected)
        #expect(flared.waitForOutcome() == .connected)

        let revoke = #"{"op":"revoke","share_id":"\#(id.rawValue)","until":\#(Int64(Date().timeIntervalSince1970) + 3600)}"#
        #expect(try flared.publish(Topics.brokerControl, revoke) == nil)
        // Disconnected within a second of the broker taking the revocation (it kicks synchronously).
        #expect(eventually(timeout: .seconds(1)) { device.disconnectCount >= 1 })
        #expect(!device.mqtt.isConnected)
        // Connecting again with the same token is refused.
        #expect(try fixture.client(id.rawValue, token).waitForOutcome() == .refused)
        #expect(try bystander.publish(Topics.location(bystanderID), "{}") == nil)
        // flared repeats a stop it is not sure the broker heard: the list on disk keeps one line.
        #expect(try flared.publish(Topics.brokerControl, revoke) == nil)
        let revocations = fixture.broker.directory.appendingPathComponent("revocations")
        #expect(try String(contentsOf: revocations, encoding: .utf8).split(separator: "\n").count == 1)

        fixture.broker.stop()
        try fixture.broker.start()
        #expect(try fixture.client(id.rawValue, token).waitForOutcome() == .refused)
        #expect(try fixture.client(bystanderID.rawValue, fixture.token(bystanderID, .device)).waitForOutcome() == .connected)
        #expect(fixture.broker.log.contains("share was stopped"))
    }

    @Test func passedRevocationsArePrunedFromTheFileAtStartUpAndLiveOnesKept() throws {
        let fixture = try AuthFixture()
        let live = ShareID.generate(), passed = ShareID.generate()
        let now = Int64(Date().timeIntervalSince1970)
        fixture.broker.stop()
        let file = fixture.broker.directory.appendingPathComponent("revocations")
        try ("\(passed.rawValue) \(now - 10)\n" + "garbage line\n" + "\(live.rawValue) \(now + 3600)\n" + "\(live.rawValue) x\n")
            .write(to: file, atomically: true, encoding: .utf8)
        try fixture.broker.start()
        #expect(try fixture.client(live.rawValue, fixture.token(live, .device)).waitForOutcome() == .refused)
        #expect(try fixture.client(passed.rawValue, fixture.token(passed, .device)).waitForOutcome() == .connected)
        #expect(try String(contentsOf: file, encoding: .utf8) == "\(live.rawValue) \(now + 3600)\n")
    }

    /// Replacing token.key is the emergency stop for every token in circulation, forged ones included: on SIGHUP new
    /// connections need the new key, and every session verified with the old one ends (its claims came from a key no
    /// longer trusted). The service accounts stay; reading the same key again ends nothing.
    @Test func aRotatedTokenKeyIsTakenUpOnSIGHUPAndEndsTheOldKeysSessions() throws {
        let fixture = try AuthFixture()
        let id = ShareID.generate()
        let oldToken = fixture.token(id, .device)
        let pid = try #require(fixture.broker.processIdentifier)
        let old = try fixture.client(id.rawValue, oldToken)
        let watcher = try fixture.client(id.rawValue, fixture.token(id, .watch))
        let flared = try fixture.flared()
        #expect(old.waitForOutcome() == .connected && watcher.waitForOutcome() == .connected && flared.waitForOutcome() == .connected)
        // The same key read again: nobody is disconnected. mosquitto clears its reload flag once a reload is done, so a
        // SIGHUP that arrives during the reload before it is lost: the next one waits for this reload's log line.
        let loads = { fixture.broker.log.components(separatedBy: "flare_auth: token key loaded").count - 1 }
        let loadedBefore = loads()
        kill(pid, SIGHUP)
        #expect(eventually { loads() > loadedBefore }, "the same key read again")
        #expect(try old.publish(Topics.location(id), #"{"lat":1,"lon":2}"#) == nil)
        #expect(old.disconnectCount == 0 && watcher.disconnectCount == 0)

        let newKey = Crypto.randomBytes(32)
        try (Base64URL.encode(newKey) + "\n").write(toFile: fixture.keyPath, atomically: true, encoding: .utf8)
        kill(pid, SIGHUP)
        let now = Int64(Date().timeIntervalSince1970)
        let newToken = ShareToken(shareID: id, role: .device, issuedAt: now, expiresAt: now + 600).signed(with: newKey)
        #expect(try eventually { try fixture.client(id.rawValue, newToken).waitForOutcome() == .connected })
        #expect(try fixture.client(id.rawValue, oldToken).waitForOutcome() == .refused)
        // The sessions the old key let in are gone, and stay so (their reconnections are refused).
        #expect(eventually { old.disconnectCount >= 1 && watcher.disconnectCount >= 1 && old.refusedCount >= 1 })
        #expect(!old.mqtt.isConnected && !watcher.mqtt.isConnected)
        #expect(fixture.broker.log.contains("token key changed; disconnected 2 clients verified with the old key"))
        #expect(flared.mqtt.isConnected && flared.disconnectCount == 0)

        // A broken key file on the next reload keeps the key in use.
        try "not a key\n".write(toFile: fixture.keyPath, atomically: true, encoding: .utf8)
        kill(pid, SIGHUP)
        #expect(eventually { fixture.broker.log.contains("keeping the token key already loaded") })
        #expect(try fixture.client(id.rawValue, newToken).waitForOutcome() == .connected)
    }
}

/// The last will of a tracker whose connection is lost reaches subscribers: the plugin keeps a client's claims
/// until its will has been checked (mosquitto 2.0 asks for the will's ACL after the disconnect event).
@Suite struct LastWillTests {
    /// A real MQTT client in its own process (Debian's mosquitto_sub), with the will the OwnTracks apps set;
    /// SIGKILL closes its socket without a DISCONNECT, as a phone losing its network does.
    final class Tracker {
        let process = Process()
        let clientID: String

        init(fixture: AuthFixture, share: ShareID, will: String, qos: Int) throws {
            clientID = "flare-\(share.rawValue)-will-\(UUID().uuidString.prefix(8))"
            process.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_sub")
            process.arguments = ["-h", "127.0.0.1", "-p", String(fixture.broker.port), "-V", "mqttv311", "-c", "-i", clientID,
                                 "-u", share.rawValue, "-P", fixture.token(share, .device), "-t", Topics.status(share),
                                 "--will-topic", Topics.location(share), "--will-payload", will, "--will-qos", String(qos)]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            // Connected and subscribed once it prints the share's retained status.
            let received = Mutex(false)
            output.fileHandleForReading.readabilityHandler = { handle in
                if !handle.availableData.isEmpty { received.withLock { $0 = true } }
            }
            defer { output.fileHandleForReading.readabilityHandler = nil }
            guard eventually(timeout: .seconds(10), { received.withLock { $0 } }) else {
                throw TestSupportError("the tracker did not connect")
            }
        }

        func cutConnection() {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }

        deinit { if process.isRunning { cutConnection() } }
    }

    /// The flared account, listening on the share's location topic, with the share's status retained (what a tracker
    /// waits for to know it is connected).
    func listeningFlared(_ fixture: AuthFixture, _ id: ShareID) throws -> Client {
        let flared = try fixture.flared()
        #expect(flared.waitForOutcome() == .connected)
        #expect(try flared.subscribe(Topics.location(id)))
        try flared.mqtt.publishAndWait(topic: Topics.status(id), payload: Array(#"{"state":"active"}"#.utf8), qos: 1, retain: true, timeout: .seconds(10))
        return flared
    }

    @Test(arguments: [
        (#"{"_type":"lwt"}"#, 0),                    // Android: no tst, QoS 0
        (#"{"_type":"lwt","tst":1767225600}"#, 1),   // iOS: the connect time, at the location QoS
    ])
    func aCutConnectionDeliversTheTrackersLastWill(will: String, qos: Int) throws {
        let fixture = try AuthFixture()
        let id = ShareID.generate()
        let flared = try listeningFlared(fixture, id)
        let tracker = try Tracker(fixture: fixture, share: id, will: will, qos: qos)
        tracker.cutConnection()
        #expect(eventually(timeout: .seconds(10)) {
            flared.messages.contains { $0.topic == Topics.location(id) && $0.payload == Array(will.utf8) }
        })
        #expect(!fixture.broker.log.contains("Denied PUBLISH from \(tracker.clientID)"))
    }

    @Test func aStoppedSharesTrackerIsCutOffWithoutItsWill() throws {
        let fixture = try AuthFixture()
        let id = ShareID.generate()
        let flared = try listeningFlared(fixture, id)
        let tracker = try Tracker(fixture: fixture, share: id, will: #"{"_type":"lwt"}"#, qos: 1)
        let revoke = #"{"op":"revoke","share_id":"\#(id.rawValue)","until":\#(Int64(Date().timeIntervalSince1970) + 3600)}"#
        #expect(try flared.publish(Topics.brokerControl, revoke) == nil)
        // The broker's kick closes the connection (mosquitto_sub then exits or retries and is refused).
        #expect(eventually(timeout: .seconds(10)) { fixture.broker.log.contains("share \(id.rawValue) revoked") })
        tracker.cutConnection()
        // A marker published after the kick arrives; the will never does.
        #expect(try flared.publish(Topics.location(id), #"{"marker":true}"#) == nil)
        #expect(eventually(timeout: .seconds(10)) { flared.messages.contains { $0.payload == Array(#"{"marker":true}"#.utf8) } })
        #expect(!flared.messages.contains { $0.payload == Array(#"{"_type":"lwt"}"#.utf8) })
    }
}
