import FlareHTTP
import FlareTestSupport
import Foundation
import Testing

/// A server whose every request opens a new EventStream that the test can reach.
final class StreamServer: Sendable {
    let server: HTTPServer
    let streams = Locked<[EventStream]>([])
    let closes = Locked(0)

    init(maxBufferedBytes: Int = 256 * 1024, firstEvent: String? = nil) throws {
        let streams = self.streams
        let closes = self.closes
        server = try startServer { _ in
            let stream = EventStream(maxBufferedBytes: maxBufferedBytes)
            stream.onClose { closes.update { $0 += 1 } }
            if let firstEvent { stream.send(Array(firstEvent.utf8)) }
            streams.update { $0.append(stream) }
            return HTTPResponse(
                status: 200,
                headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store")],
                body: .stream(stream))
        }
    }

    /// Connects and waits for the response head, so the stream exists (and is, or soon is, suspended).
    func connect() throws -> (RawHTTPClient, EventStream) {
        let client = try RawHTTPClient(port: server.port)
        return try request(on: client)
    }

    func request(on client: RawHTTPClient) throws -> (RawHTTPClient, EventStream) {
        let before = streams.value.count
        try client.send("GET /api/v1/view/t/events HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n")
        let head = try client.readHead()
        #expect(head.status == 200)
        #expect(head.headers["content-type"] == "text/event-stream")
        #expect(head.headers["transfer-encoding"] == "chunked")
        let stream = try #require(streams.value.count > before ? streams.value[before] : nil)
        return (client, stream)
    }

    func forgetStreams() {
        streams.update { $0 = [] }
    }
}

@Suite struct EventStreamTests {
    @Test func eventsPushedFromAnotherThreadArriveAndFinishEndsTheResponse() throws {
        let fixture = try StreamServer()
        defer { fixture.server.stop() }
        let (client, stream) = try fixture.connect()

        // Pushed later, from a thread that is not the server's.
        let pusher = Thread {
            usleep(100_000)
            stream.send(Array("data: one\n\n".utf8))
            stream.send(Array("data: two\n\n".utf8))
        }
        pusher.start()
        #expect(client.read { _ in client.chunkedPayload().payload == "data: one\n\ndata: two\n\n" })

        stream.send(Array("data: three\n\n".utf8))
        stream.finish()
        #expect(stream.isClosed)
        #expect(!stream.send(Array("data: late\n\n".utf8)))
        #expect(client.read { _ in client.chunkedPayload().finished })
        #expect(client.chunkedPayload().payload == "data: one\n\ndata: two\n\ndata: three\n\n")
        #expect(fixture.closes.value == 1)
    }

    /// Events larger than the stream's block (`MicroHTTPDaemon.streamBlockBytes`) and than the connection's pool
    /// arrive whole: chunked over HTTP/1.1, and over HTTP/1.0 (no chunks, the end is the connection's close), which
    /// reads through the block a piece at a time.
    @Test func eventsLargerThanTheBlockArriveWholeOverBothProtocols() throws {
        let large = "data: " + String(repeating: "x", count: 20_000) + "\n\n"
        let small = "data: small\n\n"
        let fixture = try StreamServer()
        defer { fixture.server.stop() }
        let (client, stream) = try fixture.connect()
        stream.send(Array(large.utf8))
        stream.send(Array(small.utf8))
        #expect(client.read { _ in client.chunkedPayload().payload == large + small })

        let old = try RawHTTPClient(port: fixture.server.port)
        let before = fixture.streams.value.count
        try old.send("GET /api/v1/view/t/events HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n")
        let head = try old.readHead()
        #expect(head.status == 200 && head.headers["transfer-encoding"] == nil)
        let oldStream = try #require(fixture.streams.value.count > before ? fixture.streams.value[before] : nil)
        oldStream.send(Array(large.utf8))
        oldStream.send(Array(small.utf8))
        #expect(old.read { String(decoding: $0, as: UTF8.self) == large + small })
        oldStream.finish()
        #expect(old.waitForClose())
        #expect(String(decoding: old.buffer, as: UTF8.self) == large + small)
    }

    @Test func aFinishedStreamLeavesTheConnectionUsable() throws {
        let fixture = try StreamServer(firstEvent: "retry: 1000\n\n")
        defer { fixture.server.stop() }
        let (client, stream) = try fixture.connect()
        #expect(client.read { _ in client.chunkedPayload().payload == "retry: 1000\n\n" })
        stream.finish()
        #expect(client.read { _ in client.chunkedPayload().finished })
        // The terminating chunk ended the response, not the connection: it carries the next request.
        client.discardBuffer()
        let (_, next) = try fixture.request(on: client)
        #expect(next !== stream)
    }

