import FlareAPI
public import FlareIngest
public import FlareShares
public import FlareCore
public import FlareHTTP
import FlareStore
import FlareSystem
import Synchronization
import FlareCodec

/// Health of the parts the gateway cannot see for itself.
public struct HealthReport: Sendable {
    public var mqttConnected: Bool
    /// False after a failed write, until a write succeeds again.
    public var storeHealthy: Bool
    /// The store's disk is below its minimum free space (it may still be writing).
    public var storeSpaceLow: Bool
    public init(mqttConnected: Bool, storeHealthy: Bool, storeSpaceLow: Bool = false) {
        self.mqttConnected = mqttConnected
        self.storeHealthy = storeHealthy
        self.storeSpaceLow = storeSpaceLow
    }
}

/// The HTTP face of Flare: owner API, link endpoints (page, view JSON, live events), HTTP ingest, operator
/// endpoints. Share state comes through one door, `ShareService`; every body is a `FlareAPI` type.
public final class Gateway: Sendable {
    let configuration: GatewayConfiguration
    let shares: ShareService
    let ingestor: FixIngestor
    let metrics: Metrics
    private let requestCounters: [Int: Metrics.Counter]
    let logger: Logger
    let clock: any Clock
    let health: @Sendable () -> HealthReport
    let assets: ViewerAssets
    let sosPage: SOSPageAssets
    let apiDocument: OpenAPIDocument
    let addressLimiter: RateLimiter
    let tokenLimiter: RateLimiter
    /// Fixes over HTTP, per share (`FLARE_FIX_RATE_PER_SHARE`, the bound the broker applies over MQTT): one budget for
    /// Flare's ingest and the OwnTracks apps' HTTP mode, far above a phone in move mode (one message every few
    /// seconds), enough for one sending the backlog it queued while offline, one message per request.
    let fixLimiter: RateLimiter
    /// Extensions with a device token, per share: a phone prolongs its share now and then, not in a loop.
    let deviceExtendLimiter = RateLimiter(rule: .init(ratePerSecond: 1.0 / 60, burst: 10))
    /// Track exports sending now (`Gateway+Track.swift`).
    let trackExports = Mutex(0)
    /// Answers per address and share: their pace, and how many in all (`GatewayConfiguration.answersPerAddress`).
    let answerLimiter: RateLimiter
    /// Contacts a key adds: a family's in a minute, a script's far fewer than the per-key cap takes to fill.
    let contactLimiter = RateLimiter(rule: .init(ratePerSecond: 1.0 / 6, burst: 30))
    /// Check-ins armed per key: a few a day is use, thirty at once a script.
    let checkinLimiter = RateLimiter(rule: .init(ratePerSecond: 1.0 / 6, burst: 30))
    /// Requests with a device's secret, per device: a phone reporting every second with room for its backlog, a person
    /// pressing and stopping; not a script trying PINs (which the store's lock stops anyway).
    let deviceLimiter = RateLimiter(rule: .init(ratePerSecond: 5, burst: 120))
    /// SOS starts and stops per client address, whatever the device: one phone presses a few times; an address
    /// cycling through stolen secrets does not get to start or stop dozens of SOS.
    let sosAddressLimiter: RateLimiter
    /// Push subscriptions made or ended per client address: a family's few browsers, each now and then.
    let pushLimiter = RateLimiter(rule: .init(ratePerSecond: 0.2, burst: 20))
    let answerQuota: RateLimiter
    /// /metrics on the public listener (with `FLARE_METRICS_TOKEN`), per client address: a scraper every few seconds
    /// and more; a wrong token costs more.
    let metricsLimiter = RateLimiter(rule: .init(ratePerSecond: 2, burst: 20))
    /// SHA-256 of `FLARE_METRICS_TOKEN`, if set.
    let metricsTokenHash: SecretHash?
    let liveStreams: LiveStreams
    private let storeFailureLog = RateLimiter(rule: .init(ratePerSecond: 0.2, burst: 5), maximumKeys: 4)
    let parser: LocationPayloadParser

