import FlareAPI
import FlareBridge
import FlareShares
import FlareCore
import FlareDaemonSettings
import FlareEvents
import FlareGateway
import FlareSQLite
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import FlareServiceTestSupport
import Testing
@testable import FlareHTTP
import FlareSystem
import FlareIngest
import FlareSettings

/// What `/healthz` is told about the parts the gateway cannot see.
final class HealthBox: Sendable {
    private let state = Mutex(HealthReport(mqttConnected: true, storeHealthy: true, storeSpaceLow: false))
    var report: HealthReport {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }
}

/// A gateway over a real share service, ingestor and SQLite store in a temp directory, driven through
/// `Gateway.handle` without any socket.
final class GatewayFixture {
    let directory: URL
    let store: SQLiteShareStore
    let metrics = Metrics()
    let brokerPublisher = RecordingPublisher()
    let service: ShareService
    let ingestor: FixIngestor
    let health = HealthBox()
    let gateway: Gateway
    let ownerKey: String
    let tokenKey: [UInt8]
    /// Time as the test moves it (`clock.advance`): rate limits refill, trackers go stale and shares expire only then.
    let clock: ManualClock
    /// The store as the service sees it, when it fails on demand (`faulty: true`).
    let faults: FaultyStore?
    static let publicURL = "https://sos.example.org"
    static let mqttPublicURL = "mqtts://sos.example.org:8883"

    /// The gateway's listeners, once `serveLive()` started them: the public one and the metrics one.
    private(set) var publicServer: HTTPServer?
    private(set) var metricsServer: HTTPServer?
    /// Live streams held open by `openStream` until the fixture goes.
    private var heldStreams: [Any] = []

    /// - Parameters:
    ///   - faulty: the service's store is a `FaultyStore` around the SQLite one (`faults`).
    ///   - other: use that fixture's database, token key and owner key, with a memory of its own that knows nothing
    ///     yet: what another instance, or this one after a restart, would be.
    ///   - hostResolver: where setting a limited key's webhook looks its host name up.
    ///   - pushes: events are pushed to subscribed browsers (`EventDeliverer.pushes`); the gateway's push settings are
    ///     `adjust`'s to set.
    init(settings: [String: String] = [:], faulty: Bool = false, sharingDatabaseOf other: GatewayFixture? = nil,
         hostResolver: any HostResolving = SystemHostResolver(), pushes: Bool = false, adjust: (inout GatewayConfiguration) -> Void = { _ in }) throws {
        directory = try other?.directory ?? TempDirectory.make(prefix: "flare-gateway")
        store = try SQLiteShareStore(path: directory.appendingPathComponent("flare.db").path)
        faults = faulty ? FaultyStore(store) : nil
        let config = try Configuration.defaults(FlaredSettings.all, overriding: [
            "FLARE_PUBLIC_URL": Self.publicURL,
            "FLARE_MQTT_PUBLIC_URL": Self.mqttPublicURL,
            // No Leaflet here: the gateway serves the viewer without the map (a warning, below the test logger's level).
            "FLARE_LEAFLET_DIR": directory.appendingPathComponent("no-leaflet").path,
        ].merging(settings) { $1 })
        let logger = Logger(label: "gateway-test", level: .error)
        let clock = other?.clock ?? ManualClock(readingsIncrease: true)
        self.clock = clock
        var key = [UInt8](repeating: 0, count: 32)
        var random = SystemRandomNumberGenerator()
        for index in key.indices { key[index] = random.next() }
        tokenKey = other?.tokenKey ?? key
        ownerKey = other?.ownerKey ?? OwnerKey.generate()
        service = ShareService(store: faults ?? store, trailLength: Int(try config.integer("FLARE_TRAIL_LENGTH")), publisher: brokerPublisher,
                               tokenKey: tokenKey, policy: try SharePolicy(config), trackerRules: try TrackerRules(config), clock: clock, metrics: metrics, logger: logger,
                               pushes: pushes, hostResolver: hostResolver, sosPerDevicePerHour: Int(try config.integer("FLARE_SOS_PER_DEVICE_PER_HOUR")))
        let parser = try LocationPayloadParser(config)
        ingestor = FixIngestor(store: faults ?? store, shares: service, metrics: metrics, logger: logger, clock: clock, parser: parser)
        ingestor.start()
        let health = self.health
        var configuration = try GatewayConfiguration(config)
        adjust(&configuration)
        gateway = try Gateway(configuration: configuration, shares: service, ingestor: ingestor,
                              metrics: metrics, logger: logger, clock: clock, parser: parser, health: { health.report })
        if other == nil { try store.insertOwnerKey(hash: SecretHash(of: ownerKey), label: "test", createdAt: clock.now()) }
    }

