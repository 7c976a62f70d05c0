#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 address as its bytes (4 or 16), parsed with `inet_pton`: nothing looser is accepted.
public struct IPAddress: Sendable, Equatable {
    public let bytes: [UInt8]

    public init?(_ text: some StringProtocol) {
        let text = String(text)
        guard text.utf8.count <= 45 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 16)
        if text.contains(":") {
            guard inet_pton(AF_INET6, text, &buffer) == 1 else { return nil }
            // A v4 client seen through a dual-stack socket (::ffff:a.b.c.d) is that v4 client.
            let isMappedV4 = buffer.prefix(10).allSatisfy { $0 == 0 } && buffer[10] == 0xFF && buffer[11] == 0xFF
            bytes = isMappedV4 ? Array(buffer[12..<16]) : buffer
        } else {
            guard inet_pton(AF_INET, text, &buffer) == 1 else { return nil }
            bytes = Array(buffer.prefix(4))
        }
    }

    public var isV6: Bool { bytes.count == 16 }

    /// The address written out (`inet_ntop`).
    public var text: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        var raw = bytes
        _ = inet_ntop(isV6 ? AF_INET6 : AF_INET, &raw, &buffer, socklen_t(buffer.count))
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Which peers are reverse proxies whose `X-Forwarded-For` is believed (`FLARE_TRUSTED_PROXIES`), and so which
/// address a link request really comes from. Behind a proxy every request arrives from the proxy; without this,
/// all viewers would share one rate-limit bucket, and one abuser would lock everybody out.
public struct TrustedProxies: Sendable {
    struct Network: Sendable {
        let prefix: [UInt8]
        let bits: Int

        func contains(_ address: IPAddress) -> Bool {
            guard address.bytes.count == prefix.count else { return false }
            var remaining = bits
            for (a, b) in zip(address.bytes, prefix) where remaining > 0 {
                let mask: UInt8 = remaining >= 8 ? 0xFF : ~(0xFF >> UInt8(remaining))
                if a & mask != b & mask { return false }
                remaining -= 8
            }
            return true
        }
    }

    private let networks: [Network]

    public static let none = TrustedProxies(networks: [])

    private init(networks: [Network]) { self.networks = networks }

    /// A list that does not parse; `message` names the entry (the setting's reader puts the setting's name before it).
    public struct Malformed: Error, Equatable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// "127.0.0.1, ::1, 172.16.0.0/12": addresses and CIDR networks, comma-separated; "" trusts no proxy.
    public init(parsing list: String) throws(Malformed) {
        var networks: [Network] = []
        for entry in list.split(separator: ",").map({ $0.trimmingSpaces }) where !entry.isEmpty {
            let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard let address = IPAddress(parts[0]) else {
                throw Malformed(message: "\(entry) is not an IP address or network")
            }
            let maximumBits = address.bytes.count * 8
            var bits = maximumBits
            if parts.count == 2 {
                guard let value = Int(parts[1]), (0...maximumBits).contains(value) else {
                    throw Malformed(message: "\(entry) has a bad prefix length (0...\(maximumBits))")
                }
                bits = value
            }
            networks.append(Network(prefix: address.bytes, bits: bits))
        }
        self.networks = networks
    }

    public var isEmpty: Bool { networks.isEmpty }

    public func trusts(_ address: IPAddress) -> Bool { networks.contains { $0.contains(address) } }

    /// The address a request comes from. Only a trusted peer's `X-Forwarded-For` is read, from the right (each
    /// proxy appends the address it saw): the first entry that is not itself a trusted proxy is the client.
    /// A malformed entry ends the walk there and the last address believed so far is used: a client can write
    /// anything at the left end of the header, so nothing left of a bad entry is believed.
    public func clientAddress(peer: String, forwardedFor: String?) -> String {
        guard !networks.isEmpty, let peerAddress = IPAddress(peer), trusts(peerAddress), let forwardedFor else { return peer }
        var client = peer
        for entry in forwardedFor.split(separator: ",").reversed() {
            let text = entry.trimmingSpaces
            guard let address = IPAddress(text) else { break }
            client = text
            if !trusts(address) { break }
        }
        return client
    }

    /// The rate-limit key of an address: IPv6 clients are counted per /64, the block one subscriber usually
    /// holds whole (counting each of its 2^64 addresses apart would let one client walk around the limit).
    public static func rateLimitKey(for address: String) -> String {
        // Every IPv6 form has a colon, no IPv4 address does: most requests need no parsing here.
        guard address.utf8.contains(UInt8(ascii: ":")), let parsed = IPAddress(address), parsed.isV6 else { return address }
        let hex = parsed.bytes.prefix(8).map { byte in
            String(decoding: [hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0xF)]], as: UTF8.self)
        }
        return stride(from: 0, to: 8, by: 2).map { hex[$0] + hex[$0 + 1] }.joined(separator: ":") + "::/64"
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
}

extension Substring {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
