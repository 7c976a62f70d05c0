// The addresses settings and configurations name: where to listen, which broker to reach.

/// `host:port`, `[v6]:port` or `:port` as used by FLARE_HTTP_ADDR.
public struct HostPort: Sendable, Equatable {
    public let host: String
    public let port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public init?(_ text: String) {
        var host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if host.contains(":") { return nil }
        }
        if host.isEmpty { host = "0.0.0.0" }
        guard let port = Int(portText), (0...65535).contains(port) else { return nil }
        self.host = String(host)
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// `mqtt://host:port` (or `mqtts://`), as used by FLARE_MQTT_URL.
public struct MQTTURL: Sendable, Equatable {
    public let tls: Bool
    public let host: String
    public let port: Int

    public init?(_ text: String) {
        let tls: Bool
        let rest: Substring
        if text.hasPrefix("mqtt://") { tls = false; rest = text.dropFirst(7) }
        else if text.hasPrefix("mqtts://") { tls = true; rest = text.dropFirst(8) }
        else { return nil }
        let authority = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        if let hostPort = HostPort(String(authority)) {
            self.host = hostPort.host
            self.port = hostPort.port
        } else if !authority.isEmpty, !authority.contains(":") {
            self.host = String(authority)
            self.port = tls ? 8883 : 1883
        } else {
            return nil
        }
        self.tls = tls
    }
}
