import FlareAPI
import FlareCore
import FlareHTTP
import FlareShares
import FlareStore
import FlareSystem
import FoundationEssentials
import FlareCodec

/// Devices over HTTP. The owner's side, with an owner key: `POST /api/v1/devices`, `GET /api/v1/devices` (paged as
/// contacts), `GET`, `PATCH` and `DELETE /api/v1/devices/{id}`, `POST …/{id}/secret`, `GET …/{id}/setup`; a limited
/// key sees only its own devices (another key's id answers 404 as an unknown one does). The device's side, with its
/// secret as `Authorization: Bearer`: `POST /api/v1/devices/sos` starts (or finds) its SOS, `GET` reads it,
/// `POST /api/v1/devices/sos/stop` stops it, `POST /api/v1/devices/locations` reports a position into it. An unknown
/// or replaced secret answers 404 and costs its address as an unknown link does. The log names devices by id, never
/// a secret, a PIN or a position.
extension Gateway {
    // MARK: The owner's side

    func createDevice(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        if let wait = contactLimiter.take("device:\(key.id)", nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "devices")])
            throw .rateLimited(retryAfter: wait)
        }
        let body = try request.decode(as: DeviceRequest.self)
        do throws(Devices.Refusal) {
            let (stored, secret) = try shares.devices.add(Self.settings(body), owner: key)
            let device = stored.device
            var response = HTTPResponse.api(201, CreatedDevice(deviceID: device.id.rawValue, name: device.name, secret: secret,
                                                               contacts: device.contacts.map(\.rawValue), setup: setup(stored, secret: secret)))
            response.headers.append(("Location", "/api/v1/devices/\(device.id)"))
            return response
        } catch {
            throw deviceRefusal(error, "storing a device")
        }
    } }

    func listDevices(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        let (limit, page) = try Self.page(request, defaultLimit: DeviceList.defaultLimit, maximumLimit: DeviceList.maximumLimit)
        do throws(StoreError) {
            let found = try shares.devices.list(for: key, after: page.map { DeviceListPosition(row: $0.row) }, limit: limit + 1)
            let page = found.prefix(limit)
            let next = found.count > limit ? page.last.map { ContactListCursor.encode(ContactListPosition(row: $0.row)) } : nil
            var devices: [DeviceInfo] = []
            for stored in page { devices.append(try info(stored)) }
            return .api(200, DeviceList(devices: devices, nextCursor: next))
        } catch {
            throw storeFailed(error, "listing devices")
        }
    } }

    func showDevice(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let stored = try ownedDevice(request, id: text)
        do throws(StoreError) { return .api(200, try info(stored)) } catch { throw storeFailed(error, "reading a device") }
    } }

    func changeDevice(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        guard let id = DeviceID(text) else { throw Self.deviceNotFound }
        let body = try request.decode(as: DeviceRequest.self)
        let stored: StoredDevice
        do throws(Devices.Refusal) { stored = try shares.devices.change(id, Self.settings(body), by: key) } catch {
            throw deviceRefusal(error, "changing a device")
        }
        do throws(StoreError) { return .api(200, try info(stored)) } catch { throw storeFailed(error, "reading a device") }
    } }

    func removeDevice(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        guard let id = DeviceID(text) else { throw Self.deviceNotFound }
        let removed: Bool
        do throws(StoreError) { removed = try shares.devices.remove(id, by: key) } catch { throw storeFailed(error, "removing a device") }
        guard removed else { throw Self.deviceNotFound }
        return HTTPResponse(status: 204, headers: [], body: .bytes([]))
    } }

    func newDeviceSecret(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        guard let id = DeviceID(text) else { throw Self.deviceNotFound }
        do throws(Devices.Refusal) {
            let (stored, secret) = try shares.devices.newSecret(id, by: key)
            let device = stored.device
            return .api(200, CreatedDevice(deviceID: device.id.rawValue, name: device.name, secret: secret, contacts: device.contacts.map(\.rawValue),
                                           setup: setup(stored, secret: secret)))
        } catch {
            throw deviceRefusal(error, "issuing a device secret")
        }
    } }

    func deviceSetup(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        .api(200, setup(try ownedDevice(request, id: text), secret: nil))
    } }

    static let deviceNotFound = APIError.notFound("no such device")

    private func ownedDevice(_ request: HTTPRequest, id text: String) throws(APIError) -> StoredDevice {
        let key = try contactsCaller(request)
        guard let id = DeviceID(text) else { throw Self.deviceNotFound }
        let found: StoredDevice?
        do throws(StoreError) { found = try shares.devices.device(id, for: key) } catch { throw storeFailed(error, "reading a device") }
        guard let found else { throw Self.deviceNotFound }
        return found
    }

    private static func settings(_ body: DeviceRequest) -> Devices.Settings {
        Devices.Settings(name: body.name, contacts: body.contacts, durationSeconds: body.durationSeconds, message: body.message, pin: body.pin,
                         duressPin: body.duressPin, countdownSeconds: body.countdownSeconds,
                         escalateAfterSeconds: body.escalateAfterSeconds)
    }

    private func deviceRefusal(_ error: Devices.Refusal, _ doing: String) -> APIError {
        switch error {
        case .invalid(let code, let message): return .badRequest(code, message)
        case .full:
            return APIError(status: 409, code: "devices_full", message: "this key has as many devices as a key may (\(DeviceRules.maximumPerKey)); remove some first")
        case .notFound: return Self.deviceNotFound
        case .storage(let failure):
            noteStoreFailure("\(doing): \(failure)")
            return .storeUnavailable
        }
    }

    /// The device as its owner sees it, its SOS included (the owner sees a duress for what it is).
    private func info(_ stored: StoredDevice) throws(StoreError) -> DeviceInfo {
        let device = stored.device
        var sos = "none"
        var shareID: String?
        if let share = try shares.devices.currentShare(of: stored)?.share {
            shareID = share.id.rawValue
            sos = !share.isActive ? "ended" : share.underDuress ? "duress" : "live"
        }
        return DeviceInfo(deviceID: device.id.rawValue, name: device.name, contacts: device.contacts.map(\.rawValue),
                          durationSeconds: device.durationSeconds.map { Int($0) }, message: device.message, hasPin: device.pin != nil,
                          hasDuressPin: device.duressPin != nil, countdownSeconds: device.countdownSeconds,
                          escalateAfterSeconds: device.escalateAfterSeconds, createdAt: Date(unixMillis: device.createdAt),
                          lastHeardAt: stored.sos.lastHeardAt.map(Date.init(unixMillis:)), sos: sos, sosShareID: shareID)
    }

    /// What each app needs: the secret where it goes, or `<secret>` when this answer does not issue it.
    func setup(_ stored: StoredDevice, secret: String?) -> DeviceSetup {
        let base = configuration.publicURL
        let shown = secret ?? "<secret>"
        let osmand = "\(base)/api/v1/osmand"
        typealias Field = DeviceSetup.App.Field
        let apps = [
            DeviceSetup.App(app: "traccar_client", name: "Traccar Client (Android, iOS)", fields: [
                Field(label: "Server URL", value: osmand),
                Field(label: "Device identifier", value: shown),
                Field(label: "Location accuracy", value: "High"),
                Field(label: "Frequency", value: "30 (seconds)"),
                Field(label: "Offline buffering", value: "On"),
            ], sos: "Long-press the app's icon and choose SOS (Android and iPhone); Traccar Client 10.1 and later also has an SOS button on its main screen.",
            qr: "\(osmand)/\(shown)"),
            DeviceSetup.App(app: "gpslogger", name: "GPSLogger (Android)", fields: [
                Field(label: "Log to custom URL", value: "On"),
                Field(label: "URL", value: "\(osmand)/\(shown)?lat=%LAT&lon=%LON&timestamp=%TIMESTAMP&accuracy=%ACC&altitude=%ALT&speed_mps=%SPD&bearing=%DIR&batt=%BATT&charge=%ISCHARGING&alarm=%DESC"),
                Field(label: "HTTP Method", value: "GET"),
            ], sos: "GPSLogger has no SOS button: log a single point with the annotation \"sos\" (the annotation goes in as alarm=sos).", qr: nil),
            DeviceSetup.App(app: "osmand", name: "OsmAnd (Trip recording → Online tracking)", fields: [
                Field(label: "Web address", value: "\(osmand)/\(shown)?lat={0}&lon={1}&timestamp={2}&accuracy={3}&altitude={4}&speed_mps={5}&bearing={6}"),
                Field(label: "Tracking interval", value: "30 seconds"),
            ], sos: "OsmAnd has no SOS: start it from Traccar Client or the Flare API; OsmAnd's positions go into the SOS while it is live.", qr: nil),
            DeviceSetup.App(app: "http", name: "Flare's API (FlareClient, scripts)", fields: [
                Field(label: "Start", value: "POST \(base)/api/v1/devices/sos"),
                Field(label: "Positions", value: "POST \(base)/api/v1/devices/locations"),
                Field(label: "Stop", value: "POST \(base)/api/v1/devices/sos/stop"),
                Field(label: "Authorization", value: "Bearer \(shown)"),
            ], sos: "POST /api/v1/devices/sos with the secret as a bearer token.", qr: nil),
            DeviceSetup.App(app: "sos_page", name: "Flare's SOS page (any phone's browser, nothing to install)", fields: [
                Field(label: "Open on the phone, then add to the home screen", value: "\(base)/sos#d=\(shown)"),
            ], sos: "Press the SOS button; it counts down \(stored.device.countdownSeconds) s with a Cancel, then starts.", qr: "\(base)/sos#d=\(shown)"),
        ]
        let heard = stored.sos.lastHeardAt
        return DeviceSetup(deviceID: stored.device.id.rawValue, includesSecret: secret != nil, apps: apps, lastHeardAt: heard.map(Date.init(unixMillis:)),
                           lastHeardSecondsAgo: heard.map { Int(max(0, clock.now() - $0) / 1000) })
    }

    // MARK: The device's side

    /// The device whose secret the request carries as `Authorization: Bearer`.
    func deviceCaller(_ request: HTTPRequest) throws(APIError) -> (device: StoredDevice, owner: OwnerKeyRecord) {
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer ") else { throw .unauthorized }
        return try device(secret: authorization.dropFirst(7), request)
    }

    /// The device with this secret; an unknown one answers 404 and costs the caller's address as an unknown link does.
    func device(secret: some StringProtocol, _ request: HTTPRequest) throws(APIError) -> (device: StoredDevice, owner: OwnerKeyRecord) {
        let found: (device: StoredDevice, owner: OwnerKeyRecord)?
        do throws(StoreError) { found = try shares.devices.authenticate(secret: secret) } catch { throw storeFailed(error, "checking a device secret") }
        guard let found else {
            let refusal = unknownCredential(request)
            throw refusal.status == 429 ? refusal : APIError(status: 404, code: "unknown_device", message: "no device has this secret (was a new one issued?)")
        }
        if let wait = deviceLimiter.take(found.device.device.id.rawValue, nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "device")])
            throw .rateLimited(retryAfter: wait)
        }
        shares.devices.heard(found.device)
        return found
    }

    /// 429 once an address has started or stopped more SOS than a person would (`sosAddressLimiter`).
    func overSOSAddressRate(_ request: HTTPRequest) throws(APIError) {
        guard let wait = sosAddressLimiter.take(clientKey(request), nowMillis: clock.monotonicMillis()) else { return }
        metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "sos_address")])
        throw .rateLimited(retryAfter: wait)
    }

    func startSOS(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let caller = try deviceCaller(request)
        try overSOSAddressRate(request)
        // The first fix, if the body holds one, goes in with the start; a body that is not a fix is refused first.
        var first: Fix?
        // No body, or `{}` (what clients send for "no body"), is a press without a position.
        let noFix = request.body.allSatisfy { $0 == 32 || $0 == 10 || $0 == 13 || $0 == 9 } || (try? JSONValue.parse(request.body)) == .object([:])
        if !noFix {
            let parsed = parser.parseMessage(request.body, receivedAt: clock.now(), shareCreatedAt: clock.now() - 86_400_000)
                .flatMap { $0.fix(endToEnd: false, receivedAt: clock.now()) ?? .failure(.ignoredType) }
            switch parsed {
            case .success(let fix): first = fix
            case .failure(let reason):
                metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
                throw APIError(status: reason == .tooLarge ? 413 : 400, code: reason.rawValue, message: reason.message)
            }
        }
        let sos = try startSOS(caller)
        if let first, case .live(let snapshot) = try lookUp(sos.share.id), snapshot.share.isActive {
            _ = storeOverHTTP(first, snapshot, receivedAt: clock.now())
        }
        return .api(sos.repeated ? 200 : 201, sosAnswer(sos))
    } }

    /// Starts the device's SOS (or finds it live): the refusals as the API answers them.
    func startSOS(_ caller: (device: StoredDevice, owner: OwnerKeyRecord)) throws(APIError) -> Devices.SOS {
        do throws(Devices.StartRefusal) { return try shares.devices.startSOS(caller.device, owner: caller.owner) } catch {
            switch error {
            case .tooMany(let wait):
                throw APIError(status: 429, code: "sos_limit", message: "this device started as many SOS as an hour allows; its contacts have been told of the last one",
                               headers: [("Retry-After", String(wait))])
            case .storage(let failure): noteStoreFailure("starting an SOS: \(failure)"); throw .storeUnavailable
            case .refused(let refusal): throw APIError(status: 409, code: "sos_refused", message: refusal.description)
            }
        }
    }

    func sosAnswer(_ sos: Devices.SOS) -> SOSStarted {
        let id = sos.share.id
        return SOSStarted(shareID: id.rawValue, shareURL: "\(configuration.publicURL)/s/\(sos.viewToken)", expiresAt: Date(unixMillis: sos.share.expiresAt),
                          deviceToken: sos.deviceToken, mqttURL: configuration.mqttPublicURL, mqttUsername: id.rawValue, mqttTopic: Topics.location(id),
                          links: sos.links.map { personalLink($0.link, token: $0.token, share: id, mailing: sos.mailing[$0.link.id]) },
                          repeated: sos.repeated)
    }

    /// `GET /api/v1/devices/me`: what the SOS page shows before a press, and the numbers of its SMS fallback.
    func deviceCard(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let caller = try deviceCaller(request)
        let device = caller.device.device
        let contacts: [Contact]
        do throws(StoreError) { contacts = try shares.devices.contacts(of: device, owner: caller.owner) } catch {
            throw storeFailed(error, "reading a device's contacts")
        }
        return .api(200, DeviceCard(deviceID: device.id.rawValue, name: device.name, countdownSeconds: device.countdownSeconds,
                                    hasPin: device.pin != nil, contacts: contacts.map { DeviceCard.Contact(name: $0.name, phone: $0.phone) }))
    } }

    /// `POST /api/v1/devices/sos/extend`: the live SOS runs longer; answered as `GET /api/v1/devices/sos`.
    func extendSOS(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let caller = try deviceCaller(request)
        if let wait = deviceExtendLimiter.take("device:\(caller.device.device.id)", nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "device_extend")])
            throw .rateLimited(retryAfter: wait)
        }
        let body = try request.decode(as: SOSExtendRequest.self)
        do throws(Devices.ExtendRefusal) {
            _ = try shares.devices.extendSOS(caller.device, durationSeconds: body.durationSeconds)
        } catch {
            switch error {
            case .notSharing: throw APIError(status: 409, code: "not_sharing", message: "this device has no live SOS to extend")
            case .refused(let refusal): return shareErrorResponse(refusal)
            case .storage(let failure): noteStoreFailure("extending an SOS: \(failure)"); throw .storeUnavailable
            }
        }
        // What the device reads now, for the device already found (not found again, nor charged twice).
        return try sosState(of: caller.device)
    } }

    func sosState(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        try sosState(of: try deviceCaller(request).device)
    } }

    /// `GET /api/v1/devices/sos`'s answer for a device found by its secret.
    private func sosState(of device: StoredDevice) throws(APIError) -> HTTPResponse {
        do throws(StoreError) {
            switch try shares.devices.status(of: device) {
            case .none: return .api(200, SOSState(status: "none", shareID: nil, expiresAt: nil, stoppedAt: nil))
            case .stopped(let share, let at): return .api(200, Self.stopped(share, at: at))
            case .live(let snapshot):
                let audience = try shares.audience(of: snapshot)
                let answers = (try? shares.answers(of: snapshot.row, after: 0, limit: 100)) ?? []
                let status = Self.status(of: .live(snapshot), audience: audience)
                // "Nobody has answered yet" while no one said they are coming or called for help.
                let helped = answers.contains { $0.kind == .onMyWay || $0.kind == .calledEmergency }
                let ladder = helped ? nil : try shares.devices.escalation(of: snapshot)
                return .api(200, SOSState(status: "live", shareID: snapshot.share.id.rawValue, expiresAt: Date(unixMillis: snapshot.share.expiresAt),
                                          stoppedAt: nil, audience: status.audience, answers: answers.map(Self.apiAnswer),
                                          escalation: ladder.map { SOSEscalation(step: $0.step, nextAt: $0.nextAt.map(Date.init(unixMillis:))) }))
            }
        } catch {
            throw storeFailed(error, "reading a device's SOS")
        }
    }

    /// What a stop answers, and what the device reads after one (a duress PIN's the same, to the byte but the time).
    static func stopped(_ share: Share, at: UnixMillis) -> SOSState {
        SOSState(status: "stopped", shareID: share.id.rawValue, expiresAt: nil, stoppedAt: Date(unixMillis: at))
    }

    func stopSOS(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let caller = try deviceCaller(request)
        try overSOSAddressRate(request)
        let body = try request.decode(as: SOSStopRequest.self)
        do throws(Devices.StopRefusal) {
            switch try shares.devices.stopSOS(caller.device, owner: caller.owner, pin: body.pin) {
            case .none, .live: return .api(200, SOSState(status: "none", shareID: nil, expiresAt: nil, stoppedAt: nil))
            case .stopped(let share, let at): return .api(200, Self.stopped(share, at: at))
            }
        } catch {
            switch error {
            case .wrongPIN: throw APIError(status: 403, code: "wrong_pin", message: "the PIN is wrong; the SOS goes on")
            case .locked(let wait):
                throw APIError(status: 403, code: "stop_locked", message: "too many wrong PINs: stopping is locked for a while, and the contacts were told",
                               headers: [("Retry-After", String(wait))])
            case .storage(let failure): noteStoreFailure("stopping an SOS: \(failure)"); throw .storeUnavailable
            }
        }
    } }

    /// The share a device's positions go into now (nil outside a live SOS).
    func livePositions(_ stored: StoredDevice) throws(APIError) -> ShareSnapshot? {
        do { return try shares.devices.shareTakingPositions(of: stored) } catch { throw storeFailed(error, "finding a device's SOS") }
    }

    func deviceLocation(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let caller = try deviceCaller(request)
        guard let snapshot = try livePositions(caller.device) else {
            shares.devices.positionDropped()
            return .api(200, DevicePositionDropped())
        }
        if let refusal = overFixRate(snapshot.share.id) { throw refusal }
        let receivedAt = clock.now()
        let parsed = parser.parseMessage(request.body, receivedAt: receivedAt, shareCreatedAt: snapshot.share.createdAt)
            .flatMap { $0.fix(endToEnd: false, receivedAt: receivedAt) ?? .failure(.ignoredType) }
        switch parsed {
        case .failure(let reason):
            metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
            throw APIError(status: reason == .tooLarge ? 413 : (reason == .ignoredType ? 422 : 400), code: reason.rawValue, message: reason.message)
        case .success(let fix):
            if shares.fixLimitReached(snapshot.share.id) { throw APIError(status: 409, code: RejectReason.fixLimitReached.rawValue, message: RejectReason.fixLimitReached.message) }
            if let refusal = storeOverHTTP(fix, snapshot, receivedAt: receivedAt) { throw refusal }
            // Under duress the device reads "stopped" everywhere: its positions are kept, and it is told they were not.
            if snapshot.share.underDuress { return .api(200, DevicePositionDropped()) }
            return .api(202, IngestReceipt(tst: fix.timestamp, commands: commands(for: snapshot)))
        }
    } }
}
