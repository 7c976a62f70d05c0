import FlareTestSupport
import Foundation
import Testing

@Suite struct CommandLineTests {
    @Test func helpTextsExplainEverySetting() throws {
        let flared = try runCommand(try BuiltProducts.path("flared"), ["--help"])
        #expect(flared.status == 0)
        for name in ["FLARE_DATA_DIR", "FLARE_HTTP_ADDR", "FLARE_PUBLIC_URL", "FLARE_MQTT_URL", "FLARE_MQTT_PORT", "--config", "--print-config"] {
            #expect(flared.stdout.contains(name), "flared --help lacks \(name)")
        }
        let flare = try runCommand(try BuiltProducts.path("flare"), ["--help"])
        #expect(flare.status == 0)
        for command in ["share create", "share list", "share stop", "share extend", "share show", "keys create", "track"] {
            #expect(flare.stdout.contains(command))
        }
    }

    @Test func badConfigurationIsAClearErrorNotACrash() throws {
        let flared = try BuiltProducts.path("flared")
        let directory = try TempDirectory.make()
        var environment = ["FLARE_DATA_DIR": directory.path]
        var result = try runCommand(flared, ["--http-addr", "nonsense"], environment: environment)
        #expect(result.status == 1 && result.stderr.contains("FLARE_HTTP_ADDR"))
        result = try runCommand(flared, ["--bogus"], environment: environment)
        #expect(result.status == 1 && result.stderr.contains("--bogus"))
        environment["FLARE_MAX_DURATION_S"] = "forever"
        result = try runCommand(flared, [], environment: environment)
        #expect(result.status == 1 && result.stderr.contains("FLARE_MAX_DURATION_S"))
        environment["FLARE_MAX_DURATION_S"] = nil
        // A webhook without its secret, a bad URL, a bad secret: named, the secret never shown, nothing created.
        let secretShown = "whsec_dG9vLXNob3J0LXNlY3JldA=="  // 16 bytes: too short
        for (url, secret, says) in [("https://hooks.example.org/", nil, "FLARE_WEBHOOK_URL is set but FLARE_WEBHOOK_SECRET is not"),
                                    ("ftp://hooks.example.org/", "whsec_" + Data(repeating: 7, count: 32).base64EncodedString(), "FLARE_WEBHOOK_URL: a webhook URL is http://"),
                                    ("https://hooks.example.org/", secretShown, "FLARE_WEBHOOK_SECRET must be whsec_")] {
            environment["FLARE_WEBHOOK_URL"] = url
            environment["FLARE_WEBHOOK_SECRET"] = secret
            result = try runCommand(flared, [], environment: environment)
            #expect(result.status == 1 && result.stderr.contains(says) && !result.stderr.contains(secretShown), "\(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("owner.key").path))
        environment["FLARE_WEBHOOK_URL"] = nil
        environment["FLARE_WEBHOOK_SECRET"] = nil
        // SMTP: either setting without the other, a URL that is not one, a sender that is not an address; the password
        // never shown.
        for (url, from, says) in [("smtp://flare:pa55word-x@mail.example.org", nil, "FLARE_SMTP_URL is set but FLARE_SMTP_FROM is not"),
                                  (nil, "flare@example.org", "FLARE_SMTP_FROM is set but FLARE_SMTP_URL is not"),
                                  ("http://flare:pa55word-x@mail.example.org", "flare@example.org", "FLARE_SMTP_URL must be smtp://"),
                                  ("smtps://flare:pa55word-x@mail.example.org", "Flare", "FLARE_SMTP_FROM must be the address")] {
            environment["FLARE_SMTP_URL"] = url
            environment["FLARE_SMTP_FROM"] = from
            result = try runCommand(flared, [], environment: environment)
            #expect(result.status == 1 && result.stderr.contains(says) && !result.stderr.contains("pa55word"), "\(result.stderr)")
        }
        environment["FLARE_SMTP_URL"] = "smtp://flare:pa55word-x@mail.example.org"
        environment["FLARE_SMTP_FROM"] = "flare@example.org"
        result = try runCommand(flared, ["--print-config"], environment: environment)
        #expect(result.status == 0 && result.stdout.contains("FLARE_SMTP_FROM=flare@example.org") && !result.stdout.contains("pa55word"), "\(result.stdout)")
        environment["FLARE_SMTP_URL"] = nil
        environment["FLARE_SMTP_FROM"] = nil
        // The NATS broker: its settings without it, it without its nodes, a node that is not a URL, a mosquitto login
        // that would be ignored, its secrets missing; the password never shown.
        for (settings, says) in [(["FLARE_NATS_URLS": "nats://127.0.0.1:4222"], "FLARE_NATS_URLS is set but FLARE_BROKER is not nats"),
                                 (["FLARE_BROKER": "nats"], "FLARE_BROKER=nats needs FLARE_NATS_URLS"),
                                 (["FLARE_BROKER": "nats", "FLARE_NATS_URLS": "http://127.0.0.1:4222"], "is not a nats:// URL"),
                                 (["FLARE_BROKER": "nats", "FLARE_NATS_URLS": "nats://127.0.0.1:4222", "FLARE_MQTT_PASSWORD": "pa55word-x"],
                                  "FLARE_MQTT_PASSWORD is for mosquitto"),
                                 (["FLARE_BROKER": "nats", "FLARE_NATS_URLS": "nats://127.0.0.1:4222"], "FLARE_NATS_PASSWORD_FILE"),
                                 (["FLARE_BROKER": "mqtt5"], "FLARE_BROKER")] {
            result = try runCommand(flared, [], environment: environment.merging(settings) { $1 })
            #expect(result.status == 1 && result.stderr.contains(says) && !result.stderr.contains("pa55word"), "\(settings): \(result.stderr)")
        }
        // Web Push: a subject that is no contact, the loopback switch without push or with a public URL.
        for (settings, says) in [(["FLARE_VAPID_SUBJECT": "ops@example.org"], "FLARE_VAPID_SUBJECT must be mailto:"),
                                 (["FLARE_VAPID_SUBJECT": "http://example.org"], "FLARE_VAPID_SUBJECT must be mailto:"),
                                 (["FLARE_PUSH_ALLOW_LOOPBACK": "1"], "FLARE_PUSH_ALLOW_LOOPBACK is set but FLARE_VAPID_SUBJECT is not"),
                                 (["FLARE_VAPID_SUBJECT": "mailto:ops@example.org", "FLARE_PUSH_ALLOW_LOOPBACK": "1",
                                   "FLARE_PUBLIC_URL": "https://sos.example.org"], "FLARE_PUSH_ALLOW_LOOPBACK=1 is for tests")] {
            result = try runCommand(flared, [], environment: environment.merging(settings) { $1 })
            #expect(result.status == 1 && result.stderr.contains(says), "\(settings): \(result.stderr)")
        }
        // A database that is not there: one line naming the setting, never the password; nothing left running.
        let (refusing, closed) = try FreePort.refusing()
        defer { close(refusing) }
        environment["FLARE_STORE_URL"] = "postgresql://flare:pa55word-x@127.0.0.1:\(closed)/flare"
        result = try runCommand(flared, [], environment: environment)
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("cannot open the store (FLARE_STORE_URL: PostgreSQL postgresql://flare:***@127.0.0.1:\(closed)/flare)"), "\(result.stderr)")
        #expect(!result.stderr.contains("pa55word") && result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        environment["FLARE_STORE_URL"] = "mysql://root:pa55word-x@db/flare"
        result = try runCommand(flared, [], environment: environment)
        #expect(result.status == 1 && result.stderr.contains("FLARE_STORE_URL must be postgresql://") && !result.stderr.contains("pa55word"), "\(result.stderr)")
    }