    public init(configuration: GatewayConfiguration, shares: ShareService, ingestor: FixIngestor, metrics: Metrics, logger: Logger,
                clock: any Clock, parser: LocationPayloadParser,
                health: @escaping @Sendable () -> HealthReport) throws(ViewerAssets.LoadError) {
        self.configuration = configuration
        self.shares = shares
        self.ingestor = ingestor
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        self.parser = parser
        self.health = health
        self.assets = try ViewerAssets(configuration: configuration, logger: logger)
        self.sosPage = SOSPageAssets(languages: assets.languages, languageOptions: assets.languageOptions, logger: logger)
        self.apiDocument = try OpenAPIDocument()
        self.addressLimiter = RateLimiter(rule: configuration.linkRatePerAddress)
        self.tokenLimiter = RateLimiter(rule: configuration.linkRatePerToken)
        self.fixLimiter = RateLimiter(rule: configuration.fixRatePerShare)
        self.sosAddressLimiter = RateLimiter(rule: configuration.sosRatePerAddress)
        self.answerLimiter = RateLimiter(rule: configuration.answerRate)
        let answers = Double(configuration.answersPerAddress)
        self.answerQuota = RateLimiter(rule: .init(ratePerSecond: answers / 86_400, burst: answers))
        self.liveStreams = LiveStreams(keepaliveSeconds: configuration.keepaliveSeconds, perLink: configuration.liveStreamsPerLink,
                                       perAddress: configuration.liveStreamsPerAddress)
        self.metricsTokenHash = configuration.metricsToken.map { SecretHash(of: $0) }
        metrics.register(FlareMetrics.httpRequests)
        // The statuses the gateway answers with, counted without a lock (every request counts one).
        self.requestCounters = Dictionary(uniqueKeysWithValues: [200, 201, 204, 304, 400, 401, 403, 404, 405, 409, 410, 413, 415, 429, 500, 503]
            .map { ($0, metrics.counter(FlareMetrics.httpRequests, labels: [("status", String($0))])) })
        metrics.register(FlareMetrics.rateLimited)
        metrics.registerGauge(FlareMetrics.sseClients) { [liveStreams] in Double(liveStreams.count) }
    }

    /// Runs a handler whose refusals are thrown (`APIError`), answering each as its response.
    func answering(_ body: () throws(APIError) -> HTTPResponse) -> HTTPResponse {
        do { return try body() } catch { return error.response }
    }

    /// A store failure on a request path: said in the log (a few times a minute at most: an outage fails every
    /// request) and answered `storeUnavailable`.
    func storeFailed(_ error: StoreError, _ doing: String) -> APIError {
        noteStoreFailure("\(doing): \(error)")
        return .storeUnavailable
    }

    func noteStoreFailure(_ message: @autoclosure () -> String) {
        if storeFailureLog.take("store", nowMillis: clock.monotonicMillis()) == nil { logger.error(message()) }
    }

    /// Ends every live stream (the drain before the HTTP server stops).
    public func closeLiveStreams() { liveStreams.closeAll() }

    /// The server's entry point: route, answer, count.
    @Sendable public func handle(_ request: HTTPRequest) -> HTTPResponse {
        var response = route(request)
        if response.status == 405 { response.headers.append(("Allow", Self.allowedMethods(path: request.path))) }
        response.headers.append(("X-Content-Type-Options", "nosniff"))
        response.headers.append(("Referrer-Policy", "no-referrer"))
        if let counter = requestCounters[response.status] {
            counter.increment()
        } else {
            metrics.increment(FlareMetrics.httpRequests, labels: [("status", String(response.status))])
        }
        return response
    }

