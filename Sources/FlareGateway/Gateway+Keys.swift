import FlareAPI
import FlareEvents
import FlareShares
import FlareCore
import FlareHTTP
import FlareSystem
import FoundationEssentials

/// Owner keys over HTTP: `POST /api/v1/keys` and `DELETE /api/v1/keys/{id}` for admin keys; `GET /api/v1/keys` lists
/// every key for an admin, and only itself for a limited key. Never the key itself, except once in the creation's
/// answer. A request with a key that is not current costs its address as an unknown link does, so guessing is cut
/// off by the address limit (429).
extension Gateway {
    func createKey(_ request: HTTPRequest) -> HTTPResponse {
        let admin: OwnerKeyRecord
        switch adminKey(request) {
        case .key(let key): admin = key
        case .refused(let response): return response
        }
        let body: KeyRequest
        do { body = try keyRequest(request) } catch { return error.response }
        let limits = KeyLimits(maxLive: body.maxLive, maxDurationSeconds: body.maxDurationSeconds.map(Int64.init),
                               createsPerHour: body.createRatePerHour)
        do {
            let (key, record) = try shares.keys.create(label: body.label ?? "", admin: body.admin ?? false, limits: limits)
            logger.info("owner key \(record.id) created over HTTP by key \(admin.id)")
            let enrollment = URL(string: configuration.publicURL).map { Enrollment(server: $0, key: key).link } ?? ""
            return .api(201, CreatedKey(key: key, info: Self.info(record), enrollmentURL: enrollment))
        } catch {
            return storeFailed(error, "storing a new owner key").response
        }
    }

    func listKeys(_ request: HTTPRequest) -> HTTPResponse {
        let caller: OwnerKeyRecord
        switch currentKey(request) {
        case .key(let key): caller = key
        case .refused(let response): return response
        }
        do {
            let keys = try shares.keys.list().filter { caller.isAdmin || $0.id == caller.id }
            return .api(200, KeyList(keys: keys.map(Self.info)))
        } catch {
            return storeFailed(error, "listing owner keys").response
        }
    }

    func revokeKey(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        let admin: OwnerKeyRecord
        switch adminKey(request) {
        case .key(let key): admin = key
        case .refused(let response): return response
        }
        guard let id = Int64(text), id > 0 else { return APIError.notFound("no such key").response }
        do {
            guard try shares.keys.find(id: id) != nil else { return APIError.notFound("no such key").response }
            try shares.keys.revoke(id: id)
            logger.info("owner key \(id) revoked over HTTP by key \(admin.id)")
            // Its live shares, check-ins and mail stop now rather than at the lease holder's next round (which finishes
            // the job if the store fails here: the revocation itself is recorded, and that is what the answer says).
            do { try shares.revocations.sweep() } catch {
                logger.warning("owner key \(id): what it left running will be stopped at the next round (\(error))")
            }
            guard let record = try shares.keys.find(id: id) else { return APIError.notFound("no such key").response }
            return .api(200, Self.info(record))
        } catch {
            return storeFailed(error, "revoking an owner key").response
        }
    }

    /// `PUT /api/v1/keys/{id}/webhook` `{"url": "…"}`: the key itself, or an admin, sets where its shares' events go;
    /// the answer holds the signing secret, once. A limited key's host name is looked up off this thread: one whose DNS
    /// has not answered in time is answered 503 with `Retry-After` (`OwnerKeyService.setWebhook`).
    func setWebhook(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        let id: Int64
        switch webhookTarget(request, id: text) {
        case .key(let target): id = target
        case .refused(let response): return response
        }
        let url: String
        do { url = try request.decode(as: WebhookRequest.self).url } catch { return error.response }
        do {
            let set = try shares.keys.setWebhook(id: id, url: url)
            return .api(200, WebhookCreated(url: set.url.text, secret: set.secret.text,
                                            previousSecretValidSeconds: set.replaced ? Int(EventDeliverer.previousSecretMillis / 1000) : nil))
        } catch {
            return webhookRefusal(error)
        }
    }

    /// `DELETE /api/v1/keys/{id}/webhook`: no more events for that key's shares (204).
    func removeWebhook(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        let id: Int64
        switch webhookTarget(request, id: text) {
        case .key(let target): id = target
        case .refused(let response): return response
        }
        do {
            try shares.keys.removeWebhook(id: id)
            return HTTPResponse(status: 204)
        } catch {
            return webhookRefusal(error)
        }
    }

