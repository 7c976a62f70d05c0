import FlareAPI
import FlareClient
import FlareCore
import FlareQR
import Foundation

/// `flare devices …`: standing SOS triggers for a person's phone or tracker, through flared's HTTP API with the owner
/// key. The device holds one secret, which starts its SOS and tells the contacts named here; the owner key stays here.
enum DevicesCommands {
    static let contact = OptionSpec.value("--contact", "ID", "a contact told when the SOS starts, with a personal link (flare contacts list); "
                                              + "at least one", repeatable: true)
    static let duration = OptionSpec.value("--duration", "TIME", "how long an SOS runs: 90s, 30m, 2h (default: flared's FLARE_DEFAULT_DURATION_S)")
    static let message = OptionSpec.value("--message", "TEXT", "what the contacts read with the SOS")
    static let pin = OptionSpec.switch("--pin", "ask for a PIN (4 to 12 digits) that stopping the SOS from the device needs: typed twice "
                                           + "without echo, else env FLARE_DEVICE_PIN, else a line of standard input")
    static let duressPin = OptionSpec.switch("--duress-pin", "ask for a duress PIN too (needs --pin): it answers as a stop does while the SOS "
                                                 + "goes on for the contacts, with a warning (env FLARE_DEVICE_DURESS_PIN, or the next line of standard input)")
    static let qr = OptionSpec.value("--qr", "FILE.png", "draw a setup as a QR code for the phone to scan (--qr-app says which; it holds the secret)")
    static let qrApp = OptionSpec.value("--qr-app", "APP", "the setup --qr draws: sos_page (default: the camera opens the SOS page, nothing to install) "
                                            + "or traccar_client (its server URL with the secret)")
    static let countdown = OptionSpec.value("--countdown", "SECONDS", "the SOS page's countdown after a press, with a Cancel, 0 to 10 (default 5)")
    static let escalateAfter = OptionSpec.value("--escalate-after", "SECONDS", "alert every contact again when nobody answers \"on my way\" or "
                                                    + "\"called emergency services\" this long after the SOS starts, and again at 3 times it: 0 (off) or 5 to 3600 (default 300)")
    static let secret = OptionSpec.value("--secret", "SECRET", "the device's secret, as add or secret printed it (env FLARE_DEVICE_SECRET): "
                                             + "filled into the setup here, never sent")

    static let id = ArgumentSpec(name: "ID", help: "the device's id (flare devices list)")
    static let all: [CommandSpec] = [
        CommandSpec("devices add", summary: "a standing SOS trigger for someone's phone or tracker: prints its secret, once, and each app's setup",
                    details: "Give at least one --contact. The device holds only its secret: a stolen phone exposes one person's SOS, "
                        + "not the owner key, and flare devices secret ID replaces it. PINs are never taken on the command line "
                        + "(a shell's history would keep them): --pin and --duress-pin ask for them.",
                    arguments: [ArgumentSpec(name: "NAME", help: "the person, as the contacts know them (\"Anna pressed SOS\")")],
                    options: [contact, duration, message, pin, duressPin, countdown, escalateAfter, qr, qrApp, SharedOptions.json] + SharedOptions.reachFlare,
                    run: add),
        CommandSpec("devices list", summary: "the key's devices, newest first: their SOS and when Flare last heard from each",
                    options: [SharedOptions.limit, SharedOptions.cursor, SharedOptions.json] + SharedOptions.reachFlare, run: list),
        CommandSpec("devices show", summary: "a device's contacts, PINs (whether it has them), SOS and when Flare last heard from it", arguments: [id],
                    options: [SharedOptions.json] + SharedOptions.reachFlare, run: show),
        CommandSpec("devices remove", summary: "forget a device: its secret stops working", arguments: [id], options: SharedOptions.reachFlare, run: remove),
        CommandSpec("devices secret", summary: "a new secret, printed once with each app's setup; the old one stops working at once", arguments: [id],
                    options: [qr, qrApp, SharedOptions.json] + SharedOptions.reachFlare, run: newSecret),
        CommandSpec("devices setup", summary: "what each app needs to start the SOS, and when Flare last heard from the device (the test)",
                    details: "Flare keeps only the secret's hash, so the setup shows <secret> where it goes: --secret fills it in here. "
                        + "Set the app up, let it send one position, and run this again: \"last heard\" says whether Flare heard it.",
                    arguments: [id], options: [secret, qr, qrApp, SharedOptions.json] + SharedOptions.reachFlare, run: setup),
    ]

