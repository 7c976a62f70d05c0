internal import CCurl

/// Sends one mail with libcurl's SMTP: `smtp://` upgraded with STARTTLS (required, except to a loopback address, where
/// a relay on the same machine may have no certificate), or `smtps://` (TLS from the first byte). Certificates are
/// verified against the system's CAs. Never a proxy from the environment.
///
/// Each mail has a libcurl handle of its own, so any number of threads may send at once.
public struct SMTPClient: Sendable {
    /// `smtp://host[:port]` or `smtps://host[:port]`, without credentials.
    public let url: String
    public let username: String?
    public let password: String?
    /// STARTTLS must succeed (false: tried, and the mail goes in clear if the server offers none).
    public let requireTLS: Bool

    public init(url: String, username: String?, password: String?, requireTLS: Bool) {
        self.url = url
        self.username = username
        self.password = password
        self.requireTLS = requireTLS
    }

    /// Hands `message` (a whole RFC 5322 message, CRLF line ends) to the server for `recipients`.
    public func send(from sender: String, to recipients: [String], message: [UInt8], timeout: Duration) throws(SMTPError) {
        guard Curl.libraryReady, let handle = curl_easy_init() else { throw SMTPError(code: 0, reply: nil, reason: "libcurl could not make a request") }
        var list: UnsafeMutablePointer<curl_slist>?
        defer {
            curl_easy_cleanup(handle)
            if let list { curl_slist_free_all(list) }
        }
        let lines = [sender] + recipients
        guard !lines.contains(where: { $0.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 || $0 == UInt8(ascii: "<") || $0 == UInt8(ascii: ">") } }) else {
            throw SMTPError(code: 0, reply: nil, reason: "an address holds a line break or an angle bracket")
        }
        for recipient in recipients {
            guard let longer = curl_slist_append(list, "<\(recipient)>") else { throw SMTPError(code: 0, reply: nil, reason: "libcurl could not make a request") }
            list = longer
        }
        func set(_ code: CURLcode) throws(SMTPError) {
            guard code == CURLE_OK else { throw SMTPError(curl: code, reply: nil) }
        }
        try set(flare_curl_setopt_string(handle, CURLOPT_URL, url))
        try set(flare_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "smtp,smtps"))
        try set(flare_curl_setopt_long(handle, CURLOPT_USE_SSL, Int(requireTLS ? CURLUSESSL_ALL.rawValue : CURLUSESSL_TRY.rawValue)))
        try set(flare_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1))
        try set(flare_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2))
        try set(flare_curl_setopt_string(handle, CURLOPT_PROXY, ""))
        try set(flare_curl_setopt_string(handle, CURLOPT_NOPROXY, "*"))
        try set(flare_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        try set(flare_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Curl.milliseconds(min(timeout, .seconds(5)))))
        try set(flare_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Curl.milliseconds(timeout)))
        if let username { try set(flare_curl_setopt_string(handle, CURLOPT_USERNAME, username)) }
        if let password { try set(flare_curl_setopt_string(handle, CURLOPT_PASSWORD, password)) }
        try set(flare_curl_setopt_string(handle, CURLOPT_MAIL_FROM, "<\(sender)>"))
        try set(flare_curl_setopt_list(handle, CURLOPT_MAIL_RCPT, list))
        try set(flare_curl_setopt_long(handle, CURLOPT_INFILESIZE, message.count))
        let code: CURLcode = try message.withUnsafeBufferPointer { bytes throws(SMTPError) -> CURLcode in
            var upload = flare_curl_upload(bytes: UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self), length: bytes.count, offset: 0)
            return try withUnsafeMutablePointer(to: &upload) { pointer throws(SMTPError) -> CURLcode in
                try set(flare_curl_upload_from(handle, pointer))
                return curl_easy_perform(handle)
            }
        }
        guard code == CURLE_OK else {
            var reply = 0
            _ = flare_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &reply)
            throw SMTPError(curl: code, reply: reply == 0 ? nil : reply)
        }
    }
}

/// Why a mail was not taken. `reason` is this module's own words or libcurl's table, never the server's text (it may
/// quote the addresses).
public struct SMTPError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The libcurl result, or 0 for a mail refused before sending.
    public let code: Int
    /// The server's last reply code, if it answered (550: the mailbox does not exist).
    public let reply: Int?
    public let reason: String

    public var description: String { reply.map { "\(reason) (the server answered \($0))" } ?? reason }

    /// The server refused for good (a 5xx reply): the same mail would be refused again.
    public var isPermanent: Bool { (500..<600).contains(reply ?? 0) && code != Int(CURLE_LOGIN_DENIED.rawValue) }
    /// The server never answered (down, unreachable, silent): the outcome is unknown or nothing was sent.
    public var isUnanswered: Bool { reply == nil }

    init(code: Int, reply: Int?, reason: String) {
        self.code = code
        self.reply = reply
        self.reason = reason
    }

    init(curl: CURLcode, reply: Int?) {
        code = Int(curl.rawValue)
        self.reply = reply
        switch curl {
        case CURLE_COULDNT_CONNECT: reason = "cannot connect"
        case CURLE_OPERATION_TIMEDOUT: reason = "timed out"
        case CURLE_LOGIN_DENIED: reason = "the server refused the user name or password"
        case CURLE_USE_SSL_FAILED: reason = "the server offers no STARTTLS"
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION: reason = "TLS failed"
        case CURLE_SEND_ERROR, CURLE_RECV_ERROR: reason = reply == nil ? "connection lost" : "the server refused the mail"
        case CURLE_GOT_NOTHING: reason = "no answer (the connection was closed)"
        default: reason = String(cString: curl_easy_strerror(curl))
        }
    }
}
