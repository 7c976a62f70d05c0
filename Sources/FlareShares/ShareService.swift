import FlareAPI
import FlareWire
public import FlareCore
public import FlareStore
public import FlareEvents
import FlareSystem
import Synchronization

public enum ShareError: Error, Equatable, CustomStringConvertible {
    case notFound
    case ended
    case invalid(String)
    /// Bad input with a code of its own (`unknown_contact`, `too_many_links`).
    case refusedInput(code: String, message: String)
    case storage(String)
    /// Over one of the owning key's limits.
    case quota(QuotaRefusal)

    public var description: String {
        switch self {
        case .notFound: "no such share"
        case .ended: "the share has ended"
        case .invalid(let message): message
        case .refusedInput(_, let message): message
        case .storage(let message): "store error: \(message)"
        case .quota(let refusal): refusal.message
        }
    }
}

/// What the service knows of a share.
public enum ShareLookup: Sendable {
    /// Its history still exists: state, last position, trail and viewers, from memory.
    case live(ShareSnapshot)
    /// Ended and its history deleted: only the row remains, which says that it existed and when.
    case historyDeleted(Share)

    public var share: Share {
        switch self {
        case .live(let snapshot): snapshot.share
        case .historyDeleted(let share): share
        }
    }
}

/// The one door to share state, for the gateway, the bridges and the watchers: each concern is a type of its own
/// (below), built on the directory (`ShareDirectory`: where shares are found, memory kept in line with the store), the
/// announcer (`BrokerAnnouncer`: what is said on the broker) and one scheduler (`Deadlines`), and this type hands each
/// call to the concern that owns it. A share's life is `ShareLifecycle`'s: every transition written to the store
/// first, then to memory, then announced on the broker.
public final class ShareService: Sendable {
    public struct Created: Sendable {
        public let share: Share
        public let viewToken: String
        public let deviceToken: String
        /// A personal link per contact asked for, with its view token (empty without contacts).
        public let links: [(link: ShareLink, token: String)]
        /// Whether each link's contact is mailed (none for a contact Flare does not mail: no address, no SMTP server).
        public let mailing: [LinkID: LinkMailing]
    }

    /// The owner keys: who may create, read and control which shares.
    public let keys: OwnerKeyService
    /// The contacts: whom a key's shares may tell.
    public let contacts: ContactService
    /// The devices: standing SOS triggers, each with a secret of its own.
    public let devices: Devices
    package let directory: ShareDirectory
    let announcer: BrokerAnnouncer
    let lifecycle: ShareLifecycle
    let links: PersonalLinks
    let checkins: Checkins
    let trackers: Trackers
    let positions: PositionPublication
    let confirmations: ConfirmingTrackers
    let audience: ShareAudience
    let answers: FamilyAnswers
    /// Browsers subscribed to Web Push: links' viewers, and contacts' alerts.
    public let push: PushAlerts
    /// The escalation ladder of SOS shares and missed check-ins (run by `CheckinWatcher` under its lease).
    public let escalations: Escalations