    static func add(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient()
        let contacts = invocation.values(contact)
        guard !contacts.isEmpty else { throw CLIError("name at least one --contact ID to tell (flare contacts list)") }
        let durationSeconds = try invocation.value(duration).map { try CheckinCommands.seconds($0, flag: "--duration") }
        if invocation.isSet(duressPin) && !invocation.isSet(pin) {
            throw CLIError("--duress-pin needs --pin: the duress PIN seems to stop an SOS that the PIN really stops")
        }
        let pinText = invocation.isSet(pin) ? try readPIN("PIN to stop the SOS", from: "FLARE_DEVICE_PIN", field: "pin", invocation) : nil
        let duressText = invocation.isSet(duressPin)
            ? try readPIN("duress PIN", from: "FLARE_DEVICE_DURESS_PIN", field: "duress_pin", invocation) : nil
        var countdownSeconds: Double?
        if let text = invocation.value(countdown) {
            guard let value = Int(text), DeviceRules.countdownSeconds.contains(value) else { throw CLIError("--countdown must be 0 to 10 (seconds)") }
            countdownSeconds = Double(value)
        }
        var escalation: Double?
        if let text = invocation.value(escalateAfter) {
            guard let value = Double(text), let valid = EscalationRules.valid(value) else {
                throw CLIError("--escalate-after must be 0 (off) or a whole number of seconds from 5 to 3600")
            }
            escalation = Double(valid)
        }
        let request = DeviceRequest(name: invocation.arguments[0], contacts: contacts, durationSeconds: durationSeconds, message: invocation.value(message),
                                    pin: pinText, duressPin: duressText, countdownSeconds: countdownSeconds, escalateAfterSeconds: escalation)
        let created = try await call("cannot add the device") { try await client.createDevice(request) }
        try printIssued(created, invocation, headline: "device \(created.deviceID) added: \(created.name); its SOS tells \(created.contacts.count) "
                            + (created.contacts.count == 1 ? "contact" : "contacts"))
        return 0
    }

    static func newSecret(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let created = try await call("cannot issue a new secret for device \(id)") { try await client.newDeviceSecret(id) }
        try printIssued(created, invocation, headline: "device \(id) (\(created.name)): a new secret; the old one no longer works")
        return 0
    }

    static func setup(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        var setup = try await call("cannot read the setup of device \(id)") { try await client.deviceSetup(id) }
        if let given = invocation.value(secret) ?? invocation.environment["FLARE_DEVICE_SECRET"] { setup = filledIn(setup, secret: given) }
        if invocation.isSet(SharedOptions.json) { try printJSON(setup) } else {
            printApps(setup)
            print(heard(setup, id: id))
        }
        try writeQR(setup, invocation)
        return 0
    }

    static func list(_ invocation: Invocation) async throws -> Int32 {
        guard let page = try await invocation.page(maximum: DeviceList.maximumLimit, of: "devices", { try await $0.listDevices(limit: $1, cursor: $2) })
        else { return 0 }
        if page.devices.isEmpty {
            print(invocation.value(SharedOptions.cursor) == nil ? "no devices (flare devices add NAME --contact ID makes one)" : "no more devices")
        } else {
            print(row("ID", "SOS", "PIN", "LAST HEARD", "CONTACTS", "NAME"))
        }
        for device in page.devices {
            print(row(device.deviceID, device.sos, pins(device), device.lastHeardAt.map { RFC3339.format($0) } ?? "never", String(device.contacts.count),
                      device.name))
        }
        if let next = page.nextCursor { print("more: flare devices list --cursor \(next)") }
        return 0
    }

