import FlareBridge
import FlareCore
import FlareHTTP

/// The owner API: create, show, stop, extend. Stop and extend also accept the share's device token, so the
/// person in trouble can end or prolong sharing from the phone.
extension Gateway {
    enum Caller { case owner, device }

    func authenticate(_ request: HTTPRequest, share: ShareID?, allowDevice: Bool) -> Caller? {
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer ") else { return nil }
        let token = String(authorization.dropFirst("Bearer ".count))
        if OwnerKey.isWellFormed(token) {
            return ((try? store.ownerKeyExists(hash: SecretHash(of: token))) ?? false) ? .owner : nil
        }
        if allowDevice, let share, shares.authorizeDevice(token: token, for: share) { return .device }
        return nil
    }

    /// The request body as a JSON object (an empty body is an empty object) and its `duration_s`, if any.
    /// The content type is not checked: `curl -d` labels JSON as a form, and the body's own shape is what matters.
    func shareRequestBody(_ request: HTTPRequest) throws(APIError) -> (fields: [String: JSONValue], duration: Double?) {
        if request.body.isEmpty { return ([:], nil) }
        guard let object = (try? JSONValue.parse(request.body))?.objectValue else {
            throw .badRequest("invalid_json", "the body must be a JSON object")
        }
        guard let duration = object["duration_s"], duration != .null else { return (object, nil) }
        guard let seconds = duration.doubleValue else { throw .badRequest("invalid_duration", "duration_s must be a number of seconds") }
        return (object, seconds)
    }

    func createShare(_ request: HTTPRequest) -> HTTPResponse {
        guard authenticate(request, share: nil, allowDevice: false) == .owner else { return APIError.unauthorized.response }
        let body: (fields: [String: JSONValue], duration: Double?)
        do { body = try shareRequestBody(request) } catch { return error.response }
        let name = body.fields["name"]
        if let name, name.stringValue == nil, name != .null { return APIError.badRequest("invalid_name", "name must be a string").response }
        do {
            let created = try shares.create(name: name?.stringValue, durationSeconds: body.duration)
            let id = created.share.id
            // A flat object of strings: the original iOS client decodes it as [String: String].
            let response = JSONWriter.flatObject([
                ("share_id", id.rawValue),
                ("share_url", "\(configuration.publicURL)/s/\(created.viewToken)"),
                ("expires_at", RFC3339.format(millis: created.share.expiresAt)),
                ("duration_s", String((created.share.expiresAt - created.share.createdAt) / 1000)),
                ("device_token", created.deviceToken),
                ("mqtt_url", configuration.mqttPublicURL),
                ("mqtt_username", id.rawValue),
                ("mqtt_topic", Topics.location(id)),
                ("status_topic", Topics.status(id)),
                ("ingest_url", "\(configuration.publicURL)/api/v1/shares/\(id.rawValue)/locations"),
                ("owntracks_config_url", "\(configuration.publicURL)/api/v1/shares/\(id.rawValue)/owntracks"),
            ])
            var http = HTTPResponse.json(201, response)
            http.headers.append(("Location", "/api/v1/shares/\(id.rawValue)"))
            return http
        } catch {
            return shareErrorResponse(error)
        }
    }

    func showShare(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        guard let id = ShareID(text) else { return APIError.notFound("no such share").response }
        guard authenticate(request, share: id, allowDevice: false) == .owner else { return APIError.unauthorized.response }
        var writer = JSONWriter()
        writer.beginObject()
        if let snapshot = registry.snapshot(id) {
            writeShareFields(snapshot.share, into: &writer)
            writer.key("last")
            if let last = snapshot.last { last.writeViewJSON(into: &writer) } else { writer.null() }
            writer.field("viewers", snapshot.viewers)
        } else if let stored = try? store.share(id: id) {
            // History already deleted: only that it existed, and when.
            writeShareFields(stored.share, into: &writer)
            writer.key("last")
            writer.null()
            writer.field("viewers", 0)
        } else {
            return APIError.notFound("no such share").response
        }
        writer.endObject()
        return .json(200, writer.bytes)
    }

    private func writeShareFields(_ share: Share, into writer: inout JSONWriter) {
        writer.field("share_id", share.id.rawValue)
        writer.field("name", share.name)
        writer.field("state", share.isActive ? "active" : "ended")
        writer.field("created_at", RFC3339.format(millis: share.createdAt))
        writer.field("expires_at", RFC3339.format(millis: share.expiresAt))
        if let endedAt = share.endedAt { writer.field("ended_at", RFC3339.format(millis: endedAt)) }
        if let reason = share.endReason { writer.field("reason", reason.rawValue) }
        writer.field("history_deleted", share.historyPurged)
    }

    func stopShare(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        guard let id = ShareID(text) else { return APIError.notFound("no such share").response }
        guard authenticate(request, share: id, allowDevice: true) != nil else {
            // An ended share refuses its device token; tell an owner-less caller the truth only if they could
            // have known the share: the answer stays 401 either way.
            return APIError.unauthorized.response
        }
        do {
            let share = try shares.stop(id)
            var pairs = [("share_id", id.rawValue), ("state", "ended"), ("reason", share.endReason?.rawValue ?? "stopped")]
            if let endedAt = share.endedAt { pairs.append(("ended_at", RFC3339.format(millis: endedAt))) }
            return .json(200, JSONWriter.flatObject(pairs))
        } catch {
            return shareErrorResponse(error)
        }
    }

    func extendShare(_ request: HTTPRequest, id text: String) -> HTTPResponse {
        guard let id = ShareID(text) else { return APIError.notFound("no such share").response }
        guard authenticate(request, share: id, allowDevice: true) != nil else { return APIError.unauthorized.response }
        let duration: Double?
        do { duration = try shareRequestBody(request).duration } catch { return error.response }
        do {
            let (share, deviceToken) = try shares.extend(id, durationSeconds: duration)
            return .json(200, JSONWriter.flatObject([
                ("share_id", id.rawValue), ("state", "active"),
                ("expires_at", RFC3339.format(millis: share.expiresAt)), ("device_token", deviceToken),
            ]))
        } catch {
            return shareErrorResponse(error)
        }
    }

    func shareErrorResponse(_ error: ShareError) -> HTTPResponse {
        switch error {
        case .notFound: return APIError.notFound("no such share").response
        case .ended: return APIError(status: 409, code: "share_ended", message: "the share has ended; create a new one").response
        case .invalid(let message): return APIError.badRequest("invalid_request", message).response
        case .storage(let message):
            logger.error("share operation failed: \(message)")
            return APIError(status: 503, code: "store_unavailable", message: "the store cannot be written right now; retry",
                            headers: [("Retry-After", "5")]).response
        }
    }
}
