import FlareAPI
import FlareCore
import FlareHTTP
import FlareShares
import FlareStore
import FlareSystem
import FlareWire
import Synchronization

/// A track to hand over: the whole recorded track of a share as GPX 1.1, GeoJSON or KML 2.2 for the owner key
/// (`GET /api/v1/shares/{id}/track.gpx|geojson|kml`) and for whoever holds a link (`GET /api/v1/view/{view_token}/
/// track.…`), and the live KML feed rescue tools poll (`GET /s/{view_token}/feed.kml`). An ended share's track is there
/// until its history is purged; a withdrawn link gets nothing; an end-to-end encrypted share's positions are not the
/// server's to export (its page builds the GPX from what it decrypted).
extension Gateway {
    /// Positions read from the store at a time, each page sent before the next is read.
    static let trackPage = 2_000
    /// Exports running at once on this instance (each has a thread while it sends): beyond, 429.
    static let tracksAtOnce = 8
    /// How long a client may take nothing of a track before its export ends.
    static let trackStall: Duration = .seconds(30)

    static let historyPurged = APIError(status: 410, code: "history_purged",
                                        message: "the share ended and its positions were deleted (FLARE_HISTORY_RETENTION_S)")
    static let noTrackForE2E = APIError(status: 409, code: "e2e_no_track",
                                        message: "this share is end-to-end encrypted: the server cannot read its positions; its page can download the track it decrypted")

    func ownerTrack(_ request: HTTPRequest, id text: String, file: String) -> HTTPResponse { answering { () throws(APIError) in
        guard let format = TrackFormat(fileName: file) else { throw .notFound("no such endpoint") }
        guard let id = ShareID(text) else { throw .shareNotFound }
        guard let caller = try authenticate(request, share: id, allowDevice: false) else { throw .unauthorized }
        guard let lookup = try lookUp(id), caller.sees(lookup.share) else { throw .shareNotFound }
        return try track(lookup, format: format)
    } }

    func linkTrack(_ request: HTTPRequest, token: String, file: String) -> HTTPResponse {
        guard let format = TrackFormat(fileName: file) else { return APIError.notFound("no such endpoint").response }
        switch lookUpLink(request, token: token, notFound: { APIError.shareNotFound.response }) {
        case .answered(let response): return response
        case .found(_, let link?) where link.isWithdrawn: return Self.linkWithdrawn.response
        case .found(let lookup, _): return answering { () throws(APIError) in try track(lookup, format: format) }
        }
    }

    private func track(_ lookup: ShareLookup, format: TrackFormat) throws(APIError) -> HTTPResponse {
        guard case .live(let snapshot) = lookup else {
            throw Self.historyPurged
        }
        guard !snapshot.share.endToEnd else { throw Self.noTrackForE2E }
        // The first page read here: a store that cannot answer is answered as one (503), not as an empty track.
        let first: [Fix]
        do { first = try shares.track(of: snapshot, after: nil, limit: Self.trackPage) } catch { throw storeFailed(error, "reading a track") }
        guard trackExports.withLock({ running -> Bool in
            guard running < Self.tracksAtOnce else { return false }
            running += 1
            return true
        }) else {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "tracks")])
            throw .rateLimited(retryAfter: 5)
        }
        let share = snapshot.share
        let heading = TrackHeading(shareID: share.id, name: share.name, startedAt: share.createdAt, endedAt: share.endedAt)
        let stream = EventStream()
        let file = "flare-\(share.id.rawValue).\(format == .geojson ? "geojson" : format.rawValue)"
        NamedThread.start(name: "flare-track") { [self] in
            defer { trackExports.withLock { $0 -= 1 } }
            writeTrack(of: snapshot, as: format, heading: heading, firstPage: first, into: stream)
        }
        return HTTPResponse(status: 200, headers: [("Content-Type", format.contentType), ("Content-Disposition", "attachment; filename=\"\(file)\""),
                                                   ("Cache-Control", "no-store")], body: .stream(stream))
    }

    /// Reads the track a page at a time and sends each as it is written; waits for a slow client, gives up on one that
    /// takes nothing for `trackStall` or left. A store failure half way ends the response early: the document is
    /// then incomplete (not well-formed), which a client sees, rather than a well-formed document missing positions.
    private func writeTrack(of snapshot: ShareSnapshot, as format: TrackFormat, heading: TrackHeading, firstPage: [Fix], into stream: EventStream) {
        var writer = TrackDocumentWriter(format: format, heading: heading)
        var pending = writer.begin()
        func flush(_ force: Bool) -> Bool {
            guard force || pending.count >= 32 * 1024 else { return true }
            defer { pending.removeAll(keepingCapacity: true) }
            return stream.sendWhenRoom(pending, timeout: Self.trackStall)
        }
        for pass in 0..<format.passes {
            pending += writer.startPass(pass)
            var position: FixPosition?
            while true {
                // The first page (read before the answer started) serves each pass.
                var page = firstPage
                if position != nil {
                    do { page = try shares.track(of: snapshot, after: position, limit: Self.trackPage) } catch {
                        noteStoreFailure("reading a track: \(error)")
                        _ = flush(true)
                        stream.finish()
                        return
                    }
                }
                for fix in page {
                    pending += writer.add(fix)
                    guard flush(false) else { return stream.finish() }
                }
                guard page.count == Self.trackPage, let last = page.last else { break }
                position = FixPosition(of: last)
            }
            pending += writer.endPass()
        }
        pending += writer.end()
        _ = flush(true)
        stream.finish()
    }

    /// `GET /s/{view_token}/feed.kml`: the last position and the trail kept in memory, for tools that poll (Google
    /// Earth's network link, CalTopo/SARTopo); it says when sharing ended; 410 once the history is purged.
    func liveFeed(_ request: HTTPRequest, token: String) -> HTTPResponse {
        switch lookUpLink(request, token: token, notFound: { APIError.shareNotFound.response }) {
        case .answered(let response): return response
        case .found(_, let link?) where link.isWithdrawn: return Self.linkWithdrawn.response
        case .found(.historyDeleted, _):
            return Self.historyPurged.response
        case .found(.live(let snapshot), _):
            guard !snapshot.share.endToEnd else { return Self.noTrackForE2E.response }
            return HTTPResponse(status: 200, headers: [("Content-Type", TrackFormat.kml.contentType), ("Cache-Control", "no-store")],
                                body: .bytes(LiveFeedDocument.kml(heading: TrackHeading(shareID: snapshot.share.id, name: snapshot.share.name,
                                                                                   startedAt: snapshot.share.createdAt, endedAt: snapshot.share.endedAt),
                                                                  last: snapshot.last, trail: snapshot.trail, now: clock.now())))
        }
    }
}
