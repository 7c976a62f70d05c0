import Foundation

/// `flare`'s commands, in the order `flare help` lists them, and what turns a command line into a run of one of them:
/// the command's words come first, then its arguments and options in any order.
///
/// Exit statuses: what the command returns (0 on success); 1 when it fails (`CLIError`, a message on stderr);
/// 64 (EX_USAGE) when the command line does not fit the table, with the command's usage on stderr; 2 for `flare` alone.
enum FlareCommandLine {
    static let groups: [(title: String, commands: [CommandSpec])] = [
        ("shares", ShareCommands.all),
        ("owner keys", KeysCommands.all),
        ("contacts", ContactsCommands.all),
        ("devices", DevicesCommands.all),
        ("check-ins", CheckinCommands.all),
        ("trackers", [TrackCommand.spec]),
        ("flared's secrets", SecretCommands.all),
        ("benchmarks (make bench)", Bench.all),
    ]
    static let commands = groups.flatMap(\.commands)

    static func run(_ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) async -> Int32 {
        do {
            switch try request(arguments) {
            case .overview(let status, let group):
                print(overview(group), terminator: "")
                return status
            case .help(let command):
                print(command.help, terminator: "")
                return 0
            case .run(let command, let tokens):
                switch try Invocation.parse(tokens, for: command, environment: environment) {
                case .help:
                    print(command.help, terminator: "")
                    return 0
                case .run(let invocation):
                    return try await command.run(invocation)
                }
            }
        } catch let error as UsageError {
            FileHandle.standardError.write(Data(usageMessage(error).utf8))
            return 64
        } catch {
            FileHandle.standardError.write(Data("flare: \(error)\n".utf8))
            return 1
        }
    }

    enum Request {
        /// `flare`, `flare --help`, `flare help`, or `flare help GROUP`: the list of commands, and the exit status.
        case overview(status: Int32, group: String?)
        case help(CommandSpec)
        /// The command and what follows its words.
        case run(CommandSpec, [String])
    }

    static func request(_ arguments: [String]) throws(UsageError) -> Request {
        guard let first = arguments.first else { return .overview(status: 2, group: nil) }
        if first == "--help" || first == "-h" { return .overview(status: 0, group: nil) }
        if first == "help" {
            let words = Array(arguments.dropFirst())
            if words.isEmpty { return .overview(status: 0, group: nil) }
            if let command = commands.first(where: { $0.words == words }) { return .help(command) }
            if words.count == 1, isGroup(words[0]) { return .overview(status: 0, group: words[0]) }
            throw UsageError(nil, "no command \(words.joined(separator: " ")) (flare help lists them)")
        }
        guard !Invocation.isOption(first) else { throw UsageError(nil, "the command comes first: flare COMMAND [ARGUMENTS] [OPTIONS]") }
        // The longest command whose words begin the line: `share create`, `track`.
        let matching = commands.filter { arguments.starts(with: $0.words) }
        if let command = matching.max(by: { $0.words.count < $1.words.count }) {
            return .run(command, Array(arguments.dropFirst(command.words.count)))
        }
        if isGroup(first) {
            let given = arguments.dropFirst().first.map { "no command \(first) \($0)" } ?? "flare \(first) needs a command"
            throw UsageError(nil, "\(given); the \(first) commands:\n" + list(commands.filter { $0.words.first == first }))
        }
        throw UsageError(nil, "no command \(first) (flare help lists them)")
    }

    static func isGroup(_ word: String) -> Bool { commands.contains { $0.words.count > 1 && $0.words[0] == word } }

    /// The message, then the usage of the command it is about (or where to look).
    static func usageMessage(_ error: UsageError) -> String {
        guard let command = error.command else { return "flare: \(error)" + (error.description.hasSuffix("\n") ? "" : "\n") }
        var text = "flare \(command.name): \(error)"
        if case .unknownOption(let name) = error.problem {
            let owners = commands.filter { $0.option(named: name) != nil }.map { "flare \($0.name)" }
            // Another command's flag: say which commands take it, the one meant among them.
            if !owners.isEmpty { text += " (an option of \(owners.prefix(3).joined(separator: ", "))\(owners.count > 3 ? ", …" : ""))" }
        }
        return text + "\n" + command.usage + "\n(flare help \(command.name): each option explained)\n"
    }

    /// `flare help`: every command with its arguments and what it does; `flare help GROUP`: one group's.
    static func overview(_ group: String?) -> String {
        var text = """
            flare: Flare's command-line tool.

            usage: flare COMMAND [ARGUMENTS] [OPTIONS]
                   flare help COMMAND    (or flare COMMAND --help): its arguments and every option

            """
        for (title, members) in groups {
            let shown = members.filter { group == nil || $0.words.first == group }
            if !shown.isEmpty { text += "\n\(title):\n" + list(shown) }
        }
        return text + "\ncommands that reach a running flared take:\n" + CommandSpec.table(SharedOptions.reachFlare.map { ($0.label, $0.help) })
    }

    static func list(_ commands: [CommandSpec]) -> String {
        CommandSpec.table(commands.map { ($0.nameAndArguments, $0.summary) }, column: CommandSpec.nameColumn(Self.commands.map(\.nameAndArguments)))
    }
}

/// A command that could not do what it was asked: exit status 1 and the message on stderr.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
