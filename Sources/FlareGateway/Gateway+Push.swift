import FlareAPI
import FlareCodec
import FlareCore
import FlareEvents
import FlareHTTP
import FlareShares
import FlareStore
import FlareSystem

/// Web Push: the server's key (`GET /api/v1/push/key`), a link's viewers subscribing ("Notify me about Anna",
/// `POST`/`DELETE /api/v1/view/{view_token}/push`), a contact's alerts ahead of any SOS (`GET /api/v1/alerts`,
/// `POST`/`DELETE /api/v1/alerts/push` with the alerts secret as `Authorization: Bearer`), and the link to their alerts
/// page (`GET /api/v1/contacts/{id}/alerts-link`, owner key). With push off (no `FLARE_VAPID_SUBJECT`) each answers
/// 404 `push_off`.
extension Gateway {
    static let pushOff = APIError(status: 404, code: "push_off", message: "push notifications are not enabled on this server (FLARE_VAPID_SUBJECT)")
    static let pushFull = APIError(status: 409, code: "push_full",
                                   message: "this link has as many browsers subscribed as it may (\(PushSubscriptionRules.maximumPerLink)); unsubscribe one first")
    static let notSubscribed = APIError.notFound("this browser is not subscribed here")
    static let unknownAlerts = APIError(status: 404, code: "unknown_alerts", message: "these alerts no longer exist (was the contact deleted?)")

