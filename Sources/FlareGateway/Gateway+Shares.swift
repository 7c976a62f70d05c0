import FlareAPI
import FlareShares
import FlareCore
import FlareHTTP
import FlareStore
import FlareSystem
import FlareWire
import FoundationEssentials
import FlareCodec

/// The owner API: create, list, show, stop, extend. Stop and extend also accept the share's device token, so the
/// person in trouble can end or prolong sharing from the phone.
///
/// A share belongs to the key that created it: a limited key reads and controls only its own, and for anyone
/// else's gets exactly what it would get for a share that does not exist (404 `not_found`), also where the owner
/// would hear 409 or 410. Admin keys see and control every share.
extension Gateway {
    enum Caller: Equatable {
        case owner(OwnerKeyRecord)
        case device

        var key: OwnerKeyRecord? {
            if case .owner(let key) = self { return key }
            return nil
        }

        /// Whether this caller may see `share` at all (a device token is checked against its share elsewhere).
        func sees(_ share: Share) -> Bool { key.map { $0.owns(share) } ?? true }
    }

    /// Who the request's bearer token says the caller is; nil for no current credential. Throws
    /// `APIError.storeUnavailable` when the store cannot say: a key or share that cannot be looked up is not a wrong one.
    ///
    /// A device token past its `exp` (the share was extended since it was issued) is taken only where
    /// `expiredDeviceReports` says so, for reporting positions; anywhere else it is answered 401 `token_expired`.
    func authenticate(_ request: HTTPRequest, share: ShareID?, allowDevice: Bool, expiredDeviceReports: Bool = false) throws(APIError) -> Caller? {
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Bearer ") else { return nil }
        let token = String(authorization.dropFirst("Bearer ".count))
        let standing: ShareService.DeviceTokenStanding
        do {
            if OwnerKey.isWellFormed(token) { return try shares.keys.key(token).map(Caller.owner) }
            guard allowDevice, let share else { return nil }
            standing = try shares.deviceTokenStanding(token, for: share)
        } catch {
            throw storeFailed(error, "checking a bearer token")
        }
        switch standing {
        case .refused: return nil
        case .current: return .device
        case .expired: if expiredDeviceReports { return .device } else { throw .tokenExpired }
        // As an ended share's token: refused, but for the positions it keeps sending.
        case .underDuress: return expiredDeviceReports ? .device : nil
        }
    }

    /// The owner key of the request; throws `unauthorized` without a current one (or `storeUnavailable`).
    func ownerKey(_ request: HTTPRequest) throws(APIError) -> OwnerKeyRecord {
        guard let key = try authenticate(request, share: nil, allowDevice: false)?.key else { throw .unauthorized }
        return key
    }

    /// The share with this id (memory, or the store); throws `storeUnavailable` when the store cannot say.
    func lookUp(_ id: ShareID) throws(APIError) -> ShareLookup? {
        do { return try shares.share(id) } catch { throw storeFailed(error, "looking up a share") }
    }

    /// The request body as a `ShareRequest`, its name and contacts checked (the duration: `SharePolicy`, in the service).
    func shareRequest(_ request: HTTPRequest) throws(APIError) -> ShareRequest {
        let parsed = try request.decode(as: ShareRequest.self)
        if let name = parsed.name {
            do { _ = try shares.policy.validName(name) } catch { throw .badRequest("invalid_name", error.description) }
        }
        if let contacts = parsed.contacts, !contacts.allSatisfy({ ContactID($0) != nil }) {
            throw .badRequest("invalid_contacts", "contacts must be a list of contact ids (flare contacts list)")
        }
        return parsed
    }

