import FlareCore
import FlareNATS
import FlareSystem
import FlareCodec

/// Ends the connections of one login name on every node of the cluster, through the system account: what the broker
/// plugin's kick does on mosquitto. Used when a share ends before its expiry (its tokens are refused from then on by the
/// callout; this cuts the connections already open) and when the token key changes (every share token's login).
public final class NATSSessions: Sendable {
    private let system: NATSConnection
    private let logger: Logger

    /// Connects to the cluster as the system account's user (`flare-sys`).
    public init(servers: [String], password: String, instanceName: String, logger: Logger) throws(NATSError) {
        system = try NATSConnection(servers: servers, user: "flare-sys", password: password, name: "\(instanceName)-sys")
        self.logger = logger
    }

    /// Every node's connections of `user` (the name the callout gives a share's logins), ended; with `devicesOnly`, not
    /// the share's watchers (their client ids say so: `ClientIDs`). The number ended; every node answers within
    /// `window`, or its connections are not found this time.
    @discardableResult
    public func end(user: String, devicesOnly: Bool = false, window: Duration = .milliseconds(500)) throws(NATSError) -> Int {
        var query = JSONWriter()
        query.beginObject()
        query.field("user", user)
        query.field("limit", 10_000)
        query.endObject()
        var ended = 0
        for answer in try system.gather("$SYS.REQ.SERVER.PING.CONNZ", query.bytes, window: window) {
            guard let reply = try? JSONValue.parse(answer.payload),
                  let server = reply["server"]?["id"]?.stringValue, Self.isServerID(server),
                  case .array(let connections)? = reply["data"]?["connections"] else { continue }
            for connection in connections {
                guard let cid = connection["cid"]?.doubleValue, cid >= 0, cid < 1e15 else { continue }
                if devicesOnly, connection["mqtt_client"]?.stringValue.map(ClientIDs.isWatcherForm) ?? false { continue }
                var kick = JSONWriter()
                kick.beginObject()
                kick.field("cid", Int64(cid))
                kick.endObject()
                // The server acts on a request only (it answers it): a plain publish would be ignored.
                let answers = try system.gather("$SYS.REQ.SERVER.\(server).KICK", kick.bytes, window: .seconds(2), expecting: 1)
                if let answer = answers.first, (try? JSONValue.parse(answer.payload))?["error"] == nil { ended += 1 }
            }
        }
        return ended
    }

    /// Every share-token connection on every node that a token key other than `names`' verified: after `flare
    /// token-key rotate` and a restart, the tokens of the old key stop working at once, as the broker plugin's reload
    /// makes them on mosquitto. Pages through each node's connections (1,024 at a time). The number ended.
    @discardableResult
    public func endOtherKeys(than names: NATSAuthCallout.LoginNames) throws(NATSError) -> Int {
        var servers: [String] = []
        for answer in try system.gather("$SYS.REQ.SERVER.PING", [], window: .milliseconds(500)) {
            if let id = (try? JSONValue.parse(answer.payload))?["server"]?["id"]?.stringValue, Self.isServerID(id) { servers.append(id) }
        }
        var ended = 0
        for server in servers {
            var offset = 0
            while true {
                var query = JSONWriter()
                query.beginObject()
                query.field("acc", "APP"); query.field("auth", true); query.field("offset", offset); query.field("limit", 1024)
                query.endObject()
                guard let answer = try system.gather("$SYS.REQ.SERVER.\(server).CONNZ", query.bytes, window: .seconds(2), expecting: 1).first,
                      let reply = try? JSONValue.parse(answer.payload),
                      case .array(let connections)? = reply["data"]?["connections"] else { break }
                for connection in connections {
                    guard let user = connection["authorized_user"]?.stringValue, names.isFromAnotherKey(user),
                          let cid = connection["cid"]?.doubleValue, cid >= 0, cid < 1e15 else { continue }
                    var kick = JSONWriter()
                    kick.beginObject()
                    kick.field("cid", Int64(cid))
                    kick.endObject()
                    if let done = try system.gather("$SYS.REQ.SERVER.\(server).KICK", kick.bytes, window: .seconds(2), expecting: 1).first,
                       (try? JSONValue.parse(done.payload))?["error"] == nil { ended += 1 }
                }
                if connections.count < 1024 { break }
                offset += connections.count
            }
        }
        return ended
    }

    /// A server id goes into a subject: only what a NATS server id is made of (base32 upper case).
    static func isServerID(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64 && text.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x32 && $0 <= 0x37) }
    }
}
