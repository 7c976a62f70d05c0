internal import CCurl
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An HTTP POST with libcurl that connects only to the addresses its caller gives, whatever the URL's host name
/// resolves to by then.
///
/// The caller has looked the name up once and checked the answers (Flare's webhook address rule). A second lookup, by
/// libcurl or anyone else, may get another answer: a name with a TTL of 0 can answer a public address to the check and
/// 127.0.0.1 to the connection (DNS rebinding). So every connection a request makes goes to one of the given addresses
/// (`CURLOPT_CONNECT_TO` with an empty host and port, which matches whatever host and port libcurl reads from the URL),
/// while TLS still verifies the certificate against the URL's host name, and the `Host` header names it. Never a
/// redirect, never a proxy (not even one from `http_proxy` in the environment), only http and https.
///
/// Each request has a libcurl handle to itself while it runs, so any number of threads may post at once. Handles are
/// kept for the next request (`HandlePool`), with their connections: a receiver posted to often (a push service
/// above all, where a TLS handshake per notification would cost a round trip or two each) is posted to over the
/// connection the last request opened. A kept connection was made to an address checked when it was made; the next
/// request's `CONNECT_TO` must name the same address for libcurl to reuse it.
public struct HTTPPostClient: Sendable {
    /// How long one address may take to accept the connection (and finish the TLS handshake).
    public let connectTimeout: Duration
    private let handles = HandlePool()

    public init(connectTimeout: Duration = .seconds(5)) {
        self.connectTimeout = connectTimeout
    }

    /// Posts `body` to `url` and answers the receiver's HTTP status (a redirect's too: it is not followed).
    ///
    /// - Parameters:
    ///   - url: an `http://` or `https://` URL.
    ///   - addresses: numeric IPv4 or IPv6 addresses; the next one is tried only while one refuses the connection or
    ///     cannot be reached.
    ///   - headers: sent as given; none may hold a line break.
    ///   - timeout: for the whole request, every address tried included.
    /// - Returns: the HTTP status of the answer.
    public func post(url: String, connectingTo addresses: [String], headers: [(name: String, value: String)], body: [UInt8],
                     timeout: Duration) throws(HTTPPostError) -> Int {
        try answer(url: url, connectingTo: addresses, headers: headers, body: body, timeout: timeout).status
    }

    /// What a receiver answered: its status, and when it asks to be tried again (`Retry-After`, in seconds from now,
    /// as libcurl reads either of its forms), if it did.
    public struct Answer: Sendable, Equatable {
        public let status: Int
        public let retryAfterSeconds: Int?
    }

    /// As `post`, with the whole answer.
    public func answer(url: String, connectingTo addresses: [String], headers: [(name: String, value: String)], body: [UInt8],
                       timeout: Duration) throws(HTTPPostError) -> Answer {
        guard Curl.libraryReady else { throw HTTPPostError(.notReady) }
        guard !addresses.isEmpty else { throw HTTPPostError(.noAddress) }
        // A name here would be looked up by libcurl: only numbers are pinned.
        guard addresses.allSatisfy(Self.isNumeric) else { throw HTTPPostError(.notNumeric) }
        let lines = headers.map { "\($0.name): \($0.value)" }
        guard !lines.contains(where: { $0.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 } }) else { throw HTTPPostError(.lineBreak) }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var refused: HTTPPostError?
        for address in addresses {
            let remaining = deadline - clock.now
            guard remaining > .zero else { break }
            do {
                return try attempt(url: url, address: address, headerLines: lines, body: body, timeout: remaining)
            } catch let error where error.isConnectFailure {
                refused = error
            }
        }
        throw refused ?? HTTPPostError(.timedOut)
    }

    /// One request with every connection pinned to `address`.
    private func attempt(url: String, address: String, headerLines: [String], body: [UInt8], timeout: Duration) throws(HTTPPostError) -> Answer {
        // Freed after the handle is reset or cleaned up (defers run last first): libcurl reads the lists until then.
        var lists: [UnsafeMutablePointer<curl_slist>] = []
        defer { for list in lists { curl_slist_free_all(list) } }
        guard let handle = handles.take() ?? curl_easy_init() else { throw HTTPPostError(.notReady) }
        // Kept for the next request, with its connection, only after an answer: after a failure the connection is in
        // doubt, and the handle goes.
        var answered = false
        defer {
            if answered {
                // Options (the lists among them) forgotten; the connection cache kept.
                curl_easy_reset(handle)
                handles.give(handle)
            } else {
                curl_easy_cleanup(handle)
            }
        }

        func list(_ lines: [String]) throws(HTTPPostError) -> UnsafeMutablePointer<curl_slist> {
            var head: UnsafeMutablePointer<curl_slist>?
            for line in lines {
                guard let longer = curl_slist_append(head, line) else {
                    if let head { curl_slist_free_all(head) }
                    throw HTTPPostError(.notReady)
                }
                head = longer
            }
            lists.append(head!)
            return head!
        }
        func set(_ code: CURLcode) throws(HTTPPostError) {
            guard code == CURLE_OK else { throw HTTPPostError(curl: code) }
        }
        let target = address.contains(":") ? "[\(address)]" : address
        try set(flare_curl_setopt_string(handle, CURLOPT_URL, url))
        // "HOST:PORT:CONNECT-TO-HOST:CONNECT-TO-PORT"; empty host and port match every one, an empty last port keeps the
        // URL's. An address is never looked up (libcurl reads a numeric one as it is).
        try set(flare_curl_setopt_list(handle, CURLOPT_CONNECT_TO, try list(["::\(target):"])))
        try set(flare_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https"))
        try set(flare_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0))
        try set(flare_curl_setopt_string(handle, CURLOPT_PROXY, ""))
        try set(flare_curl_setopt_string(handle, CURLOPT_NOPROXY, "*"))
        try set(flare_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1))
        try set(flare_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2))
        // Timeouts by alarm() and SIGALRM would hit whichever thread the signal lands on.
        try set(flare_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        try set(flare_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Curl.milliseconds(min(connectTimeout, timeout))))
        try set(flare_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Curl.milliseconds(timeout)))
        try set(flare_curl_setopt_long(handle, CURLOPT_POST, 1))
        try set(flare_curl_setopt_off_t(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)))
        // Copied by libcurl at once; the size set before lets the body hold any byte.
        if body.isEmpty {
            try set(flare_curl_setopt_string(handle, CURLOPT_COPYPOSTFIELDS, ""))
        } else {
            try body.withUnsafeBufferPointer { bytes throws(HTTPPostError) in
                try set(flare_curl_setopt_string(handle, CURLOPT_COPYPOSTFIELDS, UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self)))
            }
        }
        // "Expect:" (empty) keeps libcurl from asking `Expect: 100-continue` for a body over 1 KB and then waiting a
        // second for a receiver that does not answer it.
        try set(flare_curl_setopt_list(handle, CURLOPT_HTTPHEADER, try list(headerLines + ["Expect:"])))
        try set(flare_curl_discard_body(handle))

        let code = curl_easy_perform(handle)
        guard code == CURLE_OK else {
            var osError = 0
            _ = flare_curl_getinfo_long(handle, CURLINFO_OS_ERRNO, &osError)
            throw HTTPPostError(curl: code, osError: Int32(truncatingIfNeeded: osError))
        }
        var status = 0
        try set(flare_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status))
        var retryAfter: curl_off_t = 0
        let retry = flare_curl_getinfo_off_t(handle, CURLINFO_RETRY_AFTER, &retryAfter) == CURLE_OK && retryAfter > 0 ? Int(retryAfter) : nil
        answered = true
        return Answer(status: status, retryAfterSeconds: retry)
    }

    private static func isNumeric(_ address: String) -> Bool {
        var bytes = [UInt8](repeating: 0, count: 16)
        return inet_pton(AF_INET, address, &bytes) == 1 || inet_pton(AF_INET6, address, &bytes) == 1
    }

}

