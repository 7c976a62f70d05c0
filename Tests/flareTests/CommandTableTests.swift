@testable import flare
import FlareTestSupport
import Foundation
import Testing

/// `flare`'s command table is the one place a command's options are declared: the parser refuses everything else, and
/// the help lists what the parser takes. The parser is probed here, not read: a flag it accepts that no help line
/// names (or the reverse) fails.
@Suite struct CommandTableTests {
    static let names = FlareCommandLine.commands.map(\.name)

    static func command(_ name: String) throws -> CommandSpec {
        try #require(FlareCommandLine.commands.first { $0.name == name })
    }

    /// As many placeholder arguments as the command needs, so that only the flags can be wrong.
    static func placeholders(_ command: CommandSpec) -> [String] {
        command.arguments.filter { !$0.optional }.map { _ in "x" }
    }

    /// Every flag any command declares, the help flags, and one nobody does: what the parser is probed with.
    static let candidateFlags = Set(FlareCommandLine.commands.flatMap { $0.options.map(\.name) } + ["--help", "-h", "--no-such-option"])

    /// Parses a whole command line as `flare` does; the usage error, if any.
    static func usageError(_ arguments: [String]) -> UsageError? {
        do throws(UsageError) {
            guard case .run(let command, let tokens) = try FlareCommandLine.request(arguments) else { return nil }
            _ = try Invocation.parse(tokens, for: command, environment: [:])
            return nil
        } catch {
            return error
        }
    }

    /// The flags the parser takes after `command`: any it does not refuse as unknown (a value flag given alone is
    /// refused for its missing value, which shows it was recognised).
    static func accepted(by command: CommandSpec) -> Set<String> {
        candidateFlags.filter { flag in
            guard let error = usageError(command.words + placeholders(command) + [flag]), case .unknownOption = error.problem else { return true }
            return false
        }
    }

    /// The flags the help's options section names (`  --duration SECONDS  …`, `  -h, --help  …`).
    static func listed(in help: String) -> Set<String> {
        let section = help.components(separatedBy: "\noptions:\n").last ?? ""
        var flags: Set<String> = []
        for line in section.split(separator: "\n") where line.hasPrefix("  -") {
            for word in line.split(separator: " ") {
                let flag = word.hasSuffix(",") ? word.dropLast() : word
                guard flag.hasPrefix("-") else { break }
                flags.insert(String(flag))
            }
        }
        return flags
    }

    @Test(arguments: names) func theHelpListsExactlyTheFlagsTheParserAccepts(_ name: String) throws {
        let command = try Self.command(name)
        let accepted = Self.accepted(by: command)
        #expect(!accepted.contains("--no-such-option"))
        #expect(accepted.isSuperset(of: ["--help", "-h"]))
        #expect(Self.listed(in: command.help) == accepted, "\(name): help \(Self.listed(in: command.help).sorted()), parser \(accepted.sorted())")
        for option in command.options {
            #expect(!option.help.isEmpty, "flare \(name) \(option.name) has no help")
            #expect(command.help.contains(option.label), "flare help \(name) lacks \(option.label)")
        }
    }

    /// An unknown flag, and every flag of another command that this one does not declare (`flare keys list --gpx x`
    /// was silently accepted when all commands shared one set of flags).
    @Test(arguments: names) func anUnknownOrMisplacedFlagIsAUsageErrorNamingTheCommand(_ name: String) throws {
        let command = try Self.command(name)
        let foreign = Self.candidateFlags.subtracting(command.options.map(\.name)).subtracting(["--help", "-h"])
        #expect(foreign.contains("--no-such-option"))
        for flag in foreign {
            let error = try #require(Self.usageError(command.words + Self.placeholders(command) + [flag, "1"]), "flare \(name) took \(flag)")
            #expect(error.command?.name == name)
            let message = FlareCommandLine.usageMessage(error)
            #expect(message.contains("unknown option \(flag)") && message.contains("usage: flare \(name)"), "\(message)")
        }
    }

