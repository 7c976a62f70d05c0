import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How long to wait between attempts when Flare or the network is unavailable: exponential backoff with jitter,
/// capped, honouring the server's `Retry-After`. Only 5xx, 408, 429 and network failures are retried; any
/// other 4xx is an answer, not an outage.
public struct RetryPolicy: Sendable, Equatable {
    /// Attempts per call, the first one included (1 = never retry).
    public var maxAttempts: Int
    public var initialDelay: TimeInterval
    public var maxDelay: TimeInterval
    public var multiplier: Double
    /// Up to this fraction of each delay is added at random, so phones that lost the network together do not
    /// all come back in the same second.
    public var jitter: Double

    public init(maxAttempts: Int = 4, initialDelay: TimeInterval = 0.5, maxDelay: TimeInterval = 30, multiplier: Double = 2, jitter: Double = 0.2) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialDelay = max(0, initialDelay)
        self.maxDelay = max(0, maxDelay)
        self.multiplier = max(1, multiplier)
        self.jitter = min(max(0, jitter), 1)
    }

    public static let none = RetryPolicy(maxAttempts: 1)

    /// The pause after failed attempt number `attempt` (1-based).
    public func delay(afterAttempt attempt: Int, retryAfter: TimeInterval? = nil) -> TimeInterval {
        let exponential = initialDelay * pow(multiplier, Double(max(0, attempt - 1)))
        var delay = min(maxDelay, exponential)
        delay += delay * Double.random(in: 0...jitter)
        if let retryAfter { delay = max(delay, min(retryAfter, maxDelay)) }
        return delay
    }
}

/// A client for Flare's HTTP API, for the SOS app of the original question: create a share (owner key), stop or
/// extend it (owner key or the share's device token), and report fixes (device token). Every answer and every
/// `{"error","message"}` is decoded into Swift types. Stateless apart from its configuration, so it is freely
/// shared between tasks; `LocationReporter` adds the ordered offline queue on top.
///
/// Foundation only (FoundationNetworking on Linux): no dependency for an app to vet.
public final class FlareClient: Sendable {
    public let baseURL: URL
    let ownerKey: String?
    let session: URLSession
    public let retry: RetryPolicy
    /// Per-request timeout.
    public let timeout: TimeInterval

    /// A client for the server and key of an enrolment link (`flare://enroll?server=…&key=…`, from
    /// `flare keys create --enroll` or `POST /api/v1/keys`), scanned once; nil if the text is not one. Keep the key in
    /// the Keychain (docs/ios.md) and build the client from it afterwards.
    public convenience init?(enrollmentLink: String, session: URLSession = .shared, retry: RetryPolicy = RetryPolicy(), timeout: TimeInterval = 15) {
        guard let enrollment = Enrollment(link: enrollmentLink) else { return nil }
        self.init(baseURL: enrollment.server, ownerKey: enrollment.key, session: session, retry: retry, timeout: timeout)
    }

    /// The key this client creates shares with (from an enrolment link, to be kept in the Keychain).
    public var key: String? { ownerKey }

    /// - Parameters:
    ///   - baseURL: Flare's public address, e.g. `https://flare.example.org`.
    ///   - ownerKey: needed to create shares and to read their status. A key for one phone sees only the shares it
    ///     creates, within its limits (docs/ios.md).
    public init(baseURL: URL, ownerKey: String? = nil, session: URLSession = .shared, retry: RetryPolicy = RetryPolicy(), timeout: TimeInterval = 15) {
        self.baseURL = baseURL
        self.ownerKey = ownerKey
        self.session = session
        self.retry = retry
        self.timeout = timeout
    }

    // MARK: - Owner API

    /// Starts a share. `duration` defaults to the server's (one hour); `name` is shown on the viewer page.
    ///
    /// Retried like every call: a retry after a lost answer can leave one unused share behind, which simply
    /// expires. For an SOS, getting a link matters more.
    /// - Parameter contacts: contact ids: a personal link each, in the answer's `links`.
    /// - Parameter endToEnd: the server relays the phone's positions without reading them; the caller makes the
    ///   passphrase (`E2E` in the docs), keeps it, and adds `#k=<passphrase>` to `share_url` for the family.
    public func createShare(duration: TimeInterval? = nil, name: String? = nil, contacts: [String]? = nil,
                            endToEnd: Bool = false) async throws(FlareClientError) -> CreatedShare {
        guard let ownerKey else { throw .missingCredential("creating a share needs an owner key") }
        return try await call("POST", "api/v1/shares", bearer: ownerKey,
                              encodable: ShareRequest(durationSeconds: duration, name: name, contacts: contacts, e2e: endToEnd ? true : nil),
                              expecting: 201, retry: retry)
    }