/// Why a POST got no HTTP answer. `reason` is this module's own words or libcurl's own table (`curl_easy_strerror`),
/// never libcurl's error buffer, which names the host and may quote the URL: a webhook's path can be private.
public struct HTTPPostError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The libcurl result (a `CURLcode`), or 0 for a request this module refused before sending it.
    public let code: Int
    public let reason: String

    public var description: String { reason }

    enum Refusal: String {
        case notReady = "libcurl could not make a request"
        case noAddress = "no address to connect to"
        case notNumeric = "an address to connect to is not numeric"
        case lineBreak = "a header holds a line break"
        case timedOut = "timed out"
    }

    init(_ refusal: Refusal) {
        code = refusal == .timedOut ? Int(CURLE_OPERATION_TIMEDOUT.rawValue) : 0
        reason = refusal.rawValue
    }

    init(curl: CURLcode, osError: Int32 = 0) {
        code = Int(curl.rawValue)
        switch curl {
        case CURLE_COULDNT_CONNECT: reason = osError == ECONNREFUSED ? "connection refused" : "cannot connect"
        case CURLE_OPERATION_TIMEDOUT: reason = "timed out"
        case CURLE_GOT_NOTHING: reason = "no answer (the connection was closed)"
        case CURLE_SEND_ERROR, CURLE_RECV_ERROR: reason = "connection lost"
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_INVALIDCERTSTATUS: reason = "TLS failed"
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT: reason = "not an http:// or https:// URL"
        default: reason = String(cString: curl_easy_strerror(curl))
        }
    }

    /// No connection was made to that address (refused, unreachable): another address may do better.
    var isConnectFailure: Bool { code == Int(CURLE_COULDNT_CONNECT.rawValue) }
}

/// libcurl handles kept between requests (each with its connection cache), at most `limit`: one per thread that posts
/// at once is enough. A handle is used by one request at a time (taken, then given back).
private final class HandlePool: Sendable {
    /// A handle between requests: it belongs to no thread while it is here.
    private struct Idle: @unchecked Sendable {
        let handle: UnsafeMutableRawPointer
    }

    private let idle = Mutex<[Idle]>([])
    private let limit = 16

    func take() -> UnsafeMutableRawPointer? {
        idle.withLock { $0.popLast()?.handle }
    }

    func give(_ handle: UnsafeMutableRawPointer) {
        let kept = idle.withLock { idle -> Bool in
            guard idle.count < limit else { return false }
            idle.append(Idle(handle: handle))
            return true
        }
        if !kept { curl_easy_cleanup(handle) }
    }

    deinit {
        for kept in idle.withLock({ $0 }) { curl_easy_cleanup(kept.handle) }
    }
}
