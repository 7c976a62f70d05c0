import FlareTestSupport
import Foundation
import Testing

/// OwnTracks provisioning and the apps' real messages, against the built flared and a real mosquitto.
@Suite struct OwnTracksProvisioningTests {
    func createShare(_ flared: FlaredProcess) throws -> [String: String] {
        let response = try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":600,"name":"Anna"}"#, bearer: flared.ownerKey)
        #expect(response.status == 201, "\(response.text)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        let strings = object.compactMapValues { $0 as? String }
        #expect(strings.count == object.count, "the create answer must stay a flat object of strings")
        return strings
    }

    /// QR codes only: looking for every symbology, zbarimg once read a run of the QR code's modules as a 1D barcode
    /// too, and printed its digits on a second line.
    func zbar(_ png: [UInt8]) throws -> String {
        let directory = try TempDirectory.make(prefix: "qr")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("qr.png")
        try Data(png).write(to: file)
        let result = try runCommand("/usr/bin/zbarimg", ["--raw", "-q", "-Sdisable", "-Sqrcode.enable", file.path])
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.trimmingCharacters(in: .newlines)
    }

    @Test func configurationIsServedOnlyToItsHoldersInEveryForm() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_MQTT_PUBLIC_URL": "mqtts://flare.example.org:8883"])
        let share = try createShare(flared)
        let id = share["share_id"]!, deviceToken = share["device_token"]!
        let path = "/api/v1/shares/\(id)/owntracks"
        #expect(share["owntracks_config_url"] == "http://127.0.0.1:\(flared.httpPort)\(path)")

        // No credential, a wrong one, another share's token: refused.
        #expect(try flared.request("GET", path).status == 401)
        #expect(try flared.request("GET", path, bearer: "nope").status == 401)
        let other = try createShare(flared)
        #expect(try flared.request("GET", path, bearer: other["device_token"]).status == 401)

        // The device token and the owner key both get the JSON.
        for bearer in [deviceToken, flared.ownerKey] {
            let response = try flared.request("GET", path, bearer: bearer)
            #expect(response.status == 200)
            #expect(response.headers["cache-control"] == "no-store")
            let config = try #require(response.json)
            #expect(config["_type"] as? String == "configuration")
            #expect(config["host"] as? String == "flare.example.org")
            #expect(config["port"] as? Int == 8883)
            #expect(config["tls"] as? Bool == true)
            #expect(config["username"] as? String == id)
            #expect(config["pubTopicBase"] as? String == share["mqtt_topic"])
            #expect(config["tid"] as? String == "AN")
            // The password is a working device token for this share.
            let token = try #require(config["password"] as? String)
            let ingest = try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":48.1,"lon":11.5}"#, bearer: token)
            #expect(ingest.status == 202, "\(ingest.text)")
        }

        let otrc = try flared.request("GET", path + ".otrc", bearer: deviceToken)
        #expect(otrc.status == 200)
        #expect(otrc.headers["content-disposition"] == "attachment; filename=\"flare-\(id).otrc\"")
        #expect((otrc.json?["_type"] as? String) == "configuration")

        let link = try #require(try flared.request("GET", path + "/link", bearer: deviceToken).json?["url"] as? String)
        #expect(link.hasPrefix("owntracks:///config?inline="))
        let inline = try #require(String(link.dropFirst("owntracks:///config?inline=".count)).removingPercentEncoding)
        #expect(try #require(Data(base64Encoded: inline)) == Data(otrc.body))

        // The QR code is for the owner's screen.
        #expect(try flared.request("GET", path + "/qr.png", bearer: deviceToken).status == 401)
        let png = try flared.request("GET", path + "/qr.png", bearer: flared.ownerKey)
        #expect(png.status == 200)
        #expect(png.headers["content-type"] == "image/png")
        let decoded = try zbar(png.body)
        #expect(decoded == link, "the QR code reads \(decoded.count) characters, the link has \(link.count); they differ from \(Array(zip(decoded, link)).firstIndex { $0.0 != $0.1 }.map(String.init) ?? "the end of the shorter")")
        let svg = try flared.request("GET", path + "/qr.svg", bearer: flared.ownerKey)
        #expect(svg.headers["content-type"] == "image/svg+xml")
        #expect(svg.text.hasPrefix("<svg"))
        #expect(try flared.request("GET", path + "/qr.gif", bearer: flared.ownerKey).status == 404)