    @Test func optionsAndArgumentsInAnyOrder() throws {
        let create = try Self.command("share create")
        guard case .run(let invocation) = try Invocation.parse(["--contact", "a", "--duration=600", "--json", "--contact=b", "--duration", "700"],
                                                                for: create, environment: [:]) else { Issue.record("no run"); return }
        #expect(invocation.values(ShareCommands.contact) == ["a", "b"])
        #expect(invocation.value(ShareCommands.duration) == "700")  // not repeatable: the last one counts
        #expect(invocation.isSet(SharedOptions.json) && !invocation.isSet(ShareCommands.endToEnd))

        // A share id is base64url and may begin with "-"; a number may be negative: both are arguments.
        let stop = try Self.command("share stop")
        guard case .run(let byID) = try Invocation.parse(["-AAAAAAAAAAAAAAAAAAAAA"], for: stop, environment: [:]) else { Issue.record("no run"); return }
        #expect(byID.arguments == ["-AAAAAAAAAAAAAAAAAAAAA"])
        // Help is shown even without the arguments it explains.
        guard case .help = try Invocation.parse(["--help"], for: stop, environment: [:]) else { Issue.record("no help"); return }
        #expect(Self.usageError(["share", "stop"])?.description == "missing ID")
        #expect(Self.usageError(["share", "stop", "a", "b"])?.description == "unexpected argument b")
        #expect(Self.usageError(["share", "show", "a", "--json=yes"])?.description == "--json takes no value")
        #expect(Self.usageError(["share", "create", "--duration"])?.description == "--duration needs a value (SECONDS)")
    }

    /// A PIN has no place on the command line (a shell's history keeps it): `--pin` is a switch that asks for it.
    @Test func aDevicePINIsNeverAnArgument() throws {
        #expect(Self.usageError(["devices", "add", "Anna", "--contact", "c", "--pin", "4711"])?.description == "unexpected argument 4711")
        #expect(Self.usageError(["devices", "add", "Anna", "--pin=4711"])?.description == "--pin takes no value")
        #expect(Self.usageError(["devices", "add", "Anna", "--duress-pin=9999"])?.description == "--duress-pin takes no value")
        let add = try Self.command("devices add")
        guard case .run(let invocation) = try Invocation.parse(["Anna", "--contact", "a", "--pin", "--contact=b", "--duration", "30m"], for: add,
                                                                environment: [:]) else { Issue.record("no run"); return }
        #expect(invocation.values(DevicesCommands.contact) == ["a", "b"] && invocation.isSet(DevicesCommands.pin))
        #expect(try CheckinCommands.seconds(try #require(invocation.value(DevicesCommands.duration)), flag: "--duration") == 1800)
        // A device id is base64url as a share id is, and may begin with "-" too.
        #expect(Self.usageError(["devices", "show", "-AAAAAAAAAAAAAAAAAAAAA"]) == nil)
    }

    /// Against the built binary: exit status 64 with the command's usage on stderr; `flare help COMMAND` and
    /// `flare COMMAND --help` print the same on stdout with status 0.
    @Test(arguments: names) func theBinaryRefusesAnUnknownFlagAndHelpsTheSameBothWays(_ name: String) throws {
        let flare = try BuiltProducts.path("flare")
        let words = name.split(separator: " ").map(String.init)
        let refused = try runCommand(flare, words + ["--no-such-option"], environment: [:])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("flare \(name): unknown option --no-such-option") && refused.stderr.contains("usage: flare \(name)"),
                "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
        let help = try runCommand(flare, ["help"] + words, environment: [:])
        let asked = try runCommand(flare, words + ["--help"], environment: [:])
        #expect(help.status == 0 && asked.status == 0 && help.stdout.hasPrefix("usage: flare \(name)"))
        #expect(help.stdout == asked.stdout)
    }

    @Test func docsCLINamesEveryCommand() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let docs = try String(contentsOf: root.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        for command in FlareCommandLine.commands { #expect(docs.contains("`\(command.nameAndArguments)`"), "docs/cli.md lacks \(command.name)") }
    }

    @Test func theOverviewNamesEveryCommand() throws {
        let flare = try BuiltProducts.path("flare")
        let overview = try runCommand(flare, ["help"], environment: [:])
        #expect(overview.status == 0)
        for command in FlareCommandLine.commands { #expect(overview.stdout.contains("  \(command.nameAndArguments)  "), "\(command.name)") }
        #expect(try runCommand(flare, ["--help"], environment: [:]).stdout == overview.stdout)
        #expect(try runCommand(flare, [], environment: [:]).status == 2)
        let misplaced = try runCommand(flare, ["keys", "list", "--interval", "x"], environment: [:])
        #expect(misplaced.status == 64 && misplaced.stderr.contains("unknown option --interval (an option of flare track)"), "\(misplaced.stderr)")
        let unknown = try runCommand(flare, ["share", "bogus"], environment: [:])
        #expect(unknown.status == 64 && unknown.stderr.contains("share create"), "\(unknown.stderr)")
    }
}
