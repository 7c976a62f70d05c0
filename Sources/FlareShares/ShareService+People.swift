public import FlareCore
public import FlareStore
import FlareSystem

extension ShareService {
    // MARK: Personal links

    /// The most personal links one share has (withdrawn ones count): a family's, not a mailing list's.
    public static var linksPerShare: Int { PersonalLinks.linksPerShare }

    /// A personal link's view token (`PersonalLinks.linkToken`).
    public func linkToken(share: ShareID, link: LinkID) -> String { links.linkToken(share: share, link: link) }

    /// The share's personal links, oldest first, with their URLs' tokens.
    public func links(of snapshot: ShareSnapshot) -> [(link: ShareLink, token: String)] { links.links(of: snapshot) }

    /// A link each for contacts of a running share, mailed as the create's are (`MailPlanner`).
    public func addLinks(_ snapshot: ShareSnapshot, contacts ids: [ContactID], owner: OwnerKeyRecord?)
        throws(ShareError) -> (links: [(link: ShareLink, token: String)], mailing: [LinkID: LinkMailing]) {
        try links.addLinks(snapshot, contacts: ids, owner: owner)
    }

    /// Withdraws one personal link: its page says so, its live streams end, the share's other links go on.
    public func withdrawLink(_ snapshot: ShareSnapshot, link id: LinkID) throws(ShareError) { try links.withdrawLink(snapshot, link: id) }

    /// Removes a contact `caller` may see, and withdraws its personal links on every active share. False when there
    /// is no such contact.
    public func removeContact(_ id: ContactID, by caller: OwnerKeyRecord) throws(StoreError) -> Bool { try links.removeContact(id, by: caller) }

    // MARK: Who has seen the link

    /// A page with viewer id `viewer` opened or polled the link (from `address`, used only for the cap and never
    /// kept); through a personal link (`link`), its first opening is recorded too, with or without a viewer id.
    public func viewerSeen(_ snapshot: ShareSnapshot, viewer: String?, address: String, link: ShareLink? = nil) {
        if let link { links.linkOpened(snapshot, link: link) }
        audience.viewerSeen(snapshot, viewer: viewer, address: address, link: link)
    }

    /// A live stream with this viewer id opened (true) or closed (`ShareAudience.watching`).
    public func watching(_ snapshot: ShareSnapshot, viewer: String, open: Bool) { audience.watching(snapshot, viewer: viewer, open: open) }

    /// The share's audience, from the store (so every instance's viewers count).
    public func audience(of snapshot: ShareSnapshot) throws(StoreError) -> Audience { try audience.audience(of: snapshot) }

    // MARK: The family's answers

    public enum AnswerRefusal: Error, Equatable {
        case ended
        /// The share holds `answersPerShare` answers already: a refusal for good, not a failure to retry.
        case full
        case storage(String)
    }

    /// How many answers a share takes at most: a family answers a few times; a script that got the link does not
    /// get to fill the store (the gateway limits the rate too).
    public static let answersPerShare = 200


    /// A family member answers (`name` already validated, `Answer.validName`): see `FamilyAnswers.answer`.
    public func answer(_ snapshot: ShareSnapshot, kind: AnswerKind, name: String) throws(AnswerRefusal) -> Answer {
        try answers.answer(snapshot, kind: kind, name: name)
    }

    /// A share's answers after `after`, oldest first, from the store (for the phone over HTTP).
    public func answers(of row: Int64, after: Int64, limit: Int) throws(ShareError) -> [Answer] { try answers.answers(of: row, after: after, limit: limit) }

    // MARK: Check-ins

    /// What arming a check-in asks for (the API's `POST /api/v1/checkins`, checked here).
    public struct CheckinRequest: Sendable {
        public var dueAt: UnixMillis?
        public var inSeconds: Double?
        public var graceSeconds: Int64?
        public var contacts: [ContactID]
        public var message: String?
        public var arrive: ArrivalZone?
        public var notifyOnArrival: Bool
        public var durationSeconds: Int64?
        public var name: String?
        /// The escalation ladder once missed (`EscalationRules`; nil: the default).
        public var escalateAfterSeconds: Int?

        public init(dueAt: UnixMillis? = nil, inSeconds: Double? = nil, graceSeconds: Int64? = nil, contacts: [ContactID], message: String? = nil,
                    arrive: ArrivalZone? = nil, notifyOnArrival: Bool = false, durationSeconds: Int64? = nil, name: String? = nil,
                    escalateAfterSeconds: Int? = nil) {
            self.dueAt = dueAt
            self.inSeconds = inSeconds
            self.graceSeconds = graceSeconds
            self.contacts = contacts
            self.message = message
            self.arrive = arrive
            self.notifyOnArrival = notifyOnArrival
            self.durationSeconds = durationSeconds
            self.escalateAfterSeconds = escalateAfterSeconds
            self.name = name
        }
    }

    /// An armed check-in and its share's device credentials (no view link: none is live before a miss).
    public struct ArmedCheckin: Sendable {
        public let checkin: Checkin
        public let share: Share
        public let deviceToken: String
    }


    /// Arms a check-in, with its share (`Checkins.armCheckin`).
    public func armCheckin(_ request: CheckinRequest, owner: OwnerKeyRecord?) throws(ShareError) -> ArmedCheckin {
        try checkins.armCheckin(request, owner: owner)
    }

    public func checkin(_ id: CheckinID) throws(StoreError) -> Checkin? { try checkins.checkin(id) }
    public func checkin(ofShare row: Int64) throws(StoreError) -> Checkin? { try checkins.checkin(ofShare: row) }

    @discardableResult
    public func settleCheckin(_ checkin: Checkin, as state: CheckinState) throws(ShareError) -> Checkin { try checkins.settleCheckin(checkin, as: state) }

    public func extendCheckin(_ checkin: Checkin, dueAt: UnixMillis?, inSeconds: Double?) throws(ShareError) -> (checkin: Checkin, deviceToken: String) {
        try checkins.extendCheckin(checkin, dueAt: dueAt, inSeconds: inSeconds)
    }

    func fireCheckin(_ checkin: Checkin) throws(StoreError) { try checkins.fireCheckin(checkin) }
}

extension ShareService {
    // MARK: The recorded track

    /// A page of the share's recorded track, in time order, after `position` (nil: from its start): what the exports
    /// (GPX, GeoJSON, KML) read a page at a time.
    public func track(of snapshot: ShareSnapshot, after position: FixPosition?, limit: Int) throws(StoreError) -> [Fix] {
        try lifecycle.store.fixes(row: snapshot.row, after: position, limit: limit)
    }
}