        // None of it in the log.
        #expect(!flared.log.contains(deviceToken) && !flared.log.contains(inline))

        // Once the share ends, there is nothing to provision.
        #expect(try flared.request("POST", "/api/v1/shares/\(id)/stop", bearer: flared.ownerKey).status == 200)
        #expect(try flared.request("GET", path, bearer: flared.ownerKey).status == 410)
        #expect(try flared.request("GET", path, bearer: deviceToken).status == 410)
    }

    @Test func theCommandLineWritesTheQRCodeAndTheFile() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let id = share["share_id"]!
        let link = try flared.flare(["share", "owntracks", id])
        #expect(link.status == 0, "\(link.stderr)")
        #expect(link.stdout.hasPrefix("owntracks:///config?inline="))
        let png = flared.dataDirectory.appendingPathComponent("sos.png"), otrc = flared.dataDirectory.appendingPathComponent("sos.otrc")
        let written = try flared.flare(["share", "owntracks", id, "--qr", png.path, "--otrc", otrc.path])
        #expect(written.status == 0, "\(written.stderr)")
        // The same configuration (compared parsed: two renderings may order the keys differently).
        let scanned = try zbar(Array(Data(contentsOf: png)))
        #expect(scanned.hasPrefix("owntracks:///config?inline="))
        #expect(try inlineConfiguration(scanned) == inlineConfiguration(link.stdout.trimmingCharacters(in: .newlines)))
        let config = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: otrc)) as? [String: Any])
        #expect(config["username"] as? String == id)
        #expect((try FileManager.default.attributesOfItem(atPath: otrc.path)[.posixPermissions] as? Int) == 0o600)
    }

    /// An end-to-end encrypted share's QR code is drawn by the CLI with the key `share create --e2e` kept: scanned, it
    /// is the server's configuration for the share with `encryptionKey` added, the passphrase of the family's link.
    @Test func theCommandLineDrawsAnEncryptedSharesQRCodeWithItsKey() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let created = try flared.flare(["share", "create", "--e2e", "--json", "--name", "Anna"])
        #expect(created.status == 0, "\(created.stderr)")
        let share = try #require(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: String])
        let id = try #require(share["share_id"])
        let passphrase = try #require(share["e2e_url"]?.components(separatedBy: "#k=").last)
        let png = flared.dataDirectory.appendingPathComponent("sos.png")
        let written = try flared.flare(["share", "owntracks", id, "--e2e", "--qr", png.path])
        #expect(written.status == 0, "\(written.stderr)")
        let scanned = try zbar(Array(Data(contentsOf: png)))
        #expect(scanned.hasPrefix("owntracks:///config?inline="))
        let config = try inlineConfiguration(scanned)
        #expect(config["encryptionKey"] as? String == passphrase)
        let served = try #require(try flared.request("GET", "/api/v1/shares/\(id)/owntracks?encryption=client", bearer: share["device_token"]).json)
        #expect(served["encryptionKey"] == nil)
        #expect(config["username"] as? String == id && config["password"] as? String == served["password"] as? String)

        // Every way a phone could load a configuration straight from the server is refused: without the key it would
        // publish in clear (issue: trust, second round, 2).
        for (path, bearer) in [("owntracks", share["device_token"]), ("owntracks.otrc", share["device_token"]), ("owntracks/link", share["device_token"]),
                               ("owntracks?mode=http", share["device_token"]), ("owntracks/qr.png", flared.ownerKey), ("owntracks/qr.svg", flared.ownerKey),
                               ("owntracks.otrc?encryption=client", flared.ownerKey)] {
            let answer = try flared.request("GET", "/api/v1/shares/\(id)/\(path)", bearer: bearer)
            #expect(answer.status == 409 && answer.json?["error"] as? String == "e2e_needs_key", "\(path): \(answer.status)")
            #expect((answer.json?["message"] as? String)?.contains("flare share owntracks \(id) --e2e") == true)
        }

        // A passphrase given by hand: at least 16 characters, at most the 32 bytes the apps use (refused, not cut).
        for bad in ["short", String(repeating: "x", count: 33), String(repeating: "安", count: 11)] {
            let refused = try flared.flare(["share", "owntracks", id, "--e2e", "--e2e-key", bad])
            #expect(refused.status != 0 && refused.stderr.contains("--e2e-key must be"), "\(refused.stderr)")
        }
        let given = try flared.flare(["share", "owntracks", id, "--e2e", "--e2e-key", String(repeating: "k", count: 16)])
        #expect(given.status == 0, "\(given.stderr)")
        #expect(try inlineConfiguration(given.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["encryptionKey"] as? String
                == String(repeating: "k", count: 16))
    }

    /// Publishes exactly what the apps publish, where they publish it, with the provisioned credentials.
    @Test func theAppsMessagesArriveAndTheRestIsCountedAndIgnored() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let id = share["share_id"]!
        let config = try #require(try flared.request("GET", "/api/v1/shares/\(id)/owntracks", bearer: share["device_token"]).json)
        let base = try #require(config["pubTopicBase"] as? String)
        let username = config["username"] as? String, password = config["password"] as? String
        let retain = config["pubRetain"] as? Bool ?? false
        let now = Int(Date().timeIntervalSince1970)

        func publish(_ topic: String, _ payload: String, retain: Bool) throws {
            let result = try MosquittoClients.publish(port: broker.port, topic: topic, payload: payload, retain: retain, username: username, password: password)
            #expect(result.status == 0, "\(result.stderr)")
        }
        // iOS, move mode, extended data.
        try publish(base, #"{"_type":"location","BSSID":"a4:2b:b0:11:22:33","SSID":"Home","acc":5,"alt":519,"batt":64,"bs":1,"conn":"w","created_at":\#(now - 20),"lat":48.137154,"lon":11.576124,"m":2,"motionactivities":["walking"],"p":95.81,"t":"t","tid":"AN","tst":\#(now - 20),"vac":3,"vel":5}"#, retain: retain)
        // The iOS app's transition and status messages go below the base topic.
        try publish(base + "/event", #"{"_type":"transition","wtst":\#(now - 9000),"lat":48.1372,"lon":11.5762,"tst":\#(now - 15),"acc":10,"tid":"AN","event":"leave","desc":"Home","t":"c","rid":"a1b2c3"}"#, retain: false)
        try publish(base + "/status", #"{"_type":"status","iOS":{"version":"18.1","locale":"de_DE","deviceSystemName":"iOS","deviceModel":"iPhone","locationManagerAuthorizationStatus":"authorizedAlways","backgroundRefreshStatus":"available"}}"#, retain: false)
        // The Android app's location with its message id, and a last will as the broker publishes it on the base
        // topic when the phone drops off (never retained); `LastWillTests` has the broker send a real one.
        try publish(base, #"{"_type":"location","_id":"8e2c41f0","acc":12,"alt":521,"batt":63,"bs":2,"conn":"m","created_at":\#(now - 9),"lat":48.1375,"lon":11.5770,"m":2,"t":"u","tid":"AN","tst":\#(now - 10),"vac":4,"vel":3,"inregions":[]}"#, retain: retain)
        try publish(base, #"{"_type":"lwt","tst":\#(now - 3600)}"#, retain: false)
        try publish(base + "/status", #"{"_type":"status","android":{"wifi":1,"ps":0,"bo":1,"loc":0,"hib":0}}"#, retain: false)

        #expect(eventually(timeout: .seconds(15)) {
            let metrics = (try? flared.metrics()) ?? ""
            return metrics.contains("flare_tracker_last_wills_total 1") && metrics.contains("flare_fixes_accepted_total 2")
        }, "\((try? flared.metrics()) ?? "")")
        let token = String(share["share_url"]!.split(separator: "/").last!)
        let view = try flared.request("GET", "/api/v1/view/\(token)")
        let trail = (view.json?["trail"] as? [[String: Any]])?.compactMap { $0["lat"] as? Double }
        #expect(trail == [48.137154, 48.1375])
        #expect((view.json?["last"] as? [String: Any])?["batt"] as? Double == 63)
        // The last will did not replace the retained position.
        #expect(try Retained.message(port: broker.port, topic: base)?.contains("48.1375") == true)
    }
}

/// The configuration inside an `owntracks:///config?inline=<base64>` link, parsed.
func inlineConfiguration(_ link: String) throws -> NSDictionary {
    let encoded = try #require(link.components(separatedBy: "inline=").last?.removingPercentEncoding)
    var base64 = encoded.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while base64.count % 4 != 0 { base64 += "=" }
    let data = try #require(Data(base64Encoded: base64))
    return try #require(try JSONSerialization.jsonObject(with: data) as? NSDictionary)
}