    static func show(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let device = try await call("cannot show device \(id)") { try await client.device(id) }
        if invocation.isSet(SharedOptions.json) {
            try printJSON(device)
            return 0
        }
        print("device \(device.deviceID): \(device.name)")
        print("  contacts   \(device.contacts.joined(separator: ", "))")
        print("  SOS lasts  \(device.durationSeconds.map { "\($0) s" } ?? "flared's default (FLARE_DEFAULT_DURATION_S)")")
        if !device.message.isEmpty { print("  message    \(device.message)") }
        print("  ladder     \(device.escalateAfterSeconds == 0 ? "off" : "everyone alerted again after \(device.escalateAfterSeconds) s and \(3 * device.escalateAfterSeconds) s without an answer")")
        print("  PIN        \(device.hasPin ? (device.hasDuressPin ? "yes, and a duress PIN" : "yes") : "none: the device stops its SOS without one")")
        print("  created    \(RFC3339.format(device.createdAt))")
        print("  last heard \(device.lastHeardAt.map { RFC3339.format($0) } ?? "never")")
        print("  SOS        \(sosLine(device))")
        return 0
    }

    static func remove(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        // Read first, to say what goes on: the share of an SOS in progress outlives its device.
        let before = try? await client.device(id)
        try await call("cannot remove device \(id)") { try await client.removeDevice(id) }
        print("device \(id) removed: its secret no longer works")
        if let before, ["live", "duress"].contains(before.sos), let share = before.sosShareID {
            print("its SOS goes on until it ends: flare share stop \(share) ends it now")
        }
        return 0
    }

    // MARK: Printing

    /// What `add` and `secret` print: the secret, once, and the setup with it filled in.
    static func printIssued(_ created: CreatedDevice, _ invocation: Invocation, headline: String) throws {
        if invocation.isSet(SharedOptions.json) { try printJSON(created) } else {
            print(headline)
            print("secret: \(created.secret)")
            print(CommandSpec.paragraph("It is shown only now (Flare keeps only its hash): put it into the device's app as below. "
                                            + "If it is lost, a new one: flare devices secret \(created.deviceID)"))
            print("")
            printApps(created.setup)
            print(CommandSpec.paragraph("Then the test: let the app send one position, and flare devices setup \(created.deviceID) "
                                            + "says when Flare last heard from the device."))
        }
        try writeQR(created.setup, invocation)
    }

    /// Each app: its name, the fields to enter in its own words, and how its SOS is pressed.
    static func printApps(_ setup: DeviceSetup) {
        for app in setup.apps {
            print("\(app.name):")
            print(CommandSpec.table(app.fields.map { ($0.label, $0.value) }), terminator: "")
            print(CommandSpec.wrap(app.sos.split(separator: " ").map(String.init), after: "  SOS: ", indent: 7))
            if app.qr != nil { print("  QR code: --qr FILE.png draws this setup for the app to scan") }
            print("")
        }
    }

    /// The test of a setup: when Flare last heard from the device, as the server counts it.
    static func heard(_ setup: DeviceSetup, id: String) -> String {
        guard let ago = setup.lastHeardSecondsAgo else {
            return "last heard: never. Set an app up, let it send one position, then run flare devices setup \(id) again."
        }
        return "last heard \(ago) s ago" + (setup.lastHeardAt.map { " (\(RFC3339.format($0)))" } ?? "")
    }

    /// The setup with the secret where the server wrote `<secret>` (it keeps only the hash).
    static func filledIn(_ setup: DeviceSetup, secret: String) -> DeviceSetup {
        let fill = { (text: String) in text.replacingOccurrences(of: "<secret>", with: secret) }
        let apps = setup.apps.map { app in
            DeviceSetup.App(app: app.app, name: app.name, fields: app.fields.map { .init(label: $0.label, value: fill($0.value)) }, sos: app.sos,
                            qr: app.qr.map(fill))
        }
        return DeviceSetup(deviceID: setup.deviceID, includesSecret: true, apps: apps, lastHeardAt: setup.lastHeardAt,
                           lastHeardSecondsAgo: setup.lastHeardSecondsAgo)
    }

    /// `--qr FILE.png`: the `qr` of the app `--qr-app` names (the SOS page by default) drawn here, owner-only, since it
    /// holds the secret.
    static func writeQR(_ setup: DeviceSetup, _ invocation: Invocation) throws {
        guard let file = invocation.value(qr) else { return }
        let wanted = invocation.value(qrApp) ?? "sos_page"
        guard let text = setup.apps.first(where: { $0.app == wanted })?.qr else {
            throw CLIError("--qr-app must be one of \(setup.apps.filter { $0.qr != nil }.map(\.app).joined(separator: ", "))")
        }
        guard setup.includesSecret, !text.contains("<secret>") else {
            throw CLIError("the QR code needs the secret, which Flare no longer has: pass --secret, "
                               + "or issue a new one with flare devices secret \(setup.deviceID) --qr \(file)")
        }
        let png = try QRCode(text).png()
        guard FileManager.default.createFile(atPath: file, contents: Data(png), attributes: [.posixPermissions: 0o600]) else {
            throw CLIError("cannot write \(file)")
        }
        FileHandle.standardError.write(Data("\(wanted) QR code written to \(file) (it holds the device's secret: show it to the phone, then delete it)\n".utf8))
    }

    static func sosLine(_ device: DeviceInfo) -> String {
        let share = device.sosShareID.map { ", share \($0) (flare share show \($0))" } ?? ""
        switch device.sos {
        case "live": return "live\(share)"
        case "duress": return "live under duress: the device was told it stopped\(share)"
        case "ended": return "ended\(share)"
        default: return "none yet"
        }
    }

    private static func readPIN(_ what: String, from variable: String, field: String, _ invocation: Invocation) throws -> String {
        let text = try SecretInput.read(what, from: variable, invocation)
        do { return try DeviceRules.validPIN(text, field: field) } catch { throw CLIError("the \(what) must be 4 to 12 digits (as typed, or in \(variable))") }
    }

    private static func pins(_ device: DeviceInfo) -> String { device.hasPin ? (device.hasDuressPin ? "pin+duress" : "pin") : "-" }

    /// One line of `list`: each column as wide as its widest value (ids are 22 characters, times 20).
    private static func row(_ id: String, _ sos: String, _ pins: String, _ heard: String, _ contacts: String, _ name: String) -> String {
        zip([id, sos, pins, heard, contacts], [22, 6, 10, 20, 8]).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
            + "  " + name
    }
}
