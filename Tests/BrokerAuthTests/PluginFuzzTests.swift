import FlareTestSupport
import Foundation
import Testing

/// The plugin's C parsers under AddressSanitizer and UndefinedBehaviorSanitizer: mutated tokens never verify,
/// random and mangled input never misbehaves. A short run here; `scripts/fuzz-broker-plugin.sh 1000000` for more.
@Suite struct PluginFuzzTests {
    @Test func mutatedTokensNeverVerifyAndTheParsersStayWithinBounds() throws {
        let script = AuthPlugin.repositoryRoot.appendingPathComponent("scripts/fuzz-broker-plugin.sh").path
        let result = try runCommand(script, ["20000", "3"], timeout: .seconds(180))
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("0 mutated tokens verified"))
    }
}
