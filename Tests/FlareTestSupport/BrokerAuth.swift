import Foundation
import Synchronization

/// A test broker that authenticates like Flare's: the flare_auth plugin (built from broker/plugin/ if needed)
/// verifying share tokens signed with the key in `tokenKeyPath`, and service accounts in a mosquitto password
/// file with the repository's broker/acl.in.
public struct BrokerAuth: Sendable {
    public var tokenKeyPath: String
    /// username → password, e.g. ["flared": "…"].
    public var serviceAccounts: [String: String]
    /// The plugin's per-share publish bound, "RATE/BURST" (its default when nil).
    public var fixRate: String?

    public init(tokenKeyPath: String, serviceAccounts: [String: String], fixRate: String? = nil) {
        self.tokenKeyPath = tokenKeyPath
        self.serviceAccounts = serviceAccounts
        self.fixRate = fixRate
    }

    func configLines(in directory: URL) throws -> [String] {
        let passwordFile = directory.appendingPathComponent("passwd")
        let plain = serviceAccounts.map { "\($0.key):\($0.value)\n" }.joined()
        try plain.write(to: passwordFile, atomically: true, encoding: .utf8)
        // -U hashes the file in place: no password on a command line.
        let hashed = try runCommand("/usr/bin/mosquitto_passwd", ["-U", passwordFile.path])
        guard hashed.status == 0 else { throw TestSupportError("mosquitto_passwd -U failed: \(hashed.stderr)") }
        let aclFile = directory.appendingPathComponent("acl")
        try FileManager.default.copyItem(at: AuthPlugin.repositoryRoot.appendingPathComponent("broker/acl.in"), to: aclFile)
        return [
            "allow_anonymous false",
            "plugin \(try AuthPlugin.path())",
            "plugin_opt_token_key_file \(tokenKeyPath)",
            "plugin_opt_revocations_file \(directory.appendingPathComponent("revocations").path)",
            "plugin_opt_control_user flared",
        ] + (fixRate.map { ["plugin_opt_fix_rate \($0)"] } ?? []) + [
            "password_file \(passwordFile.path)",
            "acl_file \(aclFile.path)",
            "log_type notice",
        ]
    }
}

/// The built broker plugin, .build/broker/flare_auth.so (what `make plugin` makes). `swift test` on its own
/// builds it with the same flags when it is missing or older than its source.
public enum AuthPlugin {
    public static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    private static let building = Mutex(false)

    public static func path() throws -> String {
        try building.withLock { _ in
            let source = repositoryRoot.appendingPathComponent("broker/plugin/flare_auth.c").path
            let output = repositoryRoot.appendingPathComponent(".build/broker/flare_auth.so").path
            let files = FileManager.default
            if let built = (try? files.attributesOfItem(atPath: output))?[.modificationDate] as? Date,
               let written = (try? files.attributesOfItem(atPath: source))?[.modificationDate] as? Date,
               built >= written {
                return output
            }
            try files.createDirectory(atPath: (output as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let temporary = output + ".\(getpid()).tmp"
            let flags = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-fstack-protector-strong",
                         "-D_FORTIFY_SOURCE=2", "-O2", "-fPIC", "-shared"]
            let result = try runCommand("/usr/bin/cc", flags + ["-o", temporary, source, "-lcrypto"], timeout: .seconds(120))
            guard result.status == 0 else { throw TestSupportError("building the broker plugin failed:\n\(result.stderr)") }
            guard rename(temporary, output) == 0 else { throw TestSupportError("cannot move the plugin into \(output)") }
            return output
        }
    }
}
