import FlareAPI
import FlareCore
import FlareHTTP
import FlareShares
import FlareStore
import FlareSystem
import FoundationEssentials
import FlareCodec

/// Check-ins: `POST /api/v1/checkins` arms one (owner key); `GET /api/v1/checkins/{id}` shows it; `…/done` and
/// `…/extend` take the owner key or the check-in's device token, so that the phone checks in and moves its own
/// deadline. A limited key sees only its own check-ins: others' ids answer 404, as unknown ones do.
extension Gateway {
    func armCheckin(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        if let wait = checkinLimiter.take(String(key.id), nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "checkins")])
            throw .rateLimited(retryAfter: wait)
        }
        let asked = try checkinRequest(request)
        do throws(ShareError) {
            let armed = try shares.armCheckin(asked, owner: key)
            var body = checkinInfo(armed.checkin)
            addCredentials(&body, share: armed.checkin.shareID, deviceToken: armed.deviceToken)
            var response = HTTPResponse.api(201, body)
            response.headers.append(("Location", "/api/v1/checkins/\(armed.checkin.id)"))
            return response
        } catch {
            return shareErrorResponse(error)
        }
    } }

    func showCheckin(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let (checkin, _) = try checkinCaller(request, id: text, allowDevice: true)
        return .api(200, checkinInfo(checkin))
    } }

    func checkinDone(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let (checkin, caller) = try checkinCaller(request, id: text, allowDevice: true)
        try limitDevice(caller, checkin)
        let after: Checkin
        do throws(ShareError) { after = try shares.settleCheckin(checkin, as: .done) } catch {
            return shareErrorResponse(error)
        }
        guard after.state != .missed else {
            throw APIError(status: 409, code: "checkin_missed", message: "the check-in was missed: its contacts have been told; stop its share to end the sharing")
        }
        return .api(200, checkinInfo(after))
    } }

    func extendCheckin(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let (checkin, caller) = try checkinCaller(request, id: text, allowDevice: true)
        try limitDevice(caller, checkin)
        let object = try jsonObject(request, example: #"{"in_s":3600}"#)
        let (dueAt, inSeconds) = try deadline(object)
        guard checkin.state == .armed else {
            throw APIError(status: 409, code: "checkin_\(checkin.state.rawValue)", message: "the check-in is \(checkin.state.rawValue), not armed")
        }
        do throws(ShareError) {
            let (moved, token) = try shares.extendCheckin(checkin, dueAt: dueAt, inSeconds: inSeconds)
            var body = checkinInfo(moved)
            addCredentials(&body, share: moved.shareID, deviceToken: token)
            return .api(200, body)
        } catch {
            return shareErrorResponse(error)
        }
    } }

    /// The check-in named, and who asks: the owner key that sees it (a limited key only its own), or its share's
    /// device token. 401 without either, 404 for an id unknown or another key's.
    private func checkinCaller(_ request: HTTPRequest, id text: String, allowDevice: Bool) throws(APIError) -> (Checkin, Caller) {
        guard request.header("authorization")?.hasPrefix("Bearer ") == true else { throw unknownCredential(request) }
        guard let id = CheckinID(text) else { throw Self.checkinNotFound }
        let found: Checkin?
        do { found = try shares.checkin(id) } catch { throw storeFailed(error, "looking up a check-in") }
        guard let checkin = found else {
            // A credential that is not current hears 401 whether the id exists or not; a store failure is still a 503.
            guard try authenticate(request, share: nil, allowDevice: false) != nil else { throw unknownCredential(request) }
            throw Self.checkinNotFound
        }
        guard let caller = try authenticate(request, share: checkin.shareID, allowDevice: allowDevice) else { throw unknownCredential(request) }
        if let key = caller.key, !key.isAdmin, key.id != checkin.ownerKeyID { throw Self.checkinNotFound }
        return (checkin, caller)
    }

    private func limitDevice(_ caller: Caller, _ checkin: Checkin) throws(APIError) {
        guard caller == .device, let wait = deviceExtendLimiter.take("checkin:" + checkin.id.rawValue, nowMillis: clock.monotonicMillis()) else { return }
        metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "checkins")])
        throw .rateLimited(retryAfter: wait)
    }

    static let checkinNotFound = APIError.notFound("no such check-in")

    private func jsonObject(_ request: HTTPRequest, example: String) throws(APIError) -> [String: JSONValue] {
        if request.body.isEmpty { return [:] }
        guard let object = (try? JSONValue.parse(request.body))?.objectValue else {
            throw .badRequest("invalid_json", "the body must be a JSON object, e.g. \(example)")
        }
        return object
    }

    /// `due_at` (RFC 3339) or `in_s`, each checked for its type (which of them, and when: `CheckinRules`).
    private func deadline(_ object: [String: JSONValue]) throws(APIError) -> (UnixMillis?, Double?) {
        var dueAt: UnixMillis?, inSeconds: Double?
        if let value = object["due_at"], value != .null {
            guard let text = value.stringValue, let date = RFC3339.parse(text) else {
                throw .badRequest("invalid_deadline", "due_at must be an RFC 3339 time, e.g. 2026-12-02T22:00:00Z")
            }
            dueAt = Int64((date.timeIntervalSince1970 * 1000).rounded())
        }
        if let value = object["in_s"], value != .null {
            guard let seconds = value.doubleValue else { throw .badRequest("invalid_deadline", "in_s must be a number of seconds") }
            inSeconds = seconds
        }
        return (dueAt, inSeconds)
    }

    /// The body of `POST /api/v1/checkins`, each member's type checked (the values: `CheckinRules`, `armCheckin`).
    func checkinRequest(_ request: HTTPRequest) throws(APIError) -> ShareService.CheckinRequest {
        let object = try jsonObject(request, example: #"{"in_s":7200,"contacts":["…"]}"#)
        let (dueAt, inSeconds) = try deadline(object)
        func integer(_ key: String, _ code: String) throws(APIError) -> Int64? {
            guard let value = object[key], value != .null else { return nil }
            guard let number = value.doubleValue, number.isFinite, number == number.rounded(), abs(number) < 1e12 else {
                throw .badRequest(code, "\(key) must be a whole number of seconds")
            }
            return Int64(number)
        }
        guard case .array(let items)? = object["contacts"], let ids = Optional(items.compactMap { $0.stringValue.flatMap { ContactID($0) } }),
              ids.count == items.count else {
            throw .badRequest("invalid_contacts", "contacts must be a list of contact ids (flare contacts list)")
        }
        var message: String?
        if let value = object["message"], value != .null {
            guard let text = value.stringValue else { throw .badRequest("invalid_message", "message must be a string") }
            message = text
        }
        var name: String?
        if let value = object["name"], value != .null {
            guard let text = value.stringValue else { throw .badRequest("invalid_name", "name must be a string") }
            do { _ = try shares.policy.validName(text) } catch { throw .badRequest("invalid_name", error.description) }
            name = text
        }
        var zone: ArrivalZone?
        if let value = object["arrive"], value != .null {
            guard let arrive = value.objectValue, let lat = arrive["lat"]?.doubleValue, let lon = arrive["lon"]?.doubleValue,
                  let radius = arrive["radius_m"]?.doubleValue else {
                throw .badRequest("invalid_arrive", "arrive must be {\"lat\":…,\"lon\":…,\"radius_m\":…}")
            }
            do throws(CheckinRules.Refusal) { zone = try CheckinRules.zone(latitude: lat, longitude: lon, radiusMeters: radius) } catch {
                throw .badRequest(error.code, error.message)
            }
        }
        var notify = false
        if let value = object["notify_on_arrival"], value != .null {
            guard case .bool(let flag) = value else { throw .badRequest("invalid_notify_on_arrival", "notify_on_arrival must be true or false") }
            notify = flag
        }
        if notify && zone == nil { throw .badRequest("invalid_notify_on_arrival", "notify_on_arrival needs arrive") }
        return ShareService.CheckinRequest(dueAt: dueAt, inSeconds: inSeconds, graceSeconds: try integer("grace_s", "invalid_grace"), contacts: ids,
                                           message: message, arrive: zone, notifyOnArrival: notify,
                                           durationSeconds: try integer("duration_s", "invalid_duration"), name: name)
    }

    func checkinInfo(_ checkin: Checkin) -> CheckinInfo {
        CheckinInfo(checkinID: checkin.id.rawValue, state: checkin.state.rawValue, shareID: checkin.shareID.rawValue,
                    dueAt: Date(unixMillis: checkin.dueAt), graceSeconds: Int(checkin.graceMillis / 1000), firesAt: Date(unixMillis: checkin.firesAt),
                    message: checkin.message, contacts: checkin.contacts.map(\.rawValue),
                    arrive: checkin.arrive.map { CheckinZone(lat: $0.latitude, lon: $0.longitude, radiusM: $0.radiusMeters) },
                    notifyOnArrival: checkin.notifyOnArrival, durationSeconds: Int(checkin.durationSeconds), stateAt: checkin.stateAt.map(Date.init(unixMillis:)))
    }

    /// The share's device credentials, as a share's creation answers them (OwnTracks provisioning works the same).
    private func addCredentials(_ body: inout CheckinInfo, share id: ShareID, deviceToken: String) {
        let base = configuration.publicURL
        body.deviceToken = deviceToken
        body.mqttURL = configuration.mqttPublicURL
        body.mqttUsername = id.rawValue
        body.mqttTopic = Topics.location(id)
        body.ingestURL = "\(base)/api/v1/shares/\(id.rawValue)/locations"
        body.ownTracksConfigURL = "\(base)/api/v1/shares/\(id.rawValue)/owntracks"
    }
}
