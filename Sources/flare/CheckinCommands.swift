import FlareAPI
import FlareClient
import FlareCore
import Foundation

/// `flare checkin …`: "tell my contacts if I have not checked in by then", kept by the server, so that they are told
/// even when the phone is off.
enum CheckinCommands {
    static let inTime = OptionSpec.value("--in", "TIME", "the deadline, this long from now: 90s, 30m, 2h, 1d (this or --at)")
    static let at = OptionSpec.value("--at", "TIME", "the deadline, an RFC 3339 time such as 2026-12-02T22:00:00Z (this or --in)")
    static let contact = OptionSpec.value("--contact", "ID", "a contact to tell (flare contacts list); at least one", repeatable: true)
    static let grace = OptionSpec.value("--grace", "TIME", "how long past the deadline the contacts are told (default: the server's)")
    static let message = OptionSpec.value("--message", "TEXT", "what the contacts read with the alert")
    static let arrive = OptionSpec.value("--arrive", "LAT,LON,RADIUS_M", "reaching this circle checks in by itself")
    static let notifyOnArrival = OptionSpec.switch("--notify-on-arrival", "and tells the contacts that you arrived")
    static let duration = OptionSpec.value("--duration", "SECONDS", "how long the share runs on once the contacts are told")

    static let id = ArgumentSpec(name: "ID", help: "the check-in's id")
    static let all: [CommandSpec] = [
        CommandSpec("checkin start", summary: "if you have not checked in by the deadline (plus the grace), the server tells your contacts, with "
                        + "your last position, even if the phone is off",
                    details: "Give the deadline (--in or --at) and at least one --contact. It prints the credentials of the check-in's "
                        + "share, which the phone reports into.",
                    options: [inTime, at, contact, grace, message, arrive, notifyOnArrival, duration, SharedOptions.name, SharedOptions.json]
                        + SharedOptions.reachFlare, run: start),
        CommandSpec("checkin done", summary: "check in: nobody is told, the share ends", arguments: [id], options: SharedOptions.reachFlare, run: done),
        CommandSpec("checkin extend", summary: "a new deadline (and a new device token)", details: "Give the new deadline: --in or --at.",
                    arguments: [id], options: [inTime, at] + SharedOptions.reachFlare, run: extend),
        CommandSpec("checkin show", summary: "where a check-in stands", arguments: [id], options: [SharedOptions.json] + SharedOptions.reachFlare, run: show),
    ]

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
    static func deadline(_ invocation: Invocation) throws -> (inSeconds: Double?, dueAt: Date?) {
        switch (invocation.value(inTime), invocation.value(at)) {
        case (let text?, nil): return (try seconds(text, flag: "--in"), nil)
        case (nil, let text?):
            guard let date = RFC3339.parse(text) else { throw CLIError("--at needs an RFC 3339 time such as 2026-12-02T22:00:00Z (got \(text))") }
            return (nil, date)
        case (nil, nil): throw CLIError("give the deadline: --in 2h, or --at 2026-12-02T22:00:00Z")
        default: throw CLIError("give --in or --at, not both")
        }
    }

    static func start(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient()
        let (inSeconds, dueAt) = try deadline(invocation)
        let contacts = invocation.values(contact)
        guard !contacts.isEmpty else { throw CLIError("name at least one --contact ID to tell (flare contacts list)") }
        var zone: CheckinZone?
        if let text = invocation.value(arrive) {
            let parts = text.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard parts.count == 3, let lat = parts[0], let lon = parts[1], let radius = parts[2] else {
                throw CLIError("--arrive needs LAT,LON,RADIUS_M, e.g. 48.14,11.58,200 (got \(text))")
            }
            zone = CheckinZone(lat: lat, lon: lon, radiusM: radius)
        }
        let graceSeconds = try invocation.value(grace).map { Int(try seconds($0, flag: "--grace")) }
        let durationSeconds = try invocation.number(duration).map { Int($0) }
        let request = CheckinRequest(dueAt: dueAt, inSeconds: inSeconds, graceSeconds: graceSeconds, contacts: contacts, message: invocation.value(message),
                                     arrive: zone, notifyOnArrival: invocation.isSet(notifyOnArrival) ? true : nil,
                                     durationSeconds: durationSeconds, name: invocation.value(SharedOptions.name))
        let armed = try await call("could not arm the check-in") { try await client.armCheckin(request) }
        if invocation.isSet(SharedOptions.json) {
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

    static func done(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let after = try await call("could not check in") { try await client.checkinDone(id) }
        print(after.state == "arrived" ? "check-in \(id): arrived already; nobody was told" : "check-in \(id): done; nobody is told")
        return 0
    }

    static func extend(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let (inSeconds, dueAt) = try deadline(invocation)
        let moved = try await call("could not move the deadline") { try await client.extendCheckin(id, inSeconds: inSeconds, dueAt: dueAt) }
        print("check-in \(id): due \(RFC3339.format(moved.dueAt)); contacts are told at \(RFC3339.format(moved.firesAt)) unless you check in")
        print("new device token:  \(moved.deviceToken ?? "")")
        return 0
    }

    static func show(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let checkin = try await call("cannot show check-in \(id)") { try await client.checkin(id) }
        if invocation.isSet(SharedOptions.json) {
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
}