    func createShare(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let key = try ownerKey(request)
        let asked = try shareRequest(request)
        do throws(ShareError) {
            let created = try shares.create(name: asked.name, durationSeconds: asked.durationSeconds, owner: key,
                                            contacts: (asked.contacts ?? []).compactMap { ContactID($0) }, endToEnd: asked.e2e == true)
            let id = created.share.id
            let base = configuration.publicURL
            let shareURL = "\(base)/s/\(created.viewToken)", ingestURL = "\(base)/api/v1/shares/\(id.rawValue)/locations"
            let ownTracksURL = "\(base)/api/v1/shares/\(id.rawValue)/owntracks"
            let durationSeconds = Int((created.share.expiresAt - created.share.createdAt) / 1000)
            // The same members `APIJSON.encode` writes (`CreatedShare.fields`), without JSONEncoder (it took a fifth of
            // this handler's time) and without parsing the three URLs into `URL`s to print them again. With contacts,
            // `links` too (then not only strings: only clients that send contacts get it).
            var http: HTTPResponse
            if asked.contacts == nil {
                let fields = CreatedShare.fields(shareID: id.rawValue, shareURL: shareURL, expiresAt: RFC3339.format(millis: created.share.expiresAt),
                                                 durationSeconds: durationSeconds, deviceToken: created.deviceToken,
                                                 mqttURL: configuration.mqttPublicURL, mqttUsername: id.rawValue, mqttTopic: Topics.location(id),
                                                 statusTopic: Topics.status(id), ingestURL: ingestURL, ownTracksConfigURL: ownTracksURL,
                                                 e2e: created.share.endToEnd ? "true" : nil)
                http = HTTPResponse.json(201, JSONWriter.flatObject(fields.map { ($0.key.rawValue, $0.value) }))
            } else {
                var withLinks = CreatedShare(
                    shareID: id.rawValue, shareURL: configuration.url(shareURL), expiresAt: Date(unixMillis: created.share.expiresAt),
                    durationSeconds: durationSeconds, deviceToken: created.deviceToken, mqttURL: configuration.mqttPublicURL,
                    mqttUsername: id.rawValue, mqttTopic: Topics.location(id), statusTopic: Topics.status(id),
                    ingestURL: configuration.url(ingestURL), ownTracksConfigURL: configuration.url(ownTracksURL))
                withLinks.links = created.links.map { personalLink($0.link, token: $0.token, share: id, mailing: created.mailing[$0.link.id]) }
                withLinks.e2e = created.share.endToEnd ? "true" : nil
                http = HTTPResponse.api(201, withLinks)
            }
            http.headers.append(("Location", "/api/v1/shares/\(id.rawValue)"))
            return http
        } catch {
            return shareErrorResponse(error)
        }
    } }

    func showShare(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        guard let id = ShareID(text) else { throw .shareNotFound }
        // The owner key, or the share's device token: the phone may ask who has seen its link.
        guard let caller = try authenticate(request, share: id, allowDevice: true) else { throw .unauthorized }
        guard let lookup = try lookUp(id), caller.sees(lookup.share) else { throw .shareNotFound }
        var audience: Audience?
        if case .live(let snapshot) = lookup {
            do throws(StoreError) { audience = try shares.audience(of: snapshot) } catch { throw storeFailed(error, "reading an audience") }
        }
        return .api(200, Self.status(of: lookup, audience: audience))
    } }

    /// `GET /api/v1/shares`: newest first, in pages (see `FlareAPI.ShareList`): the caller's own shares, or for an
    /// admin key every share (`?key=ID`: that key's).
    func listShares(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let key = try ownerKey(request)
        var owner: Int64? = key.isAdmin ? nil : key.id
        if let text = request.query["key"] {
            guard let id = Int64(text), id > 0 else { return APIError.badRequest("invalid_key", "key must be a key id (flare keys list)").response }
            // A limited key asking for another key's shares gets what it would for a key with none.
            owner = key.isAdmin || id == key.id ? id : -1
        }
        var state: ShareStateFilter?
        if let text = request.query["state"] {
            guard let parsed = ShareStateFilter(rawValue: text) else {
                return APIError.badRequest("invalid_state", "state must be active or ended").response
            }
            state = parsed
        }
        var limit = ShareList.defaultLimit
        if let text = request.query["limit"] {
            guard let parsed = Int(text), (1...ShareList.maximumLimit).contains(parsed) else {
                return APIError.badRequest("invalid_limit", "limit must be a whole number from 1 to \(ShareList.maximumLimit)").response
            }
            limit = parsed
        }
        var position: ShareListPosition?
        if let text = request.query["cursor"] {
            guard let parsed = ShareListCursor.decode(text) else {
                return APIError.badRequest("invalid_cursor", "cursor must be a next_cursor this server returned").response
            }
            position = parsed
        }
        do throws(ShareError) {
            // One more than asked for says whether there is a next page without a second query.
            let found = try shares.list(state: state, after: position, limit: limit + 1, owner: owner)
            let page = found.prefix(limit)
            let next = found.count > limit ? page.last.map { ShareListCursor.encode(ShareListPosition(createdAt: $0.lookup.share.createdAt, row: $0.row)) } : nil
            return .api(200, ShareList(shares: page.map { Self.status(of: $0.lookup) }, nextCursor: next))
        } catch {
            return shareErrorResponse(error)
        }
    } }

    static func status(of lookup: ShareLookup, audience: Audience? = nil) -> ShareStatus {
        let share = lookup.share
        var last: ReportedLocation?
        var viewers = 0
        if case .live(let snapshot) = lookup {
            // An end-to-end encrypted share's last position is ciphertext: the server has none to show.
            last = snapshot.last.flatMap { $0.isSealed ? nil : $0.reportedLocation }
            viewers = snapshot.viewers
        }
        return ShareStatus(
            shareID: share.id.rawValue, name: share.name, state: share.isActive ? .active : .ended,
            createdAt: Date(unixMillis: share.createdAt), expiresAt: Date(unixMillis: share.expiresAt),
            endedAt: share.endedAt.map(Date.init(unixMillis:)), reason: share.endReason?.rawValue,
            historyDeleted: share.historyPurged, last: last, viewers: max(audience?.watching ?? 0, viewers), e2e: share.endToEnd ? true : nil,
            audience: audience.map { audience in
                ShareAudience(firstOpenedAt: audience.firstOpenedAt.map(Date.init(unixMillis:)), opened: audience.opened, watching: audience.watching,
                              links: audience.links.isEmpty ? nil : audience.links.map {
                                  ShareAudience.Link(linkID: $0.id.rawValue, name: $0.name, firstOpenedAt: $0.firstOpenedAt.map(Date.init(unixMillis:)),
                                                     watchingNow: $0.watchingNow, withdrawnAt: $0.withdrawnAt.map(Date.init(unixMillis:)))
                              })
            })
    }

    func stopShare(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        guard let id = ShareID(text) else { throw .shareNotFound }
        // An ended share refuses its device token; the answer stays 401 for a caller without the owner key.
        guard let caller = try authenticate(request, share: id, allowDevice: true) else { throw .unauthorized }
        guard try lookUp(id).map({ caller.sees($0.share) }) ?? true else { throw .shareNotFound }
        do throws(ShareError) {
            let share = try shares.stop(id)
            return .api(200, StoppedShare(shareID: id.rawValue, state: .ended, reason: share.endReason?.rawValue ?? EndReason.stopped.rawValue,
                                          endedAt: share.endedAt.map(Date.init(unixMillis:))))
        } catch {
            return shareErrorResponse(error)
        }
    } }

    func extendShare(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        guard let id = ShareID(text) else { throw .shareNotFound }
        guard let caller = try authenticate(request, share: id, allowDevice: true) else { throw .unauthorized }
        guard try lookUp(id).map({ caller.sees($0.share) }) ?? true else { throw .shareNotFound }
        if caller == .device, let wait = deviceExtendLimiter.take(id.rawValue, nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "extend")])
            throw .rateLimited(retryAfter: wait)
        }
        let body = try shareRequest(request)
        do throws(ShareError) {
            let (share, deviceToken) = try shares.extend(id, durationSeconds: body.durationSeconds)
            return .api(200, ExtendedShare(shareID: id.rawValue, expiresAt: Date(unixMillis: share.expiresAt), deviceToken: deviceToken))
        } catch {
            return shareErrorResponse(error)
        }
    } }

    func shareErrorResponse(_ error: ShareError) -> HTTPResponse {
        switch error {
        case .notFound: return APIError.shareNotFound.response
        case .ended: return APIError(status: 409, code: "share_ended", message: "the share has ended; create a new one").response
        case .invalid(let message): return APIError.badRequest("invalid_request", message).response
        case .refusedInput(let code, let message): return APIError.badRequest(code, message).response
        case .quota(let refusal):
            var response = HTTPResponse.api(429, QuotaErrorBody(message: refusal.message, limit: refusal.limit.rawValue, value: refusal.value))
            if let wait = refusal.retryAfterSeconds { response.headers.append(("Retry-After", String(wait))) }
            return response
        case .storage(let message):
            noteStoreFailure("share operation failed: \(message)")
            return APIError.storeUnavailable.response
        }
    }
}

