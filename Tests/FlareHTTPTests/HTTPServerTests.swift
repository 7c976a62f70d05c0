import FlareHTTP
import FlareTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Starts a server on 127.0.0.1 (or `host`) with an ephemeral port.
func startServer(
    host: String = "127.0.0.1",
    maxBodyBytes: Int = 16 * 1024,
    handler: @escaping @Sendable (HTTPRequest) -> HTTPResponse
) throws -> HTTPServer {
    let server = HTTPServer(
        configuration: .init(host: host, port: 0, maxBodyBytes: maxBodyBytes),
        handler: handler)
    try server.start()
    return server
}

@Suite struct HTTPServerTests {
    @Test func getWithQueryAndHeadersRoundTrips() throws {
        let seen = Locked<[HTTPRequest]>([])
        let server = try startServer { request in
            seen.update { $0.append(request) }
            return HTTPResponse(
                status: 200,
                headers: [("Content-Type", "text/plain"), ("X-Reply", "yes")],
                body: .bytes(Array("hello \(request.path)".utf8)))
        }
        defer { server.stop() }
        #expect(server.port > 0)

        let client = try RawHTTPClient(port: server.port)
        try client.send(
            "GET /api/v1/view/abc?q=a%20b&plus=1+2&empty&dup=first&dup=second&enc=%2B%26%C3%A9 HTTP/1.1\r\n"
                + "Host: test\r\nX-Test: Value\r\nX-Multi: a\r\nX-Multi: b\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.headers["x-reply"] == "yes")
        #expect(response.headers["content-type"] == "text/plain")
        #expect(response.text == "hello /api/v1/view/abc")

        let request = try #require(seen.value.first)
        #expect(request.method == "GET")
        #expect(request.path == "/api/v1/view/abc")
        // A name given twice keeps its first value, and says it was doubled (the OsmAnd path refuses that).
        #expect(request.query == ["q": "a b", "plus": "1 2", "empty": "", "dup": "first", "enc": "+&é", HTTPRequest.repeatedMark + "dup": ""])
        #expect(request.header("X-TEST") == "Value")
        #expect(request.headers["x-test"] == "Value")
        #expect(request.headers["x-multi"] == "a, b")
        #expect(request.header("Missing") == nil)
        #expect(request.body.isEmpty)
        #expect(request.clientAddress == "127.0.0.1")

        // Keep-alive: the same connection serves the next request.
        try client.send("GET /second HTTP/1.1\r\nHost: test\r\n\r\n")
        #expect(try client.readResponse().text == "hello /second")
        #expect(seen.value.count == 2)
    }

    /// A body of segments arrives whole and in order: kept parts shared by many responses (one of them larger than a
    /// socket's buffer, sent in several writes), one made for this response, an empty one.
    @Test func aBodyOfSegmentsArrivesWholeAndInOrder() throws {
        let large = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let tail = Array("</html>".utf8)
        let server = try startServer { request in
            HTTPResponse(status: 200, headers: [("Content-Type", "text/html")],
                         body: .segments([large, Array(request.path.utf8), tail, []]))
        }
        defer { server.stop() }
        let client = try RawHTTPClient(port: server.port)
        for path in ["/s/first", "/s/second"] {
            try client.send("GET \(path) HTTP/1.1\r\nHost: t\r\n\r\n")
            let response = try client.readResponse()
            #expect(response.status == 200)
            #expect(response.body == large + Array(path.utf8) + Array("</html>".utf8))
        }
    }

    @Test func oddInputReachesTheHandlerUnchanged() throws {
        let paths = Locked<[String]>([])
        let server = try startServer { request in
            paths.update { $0.append("\(request.method) \(request.path) \(request.query)") }
            return HTTPResponse(status: 404)
        }
        defer { server.stop() }

        let client = try RawHTTPClient(port: server.port)
        // Percent escapes stay in the path (a %2F is not a separator); a %00 in an argument survives.
        try client.send("BREW /caf%C3%A9/a%2Fb?x=%00y HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try client.readResponse().status == 404)
        // Raw UTF-8 and an invalid byte in the request line, and HTTP/1.0 without a Host header.
        try client.send(Array("GET /ü".utf8) + [0xFF] + Array(" HTTP/1.0\r\n\r\n".utf8))
        let status = try client.readResponse().status
        #expect(status == 404 || status == 400)

        #expect(paths.value.first == "BREW /caf%C3%A9/a%2Fb [\"x\": \"\\0y\"]")
    }

    @Test func postBodyIsDelivered() throws {
        let bodies = Locked<[String]>([])
        let server = try startServer { request in
            bodies.update { $0.append(String(decoding: request.body, as: UTF8.self)) }
            return HTTPResponse(status: 201)
        }
        defer { server.stop() }

        let client = try RawHTTPClient(port: server.port)
        let json = #"{"duration_s":3600,"name":"Zoë"}"#
        try client.send("POST /api/v1/shares HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: \(json.utf8.count)\r\n\r\n\(json)")
        #expect(try client.readResponse().status == 201)
        try client.send("POST /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        #expect(try client.readResponse().status == 201)
        #expect(bodies.value == [json, "hello world"])
    }

    @Test func bodyAtTheLimitIsAccepted() throws {
        let sizes = Locked<[Int]>([])
        let server = try startServer(maxBodyBytes: 1024) { request in
            sizes.update { $0.append(request.body.count) }
            return HTTPResponse(status: 200)
        }
        defer { server.stop() }
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n" + String(repeating: "x", count: 1024))
        #expect(try client.readResponse().status == 200)
        #expect(sizes.value == [1024])
    }

    @Test func declaredOversizeBodyIsRefusedWithoutTheHandler() throws {
        let calls = Locked(0)
        let server = try startServer(maxBodyBytes: 1024) { _ in
            calls.update { $0 += 1 }
            return HTTPResponse(status: 200)
        }
        defer { server.stop() }

        // Headers only, announcing more than the server would ever read: it answers before reading the body.
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /api/v1/shares HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 413)
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.text.hasPrefix(#"{"error":"body_too_large","message":""#))
        // A client that waits for 100 Continue hears the 413 instead, before it sends anything.
        let waiting = try RawHTTPClient(port: server.port)
        try waiting.send("POST /api/v1/shares HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
        #expect(try waiting.readResponse().status == 413)
        #expect(calls.value == 0)
    }

    /// Python's urllib and most HTTP libraries send the whole body before they read: they must read the 413 too,
    /// not a connection reset (the server reads and drops the body, then answers). Without that, urllib saw a reset
    /// for most 1 MB bodies on loopback.
    @Test func aClientThatSendsAWholeOversizeBodyFirstReadsThe413() throws {
        let calls = Locked(0)
        let server = try startServer(maxBodyBytes: 1024) { _ in
            calls.update { $0 += 1 }
            return HTTPResponse(status: 200)
        }
        defer { server.stop() }
        let script = """
            import sys, urllib.request, urllib.error
            for size in (1025, 200000, 1000000, 1000000, 1000000):
                request = urllib.request.Request(sys.argv[1], data=b"x" * size, method="POST")
                try:
                    urllib.request.urlopen(request, timeout=20)
                    print(size, "ok")
                except urllib.error.HTTPError as error:
                    print(size, error.code, error.read().decode()[:24])
                except Exception as error:
                    print(size, type(error).__name__)
            """
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        python.arguments = ["-c", script, "http://127.0.0.1:\(server.port)/api/v1/shares"]
        let output = Pipe()
        python.standardOutput = output
        try python.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        python.waitUntilExit()
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.count == 5, "\(text)")
        for line in lines { #expect(line.hasSuffix(#" 413 {"error":"body_too_large"#), "\(line)") }
        #expect(calls.value == 0)
    }

    @Test func streamedOversizeBodyIsRefusedWithoutTheHandler() throws {
        let calls = Locked(0)
        let server = try startServer(maxBodyBytes: 1024) { _ in
            calls.update { $0 += 1 }
            return HTTPResponse(status: 200)
        }
        defer { server.stop() }

        let client = try RawHTTPClient(port: server.port)
        let chunk = String(repeating: "y", count: 800)
        try client.send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n320\r\n\(chunk)\r\n320\r\n\(chunk)\r\n0\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 413)
        #expect(response.text.contains("body_too_large"))
        #expect(calls.value == 0)
    }

    /// A transfer coding other than chunked is answered 501 at once, never waited on (Schemathesis sent a GET with
    /// `Transfer-Encoding: 3k`: the server read a body of unknown length until its connection timed out).
    @Test func aTransferCodingOtherThanChunkedIsAnswered501AtOnce() throws {
        let calls = Locked(0)
        let server = try startServer { _ in
            calls.update { $0 += 1 }
            return HTTPResponse(status: 200)
        }
        defer { server.stop() }
        for coding in ["3k", "gzip", "gzip, chunked", "identity"] {
            let client = try RawHTTPClient(port: server.port)
            try client.send("GET /api/v1/devices HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: \(coding)\r\n\r\n")
            let response = try client.readResponse(timeout: .seconds(3))
            #expect(response.status == 501, "\(coding)")
            #expect(response.text.contains(#""error":"unsupported_transfer_encoding""#), "\(coding): \(response.text)")
        }
        // Chunked is read as before.
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
        #expect(try client.readResponse().status == 200)
        #expect(calls.value == 1)
    }

    @Test func anAbortedUploadNeverReachesTheHandler() throws {
        let calls = Locked(0)
        let server = try startServer { _ in
            calls.update { $0 += 1 }
            return HTTPResponse(status: 200)
        }
        defer { server.stop() }
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" + String(repeating: "z", count: 50))
        client.close()
        // The server is still fine, and the half body was never handed over.
        let next = try RawHTTPClient(port: server.port)
        try next.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try next.readResponse().status == 200)
        #expect(calls.value == 1)
    }

    @Test func concurrentKeepAliveClients() throws {
        let server = try startServer { request in
            HTTPResponse(status: 200, body: .bytes(Array(request.path.utf8)))
        }
        defer { server.stop() }
        let failures = Locked(0)
        let group = DispatchGroup()
        for clientNumber in 0..<8 {
            DispatchQueue.global().async(group: group) {
                do {
                    let client = try RawHTTPClient(port: server.port)
                    for requestNumber in 0..<200 {
                        try client.send("GET /\(clientNumber)/\(requestNumber) HTTP/1.1\r\nHost: t\r\n\r\n")
                        if try client.readResponse().text != "/\(clientNumber)/\(requestNumber)" {
                            failures.update { $0 += 1 }
                        }
                    }
                } catch {
                    failures.update { $0 += 1 }
                }
            }
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        #expect(failures.value == 0)
    }

    @Test func portInUseIsAClearError() throws {
        let first = try startServer { _ in HTTPResponse(status: 200) }
        defer { first.stop() }
        let second = HTTPServer(configuration: .init(host: "127.0.0.1", port: first.port)) { _ in HTTPResponse(status: 200) }
        let error = try #require(throws: HTTPServerError.self) { try second.start() }
        #expect(error.description == "address 127.0.0.1:\(first.port) is already in use")
    }

    @Test func hostMustBeAnAddress() throws {
        let server = HTTPServer(configuration: .init(host: "localhost", port: 0)) { _ in HTTPResponse(status: 200) }
        let error = try #require(throws: HTTPServerError.self) { try server.start() }
        #expect(error.description.contains("not an IP address"))
    }

    @Test(.enabled(if: ipv6LoopbackWorks(), "no IPv6 loopback on this machine"))
    func servesIPv6Loopback() throws {
        let server = try startServer(host: "::1") { request in
            HTTPResponse(status: 200, body: .bytes(Array(request.clientAddress.utf8)))
        }
        defer { server.stop() }
        let client = try RawHTTPClient(port: server.port, host: "::1")
        try client.send("GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n")
        #expect(try client.readResponse().text == "::1")
    }

    @Test(.enabled(if: ipv6LoopbackWorks(), "no IPv6 loopback on this machine"))
    func theIPv6WildcardAlsoServesIPv4() throws {
        let server = try startServer(host: "::") { request in
            HTTPResponse(status: 200, body: .bytes(Array(request.clientAddress.utf8)))
        }
        defer { server.stop() }
        for host in ["127.0.0.1", "::1"] {
            let client = try RawHTTPClient(port: server.port, host: host)
            try client.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try client.readResponse().text == host)
        }
    }

    @Test func oversizeHeadersAreRefusedBeforeTheHandler() throws {
        let calls = Locked(0)
        let server = try startServer { _ in
            calls.update { $0 += 1 }
            return HTTPResponse(status: 200)
        }
        defer { server.stop() }
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET / HTTP/1.1\r\nHost: t\r\nX-Big: \(String(repeating: "b", count: 20_000))\r\n\r\n")
        let status = try client.readResponse().status
        #expect(status == 431)
        #expect(calls.value == 0)
    }

    @Test func invalidResponsesBecome500() throws {
        let server = try startServer { request in
            request.path == "/status"
                ? HTTPResponse(status: 42)
                : HTTPResponse(status: 200, headers: [("X-Bad", "a\r\nSet-Cookie: injected=1")])
        }
        defer { server.stop() }
        let client = try RawHTTPClient(port: server.port)
        for path in ["/status", "/header"] {
            try client.send("GET \(path) HTTP/1.1\r\nHost: t\r\n\r\n")
            let response = try client.readResponse()
            #expect(response.status == 500)
            #expect(response.headers["set-cookie"] == nil)
            #expect(response.text.contains("internal_error"))
        }
    }

    @Test func stopIsIdempotentAndClosesTheListener() throws {
        let server = try startServer { _ in HTTPResponse(status: 200) }
        let port = server.port
        server.stop()
        server.stop()
        #expect(!FreePort.canConnect(port: port))
    }
}

/// True if this machine can bind ::1 (containers sometimes have IPv6 off).
func ipv6LoopbackWorks() -> Bool {
    let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in6()
    address.sin6_family = sa_family_t(AF_INET6)
    address.sin6_addr = in6addr_loopback
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
    } == 0
}
