import FlareCore
import FlareCrypto
import FlareDaemonSettings
import FlareStore
import Foundation
import FlareSystem
import FlareCodec
import FlareSettings

/// Files `flared` keeps in its data directory, created on first start with owner-only permissions.
enum DataDirectory {
    static func prepare(_ path: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw Configuration.ConfigurationError("cannot create FLARE_DATA_DIR \(path): \(error.localizedDescription)")
        }
        guard FileManager.default.isWritableFile(atPath: path) else {
            throw Configuration.ConfigurationError("FLARE_DATA_DIR \(path) is not writable")
        }
    }

    /// The HS256 key that signs device and watch tokens (shared with the broker's auth plugin).
    static func tokenKey(in directory: String, logger: Logger) throws -> [UInt8] {
        let path = directory + "/token.key"
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            guard let key = Base64URL.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)), key.count >= 32 else {
                throw Configuration.ConfigurationError("\(path) is not a valid token key (32+ bytes, base64url); move it away to make a new one")
            }
            return key
        }
        let key = Crypto.randomBytes(32)
        try writeSecretFile(path, Base64URL.encode(key) + "\n")
        logger.info("created the token signing key \(path)")
        return key
    }

    /// On first start there is no owner key: make one and leave it for the operator in owner.key.
    static func ensureOwnerKey(in directory: String, store: any ShareStore, clock: any Clock, logger: Logger) throws {
        if let version = store.upgradedFromSchema, version < 7 { try sayKeysAreAdmin(store: store, logger: logger) }
        guard try store.ownerKeyCount() == 0 else { return }
        let key = OwnerKey.generate()
        let path = directory + "/owner.key"
        try writeSecretFile(path, key + "\n")
        try store.insertOwnerKey(hash: SecretHash(of: key), label: "first start", createdAt: clock.now())
        logger.info("created an owner key; it is in \(path) (use it as Authorization: Bearer, or with `flare share create`)")
    }

    /// Keys made before keys owned shares could read and control every share, and still can (admin keys): for
    /// phones, limited keys should replace them. Said once, at the start that upgraded the store.
    private static func sayKeysAreAdmin(store: any ShareStore, logger: Logger) throws {
        let keys = try store.ownerKeys().filter { !$0.isRevoked }
        guard !keys.isEmpty else { return }
        let named = keys.map { "\($0.id) (\($0.label))" }.joined(separator: ", ")
        logger.warning("owner keys now own the shares they create; the \(keys.count) keys made before are admin keys, which see and control every share: \(named). The shares made before belong to key \(keys[0].id). Give each phone a limited key instead (`flare keys create --label PHONE --max-live 1 --max-duration 86400 --create-rate 6/h --enroll`) and revoke its old one (`flare keys revoke ID`)")
    }

    /// The bridge's broker login. A password given directly wins; otherwise FLARE_MQTT_PASSWORD_FILE, or the
    /// file scripts/broker.sh writes (`broker/flared.password`) when it exists. With a password and no username
    /// the username is `flared`, the service account the broker's password and ACL files know.
    static func brokerCredentials(in directory: String, username: String?, password: String?, passwordFile: String?)
        throws -> (username: String?, password: String?) {
        let username = username.flatMap { $0.isEmpty ? nil : $0 }
        if let password, !password.isEmpty { return (username ?? "flared", password) }
        let path: String
        if let passwordFile, !passwordFile.isEmpty {
            path = passwordFile
        } else {
            path = directory + "/broker/flared.password"
            guard FileManager.default.fileExists(atPath: path) else { return (username, nil) }
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw Configuration.ConfigurationError("cannot read the broker password file \(path) (FLARE_MQTT_PASSWORD_FILE)")
        }
        let secret = text.split(whereSeparator: \.isNewline).first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""
        guard !secret.isEmpty else {
            throw Configuration.ConfigurationError("the broker password file \(path) is empty (FLARE_MQTT_PASSWORD_FILE)")
        }
        return (username ?? "flared", secret)
    }

    /// With FLARE_BROKER=nats: the three passwords (flared's own login, the callout's, the system account's) and the
    /// account seed the callout signs with. All are made by whoever configures the nodes (scripts/nats-cluster.sh,
    /// `flare nats-issuer`): flared never makes them, since nodes that do not hold the same would refuse every login.
    /// A data directory of the release before, with one password for all three, still works: each missing file falls
    /// back to `password`, and the log says so (`sharedPasswords`).
    static func natsSecrets(_ settings: NATSBrokerSettings) throws -> NATSSecrets {
        func firstLine(_ path: String, _ setting: String) throws -> String {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8),
                  let line = text.split(whereSeparator: \.isNewline).first?.trimmingCharacters(in: .whitespaces), !line.isEmpty else {
                throw Configuration.ConfigurationError("cannot read \(path) (\(setting)); scripts/nats-cluster.sh writes it with the nodes' configuration")
            }
            return line
        }
        let password = try firstLine(settings.passwordFile, "FLARE_NATS_PASSWORD_FILE")
        var shared: [String] = []
        func own(_ path: String, _ setting: String) throws -> String {
            guard FileManager.default.fileExists(atPath: path) else {
                shared.append(setting)
                return password
            }
            return try firstLine(path, setting)
        }
        let callout = try own(settings.calloutPasswordFile, "FLARE_NATS_CALLOUT_PASSWORD_FILE")
        let system = try own(settings.systemPasswordFile, "FLARE_NATS_SYSTEM_PASSWORD_FILE")
        guard let seed = NKey.decodeSeed(try firstLine(settings.issuerSeedFile, "FLARE_NATS_ISSUER_SEED_FILE"), kind: .account) else {
            throw Configuration.ConfigurationError("\(settings.issuerSeedFile) is not an account seed (SA…; `flare nats-issuer` makes one)")
        }
        return NATSSecrets(password: password, calloutPassword: callout, systemPassword: system, issuerSeed: seed, sharedPasswords: shared)
    }

    struct NATSSecrets {
        let password: String
        let calloutPassword: String
        let systemPassword: String
        let issuerSeed: [UInt8]
        /// The settings whose file was missing, so that flared's own password stood in (a data directory of the release
        /// before): one password then serves logins that should each have their own.
        let sharedPasswords: [String]
    }

    static func writeSecretFile(_ path: String, _ contents: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(contents.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw Configuration.ConfigurationError("cannot write \(path)")
        }
    }
}