    private func route(_ request: HTTPRequest) -> HTTPResponse {
        // Split as bytes: splitting a String by Character was a twentieth of a link request's CPU.
        let parts = request.path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
            .map { String(Substring($0)) }
        switch (request.method, parts.count, parts.first) {
        case (_, _, "api") where parts.count >= 3 && parts[1] == "v1":
            return routeAPI(request, Array(parts.dropFirst(2)))
        case ("GET", 2, "s"), ("HEAD", 2, "s"):
            return viewerPage(request, token: parts[1])
        case ("GET", 1, "sos"), ("HEAD", 1, "sos"):
            return sosPage.page(language: assets.negotiateLanguage(request)) ?? notFoundPage(request)
        case ("GET", 2...3, "sos"):
            return sosPage.file(parts.dropFirst().joined(separator: "/")) ?? notFoundPage(request)
        case ("GET", 1, "sos-sw.js"):
            return sosPage.file("sw.js") ?? notFoundPage(request)
        case ("GET", 3, "s") where parts[2] == "feed.kml":
            return liveFeed(request, token: parts[1])
        case ("GET", 3, "s") where parts[2] == "manifest.webmanifest":
            return viewerManifest(request, token: parts[1])
        case ("GET", 1, "alerts"), ("HEAD", 1, "alerts"):
            return assets.alertsPage(language: assets.negotiateLanguage(request)) ?? notFoundPage(request)
        case ("GET", 2, "viewer") where parts[1] == "sw.js":
            // Served from /viewer/, it controls a link's page (/s/<token>) or the alerts page (/alerts).
            return assets.response(for: request).map { response in
                var allowed = response
                allowed.headers.append(("Service-Worker-Allowed", "/"))
                return allowed
            } ?? notFoundPage(request)
        case ("GET", _, "viewer"), ("GET", _, "vendor"):
            return assets.response(for: request) ?? notFoundPage(request)
        case ("GET", 1, "healthz"):
            return healthz()
        case (_, 1, "metrics"):
            return publicMetrics(request)
        case (_, _, "s"), (_, _, "healthz"):
            return APIError.methodNotAllowed.response
        default:
            return APIError.notFound("no such endpoint").response
        }
    }

