import FlareAPI
import FlareCore
import FlareHTTP
import FlareShares
import FlareSystem

/// `GET` and `POST /api/v1/osmand` and `/api/v1/osmand/<secret>`: the OsmAnd protocol, as Traccar Client, GPSLogger,
/// OsmAnd and many trackers speak it (`OsmAndReport`). The device is named by its secret, in the path (for apps whose
/// identifier field is short, or whose URL is a template) or as `id` / `device_id`. A position goes into the device's
/// SOS while it is live, through the path every HTTP fix takes (committed, then published on the share's topic);
/// outside an SOS it is answered and dropped, never stored. `alarm=sos` starts the SOS, with that position. Success is
/// 200 with an empty body, which every one of these apps takes as success (anything else they retry, or report).
extension Gateway {
    func osmand(_ request: HTTPRequest, secret pathSecret: String?) -> HTTPResponse { answering { () throws(APIError) in
        var query = request.query
        var repeated = Set<String>()
        for key in query.keys where key.hasPrefix(HTTPRequest.repeatedMark) {
            repeated.insert(String(key.dropFirst(HTTPRequest.repeatedMark.count)))
            query[key] = nil
        }
        let report: OsmAndReport
        do throws(OsmAndReport.Refusal) {
            report = try OsmAndReport.read(query: query, repeated: repeated, contentType: request.header("content-type"), body: request.body)
        } catch {
            throw .badRequest(error.code, error.message)
        }
        // A URL typed with a trailing slash has an empty last part: no secret there.
        guard let secret = pathSecret.flatMap({ $0.isEmpty ? nil : $0 }) ?? report.identifier, !secret.isEmpty else {
            throw .badRequest("missing_id", "the device's secret goes in the URL (/api/v1/osmand/<secret>) or as id")
        }
        let caller = try device(secret: secret, request)
        if report.tokenOnly { return Self.osmandAccepted }
        var snapshot: ShareSnapshot?
        if report.sos {
            try overSOSAddressRate(request)
            let sos = try startSOS(caller)
            if case .live(let live) = try lookUp(sos.share.id), live.share.isActive { snapshot = live }
        } else if report.hasPosition {
            snapshot = try livePositions(caller.device)
        }
        guard report.hasPosition else { return Self.osmandAccepted }
        guard let snapshot else {
            shares.devices.positionDropped()
            return Self.osmandAccepted
        }
        if let refusal = overFixRate(snapshot.share.id) { throw refusal }
        let receivedAt = clock.now()
        let message = report.ownTracksMessage(receivedAtSeconds: receivedAt / 1000)
        let parsed = parser.parseMessage(message, receivedAt: receivedAt, shareCreatedAt: snapshot.share.createdAt)
            .flatMap { $0.fix(endToEnd: false, receivedAt: receivedAt) ?? .failure(.ignoredType) }
        switch parsed {
        case .failure(let reason):
            metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
            throw APIError(status: 400, code: reason.rawValue, message: reason.message)
        case .success(let fix):
            if shares.fixLimitReached(snapshot.share.id) {
                throw APIError(status: 409, code: RejectReason.fixLimitReached.rawValue, message: RejectReason.fixLimitReached.message)
            }
            if let refusal = storeOverHTTP(fix, snapshot, receivedAt: receivedAt) { throw refusal }
            return Self.osmandAccepted
        }
    } }

    /// What the apps take as success: 200, nothing in the body.
    static let osmandAccepted = HTTPResponse(status: 200, headers: [("Cache-Control", "no-store")], body: .bytes([]))
}
