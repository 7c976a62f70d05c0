import FlareAPI
import FlareCore
import FlareStore
import FlareEvents
import FlareSystem
import FlareWire
import Synchronization

extension ShareService {
    // MARK: Reading

    /// The share with this id: from memory, or else from the store (a share another instance just created, or one
    /// whose history is deleted). Nil if unknown; throws when memory does not know it and the store cannot say.
    public func share(_ id: ShareID) throws(StoreError) -> ShareLookup? {
        if let snapshot = registry.snapshot(id) { return .live(snapshot) }
        return try lookUpInStore({ () throws(StoreError) in try store.share(id: id) }, missKey: id.rawValue)
    }

    /// The share whose view token hashes to `hash`; see `share(_:)`.
    public func share(viewTokenHash hash: SecretHash) throws(StoreError) -> ShareLookup? {
        if let snapshot = registry.snapshot(viewTokenHash: hash) { return .live(snapshot) }
        return try lookUpInStore({ () throws(StoreError) in try store.share(viewTokenHash: hash) }, missKey: hash.base64URL)
    }

    /// Whether a share holds as many fixes as a share may (`SharePolicy.maximumFixesPerShare`): its next fixes are
    /// refused, `fix_limit_reached`. Memory counts what it records; a share it has not counted yet (loaded from the
    /// store, or another instance's) is counted on the scheduler's thread, and taken in the meantime.
    package func fixLimitReached(_ context: ShareRegistry.IngestContext, of id: ShareID) -> Bool {
        guard let stored = context.storedFixes else {
            // Once per share: a share loaded at start-up would otherwise schedule a count for each of its fixes.
            if registry.askFixCount(id) { schedule(.countFixes(id), at: clock.now()) }
            return false
        }
        return stored >= policy.maximumFixesPerShare
    }

    /// For the HTTP paths, a share already looked up (see the other `fixLimitReached`).
    public func fixLimitReached(_ id: ShareID) -> Bool {
        registry.ingestContext(id).map { fixLimitReached($0, of: id) } ?? false
    }

    func countFixes(_ id: ShareID) {
        guard let context = registry.ingestContext(id), context.storedFixes == nil else { return }
        do { registry.setStoredFixes(id, try store.fixCount(row: context.row)) } catch {
            warnStore("share \(id): cannot count its fixes (\(error)); counting again in 10 s")
            schedule(.countFixes(id), at: clock.now() + 10_000)
        }
    }

    /// What the ingest path needs for a fix of `id`, looking in the store when memory does not know the share.
    package func ingestContext(_ id: ShareID) throws(StoreError) -> ShareRegistry.IngestContext? {
        if let context = registry.ingestContext(id) { return context }
        guard case .live = try share(id) else { return nil }
        return registry.ingestContext(id)
    }

    /// Shares newest first, after `position` (see `ShareStore.listShares`); `owner`: only that key's.
    public func list(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64? = nil) throws(ShareError) -> [(row: Int64, lookup: ShareLookup)] {
        let rows: [StoredShare]
        do { rows = try store.listShares(state: state, after: position, limit: limit, owner: owner) } catch { throw .storage(error.description) }
        return rows.map { stored in
            (stored.row, registry.snapshot(stored.share.id).map(ShareLookup.live) ?? .historyDeleted(stored.share))
        }
    }

    /// The view document of a share with history, rendered once per change of the share and then served from
    /// memory: rendering the trail's numbers dominated the view endpoint's CPU time, and a share changes far less
    /// often than its link is polled.
    public func view(of snapshot: ShareSnapshot) -> RenderedView {
        if let cached = snapshot.cachedView { return RenderedView(share: snapshot.share, body: cached) }
        let body = ViewDocumentRenderer.body(share: snapshot.share, last: snapshot.last, trail: snapshot.trail, sealed: snapshot.sealed,
                                             answers: snapshot.answers)
        registry.cacheView(snapshot.share.id, version: snapshot.version, bytes: body)
        return RenderedView(share: snapshot.share, body: body)
    }

    /// The view document of the share whose own link this is, when it is in memory and rendered already (most
    /// requests: a share changes far less often than its link is polled); nil otherwise, and `link(viewTokenHash:)`
    /// then `view(of:)` answer.
    public func cachedView(viewTokenHash: SecretHash) -> (isActive: Bool, body: [UInt8])? {
        registry.cachedView(viewTokenHash: viewTokenHash)
    }

    /// The name of the share whose own link this is, when it is in memory (its page's title); nil otherwise, and
    /// `link(viewTokenHash:)` answers.
    public func name(viewTokenHash: SecretHash) -> String? {
        registry.name(viewTokenHash: viewTokenHash)
    }

    /// The view document of any share found by `share(viewTokenHash:)`.
    public func view(of lookup: ShareLookup) -> RenderedView {
        switch lookup {
        case .live(let snapshot): view(of: snapshot)
        case .historyDeleted(let share): RenderedView(share: share, body: ViewDocumentRenderer.body(share: share, last: nil, trail: []))
        }
    }

    /// Adds a live viewer to an active share; nil if it is unknown or has ended. Events arrive on the thread that
    /// caused them (the store writer for fixes); the subscriber must not block.
    public func subscribe(_ id: ShareID, _ subscriber: @escaping LiveSubscriber) -> Int? {
        registry.subscribe(id, subscriber)
    }

    public func unsubscribe(_ id: ShareID, subscription: Int) {
        registry.unsubscribe(id, subscription: subscription)
    }

    // MARK: Tokens
    // Issued "at" the share's creation, so a share's token is the same string until its expiry changes: the
    // OwnTracks link, file and QR code fetched a second apart carry the same password.

    public func deviceToken(for share: Share) -> String {
        ShareToken(shareID: share.id, role: .device, issuedAt: share.createdAt / 1000, expiresAt: share.expiresAt / 1000).signed(with: tokenKey)
    }

    public func watchToken(for share: Share) -> String {
        ShareToken(shareID: share.id, role: .watch, issuedAt: share.createdAt / 1000, expiresAt: share.expiresAt / 1000).signed(with: tokenKey)
    }

    /// What a device token may do on an HTTP call.
    public enum DeviceTokenStanding: Sendable, Equatable {
        /// Not a device token of this share, or the share has ended.
        case refused
        /// Signed for this live share, but past its own `exp`: the phone of a share that was extended since. It may
        /// still report positions, and nothing else: a token once seen (a photographed QR code) must not keep the
        /// power to stop, prolong or read someone's SOS.
        case expired
        case current
    }

    /// How a device token for `id` stands, for HTTP calls. The share's own state decides whether it works at all (an
    /// ended share refuses all); the token's `exp` decides whether it does more than report positions.
    public func deviceTokenStanding(_ token: String, for id: ShareID) throws(StoreError) -> DeviceTokenStanding {
        guard let verified = try? ShareToken.verify(token, key: tokenKey, nowSeconds: Int64.min, expectedShare: id), verified.role == .device,
              case .live(let snapshot) = try share(id), snapshot.share.isActive else { return .refused }
        return verified.expiresAt > clock.now() / 1000 ? .current : .expired
    }

    /// Whether `token` is a device token Flare signed for `id`, whatever the share's state: an ended share still
    /// knows its own phone, to tell it to stop (OwnTracks HTTP mode).
    public func isDeviceToken(_ token: String, of id: ShareID) -> Bool {
        guard let verified = try? ShareToken.verify(token, key: tokenKey, nowSeconds: Int64.min, expectedShare: id) else { return false }
        return verified.role == .device
    }
}
