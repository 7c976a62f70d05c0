import FlareAPI
import FlareShares
import FlareStore
import FlareCore
import FlareHTTP
import FlareSystem
import FlareWire
import FoundationEssentials

/// The link holder's endpoints: the page, the view JSON and the live event stream. All are rate-limited per
/// client address and per token; an unknown or malformed token costs the caller several requests' worth.
extension Gateway {
    enum LinkLookup {
        /// The share, and the personal link the token is (nil: the share's own link).
        case found(ShareLookup, ShareLink?)
        /// Answered already: refused (a rate limit, an unknown token, a store that cannot say), or from memory.
        case answered(HTTPResponse)
    }

    /// A link request's rate limits (its address, then its token), the token's form, then the share it is for.
    /// `fromMemory` may answer an admitted request before the lookup (nil: it cannot, and the lookup goes on); an
    /// unknown token costs its caller several requests' worth.
    func lookUpLink(_ request: HTTPRequest, token: String, notFound: () -> HTTPResponse,
                    fromMemory: (SecretHash) -> HTTPResponse? = { _ in nil }) -> LinkLookup {
        let client = clientKey(request), now = clock.monotonicMillis()
        if let wait = addressLimiter.take(client, nowMillis: now) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "address")])
            return .answered(APIError.rateLimited(retryAfter: wait).response)
        }
        func unknown() -> LinkLookup {
            _ = addressLimiter.take(client, cost: configuration.unknownTokenCost, nowMillis: now)
            return .answered(notFound())
        }
        guard Secret.isWellFormed(token) else { return unknown() }
        let hash = SecretHash(of: token)
        if let wait = tokenLimiter.take(hash.base64URL, nowMillis: now) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "token")])
            return .answered(APIError.rateLimited(retryAfter: wait).response)
        }
        if let answer = fromMemory(hash) { return .answered(answer) }
        let found: ShareService.LinkLookup?
        do { found = try shares.link(viewTokenHash: hash) } catch {
            // Not charged as an unknown token: the link may be good, and the family will try it again.
            return .answered(storeFailed(error, "looking up a link").response)
        }
        guard let found else { return unknown() }
        return .found(found.lookup, found.link)
    }

    /// The routes that act on a share through its link (answers, locate now): the link looked up as every link call
    /// is, and an ended share whose history is gone answered 410 `share_ended`; `act` gets the live share.
    func actingOnLink(_ request: HTTPRequest, token: String, _ act: (ShareSnapshot, ShareLink?) -> HTTPResponse) -> HTTPResponse {
        switch lookUpLink(request, token: token, notFound: { APIError.shareNotFound.response }) {
        case .answered(let response): response
        case .found(_, let link?) where link.isWithdrawn: Self.linkWithdrawn.response
        case .found(.historyDeleted, _): APIError.shareEnded.response
        case .found(.live(let snapshot), let link): act(snapshot, link)
        }
    }

    static let linkWithdrawn = APIError(status: 410, code: "link_withdrawn", message: "this link was withdrawn by the person who shared it")

    /// What a withdrawn personal link shows: that it was, and nothing of the share.
    func withdrawnView(_ share: Share, _ link: ShareLink) -> HTTPResponse {
        .json(410, ViewDocumentRenderer.closing(ViewDocumentRenderer.withdrawn(withdrawnAt: link.withdrawnAt ?? clock.now()),
                                                serverTime: clock.now()))
    }

    /// The rate-limit key of the request's client (its address, or its network behind a trusted proxy).
    func clientKey(_ request: HTTPRequest) -> String {
        TrustedProxies.rateLimitKey(for: configuration.trustedProxies.clientAddress(
            peer: request.clientAddress, forwardedFor: request.headers["x-forwarded-for"]))
    }

    /// `FlareAPI.ViewDocument`: 200 while active, 410 once ended. `?v=` is the page's viewer id (the audience).
    func viewJSON(_ request: HTTPRequest, token: String) -> HTTPResponse {
        // The share's own link, rendered already, and no viewer to note: the document as it is.
        switch lookUpLink(request, token: token, notFound: { APIError.shareNotFound.response }, fromMemory: { hash in
            guard request.query["v"] == nil, let cached = shares.cachedView(viewTokenHash: hash) else { return nil }
            return .json(cached.isActive ? 200 : 410, ViewDocumentRenderer.closing(cached.body, serverTime: clock.now()))
        }) {
        case .answered(let response):
            return response
        case .found(let lookup, let link?) where link.isWithdrawn:
            return withdrawnView(lookup.share, link)
        case .found(let lookup, let link):
            if case .live(let snapshot) = lookup, request.query["v"] != nil || link != nil {
                shares.viewerSeen(snapshot, viewer: request.query["v"], address: clientKey(request), link: link)
            }
            let view = shares.view(of: lookup)
            return .json(view.share.isActive ? 200 : 410, view.document(serverTime: clock.now()))
        }
    }

    func viewEvents(_ request: HTTPRequest, token: String) -> HTTPResponse {
        let snapshot: ShareSnapshot, link: ShareLink?
        switch lookUpLink(request, token: token, notFound: { APIError.shareNotFound.response }) {
        case .answered(let response): return response
        case .found(let lookup, let withdrawn?) where withdrawn.isWithdrawn: return withdrawnView(lookup.share, withdrawn)
        case .found(.historyDeleted(let share), _):
            return .json(410, shares.view(of: .historyDeleted(share)).document(serverTime: clock.now()))
        case .found(.live(let live), let through): (snapshot, link) = (live, through)
        }
        guard snapshot.share.isActive else {
            return .json(410, shares.view(of: snapshot).document(serverTime: clock.now()))
        }
        let id = snapshot.share.id
        let client = clientKey(request)
        let stream = EventStream()
        let streamID: Int
        do {
            // Each personal link has its own share of streams, as the share's own link has.
            streamID = try liveStreams.add(stream, link: link?.id.rawValue ?? id.rawValue, address: client)
        } catch {
            // The page polls the view JSON instead, and tries a stream again 30 s later.
            let (scope, holder) = error == .link ? ("streams_per_link", "this link") : ("streams_per_address", "your address")
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", scope)])
            return APIError(status: 429, code: "too_many_streams", message: "\(holder) has as many live streams open as it may; retry later",
                            headers: [("Retry-After", "30")]).response
        }
        let viewer = request.query["v"]
        if viewer != nil || link != nil { shares.viewerSeen(snapshot, viewer: viewer, address: client, link: link) }
        let linkID = link?.id
        stream.send(Array("retry: 3000\n\n".utf8))
        stream.send(Self.event(.status, Self.encoded(LiveStatus(expiresAt: Date(unixMillis: snapshot.share.expiresAt)))))
        stream.send(Self.event(.tracker, TrackerSummary(share: snapshot.share, last: snapshot.last).json))
        // The page fetched the view JSON before connecting: the last fix closes any gap in between.
        if let last = snapshot.last { stream.send(Self.liveFix(last)) }
        let subscription = shares.subscribe(id) { [weak stream, clock] event in
            guard let stream else { return }
            switch event {
            case .fix(let fix):
                // Rendered by hand (every viewer of every share gets each fix): the same shape as
                // `FlareAPI.ReportedLocation`, which the tests decode it with.
                stream.send(Self.liveFix(fix))
            case .extended(let expiresAt):
                stream.send(Self.event(.status, Self.encoded(LiveStatus(expiresAt: Date(unixMillis: expiresAt)))))
            case .tracker(let summary):
                stream.send(Self.event(.tracker, summary.json))
            case .answer(let answer):
                stream.send(Self.event(.answer, answer.json))
            case .linkWithdrawn(let withdrawn) where withdrawn == linkID:
                stream.send(Self.event(.ended, Self.encoded(LiveEnded(reason: "withdrawn", endedAt: Date(unixMillis: clock.now())))))
                stream.finish()
            case .linkWithdrawn:
                break
            case .ended(let reason, let endedAt):
                stream.send(Self.event(.ended, Self.encoded(LiveEnded(reason: reason.rawValue, endedAt: Date(unixMillis: endedAt)))))
                stream.finish()
            }
        }
        guard let subscription else {
            // Ended between the lookup and the subscription.
            liveStreams.remove(streamID)
            stream.finish()
            // Ended meanwhile, so known in memory: the view of its end (or, if it is gone already, of what was seen).
            // Memory answers first; only a share purged meanwhile asks the store, whose failure is answered as one.
            let ended: ShareLookup?
            do throws(StoreError) { ended = try shares.share(id) } catch { return storeFailed(error, "looking up a share that just ended").response }
            return .json(410, shares.view(of: ended ?? .live(snapshot)).document(serverTime: clock.now()))
        }
        if let viewer { shares.watching(snapshot, viewer: viewer, open: true) }
        stream.onClose { [shares, liveStreams] in
            shares.unsubscribe(id, subscription: subscription)
            liveStreams.remove(streamID)
            if let viewer { shares.watching(snapshot, viewer: viewer, open: false) }
        }
        return HTTPResponse(status: 200, headers: [
            ("Content-Type", "text/event-stream"),
            ("Cache-Control", "no-store"),
            ("X-Accel-Buffering", "no"),
        ], body: .stream(stream))
    }

    /// "Locate now": asks the phone of an active share whose tracker is stale or offline for a fresh position.
    /// 202 `LocateReceipt`; 409 `tracker_live` while fixes arrive; 429 with `Retry-After` within 30 s of the last
    /// request (anyone's, on any instance); 410 once ended. Rate-limited per address and token like every link call.
    func locate(_ request: HTTPRequest, token: String) -> HTTPResponse {
        actingOnLink(request, token: token) { snapshot, _ in
            do throws(ShareService.LocateRefusal) {
                let requestedAt = try shares.requestLocate(snapshot)
                return .api(202, LocateReceipt(requestedAt: Date(unixMillis: requestedAt)))
            } catch {
                switch error {
                case .ended: return APIError.shareEnded.response
                case .trackerLive:
                    return APIError(status: 409, code: "tracker_live", message: "the phone is reporting; its next position is on its way").response
                case .tooSoon(let seconds):
                    return APIError(status: 429, code: "locate_too_soon", message: "the phone was asked less than \(ShareService.locateIntervalMillis / 1000) s ago",
                                    headers: [("Retry-After", String(seconds))]).response
                case .storage(let message):
                    noteStoreFailure("locate: \(message)")
                    return APIError.storeUnavailable.response
                }
            }
        }
    }

    /// A new last position: `fix`, or `sealed` for an end-to-end encrypted share's ciphertext.
    static func liveFix(_ fix: Fix) -> [UInt8] {
        fix.isSealed ? event(.sealed, fix.sealedJSON) : event(.fix, fix.viewJSON)
    }

    static func event(_ name: LiveEventName, _ data: [UInt8]) -> [UInt8] {
        Array("event: \(name.rawValue)\ndata: ".utf8) + data + Array("\n\n".utf8)
    }

    /// Live events are small API types; encoding cannot fail for them (see `HTTPResponse.api`).
    static func encoded<Body: Encodable>(_ body: Body) -> [UInt8] {
        (try? APIJSON.encode(body)) ?? Array("{}".utf8)
    }

    func viewerPage(_ request: HTTPRequest, token: String) -> HTTPResponse {
        // The share's own link, in memory: its name is all the page needs.
        switch lookUpLink(request, token: token, notFound: { notFoundPage(request) }, fromMemory: { hash in
            shares.name(viewTokenHash: hash).map { assets.viewerPage(language: assets.negotiateLanguage(request), title: $0) }
        }) {
        case .answered(let response):
            return response
        case .found(let lookup, let link):
            // A withdrawn link's page says so, and names nothing of the share.
            return assets.viewerPage(language: assets.negotiateLanguage(request), title: link?.isWithdrawn == true ? "" : lookup.share.name)
        }
    }

    func notFoundPage(_ request: HTTPRequest) -> HTTPResponse {
        assets.notFoundPage(language: assets.negotiateLanguage(request))
    }
}