    private func routeAPI(_ request: HTTPRequest, _ parts: [String]) -> HTTPResponse {
        switch (parts.first, parts.count, request.method) {
        case ("shares", 1, "POST"): return createShare(request)
        case ("shares", 1, "GET"): return listShares(request)
        case ("shares", 2, "GET"): return showShare(request, id: parts[1])
        case ("shares", 3, "POST") where parts[2] == "stop": return stopShare(request, id: parts[1])
        case ("shares", 3, "POST") where parts[2] == "extend": return extendShare(request, id: parts[1])
        case ("shares", 3, "POST") where parts[2] == "locations": return ingestLocation(request, id: parts[1])
        case ("shares", 3, "GET") where parts[2] == "owntracks": return ownTracksConfiguration(request, id: parts[1], download: false)
        case ("shares", 3, "GET") where parts[2] == "owntracks.otrc": return ownTracksConfiguration(request, id: parts[1], download: true)
        case ("shares", 4, "GET") where parts[2] == "owntracks": return ownTracksResource(request, id: parts[1], name: parts[3])
        case ("shares", 4, "POST") where parts[2] == "owntracks" && parts[3] == "http": return ownTracksHTTP(request, id: parts[1])
        case ("shares", 3, "POST") where parts[2] == "watch-tokens": return createWatchToken(request, id: parts[1])
        case ("checkins", 1, "POST"): return armCheckin(request)
        case ("checkins", 2, "GET"): return showCheckin(request, id: parts[1])
        case ("checkins", 3, "POST") where parts[2] == "done": return checkinDone(request, id: parts[1])
        case ("checkins", 3, "POST") where parts[2] == "extend": return extendCheckin(request, id: parts[1])
        case ("checkins", 1...3, _): return APIError.methodNotAllowed.response
        case ("devices", 2, "POST") where parts[1] == "sos": return startSOS(request)
        case ("devices", 2, "GET") where parts[1] == "sos": return sosState(request)
        case ("devices", 2, "GET") where parts[1] == "me": return deviceCard(request)
        case ("devices", 3, "POST") where parts[1] == "sos" && parts[2] == "extend": return extendSOS(request)
        case ("devices", 3, "POST") where parts[1] == "sos" && parts[2] == "stop": return stopSOS(request)
        case ("devices", 2, "POST") where parts[1] == "locations": return deviceLocation(request)
        case ("devices", 2, _) where parts[1] == "sos" || parts[1] == "locations" || parts[1] == "me", ("devices", 3, _) where parts[1] == "sos":
            return APIError.methodNotAllowed.response
        case ("devices", 1, "POST"): return createDevice(request)
        case ("devices", 1, "GET"): return listDevices(request)
        case ("devices", 2, "GET"): return showDevice(request, id: parts[1])
        case ("devices", 2, "PATCH"): return changeDevice(request, id: parts[1])
        case ("devices", 2, "DELETE"): return removeDevice(request, id: parts[1])
        case ("devices", 3, "POST") where parts[2] == "secret": return newDeviceSecret(request, id: parts[1])
        case ("devices", 3, "GET") where parts[2] == "setup": return deviceSetup(request, id: parts[1])
        case ("devices", 1...3, _): return APIError.methodNotAllowed.response
        case ("osmand", 1...2, "GET"), ("osmand", 1...2, "POST"): return osmand(request, secret: parts.count == 2 ? parts[1] : nil)
        case ("osmand", 1...2, _): return APIError.methodNotAllowed.response
        case ("contacts", 1, "POST"): return createContact(request)
        case ("contacts", 1, "GET"): return listContacts(request)
        case ("contacts", 2, "GET"): return showContact(request, id: parts[1])
        case ("contacts", 2, "DELETE"): return removeContact(request, id: parts[1])
        case ("contacts", 3, "GET") where parts[2] == "alerts-link": return alertsLink(request, id: parts[1])
        case ("contacts", 3, _) where parts[2] == "alerts-link": return APIError.methodNotAllowed.response
        case ("contacts", 1...2, _): return APIError.methodNotAllowed.response
        case ("keys", 1, "POST"): return createKey(request)
        case ("keys", 1, "GET"): return listKeys(request)
        case ("keys", 2, "DELETE"): return revokeKey(request, id: parts[1])
        case ("keys", 3, "PUT") where parts[2] == "webhook": return setWebhook(request, id: parts[1])
        case ("keys", 3, "DELETE") where parts[2] == "webhook": return removeWebhook(request, id: parts[1])
        case ("keys", 1...2, _): return APIError.methodNotAllowed.response
        case ("keys", 3, _) where parts[2] == "webhook": return APIError.methodNotAllowed.response
        case ("view", 2, "GET"): return viewJSON(request, token: parts[1])
        case ("view", 3, "GET") where parts[2] == "events": return viewEvents(request, token: parts[1])
        case ("view", 3, "POST") where parts[2] == "locate": return locate(request, token: parts[1])
        case ("view", 3, "POST") where parts[2] == "answers": return postAnswer(request, token: parts[1])
        case ("view", 3, "GET") where parts[2].hasPrefix("track."): return linkTrack(request, token: parts[1], file: parts[2])
        case ("view", 3, "POST") where parts[2] == "push": return subscribeViewer(request, token: parts[1])
        case ("view", 3, "DELETE") where parts[2] == "push": return unsubscribeViewer(request, token: parts[1])
        case ("push", 2, "GET") where parts[1] == "key": return pushKey(request)
        case ("push", 2, _) where parts[1] == "key": return APIError.methodNotAllowed.response
        case ("alerts", 1, "GET"): return alertsCard(request)
        case ("alerts", 2, "POST") where parts[1] == "push": return subscribeAlerts(request)
        case ("alerts", 2, "DELETE") where parts[1] == "push": return unsubscribeAlerts(request)
        case ("alerts", 1...2, _): return APIError.methodNotAllowed.response
        case ("shares", 3, "GET") where parts[2] == "answers": return listAnswers(request, id: parts[1])
        case ("shares", 3, "GET") where parts[2].hasPrefix("track."): return ownerTrack(request, id: parts[1], file: parts[2])
        case ("shares", 3, "GET") where parts[2] == "links": return listLinks(request, id: parts[1])
        case ("shares", 3, "POST") where parts[2] == "links": return addLinks(request, id: parts[1])
        case ("shares", 4, "DELETE") where parts[2] == "links": return withdrawLink(request, id: parts[1], link: parts[3])
        case ("shares", 4, _) where parts[2] == "links": return APIError.methodNotAllowed.response
        case ("shares", 1...3, _), ("view", 2...3, _): return APIError.methodNotAllowed.response
        case ("shares", 4, _) where parts[2] == "owntracks" && Self.ownTracksResources.contains(parts[3]):
            return APIError.methodNotAllowed.response
        case ("openapi.json", 1, "GET"): return apiDocument.response
        case ("openapi.json", 1, _): return APIError.methodNotAllowed.response
        default: return APIError.notFound("no such endpoint").response
        }
    }

    /// What `GET /api/v1/shares/{id}/owntracks/<name>` serves (`ownTracksResource`); the apps' HTTP mode only posts.
    static let ownTracksResources: Set<String> = ["link", "qr.png", "qr.svg", "http"]

