import FlareBridge
import FlareCore
import FlareHTTP
import FlareSystem

/// The link holder's endpoints: the page, the view JSON and the live event stream. All are rate-limited per
/// client address and per token; an unknown or malformed token costs the caller several requests' worth.
extension Gateway {
    enum LinkLookup {
        case live(ShareSnapshot)
        /// Ended and its history already deleted: the link still says "ended", with no position.
        case purged(Share)
        case refused(HTTPResponse)
    }

    func lookUpLink(_ request: HTTPRequest, token: String, notFound: () -> HTTPResponse) -> LinkLookup {
        let now = monotonicMillis()
        let client = TrustedProxies.rateLimitKey(for: configuration.trustedProxies.clientAddress(
            peer: request.clientAddress, forwardedFor: request.headers["x-forwarded-for"]))
        if let wait = addressLimiter.take(client, nowMillis: now) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "address")])
            return .refused(APIError.rateLimited(retryAfter: wait).response)
        }
        func unknown() -> LinkLookup {
            _ = addressLimiter.take(client, cost: configuration.unknownTokenCost, nowMillis: now)
            return .refused(notFound())
        }
        guard Secret.isWellFormed(token) else { return unknown() }
        let hash = SecretHash(of: token)
        let hashKey = Base64URL.encode(hash.bytes)
        if let wait = tokenLimiter.take(hashKey, nowMillis: now) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "token")])
            return .refused(APIError.rateLimited(retryAfter: wait).response)
        }
        if let snapshot = registry.snapshot(viewTokenHash: hash) { return .live(snapshot) }
        if let stored = try? store.share(viewTokenHash: hash) { return .purged(stored.share) }
        return unknown()
    }

    func viewJSON(_ request: HTTPRequest, token: String) -> HTTPResponse {
        switch lookUpLink(request, token: token, notFound: { APIError.notFound("no such share").response }) {
        case .refused(let response):
            return response
        case .purged(let share):
            return .json(410, viewDocument(share: share, last: nil, trail: []))
        case .live(let snapshot):
            let status = snapshot.share.isActive ? 200 : 410
            if let cached = snapshot.cachedView { return .json(status, withServerTime(cached)) }
            let document = viewDocumentBody(share: snapshot.share, last: snapshot.last, trail: snapshot.trail)
            registry.cacheView(snapshot.share.id, version: snapshot.version, bytes: document)
            return .json(status, withServerTime(document))
        }
    }

    private func viewDocument(share: Share, last: Fix?, trail: [TrailPoint]) -> [UInt8] {
        withServerTime(viewDocumentBody(share: share, last: last, trail: trail))
    }

    /// Closes a rendered view document with the one field that changes every second.
    private func withServerTime(_ body: [UInt8]) -> [UInt8] {
        body + Array(",\"server_time\":\"\(RFC3339.format(millis: clock.now()))\"}".utf8)
    }

    /// The view document without its closing `server_time` field and brace: the part that depends only on the share.
    private func viewDocumentBody(share: Share, last: Fix?, trail: [TrailPoint]) -> [UInt8] {
        var writer = JSONWriter(capacity: 256 + trail.count * 48)
        writer.beginObject()
        if share.isActive {
            writer.field("state", "active")
        } else {
            writer.field("state", "ended")
            writer.field("reason", share.endReason?.rawValue ?? "expired")
            if let endedAt = share.endedAt { writer.field("ended_at", RFC3339.format(millis: endedAt)) }
        }
        writer.field("name", share.name)
        writer.field("expires_at", RFC3339.format(millis: share.expiresAt))
        writer.key("last")
        if let last { last.writeViewJSON(into: &writer) } else { writer.null() }
        writer.key("trail")
        writer.beginArray()
        for point in trail {
            writer.beginObject()
            writer.field("lat", point.latitude)
            writer.field("lon", point.longitude)
            writer.field("tst", point.timestamp)
            writer.endObject()
        }
        writer.endArray()
        return writer.bytes
    }

    func viewEvents(_ request: HTTPRequest, token: String) -> HTTPResponse {
        let snapshot: ShareSnapshot
        switch lookUpLink(request, token: token, notFound: { APIError.notFound("no such share").response }) {
        case .refused(let response): return response
        case .purged(let share): return .json(410, viewDocument(share: share, last: nil, trail: []))
        case .live(let live): snapshot = live
        }
        guard snapshot.share.isActive else {
            return .json(410, viewDocument(share: snapshot.share, last: snapshot.last, trail: snapshot.trail))
        }
        let id = snapshot.share.id
        let stream = EventStream()
        stream.send(Array("retry: 3000\n\n".utf8))
        stream.send(Self.event("status", Self.activeStatus(expiresAt: snapshot.share.expiresAt)))
        // The page fetched the view JSON before connecting: the last fix closes any gap in between.
        if let last = snapshot.last { stream.send(Self.event("fix", last.viewJSON)) }
        let subscription = registry.subscribe(id) { [weak stream] event in
            guard let stream else { return }
            switch event {
            case .fix(let fix):
                stream.send(Self.event("fix", fix.viewJSON))
            case .extended(let expiresAt):
                stream.send(Self.event("status", Self.activeStatus(expiresAt: expiresAt)))
            case .ended(let reason, let endedAt):
                stream.send(Self.event("ended", JSONWriter.flatObject([
                    ("state", "ended"), ("reason", reason.rawValue), ("ended_at", RFC3339.format(millis: endedAt)),
                ])))
                stream.finish()
            }
        }
        guard let subscription else {
            // Ended between the lookup and the subscription.
            stream.finish()
            return .json(410, JSONWriter.flatObject([("state", "ended")]))
        }
        let streamID = liveStreams.add(stream)
        stream.onClose { [registry, liveStreams] in
            registry.unsubscribe(id, subscription: subscription)
            liveStreams.remove(streamID)
        }
        return HTTPResponse(status: 200, headers: [
            ("Content-Type", "text/event-stream"),
            ("Cache-Control", "no-store"),
            ("X-Accel-Buffering", "no"),
        ], body: .stream(stream))
    }

    static func event(_ name: String, _ data: [UInt8]) -> [UInt8] {
        Array("event: \(name)\ndata: ".utf8) + data + Array("\n\n".utf8)
    }

    static func activeStatus(expiresAt: UnixMillis) -> [UInt8] {
        JSONWriter.flatObject([("state", "active"), ("expires_at", RFC3339.format(millis: expiresAt))])
    }

    func viewerPage(_ request: HTTPRequest, token: String) -> HTTPResponse {
        switch lookUpLink(request, token: token, notFound: { notFoundPage(request) }) {
        case .refused(let response):
            return response
        case .live(let snapshot):
            return assets.viewerPage(language: assets.negotiateLanguage(request), title: snapshot.share.name)
        case .purged(let share):
            return assets.viewerPage(language: assets.negotiateLanguage(request), title: share.name)
        }
    }

    func notFoundPage(_ request: HTTPRequest) -> HTTPResponse {
        assets.notFoundPage(language: assets.negotiateLanguage(request))
    }
}