/// The `cursor` of `GET /api/v1/shares`: where the previous page ended, as base64url text. Opaque to clients, and
/// no capability: it only says where to continue in a list the caller may read anyway.
enum ShareListCursor {
    static func encode(_ position: ShareListPosition) -> String {
        Base64URL.encode(Array("1:\(position.createdAt):\(position.row)".utf8))
    }

    static func decode(_ text: String) -> ShareListPosition? {
        guard text.utf8.count <= 64, let bytes = Base64URL.decode(text) else { return nil }
        let parts = String(decoding: bytes, as: UTF8.self).split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "1", let createdAt = Int64(parts[1]), let row = Int64(parts[2]) else { return nil }
        return ShareListPosition(createdAt: createdAt, row: row)
    }
}

/// A share's personal links over HTTP (owner key): `GET /api/v1/shares/{id}/links`, `POST …/links`
/// `{"contacts":[…]}`, `DELETE …/links/{link_id}`. Another limited key's share answers 404, as elsewhere.
extension Gateway {
    /// `mailing`: what became of its contact's mail, said as `"mailed"` (and `"reason"` when not); nil: not a mail.
    func personalLink(_ link: ShareLink, token: String, share: ShareID, mailing: LinkMailing? = nil) -> PersonalLink {
        let (mailed, reason): (Bool?, String?) = switch mailing {
        case nil: (nil, nil)
        case .queued: (true, nil)
        case .notMailed(let reason): (false, reason)
        }
        return PersonalLink(linkID: link.id.rawValue, contactID: link.contactID?.rawValue, name: link.name, url: "\(configuration.publicURL)/s/\(token)",
                            mailed: mailed, reason: reason)
    }

