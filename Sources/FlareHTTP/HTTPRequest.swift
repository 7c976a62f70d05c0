/// One HTTP request, fully received (the body is complete before the handler runs).
public struct HTTPRequest: Sendable {
    public let method: String
    /// The request target's path exactly as the client sent it (still percent-encoded), without the query string.
    public let path: String
    /// Query arguments, percent-decoded (`+` is a space). For a repeated name the first value wins.
    public let query: [String: String]
    /// Header names are lowercased. Repeated headers are joined with ", ".
    public let headers: [String: String]
    public let body: [UInt8]
    /// Textual IP of the peer ("127.0.0.1", "::1"); IPv4 peers of a dual-stack listener appear as IPv4.
    public let clientAddress: String

    /// For building requests in tests of code above the server; header names are lowercased here too.
    public init(
        method: String,
        path: String,
        query: [String: String] = [:],
        headers: [String: String] = [:],
        body: [UInt8] = [],
        clientAddress: String = "127.0.0.1"
    ) {
        var lowercased: [String: String] = [:]
        for (name, value) in headers {
            let key = name.lowercased()
            lowercased[key] = lowercased[key].map { "\($0), \(value)" } ?? value
        }
        self.init(trusted: method, path: path, query: query, headers: lowercased, body: body, clientAddress: clientAddress)
    }

    /// The server's path: names are already lowercased.
    init(trusted method: String, path: String, query: [String: String], headers: [String: String], body: [UInt8], clientAddress: String) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.clientAddress = clientAddress
    }

    /// The prefix of a query key that says the name after it was given more than once (its first value is in `query`).
    public static let repeatedMark = "\u{0}repeated:"

    /// Case-insensitive header lookup.
    public func header(_ name: String) -> String? {
        headers[name] ?? headers[name.lowercased()]
    }
}

/// Decodes `%HH` escapes; malformed escapes stay as they are and invalid UTF-8 is repaired, never rejected.
func percentDecoded(_ bytes: UnsafeRawBufferPointer) -> String {
    guard bytes.contains(UInt8(ascii: "%")) else { return String(decoding: bytes, as: UTF8.self) }
    func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
    var decoded: [UInt8] = []
    decoded.reserveCapacity(bytes.count)
    var index = 0
    while index < bytes.count {
        if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
           let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) {
            decoded.append(high << 4 | low)
            index += 3
        } else {
            decoded.append(bytes[index])
            index += 1
        }
    }
    return String(decoding: decoded, as: UTF8.self)
}
