import FlareCore
import FlareSQLite
import FlareStore
import Foundation

/// Options shared by every command, read from flags first, then the environment, then defaults.
struct CommonOptions {
    var flags: [String: String] = [:]
    var switches: Set<String> = []
    var positional: [String] = []
    let environment = ProcessInfo.processInfo.environment

    static let valueFlags: Set<String> = ["--server", "--key", "--data-dir", "--duration", "--name", "--label",
                                          "--share-file", "--share-id", "--token", "--mqtt-url", "--interval", "--count", "--speed",
                                          "--gpx", "--speed-factor", "--gpsd", "--queue", "--status-every",
                                          "--qr", "--otrc",
                                          "--shares-file", "--prefix", "--qos", "--rate", "--offset", "--inflight",
                                          "--pattern", "--expect", "--timeout", "--report-every"]
    static let switchFlags: Set<String> = ["--json", "--help", "-h", "--quiet"]

    init(_ arguments: [String]) throws {
        var index = 0
        while index < arguments.count {
            var argument = arguments[index]
            index += 1
            var value: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                value = String(argument[argument.index(after: equals)...])
                argument = String(argument[..<equals])
            }
            if Self.switchFlags.contains(argument) { switches.insert(argument); continue }
            if Self.valueFlags.contains(argument) {
                if value == nil {
                    guard index < arguments.count else { throw CLIError("\(argument) needs a value") }
                    value = arguments[index]
                    index += 1
                }
                flags[argument] = value
                continue
            }
            // A share id is base64url and may itself begin with "-": it is an argument, not an option.
            if argument.hasPrefix("-") && argument.count > 1 && Double(argument) == nil && ShareID(argument) == nil {
                throw CLIError("unknown option \(argument) (see flare --help)")
            }
            positional.append(argument)
        }
    }

    var dataDirectory: String { flags["--data-dir"] ?? environment["FLARE_DATA_DIR"] ?? "./data" }

    var serverURL: String {
        if let server = flags["--server"] ?? environment["FLARE_SERVER_URL"] { return server.hasSuffix("/") ? String(server.dropLast()) : server }
        let address = HostPort(environment["FLARE_HTTP_ADDR"] ?? "127.0.0.1:8080") ?? HostPort(host: "127.0.0.1", port: 8080)
        let host = address.host == "0.0.0.0" ? "127.0.0.1" : (address.host == "::" ? "::1" : address.host)
        return "http://" + HostPort(host: host, port: address.port).description
    }

    func ownerKey() throws -> String {
        if let key = flags["--key"] ?? environment["FLARE_OWNER_KEY"] { return key }
        let path = dataDirectory + "/owner.key"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CLIError("no owner key: pass --key, set FLARE_OWNER_KEY, or run flared once so it writes \(path)")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    var json: Bool { switches.contains("--json") }

    func double(_ flag: String) throws -> Double? {
        guard let text = flags[flag] else { return nil }
        guard let value = Double(text), value.isFinite, value >= 0 else { throw CLIError("\(flag) needs a number, got \(text)") }
        return value
    }
}

