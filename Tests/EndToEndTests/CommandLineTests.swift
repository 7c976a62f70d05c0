import FlareTestSupport
import Foundation
import Testing

@Suite struct CommandLineTests {
    @Test func helpTextsExplainEverySetting() throws {
        let flared = try runCommand(try BuiltProducts.path("flared"), ["--help"])
        #expect(flared.status == 0)
        for name in ["FLARE_DATA_DIR", "FLARE_HTTP_ADDR", "FLARE_PUBLIC_URL", "FLARE_MQTT_URL", "FLARE_MQTT_PORT", "--config"] {
            #expect(flared.stdout.contains(name), "flared --help lacks \(name)")
        }
        let flare = try runCommand(try BuiltProducts.path("flare"), ["--help"])
        #expect(flare.status == 0)
        for command in ["share create", "share stop", "share extend", "share show", "keys create", "track"] {
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
    }

    @Test func aTakenPortIsAClearError() throws {
        let broker = try TestBroker()
        let first = try FlaredProcess(broker: broker)
        var environment = first.environment
        environment["FLARE_DATA_DIR"] = try TempDirectory.make().path
        let second = try runCommand(try BuiltProducts.path("flared"), [], environment: environment)
        #expect(second.status == 1)
        #expect(second.stderr.contains("in use"), "\(second.stderr)")
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
}
