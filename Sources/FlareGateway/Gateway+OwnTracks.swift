import FlareAPI
import FlareIngest
import FlareShares
import FlareCore
import FlareHTTP
import FlareQR
import FlareSystem
import FlareCodec

/// OwnTracks provisioning: the share's `_type: configuration` for the iOS and Android apps, so a phone that has
/// OwnTracks installed starts publishing into the share after one tap or one scan.
///
/// The configuration holds the device token, so nothing here is reachable without a bearer credential and no
/// token ever appears in a URL that Flare serves or logs:
/// - `GET /api/v1/shares/{id}/owntracks` — the JSON (owner key or the share's device token: an app that already
///   holds the token may fetch it and hand it to OwnTracks);
/// - `GET /api/v1/shares/{id}/owntracks.otrc` — the same as a download (`Content-Disposition: attachment`);
/// - `GET /api/v1/shares/{id}/owntracks/link` — `{"url":"owntracks:///config?inline=…"}`;
/// - `GET /api/v1/shares/{id}/owntracks/qr.png`, `…/qr.svg` — that link as a QR code, owner key only: it is
///   meant for the owner's screen, for the phone to scan.
///
/// Each takes `?mode=http` for the apps' HTTP mode (for networks that block MQTT), whose phones post to
/// `POST /api/v1/shares/{id}/owntracks/http` (`ownTracksHTTP`).
///
/// An end-to-end encrypted share's phone must have the share's key, which the server never has: a configuration
/// without it would make the app publish every position in clear. So for such a share each of these answers 409
/// `e2e_needs_key`, except the JSON asked for with `?encryption=client`: a client that adds `encryptionKey` itself
/// before anything reaches the phone (`flare share owntracks ID --e2e`, FlareClient's
/// `ownTracksConfigurationEndToEnd`).
extension Gateway {
    func ownTracksConfiguration(_ request: HTTPRequest, id text: String, download: Bool) -> HTTPResponse {
        let keyAddedByCaller = !download && request.query["encryption"] == "client"
        switch ownTracksConfiguration(request, id: text, ownerOnly: false, keyAddedByCaller: keyAddedByCaller) {
        case .failure(let error):
            return error.response
        case .success(let configuration):
            var response = HTTPResponse.json(200, configuration.json)
            if download {
                response.headers = [("Content-Type", "application/octet-stream"), ("Cache-Control", "no-store"),
                                    ("Content-Disposition", "attachment; filename=\"flare-\(configuration.shareID.rawValue).otrc\"")]
            }
            return response
        }
    }

    func ownTracksResource(_ request: HTTPRequest, id text: String, name: String) -> HTTPResponse {
        if name == "http" { return APIError.methodNotAllowed.response }  // the apps' HTTP mode only posts
        guard ["link", "qr.png", "qr.svg"].contains(name) else { return APIError.notFound("no such endpoint").response }
        switch ownTracksConfiguration(request, id: text, ownerOnly: name != "link", keyAddedByCaller: false) {
        case .failure(let error):
            return error.response
        case .success(let configuration):
            let link = configuration.inlineURL
            if name == "link" { return .api(200, OwnTracksLink(url: link)) }
            let code: QRCode
            do { code = try QRCode(link) } catch {
                logger.error("OwnTracks QR code for share \(configuration.shareID): \(error)")
                return APIError(status: 500, code: "qr_failed", message: "the configuration does not fit in a QR code").response
            }
            let (type, body) = name == "qr.png" ? ("image/png", code.png()) : ("image/svg+xml", Array(code.svg().utf8))
            return HTTPResponse(status: 200, headers: [("Content-Type", type), ("Cache-Control", "no-store")], body: .bytes(body))
        }
    }

    private func ownTracksConfiguration(_ request: HTTPRequest, id text: String, ownerOnly: Bool,
                                        keyAddedByCaller: Bool) -> Result<OwnTracksConfiguration, APIError> {
        guard let id = ShareID(text) else { return .failure(.shareNotFound) }
        let found: ShareLookup?, caller: Caller?
        do {
            found = try lookUp(id)
            caller = try authenticate(request, share: id, allowDevice: !ownerOnly)
        } catch {
            return .failure(error)
        }
        guard let caller else {
            if let found, !found.share.isActive { return .failure(.shareEnded) }
            return .failure(.unauthorized)
        }
        // Another key's share is as unknown as one that never existed.
        if let found, !caller.sees(found.share) { return .failure(.shareNotFound) }
        // The owner may learn that a share existed; a device caller only ever holds an active share's token.
        guard let found, case .live(let snapshot) = found else {
            return .failure(caller.key != nil && found != nil ? .shareEnded : .shareNotFound)
        }
        guard snapshot.share.isActive else { return .failure(.shareEnded) }
        if snapshot.share.endToEnd && !keyAddedByCaller { return .failure(.endToEndNeedsKey(id)) }
        let connection: OwnTracksConfiguration.Connection
        switch request.query["mode"] {
        case nil, "mqtt":
            guard let broker = MQTTURL(configuration.mqttPublicURL) else {
                logger.error("FLARE_MQTT_PUBLIC_URL is not mqtt://host:port or mqtts://host:port; cannot provision OwnTracks")
                return .failure(APIError(status: 500, code: "misconfigured", message: "the server's public MQTT address is not set up"))
            }
            connection = .mqtt(broker)
        case "http":
            connection = .http(url: configuration.publicURL + OwnTracksConfiguration.httpPath(id))
        default:
            return .failure(.badRequest("invalid_mode", "mode is mqtt (the default) or http"))
        }
        return .success(OwnTracksConfiguration(shareID: id, deviceToken: shares.deviceToken(for: snapshot.share),
                                               connection: connection, shareName: snapshot.share.name))
    }
}

