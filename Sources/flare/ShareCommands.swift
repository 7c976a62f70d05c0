import FlareAPI
import FlareClient
import FlareCore
import FlareQR
import Foundation
import FlareCodec

/// `flare share …`: a share's life from the terminal, through flared's HTTP API with the owner key.
enum ShareCommands {
    static let duration = OptionSpec.value("--duration", "SECONDS", "how long it lasts (default: flared's FLARE_DEFAULT_DURATION_S)")
    static let newDuration = OptionSpec.value("--duration", "SECONDS", "the new expiry, this long from now (default: flared's FLARE_DEFAULT_DURATION_S)")
    static let contact = OptionSpec.value("--contact", "ID", "a personal link for this contact (flare contacts list); mailed if it has an address",
                                          repeatable: true)
    static let endToEnd = OptionSpec.switch("--e2e", "end-to-end encrypted: the key is made here, put in the link's #k= and kept in "
                                                + "$FLARE_DATA_DIR/e2e/ID.key; the server never has it (no --contact then)")
    static let state = OptionSpec.value("--state", "active|ended", "only the shares in this state")
    static let qr = OptionSpec.value("--qr", "FILE.png", "write the configuration as a QR code the app scans")
    static let otrc = OptionSpec.value("--otrc", "FILE", "write the configuration file (.otrc) the app imports")
    static let http = OptionSpec.switch("--http", "the app's HTTP mode, for where MQTT is blocked")
    static let ownTracksEndToEnd = OptionSpec.switch("--e2e", "an end-to-end encrypted share: its key is added here (the server never has it)")

    static let gpx = OptionSpec.value("--gpx", "FILE", "write the track as GPX 1.1 (Garmin BaseCamp, CalTopo, most GPS tools)")
    static let geojson = OptionSpec.value("--geojson", "FILE", "write the track as GeoJSON (QGIS, web maps)")
    static let kml = OptionSpec.value("--kml", "FILE", "write the track as KML 2.2 (Google Earth, CalTopo/SARTopo)")

    static let id = ArgumentSpec(name: "ID", help: "the share's id (flare share list)")
    static let all: [CommandSpec] = [
        CommandSpec("share create", summary: "start a share: prints the link for family, the device's credentials, and a personal link per --contact",
                    options: [duration, SharedOptions.name, contact, endToEnd, SharedOptions.json] + SharedOptions.reachFlare, run: create),
        CommandSpec("share list", summary: "shares, newest first, a page at a time",
                    options: [state, SharedOptions.limit, SharedOptions.cursor, SharedOptions.json] + SharedOptions.reachFlare, run: list),
        CommandSpec("share show", summary: "its state, expiry, and the time of its last position (never the position)", arguments: [id],
                    options: [SharedOptions.json] + SharedOptions.reachFlare, run: show),
        CommandSpec("share stop", summary: "end a share now; its link says so", arguments: [id], options: SharedOptions.reachFlare, run: stop),
        CommandSpec("share extend", summary: "same link, new expiry", arguments: [id],
                    options: [newDuration, SharedOptions.json] + SharedOptions.reachFlare, run: extend),
        CommandSpec("share links", summary: "its personal links: who opened them, their URLs", arguments: [id],
                    options: [SharedOptions.json] + SharedOptions.reachFlare, run: links),
        CommandSpec("share withdraw", summary: "withdraw one personal link; the share's other links go on",
                    arguments: [id, ArgumentSpec(name: "LINK_ID", help: "the link's id (flare share links ID)")],
                    options: SharedOptions.reachFlare, run: withdraw),
        CommandSpec("share export", summary: "the share's whole recorded track, for rescuers' tools: GPX, GeoJSON or KML files",
                    details: "Name one or more files. An ended share's track is there until its history is purged "
                        + "(FLARE_HISTORY_RETENTION_S); an end-to-end encrypted share's only on its page, which decrypts it.",
                    arguments: [id], options: [gpx, geojson, kml] + SharedOptions.reachFlare, run: export),
        CommandSpec("share owntracks", summary: "provision the OwnTracks app: a QR code to scan, a configuration file, or (neither) the link itself",
                    details: "Each of them holds the share's device token. On the phone, first allow it in OwnTracks: Settings, "
                        + "\"Allow configuration by URI and config file\".",
                    arguments: [id], options: [qr, otrc, http, ownTracksEndToEnd, SharedOptions.e2eKey] + SharedOptions.reachFlare, run: ownTracks),
    ]

