import FlareAPI
import FlareClient
import FlareCore
import FlareCrypto
import FlareQR
import FlareStores
import FlareStore
import Foundation
import Synchronization
import FlareSystem

/// Options shared by every command, read from flags first, then the environment, then defaults.
struct CommonOptions {
    var flags: [String: String] = [:]
    var repeated: [String: [String]] = [:]
    var switches: Set<String> = []
    var positional: [String] = []
    let environment = ProcessInfo.processInfo.environment

    static let valueFlags: Set<String> = ["--server", "--key", "--e2e-key", "--data-dir", "--duration", "--name", "--label",
                                          "--share-file", "--share-id", "--token", "--mqtt-url", "--interval", "--count", "--speed",
                                          "--gpx", "--speed-factor", "--gpsd", "--queue", "--status-every",
                                          "--qr", "--otrc",
                                          "--shares-file", "--prefix", "--qos", "--rate", "--offset", "--inflight", "--store-dir", "--live",
                                          "--pattern", "--expect", "--timeout", "--report-every",
                                          "--state", "--limit", "--cursor",
                                          "--max-live", "--max-duration", "--create-rate", "--confirm-timeout",
                                          "--email", "--phone", "--language", "--contact",
                                          "--in", "--at", "--grace", "--arrive", "--message", "--acked"]
    /// Flags that may be given more than once (`--contact A --contact B`); `repeated` keeps every value in order.
    static let repeatableFlags: Set<String> = ["--contact"]
    static let switchFlags: Set<String> = ["--json", "--help", "-h", "--quiet", "--mqtt311", "--http", "--no-confirm", "--admin", "--enroll", "--remove",
                                           "--notify-on-arrival", "--e2e"]

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
                if Self.repeatableFlags.contains(argument), let value { repeated[argument, default: []].append(value) }
                continue
            }
            // A share id is base64url and may itself begin with "-": it is an argument, not an option.
            if argument.hasPrefix("-") && argument.count > 1 && Double(argument) == nil && ShareID(argument) == nil {
                throw CLIError("unknown option \(argument) (see flare --help)")
            }
            positional.append(argument)
        }
    }

    /// Settings `flare` shares with `flared` take `flared`'s defaults, from its one table.
    func shared(_ name: String) -> String { environment[name] ?? FlaredSettings.defaultValue(name) ?? "" }

    var dataDirectory: String { flags["--data-dir"] ?? shared("FLARE_DATA_DIR") }

    func serverURL() throws -> String {
        if let server = flags["--server"] ?? environment["FLARE_SERVER_URL"] { return server.hasSuffix("/") ? String(server.dropLast()) : server }
        guard let address = HostPort(shared("FLARE_HTTP_ADDR")) else {
            throw CLIError("FLARE_HTTP_ADDR must be host:port (got \(shared("FLARE_HTTP_ADDR"))); or pass --server URL")
        }
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

    /// Where an end-to-end encrypted share's passphrase is kept on the owner's machine, beside the owner key:
    /// `$FLARE_DATA_DIR/e2e/<share id>.key`, mode 0600. The server never has it.
    func passphrasePath(_ shareID: String) -> String { dataDirectory + "/e2e/\(shareID).key" }

    /// The passphrase of share `shareID`: `--e2e-key`, or the file `share create --e2e` wrote.
    func passphrase(of shareID: String) throws -> String {
        if let given = flags["--e2e-key"] {
            try E2EPassphrase.checkGiven(given)
            return given
        }
        let path = passphrasePath(shareID)
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CLIError("no passphrase for share \(shareID): pass --e2e-key, or run this where `flare share create --e2e` wrote \(path)")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

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
          flare share create [--duration SECONDS] [--name NAME] [--contact ID ...] [--e2e] [--json]
                                                                            start a share; prints the link, and a
                                                                            personal link per --contact (repeatable);
                                                                            --e2e: end-to-end encrypted, the key in the
                                                                            link's #k= and in $FLARE_DATA_DIR/e2e/ID.key
          flare share links ID [--json]                                     its personal links: who opened, the URLs
          flare share withdraw ID LINK_ID                                   withdraw one personal link
          flare share list [--state active|ended] [--limit N] [--cursor C] [--json]
                                                                            shares, newest first, a page at a time
          flare share show ID [--json]                                      state, expiry, last position time
          flare share stop ID                                               end a share now
          flare share extend ID [--duration SECONDS]                        same link, new expiry
          flare share owntracks ID [--qr FILE.png] [--otrc FILE] [--http]   provision the OwnTracks app: a QR code to scan,
                      [--e2e [--e2e-key PASSPHRASE]]                  a config file, or (neither) the link itself;
                                                                            --http: the app's HTTP mode, where MQTT is blocked;
                                                                            --e2e: with the share's key, added here
          flare keys create [--label LABEL] [--admin]                       a new owner key (printed once); a limited key
                      [--max-live N] [--max-duration SECONDS]         (the default) sees only the shares it creates,
                      [--create-rate N/h] [--enroll] [--qr FILE.png]  within these limits; --enroll prints, --qr draws,
                                                                      the link a phone scans to enrol with it
          flare keys list [--json]                                          every key: kind, limits, last use, live shares
          flare keys revoke ID                                              the key stops working, its shares end
          flare keys webhook ID URL | --remove                              POST the events of key ID's shares to URL
                                                                            (Standard Webhooks); prints the signing
                                                                            secret once; a limited key's URL must be
                                                                            a public address
          flare contacts add NAME [--email ADDRESS] [--phone +E164] [--language en|zh-CN] [--json]
                                                                            someone the key's shares may tell
          flare contacts list [--limit N] [--cursor C] [--json]            the key's contacts, newest first
          flare contacts remove ID                                          forget a contact
          flare checkin start --in 2h | --at 2026-12-02T22:00:00Z --contact ID [--contact ID ...]
                      [--grace 10m] [--message TEXT] [--arrive LAT,LON,RADIUS_M [--notify-on-arrival]]
                      [--duration SECONDS] [--name NAME] [--json]
                                                                            if you have not checked in by then (plus the
                                                                            grace), the server tells your contacts, with
                                                                            your last position, even if the phone is off
          flare checkin done ID                                             check in: nobody is told, the share ends
          flare checkin extend ID --in 1h | --at TIME                       a new deadline (and a new device token)
          flare checkin show ID [--json]                                    where a check-in stands
          flare webhook-secret                                              a new secret for FLARE_WEBHOOK_SECRET
          flare nats-issuer                                                 FLARE_BROKER=nats: the account key flared signs the
                                                                            callout's answers with (DATA_DIR/nats/issuer.seed,
                                                                            made if missing); prints the public key that every
                                                                            node's auth_callout { issuer } names
          flare token-key rotate                                            a new token.key (the emergency stop for every
                                                                            device and watch token), the keys' webhook
                                                                            secrets sealed anew; says what to do next
          flare track --share-file FILE | --share-id ID --token TOKEN       publish positions into a share over MQTT:
                      [--mqtt-url mqtt://HOST:PORT] [--interval SECONDS] [--count N]
                      [--speed M/S]                                   the built-in route (default)
                      [--gpx FILE [--speed-factor N]]                 replay a GPX track, N times faster
                      [--gpsd HOST:PORT]                              a live GPS receiver through gpsd
                      [--queue N] [--status-every SECONDS] [--quiet]  send queue bound; status line period
                      [--mqtt311]                                     MQTT 3.1.1 (a NATS cluster: it has no MQTT 5)
                      [--e2e [--e2e-key PASSPHRASE]]                  encrypt each fix for an end-to-end encrypted
                                                                      share (the key: --e2e-key, or the file
                                                                      share create --e2e wrote)
                      [--confirm-timeout SECONDS] [--no-confirm]      each fix is kept (and sent again after a
                                                                      reconnection) until Flare confirms it stored;
                                                                      at the end, wait this long (60) for that;
                                                                      --no-confirm: done at the broker's PUBACK

          flare bench publish|count|store-create ...                        load tools and references for `make bench`

        options:
          --server URL     Flare's HTTP address   [env FLARE_SERVER_URL, default http://FLARE_HTTP_ADDR]
          --key KEY        owner key              [env FLARE_OWNER_KEY, default $FLARE_DATA_DIR/owner.key]
          --data-dir DIR   Flare's data directory [env FLARE_DATA_DIR, default as flared's]
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
        case ("share", "list"): return try shareList(options)
        case ("share", "show"): return try shareShow(options, id: try argument(words, 2, "share id"))
        case ("share", "stop"): return try shareStop(options, id: try argument(words, 2, "share id"))
        case ("share", "extend"): return try shareExtend(options, id: try argument(words, 2, "share id"))
        case ("share", "owntracks"): return try shareOwnTracks(options, id: try argument(words, 2, "share id"))
        case ("share", "links"): return try shareLinks(options, id: try argument(words, 2, "share id"))
        case ("share", "withdraw"): return try shareWithdraw(options, id: try argument(words, 2, "share id"), link: try argument(words, 3, "link id"))
        case ("keys", "create"): return try keysCreate(options)
        case ("keys", "list"): return try keysList(options)
        case ("keys", "revoke"): return try keysRevoke(options, id: try argument(words, 2, "key id"))
        case ("keys", "webhook"): return try keysWebhook(options, id: try argument(words, 2, "key id"), url: words.count > 3 ? words[3] : nil)
        case ("contacts", "add"): return try contactsAdd(options, name: try argument(words, 2, "contact name"))
        case ("contacts", "list"): return try contactsList(options)
        case ("contacts", "remove"): return try contactsRemove(options, id: try argument(words, 2, "contact id"))
        case ("checkin", "start"): return try checkinStart(options)
        case ("checkin", "done"): return try checkinDone(options, id: try argument(words, 2, "check-in id"))
        case ("checkin", "extend"): return try checkinExtend(options, id: try argument(words, 2, "check-in id"))
        case ("checkin", "show"): return try checkinShow(options, id: try argument(words, 2, "check-in id"))
        case ("token-key", "rotate"): return try tokenKeyRotate(options)
        case ("nats-issuer", nil): return try natsIssuer(options)
        case ("webhook-secret", nil):
            print(WebhookSecret.generate().text)
            return 0
        case ("track", _): return try TrackCommand(options: options).run()
        case ("bench", _): return try Bench.run(options, words)
        default: throw CLIError("unknown command \(words.joined(separator: " ")) (see flare --help)")
        }
    }

    static func argument(_ words: [String], _ index: Int, _ name: String) throws -> String {
        guard index < words.count else { throw CLIError("missing \(name) (see flare --help)") }
        return words[index]
    }

    /// Flare's client, with the owner key. No retries: a person at a terminal wants the answer (or the error) now.
    static func ownerClient(_ options: CommonOptions) throws -> FlareClient {
        let server = try options.serverURL()
        guard let url = URL(string: server), url.scheme == "http" || url.scheme == "https" else {
            throw CLIError("--server must be an http:// or https:// URL (got \(server))")
        }
        return FlareClient(baseURL: url, ownerKey: try options.ownerKey(), retry: .none)
    }

    /// Runs one client call to completion for the synchronous command line, turning its error into a message.
    static func call<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws(FlareClientError) -> T) throws -> T {
        let outcome = Mutex<Result<T, FlareClientError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<T, FlareClientError>
            do throws(FlareClientError) { result = .success(try await body()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        switch outcome.withLock({ $0 })! {
        case .success(let value): return value
        case .failure(let error): throw CLIError("\(what): \(error)")
        }
    }

    static func printJSON<T: Encodable>(_ value: T) throws {
        print(String(decoding: try APIJSON.encode(value), as: UTF8.self))
    }

    static func shareCreate(_ options: CommonOptions) throws -> Int32 {
        let client = try ownerClient(options)
        let duration = try options.double("--duration"), name = options.flags["--name"]
        let contacts = options.repeated["--contact"] ?? []
        let endToEnd = options.switches.contains("--e2e")
        if endToEnd && !contacts.isEmpty {
            throw CLIError("--e2e takes no --contact: the server mails contacts, and it never has the key their links need; send the link yourself")
        }
        let share = try call("could not create a share") { () async throws(FlareClientError) in
            try await client.createShare(duration: duration, name: name, contacts: contacts.isEmpty ? nil : contacts, endToEnd: endToEnd)
        }
        // The passphrase is made here and kept here: the link's fragment carries it to the family, and no server
        // ever receives a fragment.
        var familyLink = share.shareURL.absoluteString
        var keyFile: String?
        if endToEnd {
            let passphrase = E2EPassphrase.generate()
            keyFile = try writePassphrase(passphrase, to: options.passphrasePath(share.shareID))
            familyLink += "#k=" + passphrase
        }
        if options.json {
            guard let keyFile else { try printJSON(share); return 0 }
            // Still every member a string: the share's answer with the whole link and where its key is kept.
            var object = try JSONValue.parse(try APIJSON.encode(share)).objectValue ?? [:]
            object["e2e_url"] = .string(familyLink)
            object["e2e_key_file"] = .string(keyFile)
            print(String(decoding: JSONWriter.flatObject(object.sorted { $0.key < $1.key }.compactMap { member in
                member.value.stringValue.map { (member.key, $0) } }), as: UTF8.self))
        } else {
            print("share \(share.shareID) created; it ends at \(RFC3339.format(share.expiresAt))\(endToEnd ? " (end-to-end encrypted)" : "")")
            print("link for family:   \(familyLink)")
            if let keyFile {
                print("                   the part after #k= is the key: the server never sees it; it is kept in \(keyFile)")
            }
            print("device publishes:  \(share.mqttTopic) on \(share.mqttURL)")
            print("                   username \(share.mqttUsername), password = the device token below")
            print("device token:      \(share.deviceToken)")
            // The phone needs the key too: without --e2e it would publish positions in clear, which the share refuses.
            print("OwnTracks app:     flare share owntracks \(share.shareID)\(endToEnd ? " --e2e" : "") --qr sos.png   (then scan sos.png)")
            for link in share.links ?? [] { print("link for \(link.name): \(link.url)   (withdraw: flare share withdraw \(share.shareID) \(link.linkID))") }
        }
        return 0
    }

    /// Writes an end-to-end passphrase readable by its owner only (the directory too), and never over another.
    static func writePassphrase(_ passphrase: String, to path: String) throws -> String {
        let directory = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch { throw CLIError("cannot make \(directory) for the share's passphrase: \(error.localizedDescription)") }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { throw CLIError("cannot write the share's passphrase to \(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        let bytes = Array((passphrase + "\n").utf8)
        guard write(descriptor, bytes, bytes.count) == bytes.count else { throw CLIError("cannot write the share's passphrase to \(path)") }
        return path
    }

    static func shareLinks(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let list = try call("cannot list the links of \(id)") { () async throws(FlareClientError) in try await client.links(id) }
        if options.json {
            try printJSON(list)
            return 0
        }
        if list.links.isEmpty { print("no personal links") }
        for link in list.links {
            let state = link.withdrawnAt.map { "withdrawn \(RFC3339.format($0))" }
                ?? link.firstOpenedAt.map { "opened \(RFC3339.format($0))" } ?? "not opened yet"
            print("\(link.linkID)  \(link.name)  \(state)  \(link.withdrawnAt == nil ? link.url : "")")
        }
        return 0
    }

    static func shareWithdraw(_ options: CommonOptions, id: String, link: String) throws -> Int32 {
        let client = try ownerClient(options)
        try call("cannot withdraw link \(link)") { () async throws(FlareClientError) in try await client.withdrawLink(link, of: id) }
        print("link \(link) withdrawn: its page says so; the share's other links go on")
        return 0
    }

    static func shareList(_ options: CommonOptions) throws -> Int32 {
        let client = try ownerClient(options)
        var state: ShareState?
        if let text = options.flags["--state"] {
            guard let parsed = ShareState(rawValue: text) else { throw CLIError("--state must be active or ended (got \(text))") }
            state = parsed
        }
        var limit: Int?
        if let text = options.flags["--limit"] {
            guard let parsed = Int(text), (1...ShareList.maximumLimit).contains(parsed) else {
                throw CLIError("--limit must be a whole number from 1 to \(ShareList.maximumLimit) (got \(text))")
            }
            limit = parsed
        }
        let cursor = options.flags["--cursor"]
        let page = try call("cannot list shares") { [state, limit] () async throws(FlareClientError) in
            try await client.listShares(state: state, limit: limit, cursor: cursor)
        }
        if options.json {
            try printJSON(page)
            return 0
        }
        if page.shares.isEmpty { print(cursor == nil ? "no shares" : "no more shares") }
        for share in page.shares {
            let end = share.endedAt.map { "ended \(RFC3339.format($0)) (\(share.reason ?? ""))" } ?? "ends \(RFC3339.format(share.expiresAt))"
            let name = share.name.isEmpty ? "" : "  \(share.name)"
            print("\(share.shareID)  \(share.state.rawValue.padding(toLength: 6, withPad: " ", startingAt: 0))  created \(RFC3339.format(share.createdAt))  \(end)\(name)")
        }
        if let next = page.nextCursor { print("more: flare share list --cursor \(next)") }
        return 0
    }

    static func shareShow(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let share = try call("cannot show \(id)") { () async throws(FlareClientError) in try await client.share(id) }
        if options.json {
            try printJSON(share)
            return 0
        }
        print("share \(id): \(share.state.rawValue)")
        if !share.name.isEmpty { print("  name       \(share.name)") }
        print("  created    \(RFC3339.format(share.createdAt))")
        print("  expires    \(RFC3339.format(share.expiresAt))")
        if let ended = share.endedAt { print("  ended      \(RFC3339.format(ended)) (\(share.reason ?? ""))") }
        // The time only: positions stay off terminals and logs.
        print("  last fix   \(share.last.map { RFC3339.format($0.timestamp) } ?? "none")")
        if let audience = share.audience {
            let first = audience.firstOpenedAt.map { ", first at \(RFC3339.format($0))" } ?? ""
            print("  seen by    \(audience.opened)\(first); watching now \(audience.watching)")
        } else {
            print("  viewers    \(share.viewers)")
        }
        return 0
    }

    static func shareStop(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let stopped = try call("cannot stop \(id)") { () async throws(FlareClientError) in try await client.stopShare(id) }
        print("share \(id) ended (\(stopped.reason))")
        return 0
    }

    static func shareExtend(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let duration = try options.double("--duration")
        let extended = try call("cannot extend \(id)") { () async throws(FlareClientError) in
            try await client.extendShare(id, duration: duration)
        }
        if options.json { try printJSON(extended) } else {
            print("share \(id) now ends at \(RFC3339.format(extended.expiresAt))")
        }
        return 0
    }

    /// The share's OwnTracks configuration, as a QR code image and/or an .otrc file; with neither, the
    /// `owntracks:///config?inline=…` link on stdout. All of them contain the device token.
    static func shareOwnTracks(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let mode: OwnTracksMode = options.switches.contains("--http") ? .http : .mqtt
        if options.switches.contains("--e2e") { return try shareOwnTracksEndToEnd(options, id: id, client: client, mode: mode) }
        var wrote = false
        for (flag, what) in [("--qr", "QR code"), ("--otrc", "configuration")] {
            guard let file = options.flags[flag] else { continue }
            let body = try call("cannot get the OwnTracks \(what) for \(id)") { () async throws(FlareClientError) in
                flag == "--qr" ? try await client.ownTracksQRCode(id, mode: mode) : try await client.ownTracksConfigurationFile(id, mode: mode)
            }
            guard FileManager.default.createFile(atPath: file, contents: body, attributes: [.posixPermissions: 0o600]) else {
                throw CLIError("cannot write \(file)")
            }
            print("OwnTracks \(what) for share \(id)\(mode == .http ? " (HTTP mode)" : "") written to \(file) (it contains the share's device token)")
            wrote = true
        }
        if !wrote {
            let link = try call("cannot get the OwnTracks link for \(id)") { () async throws(FlareClientError) in
                try await client.ownTracksLink(id, mode: mode)
            }
            print(link.absoluteString)
        }
        // OwnTracks for iOS from 26.2.2 and for Android from 2.6.0 refuse a configuration by link or file until
        // this is switched on in the app, and no configuration can switch it on.
        FileHandle.standardError.write(Data("on the phone, first allow it in OwnTracks: Settings, \"Allow configuration by URI and config file\" (newer app versions refuse the import without it)\n".utf8))
        return 0
    }

    /// The OwnTracks configuration of an end-to-end encrypted share: the server's, with `encryptionKey` added here,
    /// on the owner's machine, and its QR code drawn here. The server's configuration endpoints never hold the key.
    static func shareOwnTracksEndToEnd(_ options: CommonOptions, id: String, client: FlareClient, mode: OwnTracksMode) throws -> Int32 {
        let passphrase = try options.passphrase(of: id)
        let json = Array(try call("cannot get the OwnTracks configuration for \(id)") { () async throws(FlareClientError) in
            try await client.ownTracksConfigurationEndToEnd(id, passphrase: passphrase, mode: mode)
        })
        let link = OwnTracksConfiguration.inlineURL(of: json)
        var wrote = false
        for (flag, what) in [("--qr", "QR code"), ("--otrc", "configuration")] {
            guard let file = options.flags[flag] else { continue }
            let body = flag == "--qr" ? try QRCode(link).png() : json
            guard FileManager.default.createFile(atPath: file, contents: Data(body), attributes: [.posixPermissions: 0o600]) else {
                throw CLIError("cannot write \(file)")
            }
            print("OwnTracks \(what) for share \(id)\(mode == .http ? " (HTTP mode)" : "") written to \(file) (it contains the share's device token and its end-to-end key)")
            wrote = true
        }
        if !wrote { print(link) }
        FileHandle.standardError.write(Data("on the phone, first allow it in OwnTracks: Settings, \"Allow configuration by URI and config file\"; the app then encrypts every position with the share's key\n".utf8))
        return 0
    }

    /// Writes straight into the store that flared uses, through the store protocol (SQLite allows the second writer;
    /// the key is usable at once). The one command that needs no running server: it makes the first keys.
    static func keysCreate(_ options: CommonOptions) throws -> Int32 {
        let store = try openStore(options)
        let limits = KeyLimits(maxLive: try positive(options, "--max-live"), maxDurationSeconds: try positive(options, "--max-duration").map(Int64.init),
                               createsPerHour: try rate(options))
        let admin = options.switches.contains("--admin")
        let key = OwnerKey.generate()
        let label = options.flags["--label"] ?? "cli"
        guard NameBounds.keyLabel.admits(label), !NameBounds.hasHiddenScalars(label) else {
            throw CLIError("--label must be text of \(NameBounds.keyLabel.description), without control or format characters")
        }
        let id = try store.insertOwnerKey(hash: SecretHash(of: key), label: label, createdAt: SystemClock().now(), admin: admin, limits: limits)
        print(key)
        FileHandle.standardError.write(Data("owner key \(id) created (\(admin ? "admin: it sees and controls every share" : "limited: it sees only the shares it creates")); it is shown only this once and stored only as a hash\n".utf8))
        if options.switches.contains("--enroll") || options.flags["--qr"] != nil {
            let server = options.shared("FLARE_PUBLIC_URL").isEmpty ? try options.serverURL() : options.shared("FLARE_PUBLIC_URL")
            guard let url = URL(string: server), let scheme = url.scheme, ["http", "https"].contains(scheme) else {
                throw CLIError("the enrolment link needs the server's public URL: set FLARE_PUBLIC_URL (or --server) to https://…")
            }
            let link = Enrollment(server: url, key: key).link
            if options.switches.contains("--enroll") { print(link) }
            if let file = options.flags["--qr"] {
                let png = try QRCode(link).png()
                guard FileManager.default.createFile(atPath: file, contents: Data(png), attributes: [.posixPermissions: 0o600]) else {
                    throw CLIError("cannot write \(file)")
                }
                FileHandle.standardError.write(Data("enrolment QR code written to \(file) (it contains the key: show it to the phone, then delete it)\n".utf8))
            }
        }
        return 0
    }

    static func keysList(_ options: CommonOptions) throws -> Int32 {
        let store = try openStore(options)
        let keys = try store.ownerKeys()
        if options.json {
            let infos = keys.map { key in
                KeyInfo(id: String(key.id), label: key.label, kind: key.isAdmin ? .admin : .limited, maxLive: key.limits.maxLive,
                        maxDurationSeconds: key.limits.maxDurationSeconds.map { Int($0) }, createRatePerHour: key.limits.createsPerHour,
                        createdAt: Date(timeIntervalSince1970: Double(key.createdAt) / 1000),
                        lastUsedAt: key.lastUsedAt.map { Date(timeIntervalSince1970: Double($0) / 1000) },
                        revokedAt: key.revokedAt.map { Date(timeIntervalSince1970: Double($0) / 1000) }, liveShares: key.liveShares)
            }
            try printJSON(KeyList(keys: infos))
            return 0
        }
        print("ID    KIND     LIVE  LIMITS                          CREATED               LAST USED             LABEL")
        for key in keys {
            var limits: [String] = []
            if let maxLive = key.limits.maxLive { limits.append("\(maxLive) live") }
            if let duration = key.limits.maxDurationSeconds { limits.append("\(duration) s") }
            if let rate = key.limits.createsPerHour { limits.append("\(rate)/h") }
            let kind = key.isRevoked ? "revoked" : key.isAdmin ? "admin" : "limited"
            let used = key.lastUsedAt.map { RFC3339.format(millis: $0) } ?? "never"
            print("\(pad(String(key.id), 5)) \(pad(kind, 8)) \(pad(String(key.liveShares), 5)) \(pad(limits.isEmpty ? "-" : limits.joined(separator: ", "), 31)) \(pad(RFC3339.format(millis: key.createdAt), 21)) \(pad(used, 21)) \(key.label)")
        }
        return 0
    }

    static func keysRevoke(_ options: CommonOptions, id text: String) throws -> Int32 {
        guard let id = Int64(text), id > 0 else { throw CLIError("a key id is a number (flare keys list shows them)") }
        let store = try openStore(options)
        guard let key = try store.ownerKey(id: id) else { throw CLIError("no key \(id) (flare keys list shows them)") }
        if try store.revokeOwnerKey(id: id, at: SystemClock().now()) {
            print("key \(id) (\(key.label)) revoked; flared stops its \(try store.ownerKeys().first { $0.id == id }?.liveShares ?? 0) live shares, armed check-ins and queued mail within a second (at its next start if it is not running)")
        } else {
            print("key \(id) (\(key.label)) was already revoked")
        }
        return 0
    }

    static func keysWebhook(_ options: CommonOptions, id: String, url: String?) throws -> Int32 {
        let client = try ownerClient(options)
        if options.switches.contains("--remove") {
            guard url == nil else { throw CLIError("either a URL or --remove, not both") }
            try call("cannot remove the webhook of key \(id)") { () async throws(FlareClientError) in try await client.removeWebhook(keyID: id) }
            print("key \(id): no webhook; events already waiting for it are dropped")
            return 0
        }
        guard let url else { throw CLIError("missing the webhook URL (or --remove) (see flare --help)") }
        let created = try call("cannot set the webhook of key \(id)") { () async throws(FlareClientError) in
            try await client.setWebhook(keyID: id, url: url)
        }
        if options.json { try printJSON(created) } else {
            print("key \(id): events go to \(created.url)")
            print("signing secret (shown once; keep it with the receiver): \(created.secret)")
            if let valid = created.previousSecretValidSeconds { print("the previous secret keeps signing too for \(valid / 3600) h") }
        }
        return 0
    }

    /// `90`, `90s`, `30m`, `2h`, `1d`: seconds.
    static func seconds(_ text: String, flag: String) throws -> Double {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        var number = Substring(text), unit = 1.0
        if let last = text.last, let scale = units[last] {
            number = number.dropLast()
            unit = scale
        }
        guard let value = Double(number), value.isFinite, value >= 0 else { throw CLIError("\(flag) needs a time such as 90s, 30m or 2h (got \(text))") }
        return value * unit
    }

    /// `--in` or `--at`, the one given.
    static func deadline(_ options: CommonOptions) throws -> (inSeconds: Double?, dueAt: Date?) {
        switch (options.flags["--in"], options.flags["--at"]) {
        case (let text?, nil): return (try seconds(text, flag: "--in"), nil)
        case (nil, let text?):
            guard let date = RFC3339.parse(text) else { throw CLIError("--at needs an RFC 3339 time such as 2026-12-02T22:00:00Z (got \(text))") }
            return (nil, date)
        case (nil, nil): throw CLIError("give the deadline: --in 2h, or --at 2026-12-02T22:00:00Z")
        default: throw CLIError("give --in or --at, not both")
        }
    }

    static func checkinStart(_ options: CommonOptions) throws -> Int32 {
        let client = try ownerClient(options)
        let (inSeconds, dueAt) = try deadline(options)
        let contacts = options.repeated["--contact"] ?? []
        guard !contacts.isEmpty else { throw CLIError("name at least one --contact ID to tell (flare contacts list)") }
        var arrive: CheckinZone?
        if let text = options.flags["--arrive"] {
            let parts = text.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard parts.count == 3, let lat = parts[0], let lon = parts[1], let radius = parts[2] else {
                throw CLIError("--arrive needs LAT,LON,RADIUS_M, e.g. 48.14,11.58,200 (got \(text))")
            }
            arrive = CheckinZone(lat: lat, lon: lon, radiusM: radius)
        }
        let grace = try options.flags["--grace"].map { Int(try seconds($0, flag: "--grace")) }
        let duration = try options.double("--duration").map { Int($0) }
        let request = CheckinRequest(dueAt: dueAt, inSeconds: inSeconds, graceSeconds: grace, contacts: contacts, message: options.flags["--message"],
                                     arrive: arrive, notifyOnArrival: options.switches.contains("--notify-on-arrival") ? true : nil,
                                     durationSeconds: duration, name: options.flags["--name"])
        let armed = try call("could not arm the check-in") { () async throws(FlareClientError) in try await client.armCheckin(request) }
        if options.json {
            try printJSON(armed)
            return 0
        }
        print("check-in \(armed.checkinID) armed: due \(RFC3339.format(armed.dueAt)); contacts are told at \(RFC3339.format(armed.firesAt)) unless you check in")
        print("check in:          flare checkin done \(armed.checkinID)")
        print("device publishes:  \(armed.mqttTopic ?? "") on \(armed.mqttURL ?? "")")
        print("                   username \(armed.mqttUsername ?? ""), password = the device token below")
        print("device token:      \(armed.deviceToken ?? "")")
        print("OwnTracks app:     flare share owntracks \(armed.shareID) --qr checkin.png   (then scan checkin.png)")
        return 0
    }

    static func checkinDone(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let after = try call("could not check in") { () async throws(FlareClientError) in try await client.checkinDone(id) }
        print(after.state == "arrived" ? "check-in \(id): arrived already; nobody was told" : "check-in \(id): done; nobody is told")
        return 0
    }

    static func checkinExtend(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let (inSeconds, dueAt) = try deadline(options)
        let moved = try call("could not move the deadline") { () async throws(FlareClientError) in
            try await client.extendCheckin(id, inSeconds: inSeconds, dueAt: dueAt)
        }
        print("check-in \(id): due \(RFC3339.format(moved.dueAt)); contacts are told at \(RFC3339.format(moved.firesAt)) unless you check in")
        print("new device token:  \(moved.deviceToken ?? "")")
        return 0
    }

    static func checkinShow(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        let checkin = try call("cannot show check-in \(id)") { () async throws(FlareClientError) in try await client.checkin(id) }
        if options.json {
            try printJSON(checkin)
            return 0
        }
        print("check-in \(checkin.checkinID): \(checkin.state)\(checkin.stateAt.map { " since \(RFC3339.format($0))" } ?? "")")
        print("due \(RFC3339.format(checkin.dueAt)), contacts told at \(RFC3339.format(checkin.firesAt)) if not checked in; share \(checkin.shareID)")
        print("contacts: \(checkin.contacts.joined(separator: ", "))")
        if let zone = checkin.arrive { print("arrival: within \(Int(zone.radiusM)) m of \(zone.lat),\(zone.lon)\(checkin.notifyOnArrival ? ", contacts told" : "")") }
        if !checkin.message.isEmpty { print("message: \(checkin.message)") }
        return 0
    }

    static func contactsAdd(_ options: CommonOptions, name: String) throws -> Int32 {
        let client = try ownerClient(options)
        let request = ContactRequest(name: name, email: options.flags["--email"], phone: options.flags["--phone"], language: options.flags["--language"])
        let contact = try call("cannot add the contact") { () async throws(FlareClientError) in try await client.createContact(request) }
        if options.json { try printJSON(contact) } else { print("contact \(contact.id): \(contact.name)") }
        return 0
    }

    static func contactsList(_ options: CommonOptions) throws -> Int32 {
        let client = try ownerClient(options)
        var limit: Int?
        if let text = options.flags["--limit"] {
            guard let parsed = Int(text), (1...ContactList.maximumLimit).contains(parsed) else {
                throw CLIError("--limit must be a whole number from 1 to \(ContactList.maximumLimit) (got \(text))")
            }
            limit = parsed
        }
        let cursor = options.flags["--cursor"]
        let page = try call("cannot list contacts") { [limit] () async throws(FlareClientError) in try await client.listContacts(limit: limit, cursor: cursor) }
        if options.json {
            try printJSON(page)
            return 0
        }
        if page.contacts.isEmpty { print(cursor == nil ? "no contacts" : "no more contacts") }
        for contact in page.contacts {
            let reach = [contact.email, contact.phone].compactMap { $0 }.joined(separator: ", ")
            print("\(contact.id)  \(contact.language.padding(toLength: 5, withPad: " ", startingAt: 0))  \(contact.name)\(reach.isEmpty ? "" : "  <\(reach)>")")
        }
        if let next = page.nextCursor { print("more: flare contacts list --cursor \(next)") }
        return 0
    }

    static func contactsRemove(_ options: CommonOptions, id: String) throws -> Int32 {
        let client = try ownerClient(options)
        try call("cannot remove contact \(id)") { () async throws(FlareClientError) in try await client.removeContact(id) }
        print("contact \(id) removed")
        return 0
    }

    /// `flare nats-issuer`: the account seed FLARE_BROKER=nats signs with, made once (owner-only file), and the public
    /// key the nodes' configuration needs. Printing it again is harmless; a new seed is never made over an old one, since
    /// nodes configured with the old key would refuse every login.
    static func natsIssuer(_ options: CommonOptions) throws -> Int32 {
        let directory = options.dataDirectory + "/nats", path = directory + "/issuer.seed"
        if !FileManager.default.fileExists(atPath: path) {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let account = NKey.newAccount()
            guard FileManager.default.createFile(atPath: path, contents: Data((account.seed + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
                throw CLIError("cannot write \(path)")
            }
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
              let seed = NKey.decodeSeed(text.trimmingCharacters(in: .whitespacesAndNewlines), kind: .account),
              let key = Ed25519.publicKey(seed: seed) else {
            throw CLIError("\(path) is not an account seed (SA…): move it away to make a new one, and reconfigure every node")
        }
        print(NKey.encodePublic(key, kind: .account))
        return 0
    }

    /// `flare token-key rotate`: the emergency stop for every token in circulation. A new key is written beside the
    /// old one, the keys' webhook secrets are sealed anew under it (they are sealed with a key derived from the token
    /// key), and only then does it replace `token.key`: a failure on the way leaves the old key and secrets as they
    /// were, and a crash between the last two steps leaves the new key in `token.key.next`, which the message names.
    static func tokenKeyRotate(_ options: CommonOptions) throws -> Int32 {
        let path = options.dataDirectory + "/token.key", next = path + ".next"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
              let old = Base64URL.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)), old.count >= 32 else {
            throw CLIError("no token key at \(path) (pass --data-dir, or start flared once to make one)")
        }
        let new = Crypto.randomBytes(32)
        let fd = open(next, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw CLIError("cannot write \(next): \(String(cString: strerror(errno)))") }
        let bytes = Array((Base64URL.encode(new) + "\n").utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0, close(fd) == 0 else {
            unlink(next)
            throw CLIError("cannot write \(next)")
        }
        let store = try openStore(options)
        let oldSealer = WebhookSecretSealer(tokenKey: old), newSealer = WebhookSecretSealer(tokenKey: new)
        let resealed: Int
        do {
            resealed = try store.resealWebhookSecrets { id, sealed in
                oldSealer.open(sealed, ownerKey: id).flatMap { newSealer.seal($0, ownerKey: id) }
            }
        } catch {
            unlink(next)
            throw CLIError("nothing changed: cannot seal the webhook secrets anew (\(error))")
        }
        guard rename(next, path) == 0 else {
            throw CLIError("the webhook secrets are sealed with the new key in \(next), but it could not replace \(path): move it there (mv \(next) \(path)) before anything else")
        }
        print("""
            token.key replaced; \(resealed) keys' webhook secrets sealed with the new key. Now, at once:
              1. restart every flared (with several instances, copy \(path) to each first): until then they sign with
                 the old key and cannot open the webhook secrets (their deliveries wait and are retried);
              2. reload the broker (kill -HUP its pid, or systemctl reload flare-broker): it disconnects every client
                 verified with the old key and refuses the old tokens;
              3. every share's device and watch tokens have stopped working: give each phone still sharing
                 new credentials (scan its OwnTracks QR code again, `flare share owntracks ID --qr sos.png`; an app
                 gets a new device token from extend), or stop the share and start a new one; re-issue watch tokens.
            """)
        return 0
    }

    private static func openStore(_ options: CommonOptions) throws -> any ShareStore {
        let location = try StoreLocation(url: options.environment["FLARE_STORE_URL"], dataDirectory: options.dataDirectory)
        if case .sqlite(let path) = location, !FileManager.default.fileExists(atPath: path) {
            throw CLIError("no Flare database at \(path): start flared once, or pass --data-dir (or set FLARE_STORE_URL)")
        }
        do { return try Stores.open(location, instance: "flare-keys") } catch {
            throw CLIError("cannot open the store (\(location)): \(error)")
        }
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    private static func positive(_ options: CommonOptions, _ flag: String) throws -> Int? {
        guard let text = options.flags[flag] else { return nil }
        guard let value = Int(text), value >= 1 else { throw CLIError("\(flag) must be a whole number of 1 or more") }
        return value
    }

    /// `--create-rate N/h` (or just N): creations per hour.
    private static func rate(_ options: CommonOptions) throws -> Int? {
        guard let text = options.flags["--create-rate"] else { return nil }
        let number = text.hasSuffix("/h") ? String(text.dropLast(2)) : text
        guard let value = Int(number), value >= 1 else { throw CLIError("--create-rate must look like 6/h (creations per hour)") }
        return value
    }
}

struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