    /// - Parameters:
    ///   - trailLength: recent positions kept in memory per share for the viewer's trail.
    ///   - eventDestinations: where every event goes besides the owning key's webhook (`EventDeliverer.destinations`).
    ///   - mailsContacts: whether a personal link's contact with an address is mailed (`EventDeliverer.mailsContacts`).
    ///   - pushes: whether events are pushed to subscribed browsers (`EventDeliverer.pushes`).
    ///   - eventRecorded: told after an event is committed to the outbox (the deliverer wakes).
    ///   - sweepRetained: clears what tokens left retained below an ended share's location topic (`RetainedSweeper`).
    ///   - hostResolver: where setting a limited key's webhook looks its host name up (a test's resolver in tests).
    ///   - sosPerDevicePerHour: how many SOS a device may start in an hour (`FLARE_SOS_PER_DEVICE_PER_HOUR`).
    public init(store: any ShareStore, trailLength: Int, publisher: any BrokerPublisher, tokenKey: [UInt8],
                policy: SharePolicy, trackerRules: TrackerRules, clock: any Clock, metrics: Metrics, logger: Logger,
                eventDestinations: [EventDestination] = [.mqtt], mailsContacts: Bool = false, pushes: Bool = false, mailPerKeyPerHour: Int = 60,
                eventRecorded: @escaping @Sendable () -> Void = {},
                sweepRetained: @escaping @Sendable (ShareID) -> Void = { _ in }, hostResolver: any HostResolving = SystemHostResolver(),
                sosPerDevicePerHour: Int = 6) {
        let keys = OwnerKeyService(store: store, sealer: WebhookSecretSealer(tokenKey: tokenKey), resolver: hostResolver, clock: clock,
                                   metrics: metrics, logger: logger)
        let contacts = ContactService(store: store, clock: clock, logger: logger.with(label: "contacts"))
        let deadlines = Deadlines(clock: clock)
        let outbox = EventOutbox(destinations: eventDestinations, mailsContacts: mailsContacts, pushes: pushes, recorded: eventRecorded)
        let mailPlanner = MailPlanner(store: store, perKeyPerHour: mailPerKeyPerHour, metrics: metrics)
        let directory = ShareDirectory(store: store, trailLength: trailLength, trackerRules: trackerRules, deadlines: deadlines, policy: policy,
                                       clock: clock, logger: logger, ownerKeyChanged: { [keys] id in keys.forget(id) })
        let announcer = BrokerAnnouncer(publisher: publisher, policy: policy, clock: clock, logger: logger)
        let audience = ShareAudience(store: store, directory: directory, announcer: announcer, deadlines: deadlines, outbox: outbox, clock: clock)
        let links = PersonalLinks(store: store, contacts: contacts, directory: directory, audience: audience, outbox: outbox, mailPlanner: mailPlanner,
                                  tokenKey: tokenKey, clock: clock, logger: logger)
        let confirmations = ConfirmingTrackers(store: store, directory: directory, announcer: announcer, deadlines: deadlines, clock: clock, logger: logger)
        let lifecycle = ShareLifecycle(store: store, policy: policy, tokenKey: tokenKey, directory: directory, announcer: announcer, deadlines: deadlines,
                                       outbox: outbox, links: links, keys: keys, confirmations: confirmations, clock: clock, metrics: metrics,
                                       logger: logger, sweepRetained: sweepRetained)
        let trackers = Trackers(store: store, directory: directory, announcer: announcer, deadlines: deadlines, outbox: outbox, clock: clock,
                                metrics: metrics, logger: logger)
        self.keys = keys
        self.contacts = contacts
        self.directory = directory
        self.announcer = announcer
        self.lifecycle = lifecycle
        self.links = links
        self.checkins = Checkins(store: store, lifecycle: lifecycle, links: links, keys: keys, directory: directory, mailPlanner: mailPlanner,
                                 outbox: outbox, policy: policy, clock: clock, logger: logger)
        self.trackers = trackers
        self.devices = Devices(store: store, lifecycle: lifecycle, links: links, contacts: contacts, directory: directory, outbox: outbox,
                               policy: policy, tokenKey: tokenKey, sosPerHour: sosPerDevicePerHour, clock: clock, metrics: metrics,
                               logger: logger.with(label: "devices"))
        self.positions = PositionPublication(directory: directory, trackers: trackers, announcer: announcer, deadlines: deadlines, clock: clock,
                                             metrics: metrics, logger: logger)
        self.confirmations = confirmations
        self.audience = audience
        self.push = PushAlerts(store: store, tokenKey: tokenKey, clock: clock, logger: logger.with(label: "push"))
        self.escalations = Escalations(store: store, directory: directory, links: links, outbox: outbox, clock: clock, logger: logger)
        self.answers = FamilyAnswers(store: store, directory: directory, announcer: announcer, outbox: outbox, clock: clock, metrics: metrics, logger: logger)
        metrics.register(FlareMetrics.sharesCreated, FlareMetrics.quotaRefusals, FlareMetrics.answers, FlareMetrics.sharesEnded, FlareMetrics.trackerChanges, FlareMetrics.locateRequests, FlareMetrics.httpFixesUnpublished, FlareMetrics.httpFixesDropped, FlareMetrics.clearPositionsCleared)
        // Weak: the directory holds the metrics (through the owner keys); a strong capture kept both, and the store,
        // alive for ever.
        metrics.registerGauge(FlareMetrics.sharesActive) { [weak directory] in Double(directory?.activeShareCount ?? 0) }
    }