    deinit {
        gateway.closeLiveStreams()
        heldStreams.removeAll()
        publicServer?.stop()
        metricsServer?.stop()
        service.stopScheduler()
        ingestor.drain(failingStoreGraceSeconds: 5)
        try? FileManager.default.removeItem(at: directory)
    }

    // MARK: Requests

    /// One request through the gateway's handler. Every answer must carry `X-Content-Type-Options: nosniff`.
    @discardableResult
    func send(_ method: String, _ path: String, query: [String: String] = [:], bearer: String? = nil, body: [UInt8] = [],
              headers: [String: String] = [:], from address: String = "127.0.0.1",
              sourceLocation: SourceLocation = #_sourceLocation) -> Reply {
        var headers = headers
        if let bearer { headers["Authorization"] = "Bearer \(bearer)" }
        let reply = Reply(gateway.handle(HTTPRequest(method: method, path: path, query: query, headers: headers, body: body,
                                                     clientAddress: address)))
        #expect(reply.header("X-Content-Type-Options") == "nosniff", "\(method) \(path) lacks nosniff", sourceLocation: sourceLocation)
        return reply
    }

    @discardableResult
    func send(_ method: String, _ path: String, query: [String: String] = [:], bearer: String? = nil, json: String,
              sourceLocation: SourceLocation = #_sourceLocation) -> Reply {
        send(method, path, query: query, bearer: bearer, body: Array(json.utf8), sourceLocation: sourceLocation)
    }

    /// Creates a share as the owner; fails the test unless the gateway answers 201.
    func createShare(name: String? = "Anna", durationSeconds: Int? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws -> CreatedShare {
        var fields: [String] = []
        if let name { fields.append("\"name\":\"\(name)\"") }
        if let durationSeconds { fields.append("\"duration_s\":\(durationSeconds)") }
        let reply = send("POST", "/api/v1/shares", bearer: ownerKey, json: "{\(fields.joined(separator: ","))}", sourceLocation: sourceLocation)
        try #require(reply.status == 201, "create answered \(reply.status): \(reply.text)", sourceLocation: sourceLocation)
        return try reply.decode(CreatedShare.self)
    }

    /// Stops a share as the owner; fails the test unless the gateway answers 200.
    func stop(_ share: CreatedShare, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let reply = send("POST", "/api/v1/shares/\(share.shareID)/stop", bearer: ownerKey, sourceLocation: sourceLocation)
        try #require(reply.status == 200, "stop answered \(reply.status): \(reply.text)", sourceLocation: sourceLocation)
    }

    /// Records a fix as the bridge does for an MQTT message, and waits until the share's last position is it.
    func recordFix(_ share: CreatedShare, latitude: Double, longitude: Double, tst: Int64, accuracy: Double = 12,
                   sourceLocation: SourceLocation = #_sourceLocation) throws {
        let id = try #require(ShareID(share.shareID), sourceLocation: sourceLocation)
        let payload = #"{"_type":"location","lat":\#(latitude),"lon":\#(longitude),"tst":\#(tst),"acc":\#(accuracy),"batt":80}"#
        #expect(ingestor.handle(topic: Topics.location(id), payload: Array(payload.utf8), retained: false) == nil,
                sourceLocation: sourceLocation)
        try waitForLast(share, tst: tst, sourceLocation: sourceLocation)
    }

