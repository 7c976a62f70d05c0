import FlareAPI
import FlareIngest
import FlareShares
import FlareCore
import FlareHTTP
import FlareSystem

/// HTTP ingest: for a device that cannot speak MQTT. The fix is validated here (so the caller gets a clear 4xx), then
/// stored through the same batched writer as MQTT fixes; 202 only once it is committed. The writer then publishes it
/// to the share's location topic for integrators. The answer carries the commands waiting for the tracker.
extension Gateway {
    /// How long a request waits for its fix's commit before asking the client to come back (the fix stays queued).
    static let ingestCommitWaitMillis = 5_000

    func ingestLocation(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        guard let id = ShareID(text) else { throw .shareNotFound }
        guard try authenticate(request, share: id, allowDevice: true, expiredDeviceReports: true) == .device else {
            if let found = try lookUp(id), !found.share.isActive { throw .shareEnded }
            throw .unauthorized
        }
        guard let found = try lookUp(id), case .live(let snapshot) = found else { throw .shareNotFound }
        if let refusal = overFixRate(id) { throw refusal }
        let receivedAt = clock.now()
        let parsed = parser.parseMessage(request.body, receivedAt: receivedAt, shareCreatedAt: snapshot.share.createdAt)
            .flatMap { $0.fix(endToEnd: snapshot.share.endToEnd, receivedAt: receivedAt) ?? .failure(.ignoredType) }
        switch parsed {
        case .failure(let reason):
            metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", reason.rawValue)])
            let status = reason == .tooLarge ? 413 : (reason == .ignoredType ? 422 : 400)
            return APIError(status: status, code: reason.rawValue, message: reason.message).response
        case .success(let fix):
            if shares.fixLimitReached(id) {
                metrics.increment(FlareMetrics.fixesRejected, labels: [("reason", RejectReason.fixLimitReached.rawValue)])
                throw APIError(status: 409, code: RejectReason.fixLimitReached.rawValue, message: RejectReason.fixLimitReached.message)
            }
            if let refusal = storeOverHTTP(fix, snapshot, receivedAt: receivedAt) { return refusal.response }
            return .api(202, IngestReceipt(tst: fix.timestamp, commands: commands(for: snapshot)))
        }
    } }

    /// Stores a fix that came over HTTP; nil once it is committed, else the answer that asks the client to retry.
    func storeOverHTTP(_ fix: Fix, _ snapshot: ShareSnapshot, receivedAt: UnixMillis) -> APIError? {
        switch ingestor.storeHTTPFix(fix, share: snapshot.share.id, row: snapshot.row, receivedAt: receivedAt,
                                     timeout: .milliseconds(Self.ingestCommitWaitMillis)) {
        case .stored:
            return nil
        case .unavailable:
            // Longer than a lookup's Retry-After: the queue is full or the writer is failing, neither of which passes in a second.
            return APIError(status: 503, code: "store_unavailable", message: "the fix could not be stored now; retry",
                            headers: [("Retry-After", "5")])
        case .pending:
            // Queued and stored later; a retry is absorbed as a duplicate.
            return APIError(status: 503, code: "store_slow", message: "the fix is queued but not yet stored; retry",
                            headers: [("Retry-After", "2")])
        }
    }

    /// 429 once the share's devices have sent more fixes over HTTP than `FLARE_FIX_RATE_PER_SHARE` allows (nil: go on).
    func overFixRate(_ id: ShareID) -> APIError? {
        guard let wait = fixLimiter.take(id.rawValue, nowMillis: clock.monotonicMillis()) else { return nil }
        metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "share")])
        return .rateLimited(retryAfter: wait)
    }

    /// The commands waiting for a tracker that reports over HTTP, handed out once.
    func commands(for snapshot: ShareSnapshot) -> [DeviceCommand] {
        shares.takeLocateRequest(snapshot) ? [.reportLocation] : []
    }
}
