/// The SMTP server contacts are mailed through (`FLARE_SMTP_URL`, `FLARE_SMTP_FROM`), checked at start.
///
/// `smtp://[user[:password]@]host[:port]` (port 587 unless given) is upgraded with STARTTLS, which must succeed,
/// except to a loopback host (a relay on the same machine often has no certificate): there it is tried.
/// `smtps://…` (port 465 unless given) speaks TLS from the first byte. The user name and password may be
/// percent-encoded; they are a secret (`--print-config` hides the whole URL).
public struct MailServer: Sendable, Equatable, CustomStringConvertible {
    /// `scheme://host:port`, without credentials: what libcurl is given, and what logs may show.
    public let url: String
    public let host: String
    public let username: String?
    public let password: String?
    public let requiresTLS: Bool
    /// The envelope sender and the `From` address.
    public let from: String

    public var description: String { url }

    public struct Problem: Error, Equatable, CustomStringConvertible {
        public let description: String
    }

    public init(url text: String, from: String) throws(Problem) {
        let malformed = Problem(description: "FLARE_SMTP_URL must be smtp://[user[:password]@]host[:port] (STARTTLS) or smtps://… (TLS)")
        guard !text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value >= 0x7F }) else { throw malformed }
        let isImplicitTLS: Bool
        var rest: Substring
        if text.lowercased().hasPrefix("smtps://") { isImplicitTLS = true; rest = text.dropFirst(8) }
        else if text.lowercased().hasPrefix("smtp://") { isImplicitTLS = false; rest = text.dropFirst(7) }
        else { throw malformed }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.contains("/"), !rest.contains("?"), !rest.contains("#") else { throw malformed }
        var username: String?, password: String?
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let parts = userInfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let user = Self.percentDecoded(parts[0]), !user.isEmpty else { throw malformed }
            username = user
            if parts.count == 2 {
                guard let secret = Self.percentDecoded(parts[1]) else { throw malformed }
                password = secret
            }
        }
        var host: Substring, portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw malformed }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw malformed }
                portText = after.dropFirst()
            }
        } else {
            let parts = rest.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = parts[0]
            portText = parts.count == 2 ? parts[1] : nil
        }
        guard !host.isEmpty else { throw malformed }
        let port: Int
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else { throw malformed }
            port = value
        } else {
            port = isImplicitTLS ? 465 : 587
        }
        guard (try? ContactRules.validEmail(from)) != nil else {
            throw Problem(description: "FLARE_SMTP_FROM must be the address mail to contacts comes from, such as flare@example.org")
        }
        let hostText = String(host)
        self.host = hostText
        self.username = username
        self.password = password
        self.from = from
        let bracketed = hostText.contains(":") ? "[\(hostText)]" : hostText
        url = "\(isImplicitTLS ? "smtps" : "smtp")://\(bracketed):\(port)"
        requiresTLS = !isImplicitTLS && !Self.isLoopback(hostText)
    }

    /// `localhost`, or an address literal in 127.0.0.0/8 or `::1`: where STARTTLS may be skipped. A host *name* that
    /// merely starts with `127.` (`127.0.0.1.example.net`) is any host on the internet, and gets TLS like every other.
    static func isLoopback(_ host: String) -> Bool {
        if host.lowercased() == "localhost" { return true }
        guard let address = IPAddress(host) else { return false }
        return address.isV6 ? address.bytes == [UInt8](repeating: 0, count: 15) + [1] : address.bytes[0] == 127
    }

    /// The domain of `from`: what each mail's `Message-ID` ends with.
    public var messageIDDomain: String { String(from.split(separator: "@").last ?? "flare.invalid") }

    private static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var index = text.utf8.startIndex
        let utf8 = text.utf8
        while index < utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%") {
                let first = utf8.index(after: index)
                guard first < utf8.endIndex, utf8.index(after: first) < utf8.endIndex,
                      let value = UInt8(String(decoding: [utf8[first], utf8[utf8.index(after: first)]], as: UTF8.self), radix: 16) else { return nil }
                bytes.append(value)
                index = utf8.index(first, offsetBy: 2)
            } else {
                bytes.append(byte)
                index = utf8.index(after: index)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}