    /// Waits (generously) until the bridge has stored and recorded the fix with this `tst` as the share's last.
    func waitForLast(_ share: CreatedShare, tst: Int64, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let id = try #require(ShareID(share.shareID), sourceLocation: sourceLocation)
        #expect(ingestor.waitUntilStored(), sourceLocation: sourceLocation)
        let recorded = eventually {
            guard case .live(let snapshot) = try? service.share(id) else { return false }
            return snapshot.last?.timestamp == tst
        }
        try #require(recorded, "the fix at \(tst) never became the share's last", sourceLocation: sourceLocation)
    }

    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    // MARK: In memory and live

    /// Starts the gateway's two listeners on free loopback ports, as `flared` wires them.
    func serveLive() throws {
        let publicServer = HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), handler: gateway.handle)
        let metricsServer = HTTPServer(configuration: .init(host: "127.0.0.1", port: 0, threadPoolSize: 1), handler: gateway.handleMetricsListener)
        try publicServer.start()
        try metricsServer.start()
        self.publicServer = publicServer
        self.metricsServer = metricsServer
    }

    /// One request, through `Gateway.handle` (or the metrics listener's handler) in memory, or over a connection to
    /// the live listener. `from` is sent as X-Forwarded-For both ways (the fixture must trust 127.0.0.1 for it to
    /// count), so that live requests can come from more than one address.
    func request(_ transport: Transport, _ method: String, _ path: String, listener: Listener = .public, bearer: String? = nil,
                 headers: [String: String] = [:], json: String? = nil, from address: String? = nil,
                 sourceLocation: SourceLocation = #_sourceLocation) throws -> Reply {
        var headers = headers
        if let bearer { headers["Authorization"] = "Bearer \(bearer)" }
        if let address { headers["X-Forwarded-For"] = address }
        let body = json.map { Array($0.utf8) } ?? []
        switch transport {
        case .memory:
            let handler = listener == .public ? gateway.handle : gateway.handleMetricsListener
            return Reply(handler(HTTPRequest(method: method, path: path, headers: headers, body: body)))
        case .live:
            if publicServer == nil { try serveLive() }
            let port = try #require(listener == .public ? publicServer?.port : metricsServer?.port, sourceLocation: sourceLocation)
            if json != nil { headers["Content-Type"] = "application/json" }
            let raw = try RawHTTP.request(method, port: port, path: path, headers: headers, body: body)
            return Reply(HTTPResponse(status: raw.status, headers: raw.headers.map { ($0.key, $0.value) }, body: .bytes(raw.body)))
        }
    }

    /// Opens a live stream and holds it open: its status, and for a refusal the answer's error code and Retry-After.
    func openStream(_ transport: Transport, token: String, from address: String,
                    sourceLocation: SourceLocation = #_sourceLocation) throws -> (status: Int, error: String?, retryAfter: String?) {
        let path = "/api/v1/view/\(token)/events"
        switch transport {
        case .memory:
            let reply = Reply(gateway.handle(HTTPRequest(method: "GET", path: path, headers: ["X-Forwarded-For": address])))
            if let stream = reply.stream { heldStreams.append(stream) }
            return (reply.status, reply.errorCode, reply.header("Retry-After"))
        case .live:
            if publicServer == nil { try serveLive() }
            let port = try #require(publicServer?.port, sourceLocation: sourceLocation)
            let connection = try Connection(port: port, timeoutSeconds: 10)
            try connection.send(Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nConnection: close\r\nX-Forwarded-For: \(address)\r\n\r\n".utf8))
            var data: [UInt8] = []
            // A stream's head comes with its first event; a refusal's whole answer, then the connection closes.
            while data.firstRange(of: Array("\r\n\r\n".utf8)) == nil, let chunk = connection.receive(), !chunk.isEmpty { data += chunk }
            let head = String(decoding: data, as: UTF8.self)
            let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
            if status == 200 {
                heldStreams.append(connection)
                return (200, nil, nil)
            }
            while let chunk = connection.receive(), !chunk.isEmpty { data += chunk }
            let raw = try RawHTTP.parse(data)
            let reply = Reply(HTTPResponse(status: raw.status, headers: raw.headers.map { ($0.key, $0.value) }, body: .bytes(raw.body)))
            return (status, reply.errorCode, reply.header("Retry-After"))
        }
    }

    /// Live streams the gateway counts as open.
    var openStreamCount: Int {
        let line = metrics.renderText().split(separator: "\n").first { $0.hasPrefix("flare_sse_clients ") }
        return line.flatMap { Int(Double($0.split(separator: " ")[1]) ?? -1) } ?? -1
    }
}