    /// The key whose webhook a request may change: its own, or any for an admin (others' ids answer 404, as shares do).
    private func webhookTarget(_ request: HTTPRequest, id text: String) -> KeyCheck<Int64> {
        let caller: OwnerKeyRecord
        switch currentKey(request) {
        case .key(let key): caller = key
        case .refused(let response): return .refused(response)
        }
        guard let id = Int64(text), id > 0, caller.isAdmin || caller.id == id else { return .refused(APIError.notFound("no such key").response) }
        return .key(id)
    }

    private func webhookRefusal(_ refusal: OwnerKeyService.WebhookRefusal) -> HTTPResponse {
        switch refusal {
        case .invalid(let problem):
            return APIError.badRequest(problem == .malformed ? "invalid_webhook" : "webhook_not_public", problem.description).response
        case .tooOften(let wait):
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "webhook")])
            return APIError.rateLimited(retryAfter: wait).response
        case .lookupUnfinished(let wait):
            return APIError(status: 503, code: "webhook_lookup_unfinished",
                            message: "the webhook's host name has not resolved yet; retry (the lookup goes on meanwhile)",
                            headers: [("Retry-After", String(wait))]).response
        case .noSuchKey:
            return APIError.notFound("no such key").response
        case .storage(let message):
            noteStoreFailure("webhook: \(message)")
            return APIError.storeUnavailable.response
        }
    }

    /// What a key route may act on (the caller's key, or the id of the key it may change), or the answer refusing it.
    private enum KeyCheck<Value> {
        case key(Value)
        case refused(HTTPResponse)
    }

    /// The request's current owner key; a missing or wrong one is charged to the address (`unauthorizedOwner`), a store
    /// that cannot say is not.
    private func currentKey(_ request: HTTPRequest) -> KeyCheck<OwnerKeyRecord> {
        do { return .key(try ownerKey(request)) } catch {
            return .refused(error.status == 401 ? unauthorizedOwner(request) : error.response)
        }
    }

    private func adminKey(_ request: HTTPRequest) -> KeyCheck<OwnerKeyRecord> {
        let key: OwnerKeyRecord
        switch currentKey(request) {
        case .key(let found): key = found
        case .refused(let response): return .refused(response)
        }
        guard key.isAdmin else {
            return .refused(APIError(status: 403, code: "forbidden", message: "only an admin key may create or revoke keys").response)
        }
        return .key(key)
    }

    /// 401, charged to the caller's address like an unknown link (429 once that is used up).
    private func unauthorizedOwner(_ request: HTTPRequest) -> HTTPResponse { unknownCredential(request).response }

    /// What a request with a key that is not current is answered on the key-scoped routes (keys, contacts):
    /// `unauthorized`, charged to the caller's address like an unknown link, and `rateLimited` once that is used up.
    func unknownCredential(_ request: HTTPRequest) -> APIError {
        let client = clientKey(request)
        if let wait = addressLimiter.take(client, cost: configuration.unknownTokenCost, nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "address")])
            return .rateLimited(retryAfter: wait)
        }
        return .unauthorized
    }

    /// The body as a `KeyRequest`, its label and limits checked against their bounds.
    private func keyRequest(_ request: HTTPRequest) throws(APIError) -> KeyRequest {
        let parsed = try request.decode(as: KeyRequest.self)
        if let label = parsed.label, !NameBounds.keyLabel.admits(label) || NameBounds.hasHiddenScalars(label) {
            throw .badRequest("invalid_label", "label must be text of \(NameBounds.keyLabel.description), without control or format characters")
        }
        func bound(_ value: Int?, _ name: String, maximum: Int) throws(APIError) {
            guard let value, !(1...maximum).contains(value) else { return }
            throw .badRequest("invalid_\(name)", "\(name) must be a whole number from 1 to \(maximum)")
        }
        try bound(parsed.maxLive, "max_live", maximum: 1_000_000)
        try bound(parsed.maxDurationSeconds, "max_duration_s", maximum: Int(shares.policy.maximumDurationSeconds))
        try bound(parsed.createRatePerHour, "create_rate_per_hour", maximum: 1_000_000)
        return parsed
    }

    static func info(_ key: OwnerKeyRecord) -> KeyInfo {
        KeyInfo(id: String(key.id), label: key.label, kind: key.isAdmin ? .admin : .limited, maxLive: key.limits.maxLive,
                maxDurationSeconds: key.limits.maxDurationSeconds.map { Int($0) }, createRatePerHour: key.limits.createsPerHour,
                createdAt: Date(unixMillis: key.createdAt), lastUsedAt: key.lastUsedAt.map(Date.init(unixMillis:)),
                revokedAt: key.revokedAt.map(Date.init(unixMillis:)), liveShares: key.liveShares, webhookURL: key.webhookURL)
    }
}