    @Test func concurrentPushersLoseNoEvent() throws {
        let fixture = try StreamServer()
        defer { fixture.server.stop() }
        let connections = try (0..<10).map { _ in try fixture.connect() }
        let streams = connections.map(\.1)
        let pushers = 4
        let eventsPerPusher = 200
        let group = DispatchGroup()
        for pusher in 0..<pushers {
            DispatchQueue.global().async(group: group) {
                for number in 0..<eventsPerPusher {
                    for stream in streams {
                        stream.send(Array("data: \(pusher)-\(number)\n\n".utf8))
                    }
                }
            }
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        for (client, _) in connections {
            let expected = pushers * eventsPerPusher
            #expect(client.read { _ in client.chunkedPayload().payload.components(separatedBy: "\n\n").count - 1 == expected })
            // Each pusher's events arrive in the order it sent them.
            let events = client.chunkedPayload().payload.components(separatedBy: "\n\n").dropLast()
            for pusher in 0..<pushers {
                let numbers = events.filter { $0.hasPrefix("data: \(pusher)-") }.map { Int($0.split(separator: "-")[1])! }
                #expect(numbers == Array(0..<eventsPerPusher))
            }
        }
    }

    @Test func clientDisconnectFiresOnCloseOnceAndFreesTheStream() throws {
        let fixture = try StreamServer()
        defer { fixture.server.stop() }
        var (client, stream): (RawHTTPClient?, EventStream?) = try fixture.connect()
        weak let weakStream = stream
        client?.close()
        client = nil

        // A suspended connection does not see the client leave; the next writes do.
        let noticed = eventually {
            stream?.send(Array(": ping\n\n".utf8))
            return fixture.closes.value > 0
        }
        #expect(noticed)
        #expect(stream?.isClosed == true)
        #expect(stream?.send([1]) == false)
        stream = nil
        fixture.forgetStreams()
        // MHD releases its reference when it frees the response; nothing else may keep the stream.
        #expect(eventually { weakStream == nil })
        #expect(fixture.closes.value == 1)
    }

    @Test func stopWithOpenStreamsReturnsAndFiresOnClose() throws {
        let fixture = try StreamServer()
        var clients: [RawHTTPClient] = []
        for _ in 0..<3 {
            clients.append(try fixture.connect().0)
        }
        fixture.streams.value[0].send(Array("data: x\n\n".utf8))
        fixture.server.stop()
        #expect(fixture.closes.value == 3)
        #expect(fixture.streams.value.allSatisfy { $0.isClosed })
        for client in clients {
            #expect(client.waitForClose())
        }
    }

    @Test func aSlowClientOverflowsAndClosesTheStream() throws {
        let fixture = try StreamServer(maxBufferedBytes: 64 * 1024)
        defer { fixture.server.stop() }
        let (client, stream) = try fixture.connect()
        // The client reads nothing more: once the kernel buffers are full, our queue fills up.
        let event = [UInt8](repeating: UInt8(ascii: "x"), count: 16 * 1024)
        let deadline = ContinuousClock.now + .seconds(30)
        while stream.send(event), ContinuousClock.now < deadline {
            usleep(100)
        }
        #expect(stream.isClosed)
        #expect(fixture.closes.value == 1)
        #expect(client.waitForClose(timeout: .seconds(30)))
    }

    @Test func aStreamCanBeSentOnlyOnce() throws {
        let stream = EventStream()
        let server = try startServer { _ in
            HTTPResponse(status: 200, headers: [("Content-Type", "text/event-stream")], body: .stream(stream))
        }
        defer { server.stop() }
        let first = try RawHTTPClient(port: server.port)
        try first.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try first.readHead().status == 200)
        let second = try RawHTTPClient(port: server.port)
        try second.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try second.readResponse().status == 500)
        #expect(!stream.isClosed)
        // Not even once it has ended.
        first.close()
        #expect(eventually {
            stream.send(Array(": ping\n\n".utf8))
            return stream.isClosed
        })
        let third = try RawHTTPClient(port: server.port)
        try third.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try third.readResponse().status == 500)
    }

    @Test func theQueueIsBoundedWithoutAConnection() {
        let stream = EventStream(maxBufferedBytes: 10)
        let closes = Locked(0)
        stream.onClose { closes.update { $0 += 1 } }
        #expect(stream.send(Array("0123456789".utf8)))
        #expect(!stream.send([0]))
        #expect(stream.isClosed)
        stream.finish()
        #expect(closes.value == 1)
        // Registered after the close: runs at once.
        stream.onClose { closes.update { $0 += 1 } }
        #expect(closes.value == 2)
    }
}
