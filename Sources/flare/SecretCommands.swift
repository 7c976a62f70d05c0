import FlareCore
import FlareCrypto
import FlareStore
import Foundation
import FlareCodec

/// The secrets flared runs with, made or replaced on the machine that holds its data directory: no running server is
/// needed, and none of them crosses the network.
enum SecretCommands {
    static let all: [CommandSpec] = [
        CommandSpec("webhook-secret", summary: "a new secret for FLARE_WEBHOOK_SECRET", options: [], run: webhookSecret),
        CommandSpec("nats-issuer", summary: "FLARE_BROKER=nats: the public key of the account flared signs the callout's answers with",
                    details: "The seed is DATA_DIR/nats/issuer.seed, made if missing (never over an old one). Every node's "
                        + "auth_callout { issuer } names the key printed.",
                    options: [SharedOptions.dataDirectory], run: natsIssuer),
        CommandSpec("token-key rotate", summary: "a new token.key: the emergency stop for every device and watch token",
                    details: "The keys' webhook secrets are sealed anew under it; it says what to do next (restart flared, reload the broker, "
                        + "new credentials for the phones).",
                    options: SharedOptions.openStore, run: tokenKeyRotate),
    ]

    static func webhookSecret(_ invocation: Invocation) async throws -> Int32 {
        print(WebhookSecret.generate().text)
        return 0
    }

    /// `flare nats-issuer`: the account seed FLARE_BROKER=nats signs with, made once (owner-only file), and the public
    /// key the nodes' configuration needs. Printing it again is harmless; a new seed is never made over an old one, since
    /// nodes configured with the old key would refuse every login.
    static func natsIssuer(_ invocation: Invocation) async throws -> Int32 {
        let directory = invocation.dataDirectory + "/nats", path = directory + "/issuer.seed"
        if !FileManager.default.fileExists(atPath: path) {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let account = NKey.newAccount()
            guard FileManager.default.createFile(atPath: path, contents: Data((account.seed + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
                throw CLIError("cannot write \(path)")
            }
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
              let seed = NKey.decodeSeed(text.trimmingCharacters(in: .whitespacesAndNewlines), kind: .account),
              let key = Ed25519.publicKey(seed: seed) else {
            throw CLIError("\(path) is not an account seed (SA…): move it away to make a new one, and reconfigure every node")
        }
        print(NKey.encodePublic(key, kind: .account))
        return 0
    }

    /// `flare token-key rotate`: the emergency stop for every token in circulation. A new key is written beside the
    /// old one, the keys' webhook secrets are sealed anew under it (they are sealed with a key derived from the token
    /// key), and only then does it replace `token.key`: a failure on the way leaves the old key and secrets as they
    /// were, and a crash between the last two steps leaves the new key in `token.key.next`, which the message names.
    static func tokenKeyRotate(_ invocation: Invocation) async throws -> Int32 {
        let path = invocation.dataDirectory + "/token.key", next = path + ".next"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
              let old = Base64URL.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)), old.count >= 32 else {
            throw CLIError("no token key at \(path) (pass --data-dir, or start flared once to make one)")
        }
        let new = Crypto.randomBytes(32)
        let fd = open(next, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw CLIError("cannot write \(next): \(String(cString: strerror(errno)))") }
        let bytes = Array((Base64URL.encode(new) + "\n").utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0, close(fd) == 0 else {
            unlink(next)
            throw CLIError("cannot write \(next)")
        }
        let store = try invocation.openStore()
        let oldSealer = WebhookSecretSealer(tokenKey: old), newSealer = WebhookSecretSealer(tokenKey: new)
        let resealed: Int
        do {
            resealed = try store.resealWebhookSecrets { id, sealed in
                oldSealer.open(sealed, ownerKey: id).flatMap { newSealer.seal($0, ownerKey: id) }
            }
        } catch {
            unlink(next)
            throw CLIError("nothing changed: cannot seal the webhook secrets anew (\(error))")
        }
        guard rename(next, path) == 0 else {
            throw CLIError("the webhook secrets are sealed with the new key in \(next), but it could not replace \(path): move it there (mv \(next) \(path)) before anything else")
        }
        print("""
            token.key replaced; \(resealed) keys' webhook secrets sealed with the new key. Now, at once:
              1. restart every flared (with several instances, copy \(path) to each first): until then they sign with
                 the old key and cannot open the webhook secrets (their deliveries wait and are retried);
              2. reload the broker (kill -HUP its pid, or systemctl reload flare-broker): it disconnects every client
                 verified with the old key and refuses the old tokens;
              3. every share's device and watch tokens have stopped working: give each phone still sharing
                 new credentials (scan its OwnTracks QR code again, `flare share owntracks ID --qr sos.png`; an app
                 gets a new device token from extend), or stop the share and start a new one; re-issue watch tokens.
            """)
        return 0
    }
}
