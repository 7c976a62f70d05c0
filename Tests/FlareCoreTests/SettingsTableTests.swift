import FlareCore
import Foundation
import Testing
import FlareSettings

/// Every setting in one table: what the scripts and the command line read is declared (in `FlaredSettings.all` when
/// flared reads it, in `FlaredSettings.readElsewhere` otherwise), and docs/configuration.md has a row for each.
@Suite struct SettingsTableTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let declared = Set(FlaredSettings.all.map(\.name) + FlaredSettings.readElsewhere.map(\.name) + [Configuration.fileSettingName])

    static func names(in relativePath: String) throws -> Set<String> {
        let text = try String(contentsOf: root.appendingPathComponent(relativePath), encoding: .utf8)
        let pattern = try NSRegularExpression(pattern: "FLARE_[A-Z][A-Z0-9_]*")
        let range = NSRange(text.startIndex..., in: text)
        return Set(pattern.matches(in: text, range: range).compactMap { Range($0.range, in: text).map { String(text[$0]) } })
    }

    /// The command line's sources, every file of them: a command added in a new file is read too. The benchmarks' own
    /// plumbing (`flare bench`, not for users) is left out, as docs/configuration.md says.
    static let commandLineSources = ((try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Sources/flare").path)) ?? [])
        .filter { $0.hasSuffix(".swift") && !$0.hasSuffix("Bench.swift") }.sorted().map { "Sources/flare/" + $0 }

    @Test(arguments: ["scripts/broker.sh", "scripts/run.sh", "scripts/nats-cluster.sh", "scripts/postgres.sh", "scripts/swift-test.py", "Makefile"]
                     + commandLineSources)
    func everySettingAProgramReadsIsDeclared(_ file: String) throws {
        #expect(Self.commandLineSources.count > 10, "the command line's sources were not found")
        let undeclared = try Self.names(in: file).subtracting(Self.declared)
        #expect(undeclared.isEmpty, "\(file) reads \(undeclared.sorted()), which no table declares")
    }

    @Test func docsConfigurationHasOneRowPerSetting() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let rows = text.split(separator: "\n").filter { $0.hasPrefix("| `FLARE_") }
            .compactMap { $0.dropFirst(3).split(separator: "`").first.map(String.init) }
        #expect(Set(rows) == Self.declared, "missing: \(Self.declared.subtracting(rows).sorted()); not declared: \(Set(rows).subtracting(Self.declared).sorted())")
        #expect(rows.count == Set(rows).count, "a setting has two rows")
    }

    @Test func helpListsTheOthersApartAndPrintConfigShowsFlaredsOnly() throws {
        let help = FlaredSettings.helpText
        let apart = try #require(help.range(of: "Read by other programs, not by flared"))
        for setting in FlaredSettings.readElsewhere {
            #expect(help.range(of: setting.name).map { $0.lowerBound > apart.lowerBound } == true, "\(setting.name)")
        }
        let printed = try Configuration(settings: FlaredSettings.all, arguments: [], environment: [:], readFile: { _ in "" }).printed
        for setting in FlaredSettings.readElsewhere { #expect(!printed.contains(setting.name), "\(setting.name)") }
        for setting in FlaredSettings.all { #expect(printed.contains(setting.name + "="), "\(setting.name)") }
    }
}