enum Commands {
    static let usage = """
        flare: Flare's command-line tool.

        usage:
          flare share create [--duration SECONDS] [--name NAME] [--json]   start a share; prints the link
          flare share show ID [--json]                                      state, expiry, last position time
          flare share stop ID                                               end a share now
          flare share extend ID [--duration SECONDS]                        same link, new expiry
          flare share owntracks ID [--qr FILE.png] [--otrc FILE]            provision the OwnTracks app: a QR code to scan,
                                                                            a config file, or (neither) the link itself
          flare keys create [--label LABEL]                                 a new owner key (printed once)
          flare track --share-file FILE | --share-id ID --token TOKEN       publish positions into a share over MQTT:
                      [--mqtt-url mqtt://HOST:PORT] [--interval SECONDS] [--count N]
                      [--speed M/S]                                   the built-in route (default)
                      [--gpx FILE [--speed-factor N]]                 replay a GPX track, N times faster
                      [--gpsd HOST:PORT]                              a live GPS receiver through gpsd
                      [--queue N] [--status-every SECONDS] [--quiet]  outbox bound; status line period

          flare bench publish|count ...                                     MQTT load tools for `make bench` (loopback only)

        options:
          --server URL     Flare's HTTP address   [env FLARE_SERVER_URL, default http://FLARE_HTTP_ADDR]
          --key KEY        owner key              [env FLARE_OWNER_KEY, default $FLARE_DATA_DIR/owner.key]
          --data-dir DIR   Flare's data directory [env FLARE_DATA_DIR, default ./data]
          --share-file F   the JSON printed by `flare share create --json` (track reads id, token and broker from it)
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try CommonOptions(arguments)
        let words = options.positional
        if options.switches.contains("--help") || options.switches.contains("-h") || words.isEmpty {
            print(usage)
            return words.isEmpty && !options.switches.contains("--help") && !options.switches.contains("-h") ? 2 : 0
        }
        switch (words[0], words.count > 1 ? words[1] : nil) {
        case ("share", "create"): return try shareCreate(options)
        case ("share", "show"): return try shareShow(options, id: try argument(words, 2, "share id"))
        case ("share", "stop"): return try shareStop(options, id: try argument(words, 2, "share id"))
        case ("share", "extend"): return try shareExtend(options, id: try argument(words, 2, "share id"))
        case ("share", "owntracks"): return try shareOwnTracks(options, id: try argument(words, 2, "share id"))
        case ("keys", "create"): return try keysCreate(options)
        case ("track", _): return try Tracker(options: options).run()
        case ("bench", _): return try Bench.run(options, words)
        default: throw CLIError("unknown command \(words.joined(separator: " ")) (see flare --help)")
        }
    }

    static func argument(_ words: [String], _ index: Int, _ name: String) throws -> String {
        guard index < words.count else { throw CLIError("missing \(name) (see flare --help)") }
        return words[index]
    }

    static func ownerClient(_ options: CommonOptions) throws -> HTTPClient {
        HTTPClient(baseURL: options.serverURL, bearer: try options.ownerKey())
    }

    static func shareCreate(_ options: CommonOptions) throws -> Int32 {
        var body: [String: Any] = [:]
        if let duration = try options.double("--duration") { body["duration_s"] = duration }
        if let name = options.flags["--name"] { body["name"] = name }
        let response = try ownerClient(options).send("POST", "/api/v1/shares", body: body)
        guard response.status == 201, let json = response.json else { throw CLIError("could not create a share: \(response.errorMessage)") }
        if options.json {
            print(String(decoding: response.body, as: UTF8.self))
        } else {
            print("share \(json["share_id"] ?? "") created; it ends at \(json["expires_at"] ?? "")")
            print("link for family:   \(json["share_url"] ?? "")")
            print("device publishes:  \(json["mqtt_topic"] ?? "") on \(json["mqtt_url"] ?? "")")
            print("                   username \(json["mqtt_username"] ?? ""), password = the device token below")
            print("device token:      \(json["device_token"] ?? "")")
            print("OwnTracks app:     flare share owntracks \(json["share_id"] ?? "") --qr sos.png   (then scan sos.png)")
        }
        return 0
    }

    static func shareShow(_ options: CommonOptions, id: String) throws -> Int32 {
        let response = try ownerClient(options).send("GET", "/api/v1/shares/\(id)")
        guard response.status == 200, let json = response.json else { throw CLIError("cannot show \(id): \(response.errorMessage)") }
        if options.json {
            print(String(decoding: response.body, as: UTF8.self))
            return 0
        }
        print("share \(id): \(json["state"] ?? "?")")
        if let name = json["name"] as? String, !name.isEmpty { print("  name       \(name)") }
        print("  created    \(json["created_at"] ?? "")")
        print("  expires    \(json["expires_at"] ?? "")")
        if let ended = json["ended_at"] { print("  ended      \(ended) (\(json["reason"] ?? ""))") }
        if let last = json["last"] as? [String: Any], let tst = last["tst"] as? Double {
            print("  last fix   \(RFC3339.format(seconds: Int64(tst)))")  // time only: positions stay off terminals and logs
        } else {
            print("  last fix   none")
        }
        print("  viewers    \(json["viewers"] ?? 0)")
        return 0
    }

    static func shareStop(_ options: CommonOptions, id: String) throws -> Int32 {
        let response = try ownerClient(options).send("POST", "/api/v1/shares/\(id)/stop")
        guard response.status == 200 else { throw CLIError("cannot stop \(id): \(response.errorMessage)") }
        print("share \(id) ended (\(response.json?["reason"] ?? "stopped"))")
        return 0
    }

    static func shareExtend(_ options: CommonOptions, id: String) throws -> Int32 {
        var body: [String: Any] = [:]
        if let duration = try options.double("--duration") { body["duration_s"] = duration }
        let response = try ownerClient(options).send("POST", "/api/v1/shares/\(id)/extend", body: body)
        guard response.status == 200 else { throw CLIError("cannot extend \(id): \(response.errorMessage)") }
        if options.json { print(String(decoding: response.body, as: UTF8.self)) } else {
            print("share \(id) now ends at \(response.json?["expires_at"] ?? "")")
        }
        return 0
    }

    /// The share's OwnTracks configuration, as a QR code image and/or an .otrc file; with neither, the
    /// `owntracks:///config?inline=…` link on stdout. All of them contain the device token.
    static func shareOwnTracks(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let path = "/api/v1/shares/\(id)/owntracks"
        var wrote = false
        for (flag, suffix, what) in [("--qr", "/qr.png", "QR code"), ("--otrc", ".otrc", "configuration")] {
            guard let file = options.flags[flag] else { continue }
            let response = try client.send("GET", path + suffix)
            guard response.status == 200 else { throw CLIError("cannot get the OwnTracks \(what) for \(id): \(response.errorMessage)") }
            guard FileManager.default.createFile(atPath: file, contents: response.body, attributes: [.posixPermissions: 0o600]) else {
                throw CLIError("cannot write \(file)")
            }
            print("OwnTracks \(what) for share \(id) written to \(file) (it contains the share's device token)")
            wrote = true
        }
        if !wrote {
            let response = try client.send("GET", path + "/link")
            guard response.status == 200, let link = response.json?["url"] as? String else {
                throw CLIError("cannot get the OwnTracks link for \(id): \(response.errorMessage)")
            }
            print(link)
        }
        return 0
    }

    /// Writes straight into the database that flared uses (SQLite allows the second writer; the key is usable at once).
    static func keysCreate(_ options: CommonOptions) throws -> Int32 {
        let path = options.dataDirectory + "/flare.db"
        guard FileManager.default.fileExists(atPath: path) else {
            throw CLIError("no Flare database at \(path): start flared once, or pass --data-dir")
        }
        let store = try SQLiteShareStore(path: path)
        let key = OwnerKey.generate()
        try store.insertOwnerKey(hash: SecretHash(of: key), label: options.flags["--label"] ?? "cli", createdAt: SystemWallClock().now())
        print(key)
        FileHandle.standardError.write(Data("owner key created; it is shown only this once and stored only as a hash\n".utf8))
        return 0
    }
}
