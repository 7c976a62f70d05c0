import FlareTestSupport
import Foundation
import Testing

/// `flare devices …` against the built flared: a device added with PINs that never touch the command line, its secret
/// shown once with each app's setup, the setup's test ("last heard"), the Traccar Client QR code, a new secret, removal.
@Suite struct DeviceCommandTests {
    func json(_ result: CommandResult) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)\(result.stderr)")
    }

    /// `flare` with more environment (a PIN), or with `input` on its standard input as a script pipes it.
    func flare(_ flared: FlaredProcess, _ arguments: [String], environment extra: [String: String] = [:], input: String? = nil) throws -> CommandResult {
        let flare = try BuiltProducts.path("flare")
        let environment = flared.environment.merging(extra) { $1 }
        guard let input else { return try runCommand(flare, arguments, environment: environment) }
        let quoted = ([flare] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        return try runCommand("/bin/sh", ["-c", "printf '\(input)' | \(quoted)"], environment: environment)
    }

    func isPNG(_ path: String) -> Bool {
        FileManager.default.contents(atPath: path).map { Array($0.prefix(4)) == [0x89, 0x50, 0x4E, 0x47] } ?? false
    }

    @Test func aDeviceIsAddedSetUpTestedGivenANewSecretAndRemoved() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let mum = try json(try flared.flare(["contacts", "add", "Mum", "--email", "mum@example.org", "--json"]))
        let mumID = try #require(mum["id"] as? String)

        // What is wrong is said before anything is sent; a PIN is never taken from the command line.
        let noContact = try flared.flare(["devices", "add", "Anna"])
        #expect(noContact.status == 1 && noContact.stderr.contains("--contact"), "\(noContact.stderr)")
        let duressAlone = try flared.flare(["devices", "add", "Anna", "--contact", mumID, "--duress-pin"])
        #expect(duressAlone.status == 1 && duressAlone.stderr.contains("--duress-pin needs --pin"), "\(duressAlone.stderr)")
        let noPIN = try flared.flare(["devices", "add", "Anna", "--contact", mumID, "--pin"])
        #expect(noPIN.status == 1 && noPIN.stderr.contains("no PIN to stop the SOS") && noPIN.stderr.contains("FLARE_DEVICE_PIN"), "\(noPIN.stderr)")
        let shortPIN = try flare(flared, ["devices", "add", "Anna", "--contact", mumID, "--pin"], environment: ["FLARE_DEVICE_PIN": "12"])
        #expect(shortPIN.status == 1 && shortPIN.stderr.contains("must be 4 to 12 digits"), "\(shortPIN.stderr)")
        let onTheLine = try flared.flare(["devices", "add", "Anna", "--contact", mumID, "--pin", "4711"])
        #expect(onTheLine.status == 64 && onTheLine.stderr.contains("unexpected argument 4711"), "\(onTheLine.stderr)")
        let badDuration = try flared.flare(["devices", "add", "Anna", "--contact", mumID, "--duration", "soon"])
        #expect(badDuration.status == 1 && badDuration.stderr.contains("--duration needs a time"), "\(badDuration.stderr)")
        #expect(try flared.flare(["devices", "list"]).stdout.hasPrefix("no devices"))

        // PINs from the environment (a script), the QR code drawn at once.
        let qr = flared.dataDirectory.appendingPathComponent("traccar.png").path
        let added = try flare(flared, ["devices", "add", "Anna", "--contact", mumID, "--duration", "30m", "--message", "At the trailhead", "--pin",
                                       "--duress-pin", "--countdown", "3", "--qr", qr, "--qr-app", "traccar_client"], environment: ["FLARE_DEVICE_PIN": "4711", "FLARE_DEVICE_DURESS_PIN": "9999"])
        #expect(added.status == 0, "\(added.stderr)")
        let lines = added.stdout.split(separator: "\n").map(String.init)
        let id = try #require(lines.first?.split(separator: " ").dropFirst().first.map(String.init))
        #expect(lines.first == "device \(id) added: Anna; its SOS tells 1 contact")
        let secret = try #require(lines.first { $0.hasPrefix("secret: ") }.map { String($0.dropFirst(8)) })
        #expect(added.stdout.contains("shown only now") && added.stdout.contains("Traccar Client") && added.stdout.contains("GPSLogger"))
        #expect(added.stdout.contains("/api/v1/osmand/\(secret)") && !added.stdout.contains("<secret>"))
        #expect(!added.stdout.contains("4711") && !added.stdout.contains("9999") && !added.stderr.contains("4711"))
        #expect(isPNG(qr) && added.stderr.contains("QR code written to \(qr)"), "\(added.stderr)")
        #expect(try FileManager.default.attributesOfItem(atPath: qr)[.posixPermissions] as? Int == 0o600)

        // A PIN piped, as a script without the environment would.
        let piped = try flare(flared, ["devices", "add", "Ben", "--contact", mumID, "--pin", "--json"], input: "1234\\n")
        #expect(piped.status == 0, "\(piped.stderr)")
        let ben = try json(piped)
        let benID = try #require(ben["device_id"] as? String)
        #expect((ben["secret"] as? String)?.isEmpty == false && (ben["setup"] as? [String: Any])?["includes_secret"] as? Bool == true)
        let benShown = try json(try flared.flare(["devices", "show", benID, "--json"]))
        #expect(benShown["has_pin"] as? Bool == true && benShown["has_duress_pin"] as? Bool == false)

        let listed = try flared.flare(["devices", "list"])
        let rows = listed.stdout.split(separator: "\n")
        #expect(listed.status == 0 && rows.count == 3 && rows[0].hasPrefix("ID") && rows[1].hasPrefix(benID) && rows[2].hasPrefix(id), "\(listed.stdout)")
        #expect(rows[2].contains("pin+duress") && rows[2].contains("never") && rows[2].hasSuffix("Anna"), "\(listed.stdout)")
        let page = try flared.flare(["devices", "list", "--limit", "1"])
        #expect(page.stdout.contains("more: flare devices list --cursor "), "\(page.stdout)")
        let shown = try flared.flare(["devices", "show", id])
        #expect(shown.status == 0 && shown.stdout.contains("1800 s") && shown.stdout.contains("yes, and a duress PIN"), "\(shown.stdout)")
        #expect(shown.stdout.contains("At the trailhead") && shown.stdout.contains("last heard never") && !shown.stdout.contains(secret))

        // The setup without the secret shows where it goes, and cannot be drawn; with it, it is filled in here.
        let blank = try flared.flare(["devices", "setup", id])
        #expect(blank.status == 0 && blank.stdout.contains("<secret>") && blank.stdout.contains("last heard: never"), "\(blank.stdout)")
        let noSecret = try flared.flare(["devices", "setup", id, "--qr", qr + ".2"])
        #expect(noSecret.status == 1 && noSecret.stderr.contains("needs the secret"), "\(noSecret.stderr)")
        // The test: the device is heard once it uses its secret.
        #expect(try flared.request("GET", "/api/v1/devices/sos", bearer: secret).status == 200)
        let filled = try flared.flare(["devices", "setup", id, "--secret", secret, "--qr", qr + ".2"])
        #expect(filled.status == 0 && filled.stdout.contains("/api/v1/osmand/\(secret)") && !filled.stdout.contains("<secret>"), "\(filled.stdout)")
        #expect(filled.stdout.contains(" s ago") && isPNG(qr + ".2"), "\(filled.stdout)")
        #expect(filled.stdout.contains("/sos#d=\(secret)") && filled.stderr.contains("sos_page QR code written"), "the SOS page's link, drawn by default")
        let wrongApp = try flared.flare(["devices", "setup", id, "--secret", secret, "--qr", qr + ".3", "--qr-app", "gpslogger"])
        #expect(wrongApp.status == 1 && wrongApp.stderr.contains("--qr-app must be one of"), "\(wrongApp.stderr)")
        let badCountdown = try flared.flare(["devices", "add", "Ben", "--contact", mumID, "--countdown", "11"])
        #expect(badCountdown.status == 1 && badCountdown.stderr.contains("--countdown"), "\(badCountdown.stderr)")
        #expect(try flared.request("GET", "/api/v1/devices/me", bearer: secret).json?["countdown_s"] as? Int == 3)
        let fromEnvironment = try flare(flared, ["devices", "setup", id, "--json"], environment: ["FLARE_DEVICE_SECRET": secret])
        #expect(try json(fromEnvironment)["includes_secret"] as? Bool == true && fromEnvironment.stdout.contains(secret))

        // The SOS, started by the device, as its owner sees it; a new secret stops the old one at once.
        let started = try flared.request("POST", "/api/v1/devices/sos", bearer: secret)
        let share = try #require(started.json?["share_id"] as? String, "\(started.status) \(started.text)")
        #expect(try flared.flare(["devices", "show", id]).stdout.contains("live, share \(share)"))
        let renewed = try flared.flare(["devices", "secret", id])
        let newSecret = try #require(renewed.stdout.split(separator: "\n").first { $0.hasPrefix("secret: ") }.map { String($0.dropFirst(8)) })
        #expect(renewed.status == 0 && newSecret != secret && renewed.stdout.contains("the old one no longer works"), "\(renewed.stdout)")
        #expect(try flared.request("GET", "/api/v1/devices/sos", bearer: secret).status == 404)
        #expect(try flared.request("GET", "/api/v1/devices/sos", bearer: newSecret).json?["status"] as? String == "live")

        let removed = try flared.flare(["devices", "remove", id])
        #expect(removed.status == 0 && removed.stdout.contains("removed") && removed.stdout.contains("flare share stop \(share)"), "\(removed.stdout)")
        #expect(try flared.request("GET", "/api/v1/devices/sos", bearer: newSecret).status == 404)
        let again = try flared.flare(["devices", "remove", id])
        #expect(again.status == 1 && again.stderr.contains("no such device"), "\(again.stderr)")
        #expect(try flared.flare(["devices", "show", "not/an/id"]).status == 1)
    }
}