    @Test func aTakenPortIsAClearError() throws {
        let broker = try TestBroker()
        let first = try FlaredProcess(broker: broker)
        var environment = first.environment
        environment["FLARE_DATA_DIR"] = try TempDirectory.make().path
        let second = try runCommand(try BuiltProducts.path("flared"), [], environment: environment)
        #expect(second.status == 1)
        #expect(second.stderr.contains("in use"), "\(second.stderr)")
        // The services before the HTTP gateway had started: they are stopped again, in reverse, before the exit.
        #expect(second.stderr.contains("flared: cannot start HTTP gateway: "), "\(second.stderr)")
        let stops = ["stopping MQTT bridge", "stopping store writer", "stopping shares"].map { second.stderr.range(of: $0)?.lowerBound }
        #expect(stops.allSatisfy { $0 != nil } && stops == stops.sorted { $0! < $1! }, "\(second.stderr)")
    }

    /// A second SIGTERM during the drain exits at once and names what was not stopped. Another process holds the
    /// database's write lock, so the writer cannot store the fix it holds and the drain waits for the store (up to
    /// FLARE_SHUTDOWN_STORE_GRACE_S) when the second signal comes.
    @Test func aSecondSignalDuringTheDrainExitsAtOnce() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_SHUTDOWN_TIMEOUT_S": "120", "FLARE_SHUTDOWN_STORE_GRACE_S": "100"])
        let created = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: flared.ownerKey)
        let id = try #require(created.json?["share_id"] as? String)

        let lock = try SQLiteLock(path: flared.dataDirectory.appendingPathComponent("flare.db").path)
        defer { lock.release() }

        let now = Int(Date().timeIntervalSince1970)
        _ = try MosquittoClients.publish(port: broker.port, topic: "flare/v1/shares/\(id)/location",
                                         payload: #"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(now)}"#)
        #expect(eventually(timeout: .seconds(30)) { flared.log.contains("cannot write 1 fixes, will retry") }, "\(flared.log)")

        let pid = try #require(flared.processIdentifier)
        kill(pid, SIGTERM)
        #expect(eventually(timeout: .seconds(30)) { flared.log.contains("stopping store writer") }, "\(flared.log)")
        kill(pid, SIGTERM)
        #expect(flared.waitForExit(timeout: .seconds(20)) == 1)
        #expect(flared.log.contains("second signal: exiting now; not stopped: store writer, shares"), "\(flared.log)")
    }

    @Test func printConfigShowsEachValueAndItsSourceButNoSecret() throws {
        let directory = try TempDirectory.make()
        let result = try runCommand(try BuiltProducts.path("flared"), ["--print-config", "--http-addr", "127.0.0.1:9999"],
                                    environment: ["FLARE_DATA_DIR": directory.path, "FLARE_MQTT_PASSWORD": "correct-horse-battery"])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("FLARE_HTTP_ADDR=127.0.0.1:9999 ") && $0.hasSuffix("# flag") })
        #expect(lines.contains { $0.hasPrefix("FLARE_PUBLIC_URL=http://127.0.0.1:9999 ") && $0.hasSuffix("# derived") })
        #expect(lines.contains { $0.hasPrefix("FLARE_DATA_DIR=\(directory.path) ") && $0.hasSuffix("# environment") })
        #expect(lines.contains { $0.hasPrefix("FLARE_MQTT_PASSWORD=(set) ") })
        #expect(!result.stdout.contains("correct-horse"))
        // Nothing was started: no database was made.
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("flare.db").path))
    }

    @Test func shareCommandsAndTheSimulatedTracker() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let created = try flared.flare(["share", "create", "--duration", "600", "--name", "Demo", "--json"])
        #expect(created.status == 0, "\(created.stderr)")
        let share = try #require(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: String])
        let id = try #require(share["share_id"])
        let shareFile = flared.dataDirectory.appendingPathComponent("share.json")
        try created.stdout.write(to: shareFile, atomically: true, encoding: .utf8)

        let track = try flared.flare(["track", "--share-file", shareFile.path, "--interval", "0.05", "--count", "5"])
        #expect(track.status == 0, "\(track.stderr)")
        #expect(track.stderr.contains("sent 5 fixes"))
        #expect(eventually { (try? flared.request("GET", "/api/v1/shares/\(id)", bearer: flared.ownerKey).json?["last"]) is [String: Any] })

        let listed = try flared.flare(["share", "list"])
        #expect(listed.status == 0 && listed.stdout.hasPrefix("\(id)  active") && listed.stdout.contains("Demo"), "\(listed.stdout)")
        #expect(try flared.flare(["share", "list", "--state", "ended"]).stdout.contains("no shares"))
        let page = try flared.flare(["share", "list", "--json", "--limit", "1"])
        let pageJSON = try #require(try JSONSerialization.jsonObject(with: Data(page.stdout.utf8)) as? [String: Any])
        #expect((pageJSON["shares"] as? [[String: Any]])?.first?["share_id"] as? String == id)
        #expect(pageJSON["next_cursor"] is NSNull)
        let badState = try flared.flare(["share", "list", "--state", "gone"])
        #expect(badState.status == 1 && badState.stderr.contains("--state must be active or ended"))

        let shown = try flared.flare(["share", "show", id])
        #expect(shown.status == 0 && shown.stdout.contains("active") && shown.stdout.contains("last fix"))
        #expect(!shown.stdout.contains("48.1"))  // positions stay off terminals
        let extended = try flared.flare(["share", "extend", id, "--duration", "7200"])
        #expect(extended.status == 0 && extended.stdout.contains("now ends at"))
        let stopped = try flared.flare(["share", "stop", id])
        #expect(stopped.status == 0 && stopped.stdout.contains("ended"))
        let after = try flared.flare(["track", "--share-file", shareFile.path, "--interval", "0.05", "--count", "50"])
        #expect(after.stderr.contains("has ended"), "\(after.stderr)")

        let key = try flared.flare(["keys", "create", "--label", "second"])
        #expect(key.status == 0 && key.stdout.hasPrefix("flare_owner_"))
        let withNewKey = try flared.request("POST", "/api/v1/shares", body: "{}", bearer: key.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(withNewKey.status == 201)

        let missing = try flared.flare(["share", "stop", "AAAAAAAAAAAAAAAAAAAAAA"])
        #expect(missing.status == 1 && missing.stderr.contains("no such share"))
    }

    @Test func contactCommands() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let added = try flared.flare(["contacts", "add", "Anna Schmidt", "--email", "anna@example.org", "--phone", "+4915123456789", "--json"])
        #expect(added.status == 0, "\(added.stderr)")
        let contact = try #require(try JSONSerialization.jsonObject(with: Data(added.stdout.utf8)) as? [String: Any])
        let id = try #require(contact["id"] as? String)
        #expect(contact["language"] as? String == "en" && contact["phone"] as? String == "+4915123456789")
        let second = try flared.flare(["contacts", "add", "王芳", "--language", "zh-CN"])
        #expect(second.status == 0 && second.stdout.hasPrefix("contact ") && second.stdout.contains("王芳"), "\(second.stdout)")
        let listed = try flared.flare(["contacts", "list"])
        let lines = listed.stdout.split(separator: "\n")
        #expect(listed.status == 0 && lines.count == 2 && lines[0].contains("王芳") && lines[1].hasPrefix(id), "\(listed.stdout)")
        #expect(lines[1].contains("<anna@example.org, +4915123456789>"))
        let bad = try flared.flare(["contacts", "add", "Ben", "--phone", "0151 2345678"])
        #expect(bad.status == 1 && bad.stderr.contains("E.164"), "\(bad.stderr)")
        // A share with a personal link for each, listed, one withdrawn.
        let secondID = try #require(second.stdout.split(separator: " ").dropFirst().first.map { String($0.dropLast()) })
        let shared = try flared.flare(["share", "create", "--contact", id, "--contact", secondID, "--json"])
        #expect(shared.status == 0, "\(shared.stderr)")
        let share = try #require(try JSONSerialization.jsonObject(with: Data(shared.stdout.utf8)) as? [String: Any])
        let shareID = try #require(share["share_id"] as? String)
        let links = try #require(share["links"] as? [[String: Any]])
        #expect(links.count == 2 && links.compactMap { $0["contact_id"] as? String } == [id, secondID])
        let linkID = try #require(links.first?["link_id"] as? String)
        let listedLinks = try flared.flare(["share", "links", shareID])
        #expect(listedLinks.status == 0 && listedLinks.stdout.split(separator: "\n").count == 2 && listedLinks.stdout.contains("not opened yet"),
                "\(listedLinks.stdout)")
        #expect(try flared.flare(["share", "withdraw", shareID, linkID]).stdout.contains("withdrawn"))
        #expect(try flared.flare(["share", "links", shareID]).stdout.contains("withdrawn"))
        #expect(try flared.flare(["contacts", "remove", id]).stdout.contains("removed"))
        let again = try flared.flare(["contacts", "remove", id])
        #expect(again.status == 1 && again.stderr.contains("no such contact"), "\(again.stderr)")
        #expect(try flared.flare(["contacts", "list"]).stdout.split(separator: "\n").count == 1)
    }

    @Test func checkinCommands() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let mum = try flared.flare(["contacts", "add", "Mum", "--json"])
        let mumID = try #require((try JSONSerialization.jsonObject(with: Data(mum.stdout.utf8)) as? [String: Any])?["id"] as? String)
        let dad = try flared.flare(["contacts", "add", "Dad", "--json"])
        let dadID = try #require((try JSONSerialization.jsonObject(with: Data(dad.stdout.utf8)) as? [String: Any])?["id"] as? String)
        let started = try flared.flare(["checkin", "start", "--in", "2h", "--grace", "5m", "--arrive", "48.14,11.58,200", "--notify-on-arrival",
                                        "--contact", mumID, "--contact", dadID, "--message", "Hike", "--json"])
        #expect(started.status == 0, "\(started.stderr)")
        let armed = try #require(try JSONSerialization.jsonObject(with: Data(started.stdout.utf8)) as? [String: Any])
        let id = try #require(armed["checkin_id"] as? String)
        #expect(armed["contacts"] as? [String] == [mumID, dadID] && armed["grace_s"] as? Int == 300 && armed["state"] as? String == "armed")
        #expect((armed["arrive"] as? [String: Any])?["radius_m"] as? Double == 200 && armed["notify_on_arrival"] as? Bool == true)
        let shown = try flared.flare(["checkin", "show", id])
        #expect(shown.status == 0 && shown.stdout.contains("armed") && shown.stdout.contains("within 200 m of 48.14,11.58, contacts told"), "\(shown.stdout)")
        let moved = try flared.flare(["checkin", "extend", id, "--in", "3h"])
        #expect(moved.status == 0 && moved.stdout.contains("new device token:"), "\(moved.stderr)")
        let done = try flared.flare(["checkin", "done", id])
        #expect(done.status == 0 && done.stdout.contains("done; nobody is told"), "\(done.stderr)")
        #expect(try flared.flare(["checkin", "show", id]).stdout.contains(": done since "))
        // Bad input is named before anything is sent, or by the server's code.
        let noContact = try flared.flare(["checkin", "start", "--in", "2h"])
        #expect(noContact.status == 1 && noContact.stderr.contains("--contact"), "\(noContact.stderr)")
        let badTime = try flared.flare(["checkin", "start", "--in", "soon", "--contact", mumID])
        #expect(badTime.status == 1 && badTime.stderr.contains("--in needs a time"), "\(badTime.stderr)")
        let past = try flared.flare(["checkin", "start", "--at", "2001-01-01T00:00:00Z", "--contact", mumID])
        #expect(past.status == 1 && past.stderr.contains("passed"), "\(past.stderr)")
        let far = try flared.flare(["checkin", "start", "--in", "2h", "--arrive", "48,11,60000", "--contact", mumID])
        #expect(far.status == 1 && far.stderr.contains("radius_m"), "\(far.stderr)")
    }
}