    /// The share's personal links (owner key): who each is for, whether it was opened, its URL.
    public func links(_ shareID: String) async throws(FlareClientError) -> PersonalLinkList {
        guard let ownerKey else { throw .missingCredential("listing links needs an owner key") }
        let data = try await send("GET", "api/v1/shares/\(try Self.pathComponent(shareID))/links", query: [], bearer: ownerKey, body: nil,
                                  expecting: 200, retry: retry)
        return try Self.decode(PersonalLinkList.self, from: data, status: 200)
    }

    /// A personal link each for contacts of a running share.
    public func addLinks(_ shareID: String, contacts: [String]) async throws(FlareClientError) -> CreatedLinks {
        guard let ownerKey else { throw .missingCredential("adding links needs an owner key") }
        return try await call("POST", "api/v1/shares/\(try Self.pathComponent(shareID))/links", bearer: ownerKey,
                              encodable: LinkRequest(contacts: contacts), expecting: 201, retry: RetryPolicy(maxAttempts: 1))
    }

    /// Withdraws one personal link; the share's other links go on.
    public func withdrawLink(_ linkID: String, of shareID: String) async throws(FlareClientError) {
        guard let ownerKey else { throw .missingCredential("withdrawing a link needs an owner key") }
        _ = try await send("DELETE", "api/v1/shares/\(try Self.pathComponent(shareID))/links/\(try Self.pathComponent(linkID))", query: [],
                           bearer: ownerKey, body: nil, expecting: 204, retry: retry)
    }

    /// One page of shares, newest first (owner key). Pass the page's `nextCursor` to get the next one.
    public func listShares(state: ShareState? = nil, limit: Int? = nil, cursor: String? = nil) async throws(FlareClientError) -> ShareList {
        try await page("api/v1/shares", state.map { [("state", $0.rawValue)] } ?? [], limit: limit, cursor: cursor, doing: "listing shares")
    }

    /// The share's state, last position and `audience` (who opened the link, who watches now). The phone may ask
    /// with the share's `deviceToken`.
    public func share(_ shareID: String, deviceToken: String? = nil) async throws(FlareClientError) -> ShareStatus {
        guard deviceToken != nil || ownerKey != nil else { throw .missingCredential("reading a share needs an owner key or its device token") }
        return try await call("GET", "api/v1/shares/\(try Self.pathComponent(shareID))", bearer: try credential(deviceToken), body: nil, expecting: 200)
    }

    /// Ends the share now. Pass the share's `deviceToken` to stop from the phone without the owner key.
    /// Idempotent: stopping an ended share answers again with its end.
    public func stopShare(_ shareID: String, deviceToken: String? = nil) async throws(FlareClientError) -> StoppedShare {
        let bearer = try credential(deviceToken)
        return try await call("POST", "api/v1/shares/\(try Self.pathComponent(shareID))/stop", bearer: bearer, encodable: ShareRequest(),
                              expecting: 200, retry: retry)
    }

    /// Same link, new expiry: `duration` from now (server default when nil). The answer carries a new device
    /// token valid until the new expiry; hand it to the `LocationReporter` (`updateDeviceToken`).
    public func extendShare(_ shareID: String, duration: TimeInterval? = nil, deviceToken: String? = nil) async throws(FlareClientError) -> ExtendedShare {
        let bearer = try credential(deviceToken)
        return try await call("POST", "api/v1/shares/\(try Self.pathComponent(shareID))/extend", bearer: bearer,
                              encodable: ShareRequest(durationSeconds: duration), expecting: 200, retry: retry)
    }

    /// Arms a check-in (owner key): if the phone has not checked in by the deadline plus the grace, the server tells the
    /// contacts, also when the phone is off. The answer carries the device credentials of the check-in's share: report
    /// positions with them (`LocationReporter`), and check in with `checkinDone`.
    public func armCheckin(_ request: CheckinRequest) async throws(FlareClientError) -> CheckinInfo {
        guard let ownerKey else { throw .missingCredential("arming a check-in needs an owner key") }
        return try await call("POST", "api/v1/checkins", bearer: ownerKey, encodable: request, expecting: 201, retry: RetryPolicy(maxAttempts: 1))
    }

