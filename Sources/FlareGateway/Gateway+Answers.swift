import FlareAPI
import FlareShares
import FlareCore
import FlareHTTP
import FlareSystem
import FoundationEssentials

/// The family answers the person who shared: `POST /api/v1/view/{view_token}/answers` for whoever holds the link,
/// `GET /api/v1/shares/{id}/answers?after=ID` for the phone (device token) or the share's owner key.
extension Gateway {
    func postAnswer(_ request: HTTPRequest, token: String) -> HTTPResponse {
        actingOnLink(request, token: token) { snapshot, link in
            guard snapshot.share.isActive else { return APIError.shareEnded.response }
            let kind: AnswerKind, typed: String
            switch answerRequest(request) {
            case .success(let parsed): (kind, typed) = parsed
            case .failure(let error): return error.response
            }
            // Through a personal link the answer carries that contact's name; typing one is for the share's own link.
            let name = link?.name ?? typed
            // A few answers a minute per address and link: enough for a family, too few to bury the real ones.
            let client = clientKey(request)
            let key = client + " " + snapshot.share.id.rawValue, now = clock.monotonicMillis()
            if let wait = answerLimiter.take(key, nowMillis: now) {
                metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "answers")])
                return APIError.rateLimited(retryAfter: wait).response
            }
            // And only so many in all, so that the share's own cap is not one address's to fill.
            if let wait = answerQuota.take(key, nowMillis: now) {
                metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "answers_per_address")])
                return APIError(status: 429, code: "too_many_answers",
                                message: "this address has sent this share as many answers as it may (\(configuration.answersPerAddress) a day)",
                                headers: [("Retry-After", String(wait))]).response
            }
            do throws(ShareService.AnswerRefusal) {
                return .api(201, Self.apiAnswer(try shares.answer(snapshot, kind: kind, name: name)))
            } catch {
                switch error {
                case .ended: return APIError.shareEnded.response
                case .full:
                    return APIError(status: 409, code: "answers_full",
                                    message: "this share has taken all the answers it can (\(ShareService.answersPerShare))").response
                case .storage(let message):
                    noteStoreFailure("answer: \(message)")
                    return APIError.storeUnavailable.response
                }
            }
        }
    }

    func listAnswers(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        guard let id = ShareID(text) else { throw .shareNotFound }
        guard let caller = try authenticate(request, share: id, allowDevice: true) else { throw .unauthorized }
        guard let lookup = try lookUp(id), caller.sees(lookup.share), case .live(let snapshot) = lookup else {
            throw .shareNotFound
        }
        var after: Int64 = 0
        if let text = request.query["after"] {
            guard let value = Int64(text), value >= 0 else {
                return APIError.badRequest("invalid_after", "after must be the id of an answer you have").response
            }
            after = value
        }
        // Under duress, the phone reads no answer: it may be in someone else's hands.
        if caller == .device && snapshot.share.underDuress { return .api(200, ShareAnswerList(answers: [])) }
        do throws(ShareError) {
            let found = try shares.answers(of: snapshot.row, after: after, limit: 100)
            return .api(200, ShareAnswerList(answers: found.map(Self.apiAnswer)))
        } catch {
            return shareErrorResponse(error)
        }
    } }

    /// The body's kind, and its name checked (`Answer.validName`: trimmed, bounded, no hidden characters).
    private func answerRequest(_ request: HTTPRequest) -> Result<(AnswerKind, String), APIError> {
        let asked: AnswerRequest
        do { asked = try request.decode(as: AnswerRequest.self) } catch { return .failure(error) }
        guard let kind = AnswerKind(rawValue: asked.kind.rawValue) else {
            return .failure(.badRequest("invalid_kind", "kind must be on_my_way, called_emergency or cannot_help"))
        }
        guard let clean = Answer.validName(asked.name) else {
            return .failure(.badRequest("invalid_name", "name must be \(NameBounds.answerName.description), without control or format characters"))
        }
        return .success((kind, clean))
    }

    static func apiAnswer(_ answer: Answer) -> ShareAnswer {
        ShareAnswer(id: String(answer.id), kind: ShareAnswer.Kind(rawValue: answer.kind.rawValue) ?? .onMyWay, name: answer.name,
                    at: Date(unixMillis: answer.at))
    }
}