extension APIError {
    static func endToEndNeedsKey(_ id: ShareID) -> APIError {
        APIError(status: 409, code: "e2e_needs_key",
                 message: "share \(id) is end-to-end encrypted: the phone needs the share's key, which this server never has; make its configuration with `flare share owntracks \(id) --e2e`")
    }
}

/// The OwnTracks apps' HTTP mode: one POST per message, HTTP Basic auth with username = share id and password = the
/// device token, answered with a JSON array of messages for the app (`[]`, or the commands waiting for it).
///
/// Both apps treat any non-2xx as a failure: Android keeps the message at the head of its queue and retries it,
/// with backoff, for ever (a 4xx would wedge every position behind it); iOS drops it on a 4xx and shows the person
/// an alert with the message's JSON. So everything the app can send is answered 2xx unless it is worth sending
/// again: a message Flare does not take (a waypoint, a fix Flare refuses, like one older than the share) is
/// answered `[]` and counted, with `X-Flare-Refused` saying why; an unavailable store is a 503, which both apps
/// retry. A share that has ended answers its phone with the command to stop reporting
/// (`OwnTracksConfiguration.stopReporting`): no alert, nothing left retrying. Wrong credentials are a 401.
extension Gateway {
    func ownTracksHTTP(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        let now = clock.monotonicMillis()
        var found: ShareLookup?
        if let id = ShareID(text), let token = Self.basicPassword(request, username: id.rawValue), shares.isDeviceToken(token, of: id) {
            // A 503, which both apps retry, never the 401 that would have the person re-enter the password.
            do { found = try lookUp(id) } catch { return error.response }
        }
        guard let id = ShareID(text), let found else {
            // Wrong credentials cost the address as an unknown link token does; once its budget is spent, 429. (A
            // phone with the right ones is limited per share below, not per address: many share a carrier's.)
            let client = clientKey(request)
            if let wait = addressLimiter.take(client, cost: configuration.unknownTokenCost, nowMillis: now) {
                metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "address")])
                return APIError.rateLimited(retryAfter: wait).response
            }
            return APIError(status: 401, code: "unauthorized", message: "HTTP Basic auth with the share id and its device token is required",
                            headers: [("WWW-Authenticate", #"Basic realm="Flare", charset="UTF-8""#)]).response
        }
        guard case .live(let snapshot) = found, snapshot.share.isActive else {
            return .json(200, Array("[".utf8) + OwnTracksConfiguration.stopReporting + Array("]".utf8))
        }
        if let refusal = overFixRate(id) { return refusal.response }
        let receivedAt = clock.now()
        switch parser.parseMessage(request.body, receivedAt: receivedAt, shareCreatedAt: snapshot.share.createdAt) {
        case .failure(let reason) where reason == .tooLarge || reason == .malformed && (try? JSONValue.parse(request.body)) == nil:
            // Not something the apps send: a clear error for whatever did.
            metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
            return APIError(status: reason == .tooLarge ? 413 : 400, code: reason.rawValue, message: reason.message).response
        case .failure(let reason):
            metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
            var response = HTTPResponse.json(200, Array("[]".utf8))
            response.headers.append(("X-Flare-Refused", reason.rawValue))
            return response
        case .success(let message):
            // The apps send no last will over HTTP; nothing to do with one.
            guard let stored = message.fix(endToEnd: snapshot.share.endToEnd, receivedAt: receivedAt) else { return .json(200, Array("[]".utf8)) }
            // As every refusal the app cannot mend: answered 2xx, or Android would retry it for ever (see above).
            let refusal: RejectReason? = switch stored {
            case .failure(let reason): reason
            case .success: shares.fixLimitReached(id) ? .fixLimitReached : nil
            }
            if let refusal {
                metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", refusal.rawValue)])
                var response = HTTPResponse.json(200, Array("[]".utf8))
                response.headers.append(("X-Flare-Refused", refusal.rawValue))
                return response
            }
            guard case .success(let fix) = stored else { return .json(200, Array("[]".utf8)) }
            if let refusal = storeOverHTTP(fix, snapshot, receivedAt: receivedAt) { return refusal.response }
            return .api(200, commands(for: snapshot))
        }
    }

    /// The password of `Authorization: Basic …` when its username is `username`.
    static func basicPassword(_ request: HTTPRequest, username: String) -> String? {
        guard let authorization = request.header("authorization"), authorization.count <= 4096,
              authorization.lowercased().hasPrefix("basic "),
              let decoded = Base64URL.decode(standard: authorization.dropFirst("basic ".count).trimmingPrefix(" ")),
              let credentials = String(validating: decoded, as: UTF8.self),
              let colon = credentials.firstIndex(of: ":"),
              credentials[..<colon] == username else { return nil }
        return String(credentials[credentials.index(after: colon)...])
    }
}