    /// Every route the two switches above answer, as the OpenAPI document (`OpenAPIDocument`) names them. The switches
    /// route; this list is what `OpenAPIRouteTests` holds against them both ways (each entry is routed, and another
    /// method on its path is refused) and against the document (each entry is documented, each documented one listed).
    static let routes: [(method: String, path: String)] = [
        ("POST", "/api/v1/shares"), ("GET", "/api/v1/shares"), ("GET", "/api/v1/shares/{id}"),
        ("POST", "/api/v1/shares/{id}/stop"), ("POST", "/api/v1/shares/{id}/extend"), ("POST", "/api/v1/shares/{id}/locations"),
        ("GET", "/api/v1/shares/{id}/owntracks"), ("GET", "/api/v1/shares/{id}/owntracks.otrc"),
        ("GET", "/api/v1/shares/{id}/owntracks/link"), ("GET", "/api/v1/shares/{id}/owntracks/qr.png"),
        ("GET", "/api/v1/shares/{id}/owntracks/qr.svg"), ("POST", "/api/v1/shares/{id}/owntracks/http"),
        ("POST", "/api/v1/shares/{id}/watch-tokens"), ("GET", "/api/v1/shares/{id}/answers"),
        ("GET", "/api/v1/shares/{id}/links"), ("POST", "/api/v1/shares/{id}/links"), ("DELETE", "/api/v1/shares/{id}/links/{link_id}"),
        ("GET", "/api/v1/shares/{id}/track.gpx"), ("GET", "/api/v1/shares/{id}/track.geojson"), ("GET", "/api/v1/shares/{id}/track.kml"),
        ("POST", "/api/v1/checkins"), ("GET", "/api/v1/checkins/{id}"), ("POST", "/api/v1/checkins/{id}/done"),
        ("POST", "/api/v1/checkins/{id}/extend"),
        ("POST", "/api/v1/devices/sos"), ("GET", "/api/v1/devices/sos"), ("GET", "/api/v1/devices/me"),
        ("POST", "/api/v1/devices/sos/extend"), ("POST", "/api/v1/devices/sos/stop"), ("POST", "/api/v1/devices/locations"),
        ("POST", "/api/v1/devices"), ("GET", "/api/v1/devices"), ("GET", "/api/v1/devices/{id}"), ("PATCH", "/api/v1/devices/{id}"),
        ("DELETE", "/api/v1/devices/{id}"), ("POST", "/api/v1/devices/{id}/secret"), ("GET", "/api/v1/devices/{id}/setup"),
        ("GET", "/api/v1/osmand"), ("POST", "/api/v1/osmand"), ("GET", "/api/v1/osmand/{secret}"), ("POST", "/api/v1/osmand/{secret}"),
        ("POST", "/api/v1/contacts"), ("GET", "/api/v1/contacts"), ("GET", "/api/v1/contacts/{id}"), ("DELETE", "/api/v1/contacts/{id}"),
        ("GET", "/api/v1/contacts/{id}/alerts-link"),
        ("POST", "/api/v1/keys"), ("GET", "/api/v1/keys"), ("DELETE", "/api/v1/keys/{id}"), ("PUT", "/api/v1/keys/{id}/webhook"),
        ("DELETE", "/api/v1/keys/{id}/webhook"),
        ("GET", "/api/v1/view/{view_token}"), ("GET", "/api/v1/view/{view_token}/events"), ("POST", "/api/v1/view/{view_token}/locate"),
        ("POST", "/api/v1/view/{view_token}/answers"), ("POST", "/api/v1/view/{view_token}/push"),
        ("DELETE", "/api/v1/view/{view_token}/push"), ("GET", "/api/v1/view/{view_token}/track.gpx"),
        ("GET", "/api/v1/view/{view_token}/track.geojson"), ("GET", "/api/v1/view/{view_token}/track.kml"),
        ("GET", "/api/v1/push/key"), ("GET", "/api/v1/alerts"), ("POST", "/api/v1/alerts/push"), ("DELETE", "/api/v1/alerts/push"),
        ("GET", "/api/v1/openapi.json"),
        ("GET", "/s/{view_token}"), ("HEAD", "/s/{view_token}"), ("GET", "/s/{view_token}/manifest.webmanifest"),
        ("GET", "/s/{view_token}/feed.kml"),
        ("GET", "/sos"), ("HEAD", "/sos"), ("GET", "/sos/{file}"), ("GET", "/sos/i18n/{file}"), ("GET", "/sos-sw.js"),
        ("GET", "/alerts"), ("HEAD", "/alerts"),
        ("GET", "/viewer/sw.js"), ("GET", "/viewer/{file}"), ("GET", "/viewer/i18n/{file}"), ("GET", "/viewer/e2e/{file}"),
        ("GET", "/vendor/leaflet/{file}"), ("GET", "/vendor/leaflet/images/{file}"), ("GET", "/vendor/tweetnacl/{file}"),
        ("GET", "/healthz"), ("GET", "/metrics"),
    ]

