public import FlareCore
#if canImport(Glibc)
import Glibc
#endif

/// Looks up which addresses a host name stands for, for the webhook address rule. Blocks for as long as the name's
/// DNS takes (getaddrinfo cannot be cancelled): never call it on an HTTP request thread (`HostLookups` is the way
/// there).
public protocol HostResolving: Sendable {
    /// Every address `host` stands for now; empty when it does not resolve. Two calls may answer differently.
    func addresses(of host: String) -> [IPAddress]
}

/// The system's resolver (`getaddrinfo`: /etc/hosts, then DNS, as nsswitch.conf says).
public struct SystemHostResolver: HostResolving {
    public init() {}

    public func addresses(of host: String) -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else { return [] }
        defer { freeaddrinfo(first) }
        var found: [IPAddress] = []
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            if current.pointee.ai_family == AF_INET {
                current.pointee.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    var raw = address.pointee.sin_addr
                    _ = inet_ntop(AF_INET, &raw, &text, socklen_t(text.count))
                }
            } else if current.pointee.ai_family == AF_INET6 {
                current.pointee.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                    var raw = address.pointee.sin6_addr
                    _ = inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
                }
            }
            if let address = IPAddress(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)),
               !found.contains(address) { found.append(address) }
            entry = current.pointee.ai_next
        }
        return found
    }
}

extension HostResolving {
    /// The addresses a request to `url` may connect to: the URL's IP literal, or the answers of one lookup of its
    /// name, passed through the address rule (`WebhookURL.permittedAddresses`).
    func permittedAddresses(for url: WebhookURL, publicOnly: Bool) throws(WebhookURL.Problem) -> [IPAddress] {
        try url.permittedAddresses(url.hostAddress.map { [$0] } ?? addresses(of: url.host), publicOnly: publicOnly)
    }
}