/// How a gateway test reaches the gateway: its handler in memory, or a live listener over loopback.
enum Transport: String, CaseIterable, CustomTestStringConvertible {
    case memory, live
    var testDescription: String { rawValue }
}

enum Listener { case `public`, metrics }

extension CreatedShare {
    /// The view token is the last path component of the share link.
    var viewToken: String { String(shareURL.absoluteString.split(separator: "/").last ?? "") }
}

/// A gateway answer, read the way a client would.
struct Reply {
    let response: HTTPResponse

    init(_ response: HTTPResponse) { self.response = response }

    var status: Int { response.status }

    /// The first header of that name, compared case-insensitively.
    func header(_ name: String) -> String? {
        response.headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    var contentType: String? { header("Content-Type") }

    var bytes: [UInt8] { response.body.joinedBytes ?? [] }

    var text: String { String(decoding: bytes, as: UTF8.self) }

    var stream: EventStream? {
        if case .stream(let stream) = response.body { return stream }
        return nil
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try APIJSON.decode(type, from: bytes) }

    /// The contract's error code (`{"error":…,"message":…}`), or nil if the body is not that shape.
    var errorCode: String? {
        guard let body = try? decode(APIErrorBody.self), !body.message.isEmpty else { return nil }
        return body.error
    }

    /// The body as untyped JSON, for checks the Codable types cannot make (key presence, value kinds).
    var jsonObject: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] }
}

/// One Server-Sent Event as the browser's EventSource would see it.
struct ServerSentEvent: Equatable {
    var name: String?
    var data: String?
    var retry: Int?
}

/// Reads a live-event stream in memory, with no connection: drains what the gateway queued (through the server's
/// own `EventStream.read`) and splits it into events.
final class EventStreamReader {
    let stream: EventStream
    private var buffer: [UInt8] = []
    private(set) var finished = false

    init(_ stream: EventStream) { self.stream = stream }

    private func drain() {
        var scratch = [UInt8](repeating: 0, count: 4096)
        while !finished {
            let result = scratch.withUnsafeMutableBytes { stream.read(into: $0) }
            switch result {
            case .bytes(let count): buffer += scratch[..<count]
            case .end: finished = true
            // With no connection attached, an open stream with nothing queued answers `.abort`.
            case .abort: if stream.isClosed { finished = true }; return
            case .suspended: return
            }
        }
    }

    /// The next complete event (comments such as keepalives skipped), waiting up to a generous deadline.
    func next(timeout: Duration = .seconds(20)) -> ServerSentEvent? {
        var event: ServerSentEvent?
        _ = eventually(timeout: timeout) {
            drain()
            event = takeEvent()
            return event != nil || (finished && !hasCompleteBlock)
        }
        return event
    }

    private var hasCompleteBlock: Bool { blockEnd() != nil }

    private func blockEnd() -> Int? {
        guard buffer.count >= 2 else { return nil }
        for index in 0..<(buffer.count - 1) where buffer[index] == 10 && buffer[index + 1] == 10 { return index }
        return nil
    }

    private func takeEvent() -> ServerSentEvent? {
        while let end = blockEnd() {
            let block = String(decoding: buffer[..<end], as: UTF8.self)
            buffer.removeFirst(end + 2)
            var event = ServerSentEvent()
            var meaningful = false
            for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
                if line.hasPrefix(":") { continue }
                guard let colon = line.firstIndex(of: ":") else { continue }
                let field = String(line[..<colon])
                var value = line[line.index(after: colon)...]
                if value.first == " " { value = value.dropFirst() }
                switch field {
                case "event": event.name = String(value); meaningful = true
                case "data": event.data = (event.data.map { $0 + "\n" } ?? "") + value; meaningful = true
                case "retry": event.retry = Int(value); meaningful = true
                default: break
                }
            }
            if meaningful { return event }
        }
        return nil
    }
}