    /// A check-in as it stands: `armed`, `done`, `arrived` or `missed`.
    public func checkin(_ checkinID: String, deviceToken: String? = nil) async throws(FlareClientError) -> CheckinInfo {
        try await call("GET", "api/v1/checkins/\(try Self.pathComponent(checkinID))", bearer: try credential(deviceToken), body: nil, expecting: 200)
    }

    /// Checks in: nobody is told, and the check-in's share ends. Idempotent; a check-in already missed answers
    /// `checkin_missed` (409): its contacts have been told.
    public func checkinDone(_ checkinID: String, deviceToken: String? = nil) async throws(FlareClientError) -> CheckinInfo {
        try await call("POST", "api/v1/checkins/\(try Self.pathComponent(checkinID))/done", bearer: try credential(deviceToken),
                       encodable: CheckinExtension(), expecting: 200, retry: retry)
    }

    /// Moves the deadline (`inSeconds` from now, or `dueAt`). The answer's `deviceToken` covers the new deadline:
    /// hand it to the `LocationReporter` (`updateDeviceToken`); an OwnTracks app gets it by importing its
    /// configuration again.
    public func extendCheckin(_ checkinID: String, inSeconds: TimeInterval? = nil, dueAt: Date? = nil,
                              deviceToken: String? = nil) async throws(FlareClientError) -> CheckinInfo {
        try await call("POST", "api/v1/checkins/\(try Self.pathComponent(checkinID))/extend", bearer: try credential(deviceToken),
                       encodable: CheckinExtension(dueAt: dueAt, inSeconds: inSeconds), expecting: 200, retry: retry)
    }

    /// The share's OwnTracks `owntracks:///config?inline=…` link: open it on a phone with the OwnTracks app and
    /// the app publishes into the share. It contains the device token: do not log it.
    public func ownTracksLink(_ shareID: String, deviceToken: String? = nil, mode: OwnTracksMode = .mqtt) async throws(FlareClientError) -> URL {
        let bearer = try credential(deviceToken)
        let data = try await send("GET", "api/v1/shares/\(try Self.pathComponent(shareID))/owntracks/link", query: mode.query,
                                  bearer: bearer, body: nil, expecting: 200, retry: retry)
        let answer = try Self.decode(OwnTracksLink.self, from: data, status: 200)
        guard let url = URL(string: answer.url) else {
            throw .unexpectedResponse(status: 200, detail: "the OwnTracks link is not a URL")
        }
        return url
    }

    /// The share's OwnTracks configuration file (`.otrc`, JSON), for the app's import. It holds the device token.
    public func ownTracksConfigurationFile(_ shareID: String, deviceToken: String? = nil, mode: OwnTracksMode = .mqtt) async throws(FlareClientError) -> Data {
        try await send("GET", "api/v1/shares/\(try Self.pathComponent(shareID))/owntracks.otrc", query: mode.query, bearer: try credential(deviceToken),
                       body: nil, expecting: 200, retry: retry)
    }

    /// The OwnTracks configuration of an end-to-end encrypted share, with its passphrase added here as the apps'
    /// `encryptionKey`: the server answers 409 `e2e_needs_key` to every other way of asking, since a phone configured
    /// without the key would publish in clear. The result holds the device token and the key: it goes to the phone only.
    public func ownTracksConfigurationEndToEnd(_ shareID: String, passphrase: String, deviceToken: String? = nil,
                                               mode: OwnTracksMode = .mqtt) async throws(FlareClientError) -> Data {
        let served = try await send("GET", "api/v1/shares/\(try Self.pathComponent(shareID))/owntracks", query: mode.query + [("encryption", "client")],
                                    bearer: try credential(deviceToken), body: nil, expecting: 200, retry: retry)
        guard var configuration = (try? JSONSerialization.jsonObject(with: served)) as? [String: Any] else {
            throw .unexpectedResponse(status: 200, detail: "the OwnTracks configuration is not a JSON object")
        }
        configuration["encryptionKey"] = passphrase
        do { return try JSONSerialization.data(withJSONObject: configuration, options: [.sortedKeys, .withoutEscapingSlashes]) } catch {
            throw .unexpectedResponse(status: 200, detail: "the OwnTracks configuration cannot be written back")
        }
    }

