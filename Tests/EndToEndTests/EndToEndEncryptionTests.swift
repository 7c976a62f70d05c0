import FlareCore
import FlareSodium
import FlareTestSupport
import Foundation
import Testing
import FlareCodec

/// An end-to-end encrypted share on the real parts, each engine: a known position, sealed as the OwnTracks apps seal
/// it and published to the broker, is relayed; neither the store's files (the SQLite file and its WAL, or a
/// PostgreSQL dump) nor flared's and the broker's logs hold the position or the passphrase, while they do hold the
/// ciphertext (so the search would find what it looks for).
@Suite struct EndToEndEncryptionTests {
    enum Engine: String, CaseIterable { case sqlite, postgresql }

    @Test(arguments: Engine.allCases) func theServerKeepsOnlyCiphertext(engine: Engine) throws {
        let broker = try TestBroker()
        let database = engine == .postgresql ? try TestPostgres.shared.get().makeDatabase() : nil
        let flared = try FlaredProcess(broker: broker, extraEnvironment: database.map { ["FLARE_STORE_URL": $0] } ?? [:])
        let created = try flared.request("POST", "/api/v1/shares", body: #"{"name":"Anna","e2e":true}"#, bearer: flared.ownerKey)
        try #require(created.status == 201, "\(created.text)")
        let id = try #require(created.json?["share_id"] as? String), token = try #require(created.json?["device_token"] as? String)
        let view = try #require((created.json?["share_url"] as? String)?.split(separator: "/").last.map(String.init))
        let passphrase = E2EPassphrase.generate()
        // Digits nobody else writes.
        let plaintext = #"{"_type":"location","lat":47.4211613,"lon":10.9853317,"tst":\#(Int(Date().timeIntervalSince1970)),"acc":13.7,"batt":61}"#
        let data = Data(SecretBox.seal(Array(plaintext.utf8), key: E2EPassphrase.key(passphrase))).base64EncodedString()
        let sent = try MosquittoClients.publish(port: broker.port, topic: "flare/v1/shares/\(id)/location",
                                                payload: #"{"_type":"encrypted","data":"\#(data)"}"#, username: id, password: token)
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(eventually {
            let document = try? flared.request("GET", "/api/v1/view/\(view)")
            return ((document?.json?["sealed"] as? [[String: Any]])?.first?["data"] as? String) == data
        }, "the ciphertext is relayed as it came")
        // A position in clear is refused and never stored, whoever sends it.
        let clear = try MosquittoClients.publish(port: broker.port, topic: "flare/v1/shares/\(id)/location",
                                                 payload: #"{"_type":"location","lat":47.4211613,"lon":10.9853317}"#, retain: false, username: id, password: token)
        #expect(clear.status == 0)
        #expect(eventually { flared.log.contains("not_encrypted") })
        #expect(flared.stop() == 0)
        let stored: String
        if let database {
            stored = try TestPostgres.shared.get().dump(database)
        } else {
            stored = ["flare.db", "flare.db-wal"].map { name in
                (try? Data(contentsOf: flared.dataDirectory.appendingPathComponent(name))).map { String(decoding: $0, as: UTF8.self) } ?? ""
            }.joined()
        }
        #expect(stored.contains(data), "the store holds the ciphertext")
        for (what, text) in [("the store", stored), ("flared's log", flared.log), ("the broker's log", broker.log)] {
            for secret in ["47.42116", "10.98533", passphrase] {
                #expect(!text.contains(secret), "\(what) holds \(secret == passphrase ? "the passphrase" : secret)")
            }
        }
    }

    /// A broker that comes back empty (killed, and keeping nothing on disk) has lost the share's retained position;
    /// flared puts back what it stored: the phone's ciphertext, in the apps' `encrypted` message, unread.
    @Test func aBrokerThatLostEverythingGetsTheCiphertextBack() throws {
        let broker = try TestBroker(persistence: false)
        let flared = try FlaredProcess(broker: broker)
        let created = try flared.request("POST", "/api/v1/shares", body: #"{"e2e":true}"#, bearer: flared.ownerKey)
        try #require(created.status == 201, "\(created.text)")
        let id = try #require(created.json?["share_id"] as? String), token = try #require(created.json?["device_token"] as? String)
        let plaintext = #"{"_type":"location","lat":46.9481,"lon":7.4474,"tst":\#(Int(Date().timeIntervalSince1970))}"#
        let data = Data(SecretBox.seal(Array(plaintext.utf8), key: E2EPassphrase.key(E2EPassphrase.generate()))).base64EncodedString()
        let sent = #"{"_type":"encrypted","data":"\#(data)"}"#
        let topic = "flare/v1/shares/\(id)/location"
        #expect(try MosquittoClients.publish(port: broker.port, topic: topic, payload: sent, username: id, password: token).status == 0)
        #expect(eventually { (try? flared.metrics())?.contains("flare_fixes_accepted_total 1") == true })
        #expect(eventually(timeout: .seconds(10)) { (try? Retained.message(port: broker.port, topic: "flare/v1/epoch")) != nil })

        broker.kill()
        try broker.start()
        #expect(eventually(timeout: .seconds(30)) {
            (try? Retained.message(port: broker.port, topic: topic)).flatMap { try? JSONValue.parse($0) } == (try? JSONValue.parse(sent))
        }, "\(flared.log)")
        #expect(flared.log.contains("the broker lost retained messages"), "\(flared.log)")
    }

    /// `flare share create --e2e` as a person reads it: the whole link with its key, where the key is kept, and a
    /// provisioning hint that carries `--e2e` (without it the phone would get no key and every position it sent in
    /// clear would be refused as not_encrypted).
    @Test func theCommandLineMakesTheKeyAndSaysHowToGiveItToThePhone() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let created = try flared.flare(["share", "create", "--e2e", "--name", "Anna"])
        #expect(created.status == 0, "\(created.stderr)")
        let lines = created.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasSuffix("(end-to-end encrypted)") == true, "\(created.stdout)")
        let id = try #require(lines.first?.split(separator: " ").dropFirst().first.map(String.init))
        let link = try #require(lines.first { $0.hasPrefix("link for family:") })
        let passphrase = try #require(link.components(separatedBy: "#k=").last)
        #expect(passphrase.count == 32, "\(link)")
        let keyFile = flared.dataDirectory.appendingPathComponent("e2e/\(id).key")
        #expect(try String(contentsOf: keyFile, encoding: .utf8) == passphrase + "\n")
        #expect((try FileManager.default.attributesOfItem(atPath: keyFile.path)[.posixPermissions] as? Int) == 0o600)
        let hint = try #require(lines.first { $0.hasPrefix("OwnTracks app:") })
        #expect(hint.contains("flare share owntracks \(id) --e2e --qr sos.png"), "\(hint)")
    }
}
