import FlareCore
import FlareCrypto
import FlareSQLite
import FlareStore
import FlareTestSupport
import Foundation
import Testing
import FlareCodec

/// `flare token-key rotate`, the built binary against a real SQLite store: a new token.key, the keys' webhook secrets
/// still readable (sealed anew under the new key), and what to do next said; a secret that does not open leaves
/// everything as it was.
@Suite struct TokenKeyRotationTests {
    func dataDirectory(tokenKey: [UInt8]) throws -> URL {
        let directory = try TempDirectory.make(prefix: "flare-rotate")
        try (Base64URL.encode(tokenKey) + "\n").write(to: directory.appendingPathComponent("token.key"), atomically: true, encoding: .utf8)
        return directory
    }

    func tokenKey(in directory: URL) throws -> [UInt8]? {
        Base64URL.decode(try String(contentsOf: directory.appendingPathComponent("token.key"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func rotatingKeepsTheWebhookSecretsReadableUnderTheNewKey() throws {
        let old = Crypto.randomBytes(32)
        let directory = try dataDirectory(tokenKey: old)
        let first = WebhookSecret.generate(), second = WebhookSecret.generate()
        let key: Int64
        do {
            let store = try SQLiteShareStore(path: directory.appendingPathComponent("flare.db").path)
            key = try store.insertOwnerKey(hash: SecretHash(of: "k"), label: "phone", createdAt: 1, admin: false, limits: .none)
            let sealer = WebhookSecretSealer(tokenKey: old)
            #expect(try store.setKeyWebhook(id: key, url: "https://a.example/h", sealedSecret: try #require(sealer.seal(first, ownerKey: key)), at: 1))
            #expect(try store.setKeyWebhook(id: key, url: "https://a.example/h", sealedSecret: try #require(sealer.seal(second, ownerKey: key)), at: 2))
        }
        let result = try runCommand(try BuiltProducts.path("flare"), ["token-key", "rotate", "--data-dir", directory.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("1 keys' webhook secrets sealed with the new key") && result.stdout.contains("kill -HUP")
                && result.stdout.contains("new credentials"), "\(result.stdout)")
        let new = try #require(try tokenKey(in: directory))
        #expect(new != old && new.count == 32)
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("token.key.next").path))
        let mode = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent("token.key").path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let webhook = try #require(try SQLiteShareStore(path: directory.appendingPathComponent("flare.db").path).keyWebhook(id: key))
        let sealer = WebhookSecretSealer(tokenKey: new)
        #expect(sealer.open(webhook.sealedSecret, ownerKey: key)?.text == second.text)
        #expect(sealer.open(try #require(webhook.previousSealedSecret), ownerKey: key)?.text == first.text)
        #expect(WebhookSecretSealer(tokenKey: old).open(webhook.sealedSecret, ownerKey: key) == nil)
        #expect(!result.stdout.contains(Base64URL.encode(new)) && !result.stdout.contains(second.text))
    }

    @Test func aSecretThatDoesNotOpenChangesNothing() throws {
        let old = Crypto.randomBytes(32)
        let directory = try dataDirectory(tokenKey: old)
        let store = try SQLiteShareStore(path: directory.appendingPathComponent("flare.db").path)
        let key = try store.insertOwnerKey(hash: SecretHash(of: "k"), label: "phone", createdAt: 1, admin: false, limits: .none)
        // Sealed under another key than this token.key's: it cannot be opened, so it cannot be sealed anew.
        let foreign = try #require(WebhookSecretSealer(tokenKey: Crypto.randomBytes(32)).seal(WebhookSecret.generate(), ownerKey: key))
        #expect(try store.setKeyWebhook(id: key, url: "https://a.example/h", sealedSecret: foreign, at: 1))
        let result = try runCommand(try BuiltProducts.path("flare"), ["token-key", "rotate", "--data-dir", directory.path])
        #expect(result.status != 0 && result.stderr.contains("nothing changed"), "\(result.stderr)")
        #expect(try tokenKey(in: directory) == old)
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("token.key.next").path))
        #expect(try store.keyWebhook(id: key)?.sealedSecret == foreign)
    }
}
