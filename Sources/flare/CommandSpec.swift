/// One command of `flare`, declared once: its name, what it does, the arguments and options it takes, and what runs.
/// The parser (`Invocation`), the help (`CommandSpec+Help.swift`) and the usage errors all come from this value, so an
/// option cannot be accepted without being documented, nor accepted by a command that does not declare it.
struct CommandSpec: Sendable {
    /// The words that name it, as typed: `share create`, `track`.
    let name: String
    /// One line for `flare help`.
    let summary: String
    /// What else `flare help COMMAND` says: what it needs, what it prints, what to watch for.
    let details: String
    let arguments: [ArgumentSpec]
    let options: [OptionSpec]
    /// Returns the exit status. Commands that ask flared await its answers; `track` and `bench` block the thread they
    /// run on (their loops sleep, libmosquitto calls back on its own threads), which harms nothing: `flare` runs one
    /// command and nothing else.
    let run: @Sendable (Invocation) async throws -> Int32

    init(_ name: String, summary: String, details: String = "", arguments: [ArgumentSpec] = [], options: [OptionSpec],
         run: @escaping @Sendable (Invocation) async throws -> Int32) {
        precondition(Set(options.map(\.name)).count == options.count, "\(name) declares an option twice")
        self.name = name
        self.summary = summary
        self.details = details
        self.arguments = arguments
        self.options = options
        self.run = run
    }

    var words: [String] { name.split(separator: " ").map(String.init) }

    func option(named name: String) -> OptionSpec? { options.first { $0.name == name } }

    /// `share withdraw ID LINK_ID`: how `flare help` lists it.
    var nameAndArguments: String { ([name] + arguments.map(\.label)).joined(separator: " ") }
}

/// A flag: `--duration SECONDS` (with a value) or `--json` (a switch).
struct OptionSpec: Sendable {
    let name: String
    /// What the value is, as the help shows it (`SECONDS`); nil for a switch.
    let valueName: String?
    let help: String
    /// May be given more than once (`--contact A --contact B`), each value kept in order; any other flag given twice
    /// keeps its last value, as before the table existed.
    let repeatable: Bool

    static func value(_ name: String, _ valueName: String, _ help: String, repeatable: Bool = false) -> OptionSpec {
        OptionSpec(name: name, valueName: valueName, help: help, repeatable: repeatable)
    }

    static func `switch`(_ name: String, _ help: String) -> OptionSpec {
        OptionSpec(name: name, valueName: nil, help: help, repeatable: false)
    }

    var takesValue: Bool { valueName != nil }

    /// `--duration SECONDS`, `--json`.
    var label: String { valueName.map { "\(name) \($0)" } ?? name }
}

/// A positional argument: `ID` in `flare share show ID`.
struct ArgumentSpec: Sendable {
    let name: String
    let help: String
    var optional = false

    /// `ID`, or `[URL]` when it may be left out.
    var label: String { optional ? "[\(name)]" : name }
}
