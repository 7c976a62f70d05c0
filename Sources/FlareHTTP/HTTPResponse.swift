public struct HTTPResponse: Sendable {
    public enum Body: Sendable {
        case bytes([UInt8])
        /// The body is these pieces, in order: joined once, into the buffer the server sends from (`.bytes` is
        /// copied into it, which for a body made of parts kept for many responses is a second copy: the viewer
        /// page is 50 KB, of which only the title changes from share to share).
        case segments([[UInt8]])
        /// Sent with chunked encoding until the stream finishes or closes.
        case stream(EventStream)
    }

    public var status: Int
    /// Sent as listed. `Content-Length` and `Transfer-Encoding` are ignored: the server frames the body itself.
    public var headers: [(name: String, value: String)]
    public var body: Body

    public init(status: Int, headers: [(name: String, value: String)] = [], body: Body = .bytes([])) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

extension HTTPResponse {
    /// The server's own error answers, in the same `{"error":…,"message":…}` shape as the API's.
    static func error(status: Int, code: String, message: String) -> HTTPResponse {
        func quoted(_ text: String) -> String {
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\u{0}"..."\u{1F}": out += "\\u00" + (scalar.value < 16 ? "0" : "") + String(scalar.value, radix: 16)
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
        let json = "{\"error\":\(quoted(code)),\"message\":\(quoted(message))}"
        return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: .bytes(Array(json.utf8)))
    }
}

extension HTTPResponse.Body {
    /// The whole body, joined (for tests and the in-memory router); nil for a stream.
    public var joinedBytes: [UInt8]? {
        switch self {
        case .bytes(let bytes): bytes
        case .segments(let segments): Array(segments.joined())
        case .stream: nil
        }
    }
}