    /// The OwnTracks link as a QR code (PNG) for the phone to scan from the owner's screen (owner key only).
    public func ownTracksQRCode(_ shareID: String, mode: OwnTracksMode = .mqtt) async throws(FlareClientError) -> Data {
        guard let ownerKey else { throw .missingCredential("the OwnTracks QR code needs the owner key") }
        return try await send("GET", "api/v1/shares/\(try Self.pathComponent(shareID))/owntracks/qr.png", query: mode.query, bearer: ownerKey,
                              body: nil, expecting: 200, retry: retry)
    }

    /// A watch token: subscribe rights on the broker for the share's topics until it ends (owner key).
    public func createWatchToken(_ shareID: String) async throws(FlareClientError) -> WatchToken {
        guard let ownerKey else { throw .missingCredential("a watch token needs the owner key") }
        return try await call("POST", "api/v1/shares/\(try Self.pathComponent(shareID))/watch-tokens", bearer: ownerKey, body: nil, expecting: 201)
    }

    /// Sets where the events of key `keyID`'s shares are POSTed (the key itself, or an admin key). The answer holds the
    /// signing secret, once.
    public func setWebhook(keyID: String, url: String) async throws(FlareClientError) -> WebhookCreated {
        guard let ownerKey else { throw .missingCredential("setting a webhook needs an owner key") }
        return try await call("PUT", "api/v1/keys/\(try Self.pathComponent(keyID))/webhook", bearer: ownerKey,
                              encodable: WebhookRequest(url: url), expecting: 200, retry: RetryPolicy(maxAttempts: 1))
    }

    /// Stops sending key `keyID`'s shares' events anywhere.
    public func removeWebhook(keyID: String) async throws(FlareClientError) {
        guard let ownerKey else { throw .missingCredential("removing a webhook needs an owner key") }
        _ = try await send("DELETE", "api/v1/keys/\(try Self.pathComponent(keyID))/webhook", query: [], bearer: ownerKey, body: nil,
                           expecting: 204, retry: retry)
    }

    /// Adds a contact of the owner key: someone its shares may tell. `phone` in E.164 (`+4915123456789`),
    /// `language` `en` or `zh-CN`.
    public func createContact(_ contact: ContactRequest) async throws(FlareClientError) -> ContactInfo {
        guard let ownerKey else { throw .missingCredential("adding a contact needs an owner key") }
        return try await call("POST", "api/v1/contacts", bearer: ownerKey, encodable: contact, expecting: 201, retry: RetryPolicy(maxAttempts: 1))
    }

    /// One page of the owner key's contacts, newest first. Pass the page's `nextCursor` to get the next one.
    public func listContacts(limit: Int? = nil, cursor: String? = nil) async throws(FlareClientError) -> ContactList {
        try await page("api/v1/contacts", limit: limit, cursor: cursor, doing: "listing contacts")
    }

    public func contact(_ contactID: String) async throws(FlareClientError) -> ContactInfo {
        guard let ownerKey else { throw .missingCredential("reading a contact needs an owner key") }
        let data = try await send("GET", "api/v1/contacts/\(try Self.pathComponent(contactID))", query: [], bearer: ownerKey, body: nil,
                                  expecting: 200, retry: retry)
        return try Self.decode(ContactInfo.self, from: data, status: 200)
    }

    /// The share's whole recorded track as a file (`format`: `gpx`, `geojson` or `kml`), as the server wrote it.
    public func track(_ shareID: String, format: String) async throws(FlareClientError) -> Data {
        guard let ownerKey else { throw .missingCredential("a track needs an owner key") }
        return try await send("GET", "api/v1/shares/\(try Self.pathComponent(shareID))/track.\(try Self.pathComponent(format))", query: [],
                              bearer: ownerKey, body: nil, expecting: 200, retry: retry)
    }

    /// The contact's alerts page (`GET /api/v1/contacts/{id}/alerts-link`): where they allow push alerts once.
    public func alertsLink(_ contactID: String) async throws(FlareClientError) -> AlertsLink {
        guard let ownerKey else { throw .missingCredential("an alerts link needs an owner key") }
        let data = try await send("GET", "api/v1/contacts/\(try Self.pathComponent(contactID))/alerts-link", query: [], bearer: ownerKey, body: nil,
                                  expecting: 200, retry: retry)
        return try Self.decode(AlertsLink.self, from: data, status: 200)
    }

    public func removeContact(_ contactID: String) async throws(FlareClientError) {
        guard let ownerKey else { throw .missingCredential("removing a contact needs an owner key") }
        _ = try await send("DELETE", "api/v1/contacts/\(try Self.pathComponent(contactID))", query: [], bearer: ownerKey, body: nil,
                           expecting: 204, retry: retry)
    }