    static func create(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient()
        let duration = try invocation.number(Self.duration), name = invocation.value(SharedOptions.name)
        let contacts = invocation.values(contact)
        let endToEnd = invocation.isSet(Self.endToEnd)
        if endToEnd && !contacts.isEmpty {
            throw CLIError("--e2e takes no --contact: the server mails contacts, and it never has the key their links need; send the link yourself")
        }
        let share = try await call("could not create a share") {
            try await client.createShare(duration: duration, name: name, contacts: contacts.isEmpty ? nil : contacts, endToEnd: endToEnd)
        }
        // The passphrase is made here and kept here: the link's fragment carries it to the family, and no server
        // ever receives a fragment.
        var familyLink = share.shareURL.absoluteString
        var keyFile: String?
        if endToEnd {
            let passphrase = E2EPassphrase.generate()
            keyFile = try writePassphrase(passphrase, to: invocation.passphrasePath(share.shareID))
            familyLink += "#k=" + passphrase
        }
        if invocation.isSet(SharedOptions.json) {
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

    static func links(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let list = try await call("cannot list the links of \(id)") { try await client.links(id) }
        if invocation.isSet(SharedOptions.json) {
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

    static func withdraw(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0], link = invocation.arguments[1]
        try await call("cannot withdraw link \(link)") { try await client.withdrawLink(link, of: id) }
        print("link \(link) withdrawn: its page says so; the share's other links go on")
        return 0
    }

    static func list(_ invocation: Invocation) async throws -> Int32 {
        var state: ShareState?
        if let text = invocation.value(Self.state) {
            guard let parsed = ShareState(rawValue: text) else { throw CLIError("--state must be active or ended (got \(text))") }
            state = parsed
        }
        guard let page = try await invocation.page(maximum: ShareList.maximumLimit, of: "shares", { [state] in
            try await $0.listShares(state: state, limit: $1, cursor: $2)
        }) else { return 0 }
        if page.shares.isEmpty { print(invocation.value(SharedOptions.cursor) == nil ? "no shares" : "no more shares") }
        for share in page.shares {
            let end = share.endedAt.map { "ended \(RFC3339.format($0)) (\(share.reason ?? ""))" } ?? "ends \(RFC3339.format(share.expiresAt))"
            let name = share.name.isEmpty ? "" : "  \(share.name)"
            print("\(share.shareID)  \(share.state.rawValue.padding(toLength: 6, withPad: " ", startingAt: 0))  created \(RFC3339.format(share.createdAt))  \(end)\(name)")
        }
        if let next = page.nextCursor { print("more: flare share list --cursor \(next)") }
        return 0
    }

    static func show(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let share = try await call("cannot show \(id)") { try await client.share(id) }
        if invocation.isSet(SharedOptions.json) {
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

    static func export(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let wanted = [("gpx", gpx), ("geojson", geojson), ("kml", kml)].compactMap { format, option in invocation.value(option).map { (format, $0) } }
        guard !wanted.isEmpty else { throw CLIError("name a file: --gpx FILE, --geojson FILE or --kml FILE") }
        for (format, path) in wanted {
            let data = try await call("cannot export \(id)'s track") { try await client.track(id, format: format) }
            do { try data.write(to: URL(fileURLWithPath: path)) } catch { throw CLIError("cannot write \(path): \(error.localizedDescription)") }
            print("wrote \(path) (\(format), \(data.count) bytes)")
        }
        return 0
    }

    static func stop(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let stopped = try await call("cannot stop \(id)") { try await client.stopShare(id) }
        print("share \(id) ended (\(stopped.reason))")
        return 0
    }

    static func extend(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let duration = try invocation.number(newDuration)
        let extended = try await call("cannot extend \(id)") { try await client.extendShare(id, duration: duration) }
        if invocation.isSet(SharedOptions.json) { try printJSON(extended) } else {
            print("share \(id) now ends at \(RFC3339.format(extended.expiresAt))")
        }
        return 0
    }

    /// The share's OwnTracks configuration, as a QR code image and/or an .otrc file; with neither, the
    /// `owntracks:///config?inline=…` link on stdout. All of them contain the device token.
    static func ownTracks(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let mode: OwnTracksMode = invocation.isSet(http) ? .http : .mqtt
        if invocation.isSet(ownTracksEndToEnd) { return try await ownTracksEndToEnd(invocation, id: id, client: client, mode: mode) }
        var wrote = false
        for (option, what) in [(qr, "QR code"), (otrc, "configuration")] {
            guard let file = invocation.value(option) else { continue }
            let body = try await call("cannot get the OwnTracks \(what) for \(id)") {
                option.name == qr.name ? try await client.ownTracksQRCode(id, mode: mode) : try await client.ownTracksConfigurationFile(id, mode: mode)
            }
            guard FileManager.default.createFile(atPath: file, contents: body, attributes: [.posixPermissions: 0o600]) else {
                throw CLIError("cannot write \(file)")
            }
            print("OwnTracks \(what) for share \(id)\(mode == .http ? " (HTTP mode)" : "") written to \(file) (it contains the share's device token)")
            wrote = true
        }
        if !wrote {
            let link = try await call("cannot get the OwnTracks link for \(id)") { try await client.ownTracksLink(id, mode: mode) }
            print(link.absoluteString)
        }
        // OwnTracks for iOS from 26.2.2 and for Android from 2.6.0 refuse a configuration by link or file until
        // this is switched on in the app, and no configuration can switch it on.
        FileHandle.standardError.write(Data("on the phone, first allow it in OwnTracks: Settings, \"Allow configuration by URI and config file\" (newer app versions refuse the import without it)\n".utf8))
        return 0
    }

    /// The OwnTracks configuration of an end-to-end encrypted share: the server's, with `encryptionKey` added here,
    /// on the owner's machine, and its QR code drawn here. The server's configuration endpoints never hold the key.
    static func ownTracksEndToEnd(_ invocation: Invocation, id: String, client: FlareClient, mode: OwnTracksMode) async throws -> Int32 {
        let passphrase = try invocation.passphrase(of: id)
        let json = Array(try await call("cannot get the OwnTracks configuration for \(id)") {
            try await client.ownTracksConfigurationEndToEnd(id, passphrase: passphrase, mode: mode)
        })
        let link = OwnTracksConfiguration.inlineURL(of: json)
        var wrote = false
        for (option, what) in [(qr, "QR code"), (otrc, "configuration")] {
            guard let file = invocation.value(option) else { continue }
            let body = option.name == qr.name ? try QRCode(link).png() : json
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
}