    func pushKey(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        guard let push = configuration.push else { throw Self.pushOff }
        return .api(200, PushKey(publicKey: Base64URL.encode(push.publicKey)))
    } }

    // MARK: A link's viewers

    func subscribeViewer(_ request: HTTPRequest, token: String) -> HTTPResponse {
        actingOnLink(request, token: token) { snapshot, link in
            answering { () throws(APIError) in
                try overPushRate(request)
                let subscription = try browserSubscription(request)
                do throws(PushAlerts.Refusal) {
                    let added = try shares.push.subscribe(subscription, to: snapshot, link: link)
                    return .api(added ? 201 : 200, PushSubscribed(subscribed: added))
                } catch {
                    throw pushRefusal(error)
                }
            }
        }
    }

    func unsubscribeViewer(_ request: HTTPRequest, token: String) -> HTTPResponse {
        actingOnLink(request, token: token) { snapshot, link in
            answering { () throws(APIError) in
                try overPushRate(request)
                let endpoint = try unsubscribedEndpoint(request)
                let removed: Bool
                do throws(PushAlerts.Refusal) { removed = try shares.push.unsubscribe(endpoint: endpoint, from: snapshot, link: link) } catch {
                    throw pushRefusal(error)
                }
                guard removed else { throw Self.notSubscribed }
                return HTTPResponse(status: 204, headers: [], body: .bytes([]))
            }
        }
    }

    /// `GET /s/{view_token}/manifest.webmanifest`: the link's page as an app (iOS delivers Web Push only to a site on
    /// the home screen): it opens that link, and only it.
    func viewerManifest(_ request: HTTPRequest, token: String) -> HTTPResponse {
        switch lookUpLink(request, token: token, notFound: { APIError.shareNotFound.response }) {
        case .answered(let response):
            return response
        case .found(let lookup, let link):
            let name = link?.isWithdrawn == true || lookup.share.name.isEmpty ? "Flare" : "Flare: \(lookup.share.name)"
            var writer = JSONWriter(capacity: 512)
            writer.beginObject()
            writer.field("id", "/s/\(token)")
            writer.field("name", name)
            writer.field("short_name", lookup.share.name.isEmpty || link?.isWithdrawn == true ? "Flare" : String(lookup.share.name.prefix(12)))
            writer.field("start_url", "/s/\(token)")
            writer.field("scope", "/s/\(token)")
            writer.field("display", "standalone")
            writer.field("background_color", "#ffffff")
            writer.field("theme_color", "#111111")
            writer.key("icons")
            writer.beginArray()
            for purpose in ["any", "maskable"] {
                writer.beginObject()
                writer.field("src", "/viewer/icon.svg")
                writer.field("sizes", "any")
                writer.field("type", "image/svg+xml")
                writer.field("purpose", purpose)
                writer.endObject()
            }
            writer.endArray()
            writer.endObject()
            return HTTPResponse(status: 200, headers: [("Content-Type", "application/manifest+json"), ("Cache-Control", "no-store")],
                                body: .bytes(writer.bytes))
        }
    }

    // MARK: A contact's alerts

    func alertsCard(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let contact = try alertsCaller(request)
        return .api(200, AlertsCard(name: contact.name, language: contact.language.rawValue))
    } }

    func subscribeAlerts(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let contact = try alertsCaller(request)
        try overPushRate(request)
        let subscription = try browserSubscription(request)
        do throws(PushAlerts.Refusal) {
            let added = try shares.push.subscribe(subscription, alertsOf: contact)
            return .api(added ? 201 : 200, PushSubscribed(subscribed: added))
        } catch {
            throw pushRefusal(error)
        }
    } }

    func unsubscribeAlerts(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let contact = try alertsCaller(request)
        try overPushRate(request)
        let endpoint = try unsubscribedEndpoint(request)
        let removed: Bool
        do throws(PushAlerts.Refusal) { removed = try shares.push.unsubscribe(endpoint: endpoint, alertsOf: contact) } catch {
            throw pushRefusal(error)
        }
        guard removed else { throw Self.notSubscribed }
        return HTTPResponse(status: 204, headers: [], body: .bytes([]))
    } }

    /// `GET /api/v1/contacts/{id}/alerts-link`: the contact's alerts page, the secret in its fragment.
    func alertsLink(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        guard configuration.push != nil else { throw Self.pushOff }
        guard let id = ContactID(text) else { throw Self.contactNotFound }
        let secret: String?
        do throws(StoreError) {
            secret = try shares.contacts.contact(id, for: key).map { contact throws(StoreError) in try shares.push.issueAlertsSecret(of: contact.id) }
        } catch {
            throw storeFailed(error, "making an alerts link")
        }
        guard let secret else { throw Self.contactNotFound }
        return .api(200, AlertsLink(contactID: id.rawValue, url: "\(configuration.publicURL)/alerts#c=\(secret)"))
    } }

    /// The contact whose alerts secret the request carries (`Authorization: Bearer`); an unknown one answers 404 and
    /// costs the caller's address as an unknown link does.
    private func alertsCaller(_ request: HTTPRequest) throws(APIError) -> Contact {
        guard configuration.push != nil else { throw Self.pushOff }
        let client = clientKey(request)
        if let wait = addressLimiter.take(client, nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "address")])
            throw .rateLimited(retryAfter: wait)
        }
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer ") else { throw .unauthorized }
        let found: Contact?
        do throws(StoreError) { found = try shares.push.contact(alertsSecret: authorization.dropFirst(7)) } catch {
            throw storeFailed(error, "checking an alerts secret")
        }
        guard let found else {
            let refusal = unknownCredential(request)
            throw refusal.status == 429 ? refusal : Self.unknownAlerts
        }
        return found
    }

    /// Subscribing and unsubscribing per client address: a family's browsers now and then, not a script filling links.
    private func overPushRate(_ request: HTTPRequest) throws(APIError) {
        guard configuration.push != nil else { throw Self.pushOff }
        guard let wait = pushLimiter.take(clientKey(request), nowMillis: clock.monotonicMillis()) else { return }
        metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "push")])
        throw .rateLimited(retryAfter: wait)
    }

    /// The body's subscription, checked: an endpoint flared posts to (`https`; `http://127.0.0.1` only with
    /// `FLARE_PUSH_ALLOW_LOOPBACK`), a P-256 key on the curve, a 16-byte auth secret, a language Flare speaks.
    private func browserSubscription(_ request: HTTPRequest) throws(APIError) -> BrowserSubscription {
        let body = try request.decode(as: PushSubscriptionRequest.self)
        try checkEndpoint(body.endpoint)
        guard let keys = body.keys else { throw .badRequest("invalid_keys", #"keys is required: {"p256dh": "<base64url>", "auth": "<base64url>"}"#) }
        let language: ContactLanguage
        if let text = body.lang {
            guard let known = ContactLanguage(rawValue: text) else { throw .badRequest("invalid_language", "lang must be en or zh-CN") }
            language = known
        } else {
            language = .en
        }
        guard let p256dh = Base64URL.decode(keys.p256dh.trimmingPadding), let auth = Base64URL.decode(keys.auth.trimmingPadding),
              let subscription = BrowserSubscription(endpoint: body.endpoint, p256dh: p256dh, auth: auth, language: language) else {
            throw .badRequest("invalid_keys", "keys.p256dh must be a P-256 public key (65 bytes) and keys.auth 16 bytes, both base64url")
        }
        return subscription
    }

    private func unsubscribedEndpoint(_ request: HTTPRequest) throws(APIError) -> String {
        let body = try request.decode(as: PushSubscriptionRequest.self)
        try checkEndpoint(body.endpoint)
        return body.endpoint
    }

    private func checkEndpoint(_ endpoint: String) throws(APIError) {
        let allowsLoopback = configuration.push?.allowsLoopback ?? false
        guard WebPushing.acceptsEndpoint(endpoint, allowsLoopback: allowsLoopback) != nil else {
            throw .badRequest("invalid_endpoint", "endpoint must be an https URL of a push service, at most \(PushSubscriptionRules.maximumEndpointLength) bytes")
        }
    }

    private func pushRefusal(_ refusal: PushAlerts.Refusal) -> APIError {
        switch refusal {
        case .full: return Self.pushFull
        case .ended: return .shareEnded
        case .storage(let failure):
            noteStoreFailure("push subscription: \(failure)")
            return .storeUnavailable
        }
    }
}

extension String {
    /// Browsers hand keys over in base64url without padding; some libraries add it.
    var trimmingPadding: Substring {
        var text = self[...]
        while text.hasSuffix("=") { text = text.dropLast() }
        return text
    }
}