    /// The server's rules for shares (durations, names, retention).
    public var policy: SharePolicy { lifecycle.policy }
    /// Memory's copy of every share that still has history (for the tests; the service reads it through the directory).
    package var registry: ShareRegistry { directory.registry }

    /// Stops what revoked keys left running (`KeyRevocations`).
    public var revocations: KeyRevocations {
        KeyRevocations(shares: self, store: keys.store, clock: lifecycle.clock, metrics: lifecycle.metrics, logger: lifecycle.logger)
    }

    /// Sends again what could not be published while the broker was away. Called on every (re)connect.
    public func flushUnsent() {
        positions.flush()
        announcer.flush()
    }

    public func stopScheduler() { lifecycle.deadlines.stop() }

    // MARK: A share's life

    /// Loads every share that still has history into memory, ends those that expired while Flare was down,
    /// deletes history whose retention has passed, and schedules the rest.
    public func recover() throws(StoreError) {
        try lifecycle.recover()
        trackers.startSweeping()
    }

    /// - Parameter owner: the key creating it, which will own it (nil: no key, as in tests and the demo); its limits
    ///   apply, across instances.
    /// - Parameter contacts: a personal link each (`PersonalLinks`); they must be `owner`'s contacts.
    /// - Parameter endToEnd: the phone encrypts every position with a passphrase the server never gets (see
    ///   `Share.endToEnd`). Such a share takes no contacts: the server could give them a link but never its key.
    public func create(name: String?, durationSeconds: Double?, owner: OwnerKeyRecord? = nil, contacts: [ContactID] = [],
                       endToEnd: Bool = false) throws(ShareError) -> Created {
        try lifecycle.create(name: name, durationSeconds: durationSeconds, owner: owner, contacts: contacts, endToEnd: endToEnd)
    }

    /// Ends an active share now. Ending an ended share is not an error: the answer is its current state. A stop the
    /// store could not record is refused (`.storage`), and nothing changes: the caller asks again, and a stop
    /// recorded in memory alone would be undone by the next start and unknown to the other instances.
    @discardableResult
    public func stop(_ id: ShareID) throws(ShareError) -> Share { try lifecycle.stop(id) }

    /// Moves an active share's end to now + duration. The link stays the same; a new device token (with the new
    /// `exp`) is returned for brokers that check `exp` themselves.
    public func extend(_ id: ShareID, durationSeconds: Double?) throws(ShareError) -> (share: Share, deviceToken: String) {
        try lifecycle.extend(id, durationSeconds: durationSeconds)
    }

    // MARK: Finding shares

    /// Follows what other instances change in a shared store; call once, before `recover` (`ShareDirectory`).
    public func followOtherInstances() { directory.followOtherInstances() }
    public func stopFollowing() { directory.stopFollowing() }

    /// The share with this id: from memory, or else from the store. Nil if unknown; throws when memory does not know
    /// it and the store cannot say.
    public func share(_ id: ShareID) throws(StoreError) -> ShareLookup? { try directory.share(id) }

    /// The share whose view token hashes to `hash`; see `share(_:)`.
    public func share(viewTokenHash hash: SecretHash) throws(StoreError) -> ShareLookup? { try directory.share(viewTokenHash: hash) }

    /// What a link holder's token opened: the share, and the personal link it came through (nil: the share's own).
    public struct LinkLookup: Sendable {
        public let lookup: ShareLookup
        public let link: ShareLink?
    }

    /// The share and personal link a link holder's token hashes to; see `share(_:)`.
    public func link(viewTokenHash hash: SecretHash) throws(StoreError) -> LinkLookup? { try directory.link(viewTokenHash: hash) }

    /// Shares newest first, after `position` (see `ShareStore.listShares`); `owner`: only that key's.
    public func list(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64? = nil) throws(ShareError) -> [(row: Int64, lookup: ShareLookup)] {
        try directory.list(state: state, after: position, limit: limit, owner: owner)
    }

    /// What the ingest path needs for a fix of `id`, looking in the store when memory does not know the share.
    package func ingestContext(_ id: ShareID) throws(StoreError) -> ShareRegistry.IngestContext? { try directory.ingestContext(id) }

    /// Whether a share holds as many fixes as a share may: its next fixes are refused (`ShareDirectory`).
    package func fixLimitReached(_ context: ShareRegistry.IngestContext, of id: ShareID) -> Bool { directory.fixLimitReached(context, of: id) }