    /// `routes`' templates split at `/`, with their methods, for `allowedMethods`.
    private static let routeTemplates: [(segments: [Substring], methods: [String])] = Dictionary(grouping: routes, by: \.path)
        .map { path, routes in (path.split(separator: "/", omittingEmptySubsequences: false), routes.map(\.method)) }

    /// The `Allow` of a 405 (RFC 9110 §15.5.6: required): the methods of the route whose template matches `path` most
    /// literally (`/api/v1/devices/sos` is not `/api/v1/devices/{id}`); empty where no route does.
    static func allowedMethods(path: String) -> String {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        var best = -1
        var methods: [String] = []
        for template in routeTemplates where template.segments.count == parts.count {
            var literal = 0
            let matches = zip(template.segments, parts).allSatisfy { expected, part in
                if expected.first == "{" { return !part.isEmpty }
                literal += 1
                return expected == part
            }
            guard matches, literal >= best else { continue }
            if literal > best { (best, methods) = (literal, []) }
            methods += template.methods
        }
        return Self.methodOrder.filter(methods.contains).joined(separator: ", ")
    }

    private static let methodOrder = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]

    private func healthz() -> HTTPResponse {
        let report = health()
        let healthy = report.mqttConnected && report.storeHealthy && !report.storeSpaceLow
        return .api(healthy ? 200 : 503, HealthStatus(
            status: healthy ? .ok : .unhealthy,
            mqtt: report.mqttConnected ? "connected" : "disconnected",
            store: !report.storeHealthy ? "failing" : report.storeSpaceLow ? "low_space" : "ok"))
    }
}

/// The error shape of the contract: `{"error":"<code>","message":"…"}` with a fitting status.
struct APIError: Error {
    let status: Int
    let code: String
    let message: String
    var headers: [(name: String, value: String)] = []

    static func notFound(_ message: String) -> APIError { APIError(status: 404, code: "not_found", message: message) }
    static let shareNotFound = notFound("no such share")
    static let shareEnded = APIError(status: 410, code: "share_ended", message: "the share has ended")
    static func badRequest(_ code: String, _ message: String) -> APIError { APIError(status: 400, code: code, message: message) }
    static let methodNotAllowed = APIError(status: 405, code: "method_not_allowed", message: "this endpoint does not take that method")
    /// A device token past its `exp`: it still reports positions into its live share, and does nothing else.
    static let tokenExpired = APIError(status: 401, code: "token_expired",
                                       message: "this device token has expired: it may still report positions, nothing else; use the newest token (extend answers with it)",
                                       headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])
    static let unauthorized = APIError(status: 401, code: "unauthorized", message: "a valid bearer token is required",
                                       headers: [("WWW-Authenticate", "Bearer")])
    /// The store could not answer (down, paused, out of space): a failure to retry, never "unauthorized", "not found"
    /// or "ended" (FlareClient retries a 503; it gives up on a 401).
    static let storeUnavailable = APIError(status: 503, code: "store_unavailable", message: "the store cannot answer right now; retry",
                                           headers: [("Retry-After", "2")])
    static func rateLimited(retryAfter: Int) -> APIError {
        APIError(status: 429, code: "rate_limited", message: "too many requests; retry later",
                 headers: [("Retry-After", String(retryAfter))])
    }

    var response: HTTPResponse {
        var response = HTTPResponse.api(status, APIErrorBody(error: code, message: message))
        response.headers += headers
        return response
    }
}

extension HTTPResponse {
    static func json(_ status: Int, _ body: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")], body: .bytes(body))
    }

    /// A body of the API contract. The types encode only strings, numbers and dates, so encoding cannot fail; if
    /// it ever did, the caller gets a 500 with the contract's error shape rather than a half-written body.
    static func api<Body: Encodable>(_ status: Int, _ body: Body) -> HTTPResponse {
        guard let bytes = try? APIJSON.encode(body) else {
            return .json(500, JSONWriter.flatObject([("error", "internal"), ("message", "the answer could not be encoded")]))
        }
        return .json(status, bytes)
    }
}
