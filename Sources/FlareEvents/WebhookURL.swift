public import FlareCore

/// A webhook URL as Flare accepts it: `http://` or `https://`, a host, an optional port, path and query; no user
/// name or password (they would sit in the store and in logs), at most 2,048 bytes.
public struct WebhookURL: Sendable, Equatable, CustomStringConvertible {
    public let text: String
    public let isTLS: Bool
    /// The host as written (brackets removed from an IPv6 literal).
    public let host: String
    public let port: Int

    public static let maximumLength = 2048

    public enum Problem: Error, Equatable, CustomStringConvertible {
        case malformed
        /// Loopback, private, link-local and the like: refused for URLs a non-admin key sets, so that flared is not a
        /// way into the operator's network.
        case notPublic(String)
        /// The host name stands for no address (at the lookup the rule was applied to).
        case unresolved

        public var description: String {
            switch self {
            case .malformed: "a webhook URL is http:// or https://, a host and an optional port and path, with no user name or password, at most 2048 bytes"
            case .unresolved: "the webhook's host name does not resolve"
            case .notPublic(let address): "the webhook's host resolves to \(address), a loopback, private or link-local address; only an admin key may send events there"
            }
        }
    }

    public init(_ text: String) throws(Problem) {
        guard text.utf8.count <= Self.maximumLength, !text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value >= 0x7F }) else { throw .malformed }
        let rest: Substring
        if text.lowercased().hasPrefix("https://") { isTLS = true; rest = text.dropFirst(8) }
        else if text.lowercased().hasPrefix("http://") { isTLS = false; rest = text.dropFirst(7) }
        else { throw .malformed }
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.isEmpty, !authority.contains("@"), !text.contains("#") else { throw .malformed }
        let defaultPort = isTLS ? 443 : 80
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .malformed }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if after.isEmpty { port = defaultPort }
            else if after.hasPrefix(":"), let number = Int(after.dropFirst()), (1...65535).contains(number) { port = number }
            else { throw .malformed }
            guard host.contains(":"), IPAddress(host) != nil else { throw .malformed }
        } else if let colon = authority.firstIndex(of: ":") {
            host = String(authority[..<colon])
            guard let number = Int(authority[authority.index(after: colon)...]), (1...65535).contains(number) else { throw .malformed }
            port = number
        } else {
            host = String(authority)
            port = defaultPort
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == ":" }) else { throw .malformed }
        self.text = text
    }

    public var description: String { text }
}

extension WebhookURL {
    /// The host as an address, when it is an IP literal: it needs no lookup.
    public var hostAddress: IPAddress? { IPAddress(host) }

    /// The address rule, applied to what the URL's host stood for at one lookup (itself, for an IP literal): the
    /// addresses a request may connect to, and no others (a second lookup may answer something else).
    ///
    /// - Parameter publicOnly: a limited key's webhook: every answer must be public, or the URL is refused (a name
    ///   answering one public and one inside address could otherwise be reached inside by a client that tries both).
    /// - Returns: `answers`, once they pass.
    public func permittedAddresses(_ answers: [IPAddress], publicOnly: Bool) throws(Problem) -> [IPAddress] {
        guard !answers.isEmpty else { throw .unresolved }
        if publicOnly, let inside = answers.first(where: { !$0.isPublic }) { throw .notPublic(inside.text) }
        return answers
    }
}

extension IPAddress {
    /// Whether the address is on the public internet: not unspecified, loopback, private (RFC 1918, unique local),
    /// shared (CGNAT), link-local, multicast, reserved, documentation or benchmarking, nor an IPv6 form that embeds
    /// such an IPv4 address (NAT64, 6to4, IPv4-compatible).
    public var isPublic: Bool {
        if bytes.count == 4 { return Self.isPublicV4(bytes) }
        let b = bytes
        if b.allSatisfy({ $0 == 0 }) { return false }                                   // ::
        if b.prefix(15).allSatisfy({ $0 == 0 }) && b[15] == 1 { return false }          // ::1
        if b.prefix(12).allSatisfy({ $0 == 0 }) { return Self.isPublicV4(Array(b[12...])) }  // ::a.b.c.d
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B { return Self.isPublicV4(Array(b[12...])) } // 64:ff9b::/96
        if b[0] == 0x20 && b[1] == 0x02 { return Self.isPublicV4(Array(b[2..<6])) }       // 2002::/16 (6to4)
        if b[0] & 0xFE == 0xFC { return false }                                           // fc00::/7 unique local
        if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return false }                           // fe80::/10 link-local
        if b[0] == 0xFE && b[1] & 0xC0 == 0xC0 { return false }                           // fec0::/10 site-local
        if b[0] == 0xFF { return false }                                                  // multicast
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8 { return false }  // 2001:db8::/32 documentation
        if b[0] == 0x01 && b[1] == 0x00 && b[2...7].allSatisfy({ $0 == 0 }) { return false } // 100::/64 discard
        return true
    }

    /// 127.0.0.0/8 or ::1: this machine.
    public var isLoopback: Bool {
        bytes.count == 4 ? bytes[0] == 127 : bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1
    }

    private static func isPublicV4(_ b: [UInt8]) -> Bool {
        switch (b[0], b[1]) {
        case (0, _), (10, _), (127, _): return false
        case (100, 64...127): return false                     // shared address space (CGNAT)
        case (169, 254): return false                          // link-local, cloud metadata
        case (172, 16...31): return false
        case (192, 168): return false
        case (192, 0) where b[2] == 0 || b[2] == 2: return false  // IETF protocol assignments, TEST-NET-1
        case (198, 18...19): return false                      // benchmarking
        case (198, 51) where b[2] == 100: return false         // TEST-NET-2
        case (203, 0) where b[2] == 113: return false          // TEST-NET-3
        case (224...255, _): return false                      // multicast, reserved, broadcast
        default: return true
        }
    }
}