    // MARK: - Device API

    /// Reports one fix over HTTP ingest (`POST /api/v1/shares/{id}/locations`), retrying outages. For a stream of
    /// fixes that must survive being offline, use `LocationReporter`.
    public func reportLocation(_ location: Location, shareID: String, deviceToken: String) async throws(FlareClientError) -> IngestReceipt {
        try await call("POST", "api/v1/shares/\(try Self.pathComponent(shareID))/locations", bearer: deviceToken, encodable: location, expecting: 202, retry: retry)
    }

    /// The family's answers after `after` (an answer's `id`; nil: from the first), oldest first: what a phone that
    /// was away missed (the broker keeps nothing for a device that is not connected).
    public func answers(_ shareID: String, deviceToken: String? = nil, after: String? = nil) async throws(FlareClientError) -> [ShareAnswer] {
        let query = after.map { [("after", $0)] } ?? []
        let data = try await send("GET", "api/v1/shares/\(try Self.pathComponent(shareID))/answers", query: query,
                                  bearer: try credential(deviceToken), body: nil, expecting: 200, retry: retry)
        return try Self.decode(ShareAnswerList.self, from: data, status: 200).answers
    }

    /// Every answer as it comes, from the first: asked for every `interval` seconds (HTTP only, so it works wherever
    /// the phone can reach Flare), each yielded once. Ends when the share has ended (or the device token no longer
    /// works), and with the task that iterates it.
    public func answerUpdates(_ shareID: String, deviceToken: String, interval: TimeInterval = 10) -> AsyncThrowingStream<ShareAnswer, any Error> {
        AsyncThrowingStream(ShareAnswer.self, bufferingPolicy: .unbounded) { continuation in
            let task = Task {
                var last: String?
                while !Task.isCancelled {
                    do {
                        for answer in try await self.answers(shareID, deviceToken: deviceToken, after: last) {
                            continuation.yield(answer)
                            last = answer.id
                        }
                    } catch {
                        // 401/404: the share ended (its device token stops working) or is gone: nothing more will come.
                        if case FlareClientError.api(let refusal) = error, [401, 404, 410].contains(refusal.status) {
                            continuation.finish()
                            return
                        }
                    }
                    try? await Task.sleep(nanoseconds: UInt64(max(1, interval) * 1_000_000_000))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// One attempt, no retry: the reporter schedules its own.
    func reportOnce(_ location: Location, shareID: String, deviceToken: String) async throws(FlareClientError) -> IngestReceipt {
        try await call("POST", "api/v1/shares/\(try Self.pathComponent(shareID))/locations", bearer: deviceToken, encodable: location, expecting: 202, retry: .none)
    }

    /// One already-made body (an end-to-end encrypted share's sealed fix, `Location.sealed(by:)`), no retries.
    func reportOnce(body: Data, shareID: String, deviceToken: String) async throws(FlareClientError) -> IngestReceipt {
        let data = try await send("POST", "api/v1/shares/\(try Self.pathComponent(shareID))/locations", query: [], bearer: deviceToken,
                                  body: body, expecting: 202, retry: .none)
        return try Self.decode(IngestReceipt.self, from: data, status: 202)
    }

    // MARK: - Transport

    private func credential(_ deviceToken: String?) throws(FlareClientError) -> String {
        if let deviceToken { return deviceToken }
        if let ownerKey { return ownerKey }
        throw .missingCredential("this call needs the owner key or the share's device token")
    }

    /// One page of a list the owner key reads, as every list pages: at most `limit` entries, after `cursor`.
    func page<Page: Decodable>(_ path: String, _ query: [(String, String)] = [], limit: Int?, cursor: String?,
                               doing what: String) async throws(FlareClientError) -> Page {
        guard let ownerKey else { throw .missingCredential("\(what) needs an owner key") }
        var query = query
        if let limit { query.append(("limit", String(limit))) }
        if let cursor { query.append(("cursor", cursor)) }
        let data = try await send("GET", path, query: query, bearer: ownerKey, body: nil, expecting: 200, retry: retry)
        return try Self.decode(Page.self, from: data, status: 200)
    }

    static func pathComponent(_ text: String) throws(FlareClientError) -> String {
        // Flare's ids (shares, links, contacts, devices) are URL-safe base64; anything else would change the path, so
        // refuse it here.
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 == 45 || $0 == 95 || (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) }) else {
            throw .unexpectedResponse(status: 0, detail: "not an id (Flare's ids are base64url)")
        }
        return text
    }

    func call<T: Decodable>(_ method: String, _ path: String, bearer: String, body: Data?,
                            expecting status: Int) async throws(FlareClientError) -> T {
        let data = try await send(method, path, query: [], bearer: bearer, body: body, expecting: status, retry: retry)
        return try Self.decode(T.self, from: data, status: status)
    }

    func call<T: Decodable, Body: Encodable>(_ method: String, _ path: String, bearer: String, encodable: Body,
                                             expecting status: Int, retry: RetryPolicy) async throws(FlareClientError) -> T {
        let data = try await send(method, path, query: [], bearer: bearer, body: try Self.encode(encodable), expecting: status, retry: retry)
        return try Self.decode(T.self, from: data, status: status)
    }

    static func encode(_ body: some Encodable) throws(FlareClientError) -> Data {
        do { return Data(try APIJSON.encode(body)) } catch { throw .unexpectedResponse(status: 0, detail: "cannot encode the request body") }
    }

    static func decode<T: Decodable>(_ type: T.Type, from data: Data, status: Int) throws(FlareClientError) -> T {
        do { return try APIJSON.decode(T.self, from: data) } catch {
            throw .unexpectedResponse(status: status, detail: "cannot decode \(T.self): \(error)")
        }
    }

    /// The body of the expected answer, after retrying outages; any other answer becomes the error it carries.
    func send(_ method: String, _ path: String, query: [(String, String)], bearer: String, body: Data?, expecting status: Int,
              retry: RetryPolicy) async throws(FlareClientError) -> Data {
        try await exchange(method, path, query: query, bearer: bearer, body: body, accepting: [status], retry: retry).data
    }

    /// The answer, when its status is one of `accepting` (a call that may answer 200 or 201), after retrying outages.
    func exchange(_ method: String, _ path: String, query: [(String, String)], bearer: String, body: Data?, accepting: Set<Int>,
                  retry: RetryPolicy) async throws(FlareClientError) -> (status: Int, data: Data) {
        var attempt = 1
        while true {
            do {
                return try await sendOnce(method, path, query: query, bearer: bearer, body: body, accepting: accepting)
            } catch {
                guard error.isRetryable, attempt < retry.maxAttempts, !Task.isCancelled else { throw error }
                var retryAfter: TimeInterval?
                if case .api(let apiError) = error { retryAfter = apiError.retryAfter }
                let pause = retry.delay(afterAttempt: attempt, retryAfter: retryAfter)
                do { try await Task.sleep(nanoseconds: UInt64(pause * 1_000_000_000)) } catch { throw .transport("cancelled") }
                attempt += 1
            }
        }
    }

    private func sendOnce(_ method: String, _ path: String, query: [(String, String)], bearer: String, body: Data?,
                          accepting: Set<Int>) async throws(FlareClientError) -> (status: Int, data: Data) {
        var url = baseURL.appendingPathComponent(path)
        if !query.isEmpty, var components = URLComponents(url: url, resolvingAgainstBaseURL: false) {
            components.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) }
            // `+` is a space to the server's form decoding: cursors are base64url, but say it anyway.
            components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
            url = components.url ?? url
        }
        var request = URLRequest(url: url, timeoutInterval: timeout)
        request.httpMethod = method
        request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        if let body {
            request.httpBody = body
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await session.data(for: request)
        } catch {
            // The URLError's description names the URL, which carries the share id but no secret.
            throw .transport((error as? URLError).map { "URLError \($0.code.rawValue)" } ?? String(describing: type(of: error)))
        }
        guard let http = response as? HTTPURLResponse else { throw .unexpectedResponse(status: 0, detail: "not an HTTP response") }
        if accepting.contains(http.statusCode) { return (http.statusCode, data) }
        let retryAfter = http.value(forHTTPHeaderField: "Retry-After").flatMap(TimeInterval.init)
        if let shape = try? APIJSON.decode(APIErrorBody.self, from: data) {
            throw .api(FlareAPIError(status: http.statusCode, code: shape.error, message: shape.message, retryAfter: retryAfter))
        }
        // A proxy's page or an empty body: still an error with a status, retryable when it is a 5xx.
        if http.statusCode >= 400 {
            throw .api(FlareAPIError(status: http.statusCode, code: "http_\(http.statusCode)", message: "no Flare error body", retryAfter: retryAfter))
        }
        throw .unexpectedResponse(status: http.statusCode, detail: "expected \(accepting.sorted().map(String.init).joined(separator: " or "))")
    }
}