    /// For the HTTP paths, a share already looked up (see the other `fixLimitReached`).
    public func fixLimitReached(_ id: ShareID) -> Bool {
        directory.fixLimitReached(id)
    }

    // MARK: The view

    /// The view document of a share with history, rendered once per change and then served from memory.
    public func view(of snapshot: ShareSnapshot) -> RenderedView { directory.view(of: snapshot) }

    /// The view document of any share found by `share(viewTokenHash:)`.
    public func view(of lookup: ShareLookup) -> RenderedView {
        switch lookup {
        case .live(let snapshot): directory.view(of: snapshot)
        case .historyDeleted(let share): RenderedView(share: share, body: ViewDocumentRenderer.body(share: share, last: nil, trail: []))
        }
    }

    /// The view document of the share whose own link this is, when it is in memory and rendered already; nil
    /// otherwise, and `link(viewTokenHash:)` then `view(of:)` answer.
    public func cachedView(viewTokenHash: SecretHash) -> (isActive: Bool, body: [UInt8])? { directory.cachedView(viewTokenHash: viewTokenHash) }

    /// The name of the share whose own link this is, when it is in memory (its page's title).
    public func name(viewTokenHash: SecretHash) -> String? { directory.name(viewTokenHash: viewTokenHash) }

    /// Adds a live viewer to an active share; nil if it is unknown or has ended. Events arrive on the thread that
    /// caused them (the store writer for fixes); the subscriber must not block.
    public func subscribe(_ id: ShareID, _ subscriber: @escaping LiveSubscriber) -> Int? { directory.subscribe(id, subscriber) }
    public func unsubscribe(_ id: ShareID, subscription: Int) { directory.unsubscribe(id, subscription: subscription) }

    // MARK: Tokens

    public func deviceToken(for share: Share) -> String { lifecycle.deviceToken(for: share) }
    public func watchToken(for share: Share) -> String { lifecycle.watchToken(for: share) }

    /// What a device token may do on an HTTP call.
    public enum DeviceTokenStanding: Sendable, Equatable {
        /// Not a device token of this share, or the share has ended.
        case refused
        /// Signed for this live share, but past its own `exp`: the phone of a share that was extended since. It may
        /// still report positions, and nothing else: a token once seen (a photographed QR code) must not keep the
        /// power to stop, prolong or read someone's SOS.
        case expired
        /// The share goes on under duress (`Share.underDuress`): its phone was told it stopped. It may still report
        /// positions; everything else answers it as an ended share does.
        case underDuress
        case current
    }

    /// How a device token for `id` stands, for HTTP calls. The share's own state decides whether it works at all (an
    /// ended share refuses all); the token's `exp` decides whether it does more than report positions.
    public func deviceTokenStanding(_ token: String, for id: ShareID) throws(StoreError) -> DeviceTokenStanding {
        guard let verified = try? ShareToken.verify(token, key: lifecycle.tokenKey, nowSeconds: Int64.min, expectedShare: id), verified.role == .device,
              case .live(let snapshot) = try share(id), snapshot.share.isActive else { return .refused }
        if snapshot.share.underDuress { return .underDuress }
        return verified.expiresAt > lifecycle.clock.now() / 1000 ? .current : .expired
    }

    /// Whether `token` is a device token Flare signed for `id`, whatever the share's state: an ended share still
    /// knows its own phone, to tell it to stop (OwnTracks HTTP mode).
    public func isDeviceToken(_ token: String, of id: ShareID) -> Bool {
        guard let verified = try? ShareToken.verify(token, key: lifecycle.tokenKey, nowSeconds: Int64.min, expectedShare: id) else { return false }
        return verified.role == .device
    }

    // MARK: After the broker forgot

    /// See `BrokerRestorer.restoreBrokerState`.
    public func restoreBrokerState(window: Int, timeout: Duration) -> RestoredState? { restorer.restoreBrokerState(window: window, timeout: timeout) }
    /// See `BrokerRestorer.confirmRestore`.
    @discardableResult
    public func confirmRestore(_ restored: RestoredState) -> Int { restorer.confirmRestore(restored) }

    private var restorer: BrokerRestorer {
        BrokerRestorer(store: lifecycle.store, directory: directory, announcer: announcer, logger: lifecycle.logger)
    }
}
