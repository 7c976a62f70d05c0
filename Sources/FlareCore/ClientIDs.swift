/// The MQTT client ids a share's tokens may use. A client id names a session on the broker: whoever connects with one
/// takes that session over, with everything the broker queued for it. So the broker's auth plugin binds them
/// (`client_id_allowed` in broker/plugin/flare_auth.c holds the same rule):
/// - a device token: `flare-<share id>` (the phone) or `flare-<share id>-<suffix>`, the suffix not starting `watch-`;
/// - a watch token: `flare-<share id>-watch-<suffix>`;
/// - a suffix: 1–64 characters of `A-Z a-z 0-9 . _ -`.
/// Any other id is refused at CONNACK, the service accounts' (`flared`, `flared-a`, `<id>-epoch`) above all, and so
/// is an empty id (the broker would assign one). Everything Flare hands out follows the rule.
public enum ClientIDs {
    static let prefix = "flare-"
    static let watchPrefix = "watch-"

    /// The phone's own id (the OwnTracks configuration's `clientId`), or another device's of the share with `suffix`.
    public static func device(_ share: ShareID, suffix: String? = nil) -> String {
        prefix + share.rawValue + (suffix.map { "-" + $0 } ?? "")
    }

    /// What every watcher's id of the share starts with; the integrator adds a suffix of its own.
    public static func watcherPrefix(_ share: ShareID) -> String { prefix + share.rawValue + "-" + watchPrefix }

    public static func watcher(_ share: ShareID, suffix: String) -> String { watcherPrefix(share) + suffix }

    /// A fresh suffix: 8 random characters, for a client that wants a session of its own each run.
    public static func randomSuffix() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<8).map { _ in alphabet.randomElement()! })
    }

    /// Whether an id is of the form share tokens use: a service account must not take one (a phone would take its
    /// session back).
    public static func isTokenForm(_ id: String) -> Bool { id.hasPrefix(prefix) }

    /// Whether `id` has a watcher's form (`flare-<share id>-watch-…`, of any share).
    public static func isWatcherForm(_ id: String) -> Bool {
        guard id.hasPrefix(prefix) else { return false }
        let rest = id.utf8.dropFirst(prefix.utf8.count + 22)
        return rest.starts(with: ("-" + watchPrefix).utf8)
    }

    /// Whether a token of `share` with `role` may connect as `id`: the rule above, the same as the broker plugin's
    /// `client_id_allowed` (the NATS auth callout applies it here).
    public static func isAllowed(_ id: String, share: ShareID, role: ShareToken.Role) -> Bool {
        let own = prefix + share.rawValue
        guard id.hasPrefix(own) else { return false }
        let rest = id.utf8.dropFirst(own.utf8.count)
        if rest.isEmpty { return role == .device }
        guard rest.first == UInt8(ascii: "-") else { return false }
        let suffix = rest.dropFirst()
        let isWatcher = suffix.starts(with: watchPrefix.utf8)
        switch role {
        case .device: return !isWatcher && isSuffix(suffix)
        case .watch: return isWatcher && isSuffix(suffix.dropFirst(watchPrefix.utf8.count))
        }
    }

    private static func isSuffix(_ text: Substring.UTF8View) -> Bool {
        guard (1...64).contains(text.count) else { return false }
        return text.allSatisfy { c in
            (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == 0x2E || c == 0x5F || c == 0x2D
        }
    }
}