    /// The owner's live share `text` names, or the refusal.
    func ownersLiveShare(_ request: HTTPRequest, id text: String) throws(APIError) -> (key: OwnerKeyRecord, snapshot: ShareSnapshot) {
        let key = try ownerKey(request)
        guard let id = ShareID(text), let lookup = try lookUp(id), key.owns(lookup.share) else { throw .shareNotFound }
        guard case .live(let snapshot) = lookup else { throw .shareEnded }
        return (key, snapshot)
    }

    func listLinks(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let (_, snapshot) = try ownersLiveShare(request, id: text)
        return .api(200, PersonalLinkList(links: shares.links(of: snapshot).map { link, token in
            PersonalLinkList.Item(linkID: link.id.rawValue, contactID: link.contactID?.rawValue, name: link.name,
                                  url: "\(configuration.publicURL)/s/\(token)", createdAt: Date(unixMillis: link.createdAt),
                                  firstOpenedAt: link.firstOpenedAt.map(Date.init(unixMillis:)), withdrawnAt: link.withdrawnAt.map(Date.init(unixMillis:)))
        }))
    } }

    func addLinks(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let (key, snapshot) = try ownersLiveShare(request, id: text)
        let asked = try request.decode(as: LinkRequest.self)
        let ids = asked.contacts.compactMap { ContactID($0) }
        guard !ids.isEmpty, ids.count == asked.contacts.count else {
            throw .badRequest("invalid_contacts", "the body must be {\"contacts\":[\"<contact id>\", …]}")
        }
        do throws(ShareError) {
            let added = try shares.addLinks(snapshot, contacts: ids, owner: key)
            return .api(201, CreatedLinks(links: added.links.map {
                personalLink($0.link, token: $0.token, share: snapshot.share.id, mailing: added.mailing[$0.link.id])
            }))
        } catch {
            return shareErrorResponse(error)
        }
    } }

    func withdrawLink(_ request: HTTPRequest, id text: String, link linkText: String) -> HTTPResponse { answering { () throws(APIError) in
        let (_, snapshot) = try ownersLiveShare(request, id: text)
        guard let link = LinkID(linkText) else { throw .notFound("no such link") }
        do throws(ShareError) {
            try shares.withdrawLink(snapshot, link: link)
            return HTTPResponse(status: 204)
        } catch {
            if error == .notFound { throw .notFound("no such link") }
            return shareErrorResponse(error)
        }
    } }
}
