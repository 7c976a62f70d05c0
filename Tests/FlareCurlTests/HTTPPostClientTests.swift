import FlareCurl
import FlareTestSupport
import Testing

/// The POST that webhooks go out with, against real receivers on loopback: it connects where it is told and nowhere
/// else. (That a proxy in the environment is not used is tested on flared itself, in `EventDeliveryTests`: setting
/// `http_proxy` here would reach every suite running in this process.)
@Suite struct HTTPPostClientTests {
    let client = HTTPPostClient()
    let body = Array(#"{"type":"share.started"}"#.utf8)

    /// No DNS knows the name: the request reaches the receiver at the address given, with the name in `Host`.
    @Test(arguments: ["127.0.0.1", "::1"]) func aRequestGoesToTheAddressGivenWhateverItsNameResolvesTo(address: String) throws {
        let receiver = try RecordingReceiver(host: address)
        defer { receiver.stop() }
        let status = try client.post(url: "http://receiver.flare.invalid:\(receiver.port)/hook?desk=1", connectingTo: [address],
                                     headers: [("content-type", "application/json"), ("webhook-id", "msg_1")], body: body, timeout: .seconds(10))
        #expect(status == 204)
        let request = try #require(receiver.requests.first)
        #expect(request.method == "POST" && request.path == "/hook?desk=1")
        #expect(request.headers["host"] == "receiver.flare.invalid:\(receiver.port)")
        #expect(request.headers["webhook-id"] == "msg_1" && request.headers["content-type"] == "application/json")
        #expect(request.body == body)
        #expect(request.headers["expect"] == nil)
    }

    /// `localhost` resolves to the receiver for anyone who looks it up; pinned to another address, the request never
    /// gets there.
    @Test func aNameIsNotLookedUpAgain() throws {
        let receiver = try RecordingReceiver()
        defer { receiver.stop() }
        // 127.0.0.2 is loopback too, but nothing listens there on the receiver's port: refused.
        let error = #expect(throws: HTTPPostError.self) {
            try client.post(url: "http://localhost:\(receiver.port)/hook", connectingTo: ["127.0.0.2"], headers: [], body: body, timeout: .seconds(10))
        }
        #expect(error?.reason == "connection refused")
        #expect(receiver.requests.isEmpty)
    }

    @Test func theNextAddressIsTriedWhileOneRefuses() throws {
        let receiver = try RecordingReceiver()
        defer { receiver.stop() }
        #expect(try client.post(url: "http://receiver.flare.invalid:\(receiver.port)/", connectingTo: ["127.0.0.2", "127.0.0.1"], headers: [],
                                body: body, timeout: .seconds(10)) == 204)
        #expect(receiver.requests.count == 1)
    }

    /// A redirect is the answer: its status comes back, and where it points gets nothing.
    @Test func aRedirectIsAnsweredNotFollowed() throws {
        let elsewhere = try RecordingReceiver()
        defer { elsewhere.stop() }
        let redirecting = try RecordingReceiver(status: 302, headers: [("Location", "http://127.0.0.1:\(elsewhere.port)/inside")])
        defer { redirecting.stop() }
        #expect(try client.post(url: "http://127.0.0.1:\(redirecting.port)/", connectingTo: ["127.0.0.1"], headers: [], body: body,
                                timeout: .seconds(10)) == 302)
        #expect(redirecting.requests.count == 1 && elsewhere.requests.isEmpty)
    }

    /// Refused before anything is sent: no address, a name where an address belongs, a header that would split into
    /// two, a scheme other than http and https.
    @Test func whatCannotBePinnedOrSentAsGivenIsRefused() throws {
        let receiver = try RecordingReceiver()
        defer { receiver.stop() }
        let url = "http://127.0.0.1:\(receiver.port)/"
        #expect(throws: HTTPPostError.self) { try client.post(url: url, connectingTo: [], headers: [], body: body, timeout: .seconds(5)) }
        #expect(throws: HTTPPostError.self) { try client.post(url: url, connectingTo: ["localhost"], headers: [], body: body, timeout: .seconds(5)) }
        #expect(throws: HTTPPostError.self) {
            try client.post(url: url, connectingTo: ["127.0.0.1"], headers: [("x-a", "1\r\nx-injected: 1")], body: body, timeout: .seconds(5))
        }
        #expect(throws: HTTPPostError.self) {
            try client.post(url: "ftp://127.0.0.1:\(receiver.port)/", connectingTo: ["127.0.0.1"], headers: [], body: body, timeout: .seconds(5))
        }
        #expect(receiver.requests.isEmpty)
    }

    /// A receiver that takes the connection and never answers costs the request's time limit, and says so.
    @Test func aReceiverThatNeverAnswersTimesOut() throws {
        let silent = try SilentReceiver()
        defer { silent.stop() }
        let error = #expect(throws: HTTPPostError.self) {
            try client.post(url: "http://127.0.0.1:\(silent.port)/", connectingTo: ["127.0.0.1"], headers: [], body: body, timeout: .seconds(1))
        }
        #expect(error?.reason == "timed out")
        #expect(silent.connections == 1)
    }
}
