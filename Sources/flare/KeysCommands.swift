import FlareAPI
import FlareCore
import FlareQR
import FlareStore
import FlareSystem
import Foundation

/// `flare keys …`: owner keys. create, list and revoke write straight into the store flared uses, through the store
/// protocol (SQLite allows the second writer; a key is usable at once), so they need no running server: they make the
/// first keys. webhook goes through flared, which checks the URL.
enum KeysCommands {
    static let label = OptionSpec.value("--label", "LABEL", "what the key is for, in flare keys list (default cli)")
    static let admin = OptionSpec.switch("--admin", "an admin key: it sees and controls every share (default: limited, it sees only its own)")
    static let maxLive = OptionSpec.value("--max-live", "N", "at most this many of its shares live at once")
    static let maxDuration = OptionSpec.value("--max-duration", "SECONDS", "its shares last at most this long")
    static let createRate = OptionSpec.value("--create-rate", "N/h", "at most this many new shares an hour")
    static let enroll = OptionSpec.switch("--enroll", "also print the link a phone opens to enrol with the key (needs FLARE_PUBLIC_URL or --server)")
    static let qr = OptionSpec.value("--qr", "FILE.png", "draw that link as a QR code for the phone to scan")
    static let enrollServer = OptionSpec.value("--server", "URL", "the server the enrolment link names when FLARE_PUBLIC_URL is not set "
                                                    + "(env FLARE_SERVER_URL; default http:// and flared's FLARE_HTTP_ADDR)")
    static let remove = OptionSpec.switch("--remove", "no webhook any more (instead of a URL)")

    static let id = ArgumentSpec(name: "ID", help: "the key's id (flare keys list)")
    static let all: [CommandSpec] = [
        CommandSpec("keys create", summary: "a new owner key, printed once (the store keeps only its hash)",
                    details: "A limited key (the default) sees only the shares it creates, within its limits.",
                    options: [label, admin, maxLive, maxDuration, createRate, enroll, qr, enrollServer] + SharedOptions.openStore, run: create),
        CommandSpec("keys list", summary: "every key: its kind, limits, last use and live shares",
                    options: [SharedOptions.json] + SharedOptions.openStore, run: list),
        CommandSpec("keys revoke", summary: "the key stops working, and its shares end", arguments: [id], options: SharedOptions.openStore, run: revoke),
        CommandSpec("keys webhook", summary: "POST the events of the key's shares to URL (Standard Webhooks), or --remove",
                    details: "Prints the signing secret once. A limited key's URL must be a public address.",
                    arguments: [id, ArgumentSpec(name: "URL", help: "where the events go", optional: true)],
                    options: [remove, SharedOptions.json] + SharedOptions.reachFlare, run: webhook),
    ]

    static func create(_ invocation: Invocation) async throws -> Int32 {
        let store = try invocation.openStore()
        let limits = KeyLimits(maxLive: try positive(invocation, maxLive), maxDurationSeconds: try positive(invocation, maxDuration).map(Int64.init),
                               createsPerHour: try rate(invocation))
        let isAdmin = invocation.isSet(admin)
        let key = OwnerKey.generate()
        let label = invocation.value(Self.label) ?? "cli"
        guard NameBounds.keyLabel.admits(label), !NameBounds.hasHiddenScalars(label) else {
            throw CLIError("--label must be text of \(NameBounds.keyLabel.description), without control or format characters")
        }
        let id = try store.insertOwnerKey(hash: SecretHash(of: key), label: label, createdAt: SystemClock().now(), admin: isAdmin, limits: limits)
        print(key)
        FileHandle.standardError.write(Data("owner key \(id) created (\(isAdmin ? "admin: it sees and controls every share" : "limited: it sees only the shares it creates")); it is shown only this once and stored only as a hash\n".utf8))
        if invocation.isSet(enroll) || invocation.value(qr) != nil {
            let publicURL = invocation.shared("FLARE_PUBLIC_URL")
            let server = publicURL.isEmpty ? try invocation.serverURL() : publicURL
            guard let url = URL(string: server), let scheme = url.scheme, ["http", "https"].contains(scheme) else {
                throw CLIError("the enrolment link needs the server's public URL: set FLARE_PUBLIC_URL (or --server) to https://…")
            }
            let link = Enrollment(server: url, key: key).link
            if invocation.isSet(enroll) { print(link) }
            if let file = invocation.value(qr) {
                let png = try QRCode(link).png()
                guard FileManager.default.createFile(atPath: file, contents: Data(png), attributes: [.posixPermissions: 0o600]) else {
                    throw CLIError("cannot write \(file)")
                }
                FileHandle.standardError.write(Data("enrolment QR code written to \(file) (it contains the key: show it to the phone, then delete it)\n".utf8))
            }
        }
        return 0
    }

    static func list(_ invocation: Invocation) async throws -> Int32 {
        let store = try invocation.openStore()
        let keys = try store.ownerKeys()
        if invocation.isSet(SharedOptions.json) {
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

    static func revoke(_ invocation: Invocation) async throws -> Int32 {
        guard let id = Int64(invocation.arguments[0]), id > 0 else { throw CLIError("a key id is a number (flare keys list shows them)") }
        let store = try invocation.openStore()
        guard let key = try store.ownerKey(id: id) else { throw CLIError("no key \(id) (flare keys list shows them)") }
        if try store.revokeOwnerKey(id: id, at: SystemClock().now()) {
            print("key \(id) (\(key.label)) revoked; flared stops its \(try store.ownerKeys().first { $0.id == id }?.liveShares ?? 0) live shares, armed check-ins and queued mail within a second (at its next start if it is not running)")
        } else {
            print("key \(id) (\(key.label)) was already revoked")
        }
        return 0
    }

    static func webhook(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0], url = invocation.argument(1)
        if invocation.isSet(remove) {
            guard url == nil else { throw CLIError("either a URL or --remove, not both") }
            try await call("cannot remove the webhook of key \(id)") { try await client.removeWebhook(keyID: id) }
            print("key \(id): no webhook; events already waiting for it are dropped")
            return 0
        }
        guard let url else { throw CLIError("missing the webhook URL (or --remove) (see flare help keys webhook)") }
        let created = try await call("cannot set the webhook of key \(id)") { try await client.setWebhook(keyID: id, url: url) }
        if invocation.isSet(SharedOptions.json) { try printJSON(created) } else {
            print("key \(id): events go to \(created.url)")
            print("signing secret (shown once; keep it with the receiver): \(created.secret)")
            if let valid = created.previousSecretValidSeconds { print("the previous secret keeps signing too for \(valid / 3600) h") }
        }
        return 0
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    private static func positive(_ invocation: Invocation, _ option: OptionSpec) throws -> Int? {
        guard let text = invocation.value(option) else { return nil }
        guard let value = Int(text), value >= 1 else { throw CLIError("\(option.name) must be a whole number of 1 or more") }
        return value
    }

    /// `--create-rate N/h` (or just N): creations per hour.
    private static func rate(_ invocation: Invocation) throws -> Int? {
        guard let text = invocation.value(createRate) else { return nil }
        let number = text.hasSuffix("/h") ? String(text.dropLast(2)) : text
        guard let value = Int(number), value >= 1 else { throw CLIError("--create-rate must look like 6/h (creations per hour)") }
        return value
    }
}
