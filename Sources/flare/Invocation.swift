import FlareCore

/// What was given to one command on the command line, checked against its `CommandSpec`: its arguments in order, and
/// the values of the options it declares. A command reads its options through their specs, never by a name typed
/// again, and reading one it does not declare stops a debug build (every test runs one).
struct Invocation: Sendable {
    let command: CommandSpec
    let arguments: [String]
    let environment: [String: String]
    private let values: [String: [String]]
    private let switches: Set<String>

    /// What a command line asks of `command`: to run it, or to show its help.
    enum Request: Sendable {
        case run(Invocation)
        case help
    }

    /// Parses `tokens` (what follows the command's words). Options and arguments may come in any order; a value goes
    /// after its flag (`--duration 600`) or joined to it (`--duration=600`).
    static func parse(_ tokens: [String], for command: CommandSpec, environment: [String: String]) throws(UsageError) -> Request {
        var arguments: [String] = []
        var values: [String: [String]] = [:]
        var switches: Set<String> = []
        var helpAsked = false
        var index = 0
        while index < tokens.count {
            let token = tokens[index]
            index += 1
            guard isOption(token) else {
                arguments.append(token)
                continue
            }
            var name = token, joinedValue: String?
            if token.hasPrefix("--"), let equals = token.firstIndex(of: "=") {
                name = String(token[..<equals])
                joinedValue = String(token[token.index(after: equals)...])
            }
            if name == "--help" || name == "-h" {
                helpAsked = true
                continue
            }
            guard let option = command.option(named: name) else { throw UsageError(command, .unknownOption(name)) }
            guard option.takesValue else {
                guard joinedValue == nil else { throw UsageError(command, "\(name) takes no value") }
                switches.insert(name)
                continue
            }
            let value: String
            if let joinedValue {
                value = joinedValue
            } else {
                guard index < tokens.count else { throw UsageError(command, "\(name) needs a value (\(option.valueName ?? ""))") }
                value = tokens[index]
                index += 1
            }
            values[name] = option.repeatable ? (values[name] ?? []) + [value] : [value]
        }
        // Help is shown even when the arguments it would explain are missing.
        if helpAsked { return .help }
        let required = command.arguments.filter { !$0.optional }
        if arguments.count < required.count { throw UsageError(command, "missing \(required[arguments.count].name)") }
        if arguments.count > command.arguments.count {
            throw UsageError(command, "unexpected argument \(arguments[command.arguments.count])")
        }
        return .run(Invocation(command: command, arguments: arguments, environment: environment, values: values, switches: switches))
    }

    /// A token that names an option. A share id is base64url and may itself begin with "-", and a number may be
    /// negative: both are arguments.
    static func isOption(_ token: String) -> Bool {
        token.hasPrefix("-") && token.count > 1 && Double(token) == nil && ShareID(token) == nil
    }

    /// The option's value (the last one given), or nil.
    func value(_ option: OptionSpec) -> String? {
        assertDeclared(option)
        return values[option.name]?.last
    }

    /// Every value of a repeatable option, in the order given.
    func values(_ option: OptionSpec) -> [String] {
        assertDeclared(option)
        return values[option.name] ?? []
    }

    /// Whether the switch was given.
    func isSet(_ option: OptionSpec) -> Bool {
        assertDeclared(option)
        return switches.contains(option.name)
    }

    /// The argument at `index`, if given (a required one always is).
    func argument(_ index: Int) -> String? { index < arguments.count ? arguments[index] : nil }

    private func assertDeclared(_ option: OptionSpec) {
        assert(command.option(named: option.name) != nil, "flare \(command.name) reads \(option.name) but does not declare it")
    }
}

/// A command line that does not fit the table: exit status 64 (EX_USAGE in sysexits.h), the message and the usage of
/// the command it names on stderr.
struct UsageError: Error, CustomStringConvertible {
    enum Problem {
        case unknownOption(String)
        case other(String)
    }

    /// The command whose usage to show (nil: the command itself is unknown).
    let command: CommandSpec?
    let problem: Problem

    init(_ command: CommandSpec?, _ problem: Problem) {
        self.command = command
        self.problem = problem
    }

    init(_ command: CommandSpec?, _ message: String) { self.init(command, .other(message)) }

    var description: String {
        switch problem {
        case .unknownOption(let name): return "unknown option \(name)"
        case .other(let message): return message
        }
    }
}
