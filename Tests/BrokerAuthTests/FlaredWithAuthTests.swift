import FlareCore
import FlareMQTT
import FlareSodium
import FlareTestSupport
import Foundation
import Testing

/// The built `flared` against a broker that enforces tokens: it logs in as the `flared` service account, its
/// device and watch tokens work at the broker, and stopping a share cuts the device off.
@Suite struct FlaredWithAuthTests {
    @Test func flaredWorksEndToEndAsTheServiceAccountAndStoppingAShareCutsItsDeviceOff() throws {
        let fixture = try AuthFixture()
        let flared = try FlaredProcess(broker: fixture.broker, dataDirectory: fixture.directory)
        defer { flared.stop() }
        #expect(eventually { (try? flared.request("GET", "/healthz"))?.status == 200 })
        #expect(fixture.broker.log.contains("u'flared'") || flared.log.contains("connected to the broker"))

        let created = try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":600}"#, bearer: flared.ownerKey)
        #expect(created.status == 201)
        let share = try #require(created.json as? [String: String])
        let id = try #require(share["share_id"].flatMap { ShareID($0) })
        let deviceToken = try #require(share["device_token"])

        // The device publishes with its token; flared (subscribed as the service account) stores the fix.
        let device = try fixture.client(id.rawValue, deviceToken)
        #expect(device.waitForOutcome() == .connected)
        #expect(try device.publish(Topics.location(id), #"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(Int(Date().timeIntervalSince1970))}"#) == nil)
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/shares/\(id.rawValue)", bearer: flared.ownerKey))?.json?["last"] as? [String: Any]) != nil
        })

        // Watch tokens: owner key only, active shares only.
        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens").status == 401)
        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens", bearer: deviceToken).status == 401)
        #expect(try flared.request("POST", "/api/v1/shares/\(ShareID.generate().rawValue)/watch-tokens", bearer: flared.ownerKey).status == 404)
        let issued = try flared.request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens", bearer: flared.ownerKey)
        #expect(issued.status == 201)
        let watch = try #require(issued.json)
        #expect(watch["mqtt_username"] as? String == id.rawValue)
        #expect(watch["topic_filter"] as? String == "flare/v1/shares/\(id.rawValue)/#")
        #expect(watch["expires_at"] as? String == share["expires_at"])
        let watchToken = try #require(watch["watch_token"] as? String)
        let watcher = try fixture.client(id.rawValue, watchToken)
        #expect(watcher.waitForOutcome() == .connected)
        #expect(try watcher.subscribe(try #require(watch["topic_filter"] as? String)))
        #expect(eventually { watcher.messages.contains { $0.topic == Topics.status(id) } })
        #expect(try watcher.publish(Topics.location(id), #"{"lat":1,"lon":2}"#) == notAuthorized)
        // HTTP ingest goes through the broker as flared: the watcher sees it.
        let ingested = try flared.request("POST", "/api/v1/shares/\(id.rawValue)/locations", body: #"{"lat":48.2,"lon":11.6}"#, bearer: deviceToken)
        #expect((200...299).contains(ingested.status))
        #expect(eventually { watcher.messages.contains { $0.topic == Topics.location(id) && String(decoding: $0.payload, as: UTF8.self).contains("48.2") } })

        // Stop: the device, subscribed to its command topic as the OwnTracks apps are, is first told to stop
        // reporting (quiet mode); then the broker disconnects it within a second and refuses the token from then on.
        #expect(try device.subscribe(Topics.command(id)))
        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/stop", bearer: flared.ownerKey).status == 200)
        #expect(eventually(timeout: .seconds(1)) { !device.mqtt.isConnected })
        #expect(device.messages.contains { $0.topic == Topics.command(id) && $0.payload == OwnTracksConfiguration.stopReporting },
                "\(device.messages.map { ($0.topic, String(decoding: $0.payload, as: UTF8.self)) })")
        #expect(try fixture.client(id.rawValue, deviceToken).waitForOutcome() == .refused)
        #expect(try fixture.client(id.rawValue, watchToken).waitForOutcome() == .refused)
        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens", bearer: flared.ownerKey).status == 409)

        // A broker restart keeps the revocation, and flared carries on as before.
        fixture.broker.stop()
        try fixture.broker.start()
        #expect(try fixture.client(id.rawValue, deviceToken).waitForOutcome() == .refused)
        #expect(eventually(timeout: .seconds(20)) { (try? flared.request("GET", "/healthz"))?.json?["mqtt"] as? String == "connected" })
        let next = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: flared.ownerKey)
        let nextShare = try #require(next.json as? [String: String])
        let nextID = try #require(nextShare["share_id"].flatMap { ShareID($0) })
        let nextDevice = try fixture.client(nextID.rawValue, try #require(nextShare["device_token"]))
        #expect(nextDevice.waitForOutcome() == .connected)
        #expect(try nextDevice.publish(Topics.location(nextID), #"{"lat":1,"lon":2}"#) == nil)
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/shares/\(nextID.rawValue)", bearer: flared.ownerKey))?.json?["last"] as? [String: Any]) != nil
        })
        #expect(!flared.log.contains(deviceToken) && !flared.log.contains(watchToken) && !flared.log.contains(fixture.flaredPassword))
        #expect(!fixture.broker.log.contains(deviceToken) && !fixture.broker.log.contains(fixture.flaredPassword))
    }

    /// A device that publishes with flared's own mark (`flare-origin: flared`) is disconnected before its message is
    /// acknowledged: nothing is retained, no watcher gets it, flared's own retained position stands, and the phone's
    /// next honest fix is taken. Before, the bridge skipped such a message unchecked and the broker kept it retained
    /// (issue: trust, second round, 4).
    @Test func nobodyButFlaredPublishesWithFlaredsMark() throws {
        let fixture = try AuthFixture()
        let flared = try FlaredProcess(broker: fixture.broker, dataDirectory: fixture.directory)
        defer { flared.stop() }
        let (id, share) = try flared.createShare()
        let deviceToken = try #require(share["device_token"])
        let watchToken = try flared.watchToken(id)
        let watcher = try fixture.client(id.rawValue, watchToken)
        #expect(watcher.waitForOutcome() == .connected)
        #expect(try watcher.subscribe(Topics.location(id)))
        let now = Int(Date().timeIntervalSince1970)
        // flared's own position: an HTTP fix, published by flared with its mark.
        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/locations", body: #"{"lat":48.1,"lon":11.5,"tst":\#(now - 5)}"#,
                                   bearer: deviceToken).status == 202)
        #expect(eventually { watcher.messages.contains { String(decoding: $0.payload, as: UTF8.self).contains("48.1") } })

        let forged = #"{"_type":"location","lat":10.5,"lon":10.5,"tst":\#(now + 86_400 * 365)}"#
        for name in [Topics.originProperty.name, "Flare-Origin"] {
            let device = try fixture.client(id.rawValue, deviceToken)
            #expect(device.waitForOutcome() == .connected)
            try device.mqtt.publish(topic: Topics.location(id), payload: Array(forged.utf8), qos: 1, retain: true,
                                    userProperties: [MQTTUserProperty(name: name, value: Topics.originProperty.value)])
            // Disconnected before any acknowledgement (the client would send it again on reconnecting: it is let go).
            #expect(eventually { device.disconnectCount >= 1 }, "\(name): disconnected")
            device.mqtt.disconnect()
        }
        #expect(fixture.broker.log.contains("\(id.rawValue) published with flared's mark"))
        let retained = try #require(try fixture.retained(below: Topics.location(id)).keys.first)
        #expect(retained == Topics.location(id))
        let reader = try fixture.flared(clientID: "mark-reader-\(UUID().uuidString.prefix(8))")
        #expect(reader.waitForOutcome() == .connected)
        #expect(try reader.subscribe(Topics.location(id)))
        #expect(eventually { reader.messages.contains { $0.retain } })
        #expect(reader.messages.filter(\.retain).allSatisfy { String(decoding: $0.payload, as: UTF8.self).contains("48.1") }, "flared's position stands")
        #expect(!watcher.messages.contains { String(decoding: $0.payload, as: UTF8.self).contains("10.5") })
        // The phone's next honest fix is taken, so the share goes on.
        let honest = try fixture.client(id.rawValue, deviceToken)
        #expect(honest.waitForOutcome() == .connected)
        #expect(try honest.publish(Topics.location(id), #"{"_type":"location","lat":48.3,"lon":11.6,"tst":\#(now)}"#, retain: true) == nil)
        let view = try #require((share["share_url"]?.split(separator: "/").last).map(String.init))
        #expect(eventually { ((try? flared.request("GET", "/api/v1/view/\(view)"))?.json?["last"] as? [String: Any])?["lat"] as? Double == 48.3 })
        #expect(!(((try? flared.request("GET", "/api/v1/view/\(view)"))?.text) ?? "").contains("10.5"))
    }

    /// An integrator watching an end-to-end encrypted share, with a watch token and a watcher's client id
    /// (`flare-<share>-watch-<suffix>`), gets the phone's message on the location topic byte for byte: the ciphertext,
    /// which opens with the share's key to the position, and nothing of it in clear.
    @Test func aWatchTokenGetsAnEncryptedSharesCiphertextUnchanged() throws {
        let fixture = try AuthFixture()
        let flared = try FlaredProcess(broker: fixture.broker, dataDirectory: fixture.directory)
        defer { flared.stop() }
        #expect(eventually { (try? flared.request("GET", "/healthz"))?.status == 200 })
        let (id, share) = try flared.createShare(#"{"duration_s":600,"e2e":true}"#)
        let watchToken = try flared.watchToken(id)
        let watcher = try fixture.client(id.rawValue, watchToken, clientID: "flare-\(id.rawValue)-watch-desk1")
        #expect(watcher.waitForOutcome() == .connected)
        #expect(try watcher.subscribe(Topics.location(id)))

        let passphrase = E2EPassphrase.generate()
        let plaintext = #"{"_type":"location","lat":47.3769,"lon":8.5417,"tst":\#(Int(Date().timeIntervalSince1970)),"batt":57}"#
        let data = Data(SecretBox.seal(Array(plaintext.utf8), key: E2EPassphrase.key(passphrase))).base64EncodedString()
        let sent = #"{"_type":"encrypted","data":"\#(data)"}"#
        let device = try fixture.client(id.rawValue, try #require(share["device_token"]))
        #expect(device.waitForOutcome() == .connected)
        #expect(try device.publish(Topics.location(id), sent) == nil)
        #expect(eventually { watcher.messages.contains { $0.topic == Topics.location(id) } })
        let received = watcher.messages.filter { $0.topic == Topics.location(id) }.map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(received == [sent])
        let box = try #require(Data(base64Encoded: data))
        #expect(SecretBox.open(Array(box), key: E2EPassphrase.key(passphrase)).map { String(decoding: $0, as: UTF8.self) } == plaintext)
        // flared kept the same ciphertext.
        let view = try #require((share["share_url"]?.split(separator: "/").last).map(String.init))
        #expect(eventually {
            ((try? flared.request("GET", "/api/v1/view/\(view)"))?.json?["sealed"] as? [[String: Any]])?.first?["data"] as? String == data
        })
    }

    /// A position in clear published to an end-to-end encrypted share is refused (`not_encrypted`) and taken off the
    /// broker at once: a watcher finds nothing of it retained within a second, and it is never stored. Before, it stayed
    /// retained and went to every watcher until the share ended (issue: trust, second round, 2).
    @Test func aClearPositionOnAnEncryptedShareDoesNotStayOnTheBroker() throws {
        let fixture = try AuthFixture()
        let flared = try FlaredProcess(broker: fixture.broker, dataDirectory: fixture.directory)
        defer { flared.stop() }
        let (id, share) = try flared.createShare(#"{"duration_s":600,"e2e":true}"#)
        let device = try fixture.client(id.rawValue, try #require(share["device_token"]))
        #expect(device.waitForOutcome() == .connected)
        let watchToken = try flared.watchToken(id)

        // First with nothing sealed before it (cleared), then after a sealed one (which stands again).
        let clear = #"{"_type":"location","lat":47.3769,"lon":8.5417,"tst":\#(Int(Date().timeIntervalSince1970))}"#
        let sealed = #"{"_type":"encrypted","data":"\#(Data(SecretBox.seal(Array("{}".utf8), key: E2EPassphrase.key(E2EPassphrase.generate()))).base64EncodedString())"}"#
        for before in [nil, sealed] {
            if let before {
                #expect(try device.publish(Topics.location(id), before, retain: true) == nil)
                let view = try #require((share["share_url"]?.split(separator: "/").last).map(String.init))
                #expect(eventually { ((try? flared.request("GET", "/api/v1/view/\(view)"))?.json?["sealed"] as? [[String: Any]])?.isEmpty == false })
            }
            #expect(try device.publish(Topics.location(id), clear, retain: true) == nil)
            // A watcher subscribing from now on finds nothing in clear, once flared has published over it.
            var probes = 0
            func retainedNow() throws -> [String] {
                probes += 1
                let watcher = try fixture.client(id.rawValue, watchToken, clientID: "flare-\(id.rawValue)-watch-p\(before == nil ? 1 : 2)x\(probes)")
                guard watcher.waitForOutcome() == .connected, try watcher.subscribe(Topics.location(id)), try watcher.subscribe(Topics.status(id)),
                      // The retained status comes after the location's on the one connection: by then any retained location has.
                      eventually(timeout: .seconds(5), { watcher.messages.contains { $0.topic == Topics.status(id) } }) else {
                    throw TestSupportError("the watcher did not get the share's status")
                }
                return watcher.messages.filter { $0.topic == Topics.location(id) && $0.retain && !$0.payload.isEmpty }
                    .map { String(decoding: $0.payload, as: UTF8.self) }
            }
            var retained: [String] = []
            #expect(eventually(timeout: .seconds(5)) {
                retained = (try? retainedNow()) ?? ["no probe"]
                return !retained.contains { $0.contains("47.3769") || $0 == "no probe" }
            }, "\(retained)")
            #expect(try flared.metrics().contains("flare_e2e_clear_positions_cleared_total \(before == nil ? 1 : 2)"))
            if before != nil { #expect(retained == [sealed], "the last sealed position stands again") }
        }
        let view = try #require((share["share_url"]?.split(separator: "/").last).map(String.init))
        let document = try flared.request("GET", "/api/v1/view/\(view)").text
        #expect(!document.contains("47.3769") && !document.contains("8.5417"), "never stored")
        #expect(try flared.metrics().contains(#"flare_fixes_rejected_total{reason="not_encrypted"} 2"#))
    }

    /// The attack that lost acknowledged fixes of every share: a token of one share (any limited key can make one)
    /// connecting with the bridge's client id and a persistent session, which would hand it the bridge's session and
    /// drop what the broker queued there; or with another share's phone's id. While another share's phone streams
    /// QoS 1 fixes, every attempt is refused at CONNACK: all the fixes are stored, and neither the bridge nor the
    /// phone is ever disconnected.
    @Test func noTokenTakesTheBridgesOrAnotherPhonesSessionWhileAShareStreams() throws {
        let fixture = try AuthFixture()
        let flared = try FlaredProcess(broker: fixture.broker, dataDirectory: fixture.directory, extraEnvironment: ["FLARE_TRAIL_LENGTH": "100"])
        defer { flared.stop() }
        func create() throws -> (id: ShareID, device: String, view: String) {
            let created = try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":600}"#, bearer: flared.ownerKey)
            let share = try #require(created.json as? [String: String])
            return (try #require(share["share_id"].flatMap { ShareID($0) }), try #require(share["device_token"]),
                    try #require(share["share_url"]?.split(separator: "/").last.map(String.init)))
        }
        let victim = try create(), attacker = try create()
        let attackerWatch = try #require(try flared.request("POST", "/api/v1/shares/\(attacker.id.rawValue)/watch-tokens",
                                                           bearer: flared.ownerKey).json?["watch_token"] as? String)
        let bridgeID = try #require(flared.environment["FLARE_MQTT_CLIENT_ID"])
        let stolenIDs = [bridgeID, "flared", "flared-a", bridgeID + "-epoch", "flare-\(victim.id.rawValue)",
                         "flare-\(victim.id.rawValue)-watch-x"]
        let phone = try fixture.client(victim.id.rawValue, victim.device, clientID: "flare-\(victim.id.rawValue)", cleanSession: false)
        #expect(phone.waitForOutcome() == .connected)

        let count = 40
        let start = Int(Date().timeIntervalSince1970) - 120
        for n in 0..<count {
            let fix = #"{"_type":"location","lat":\#(10 + Double(n) / 100),"lon":20,"tst":\#(start + n)}"#
            #expect(try phone.publish(Topics.location(victim.id), fix) == nil, "fix \(n) not acknowledged")
            let token = n % 2 == 0 ? attacker.device : attackerWatch
            let thief = try fixture.client(attacker.id.rawValue, token, clientID: stolenIDs[n % stolenIDs.count], cleanSession: false)
            #expect(thief.waitForOutcome() == .refused, "\(stolenIDs[n % stolenIDs.count]) was not refused")
        }
        #expect(eventually(timeout: .seconds(20)) {
            ((try? flared.request("GET", "/api/v1/view/\(victim.view)"))?.json?["trail"] as? [Any])?.count == count
        })
        let trail = try #require(try flared.request("GET", "/api/v1/view/\(victim.view)").json?["trail"] as? [[String: Any]])
        #expect(Set(trail.compactMap { $0["tst"] as? Int }) == Set((0..<count).map { start + $0 }))
        #expect(phone.mqtt.isConnected && phone.disconnectCount == 0)
        #expect(!flared.log.contains("lost the broker") && !flared.log.contains("disconnected from the broker"))
        #expect(!fixture.broker.log.contains("already connected, closing old connection"))
        #expect(fixture.broker.log.contains("client id is not one this token may use"))
    }

    /// A device token signed under the old rules (publish `…/location/#`) can still leave retained messages below the
    /// location topic until it expires; when the share ends, Flare clears them, and the location itself, so nothing it
    /// wrote outlives the share. Today's token cannot write there at all.
    @Test func anEndedSharesRetainedMessagesBelowItsLocationAreCleared() throws {
        let fixture = try AuthFixture()
        let flared = try FlaredProcess(broker: fixture.broker, dataDirectory: fixture.directory)
        defer { flared.stop() }
        let (id, share) = try flared.createShare()
        let current = try fixture.client(id.rawValue, try #require(share["device_token"]))
        #expect(current.waitForOutcome() == .connected)
        #expect(try current.publish(Topics.location(id) + "/junk/0", "x") == notAuthorized)

        let legacy = try fixture.client(id.rawValue, fixture.legacyDeviceToken(id, expiresAt: Int64(Date().timeIntervalSince1970) + 600))
        #expect(legacy.waitForOutcome() == .connected)
        let junk = String(repeating: "j", count: 12_000)
        for n in 1...3 {
            try legacy.mqtt.publishAndWait(topic: Topics.location(id) + "/junk/\(n)", payload: Array(junk.utf8), qos: 1, retain: true,
                                           timeout: .seconds(10))
        }
        try current.mqtt.publishAndWait(topic: Topics.location(id), payload: Array(#"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(Int(Date().timeIntervalSince1970))}"#.utf8),
                                        qos: 1, retain: true, timeout: .seconds(10))
        let before = try fixture.retained(below: Topics.location(id) + "/#")
        #expect(before.count == 4 && before[Topics.location(id) + "/junk/2"] == 12_000, "\(before)")

        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/stop", bearer: flared.ownerKey).status == 200)
        #expect(eventually(timeout: .seconds(15)) { (try? fixture.retained(below: Topics.location(id) + "/#"))?.isEmpty == true },
                "\((try? fixture.retained(below: Topics.location(id) + "/#")) ?? [:])")
        #expect(eventually { flared.log.contains("cleared 3 retained messages") })
    }

    /// The OwnTracks apps' HTTP mode end to end: the configuration, a message posted with Basic auth as Android
    /// posts it (stored, then published where integrators read), "locate now" handed to the phone in an answer,
    /// a wrong password, and the ended share telling the phone to stop.
    @Test func theOwnTracksHTTPModeRoundTrip() throws {
        let fixture = try AuthFixture()
        let flared = try FlaredProcess(broker: fixture.broker, dataDirectory: fixture.directory, extraEnvironment: ["FLARE_STALE_AFTER_S": "1"])
        defer { flared.stop() }
        let (id, share) = try flared.createShare()
        let deviceToken = try #require(share["device_token"])
        let viewToken = try #require(share["share_url"]?.split(separator: "/").last.map(String.init))

        let configuration = try flared.request("GET", "/api/v1/shares/\(id.rawValue)/owntracks?mode=http", bearer: deviceToken)
        let url = try #require(configuration.json?["url"] as? String)
        #expect(configuration.json?["mode"] as? Int == 3 && url.hasSuffix("/api/v1/shares/\(id.rawValue)/owntracks/http"))
        let path = "/api/v1/shares/\(id.rawValue)/owntracks/http"

        let watch = try flared.request("POST", "/api/v1/shares/\(id.rawValue)/watch-tokens", bearer: flared.ownerKey)
        let watcher = try fixture.client(id.rawValue, try #require(watch.json?["watch_token"] as? String))
        #expect(watcher.waitForOutcome() == .connected)
        #expect(try watcher.subscribe(Topics.location(id)))

        func post(_ lat: Double, trigger: String = "u", password: String? = nil) throws -> RawHTTPResponse {
            let tst = Int(Date().timeIntervalSince1970)
            let body = #"{"_type":"location","_id":"8e2c41f0","acc":12,"batt":81,"bs":2,"conn":"m","created_at":\#(tst),"lat":\#(lat),"lon":11.5754,"m":2,"t":"\#(trigger)","tid":"AN","tst":\#(tst)}"#
            let credentials = Data("\(id.rawValue):\(password ?? deviceToken)".utf8).base64EncodedString()
            return try RawHTTP.request("POST", port: flared.httpPort, path: path,
                                       headers: ["Authorization": "Basic \(credentials)", "Content-Type": "application/json",
                                                 "X-Limit-U": id.rawValue, "X-Limit-D": "sos"],
                                       body: Array(body.utf8))
        }
        let first = try post(48.1)
        #expect(first.status == 200 && first.text == "[]", "\(first.text)")
        #expect(eventually { watcher.messages.contains { $0.topic == Topics.location(id) && String(decoding: $0.payload, as: UTF8.self).contains("48.1") } })
        #expect((try flared.request("GET", "/api/v1/view/\(viewToken)").json?["last"] as? [String: Any])?["lat"] as? Double == 48.1)
        #expect(try post(48.1, password: "wrong").status == 401)

        // The phone goes quiet for longer than the stale limit; the family asks; the next message carries the command.
        Thread.sleep(forTimeInterval: 1.2)
        #expect(try flared.request("POST", "/api/v1/view/\(viewToken)/locate").status == 202)
        let withCommand = try post(48.2)
        let commands = (try? JSONSerialization.jsonObject(with: Data(withCommand.body))) as? [[String: String]]
        #expect(withCommand.status == 200 && commands == [["_type": "cmd", "action": "reportLocation"]], "\(withCommand.text)")
        #expect(try post(48.2, trigger: "r").text == "[]")
        #expect(eventually { (try? flared.request("GET", "/api/v1/view/\(viewToken)"))?.json.flatMap { ($0["tracker"] as? [String: Any])?["locate_answered_at"] } is String })

        #expect(try flared.request("POST", "/api/v1/shares/\(id.rawValue)/stop", bearer: flared.ownerKey).status == 200)
        let ended = try post(48.3)
        #expect(ended.status == 200 && ended.text == "[" + String(decoding: OwnTracksConfiguration.stopReporting, as: UTF8.self) + "]", "\(ended.text)")
        #expect(!flared.log.contains(deviceToken) && !flared.log.contains("48.1"))
    }
}
