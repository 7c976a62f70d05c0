import FlareAPI
import FlareCore
import FlareHTTP
import FlareShares
import FlareStore
import FlareSystem
import FoundationEssentials

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
        let asked = try request.decode(as: CheckinExtension.self)
        let (dueAt, inSeconds) = (asked.dueAt.map(Self.unixMillis), asked.inSeconds)
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

    static func unixMillis(_ date: Date) -> UnixMillis { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    /// The body of `POST /api/v1/checkins` for the service: its name and contact ids checked, its zone made
    /// (`CheckinRules`); the deadline, the grace and the duration are the service's to check (`armCheckin`).
    func checkinRequest(_ request: HTTPRequest) throws(APIError) -> ShareService.CheckinRequest {
        let asked = try request.decode(as: CheckinRequest.self)
        let ids = asked.contacts.compactMap { ContactID($0) }
        guard ids.count == asked.contacts.count else {
            throw .badRequest("invalid_contacts", "contacts must be a list of contact ids (flare contacts list)")
        }
        if let name = asked.name {
            do { _ = try shares.policy.validName(name) } catch { throw .badRequest("invalid_name", error.description) }
        }
        var zone: ArrivalZone?
        if let arrive = asked.arrive {
            do throws(CheckinRules.Refusal) { zone = try CheckinRules.zone(latitude: arrive.lat, longitude: arrive.lon, radiusMeters: arrive.radiusM) } catch {
                throw .badRequest(error.code, error.message)
            }
        }
        let notify = asked.notifyOnArrival ?? false
        if notify && zone == nil { throw .badRequest("invalid_notify_on_arrival", "notify_on_arrival needs arrive") }
        // Past a trillion seconds a whole number is no longer one an Int64 of milliseconds holds.
        func seconds(_ value: Int?, _ key: String, _ code: String) throws(APIError) -> Int64? {
            guard let value else { return nil }
            guard value.magnitude < 1_000_000_000_000 else { throw .badRequest(code, "\(key) must be a whole number of seconds") }
            return Int64(value)
        }
        var escalation: Int?
        if let seconds = asked.escalateAfterSeconds {
            guard let valid = EscalationRules.valid(seconds) else { throw .badRequest("invalid_escalation", EscalationRules.invalidMessage) }
            escalation = valid
        }
        return ShareService.CheckinRequest(dueAt: asked.dueAt.map(Self.unixMillis), inSeconds: asked.inSeconds,
                                           graceSeconds: try seconds(asked.graceSeconds, "grace_s", "invalid_grace"), contacts: ids,
                                           message: asked.message, arrive: zone, notifyOnArrival: notify,
                                           durationSeconds: try seconds(asked.durationSeconds, "duration_s", "invalid_duration"), name: asked.name,
                                           escalateAfterSeconds: escalation)
    }

    func checkinInfo(_ checkin: Checkin) -> CheckinInfo {
        CheckinInfo(checkinID: checkin.id.rawValue, state: checkin.state.rawValue, shareID: checkin.shareID.rawValue,
                    dueAt: Date(unixMillis: checkin.dueAt), graceSeconds: Int(checkin.graceMillis / 1000), firesAt: Date(unixMillis: checkin.firesAt),
                    message: checkin.message, contacts: checkin.contacts.map(\.rawValue),
                    arrive: checkin.arrive.map { CheckinZone(lat: $0.latitude, lon: $0.longitude, radiusM: $0.radiusMeters) },
                    notifyOnArrival: checkin.notifyOnArrival, durationSeconds: Int(checkin.durationSeconds),
                    escalateAfterSeconds: checkin.escalateAfterSeconds, stateAt: checkin.stateAt.map(Date.init(unixMillis:)))
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
