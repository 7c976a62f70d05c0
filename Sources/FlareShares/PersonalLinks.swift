import FlareCore
import FlareCrypto
import FlareStore
import FlareSystem

/// A personal link per contact: its own URL (a token derived from the token key, stored only as its hash), made with
/// the share or added later, mailed within the owning key's budget (`MailPlanner`), withdrawn alone, and opened once
/// as far as `link.opened` is concerned.
final class PersonalLinks: Sendable {
    /// The most personal links one share has (withdrawn ones count): a family's, not a mailing list's.
    static let linksPerShare = 20

    /// Personal links are mailed by the server, which has no key to put in them; the sharer sends the link instead.
    static let endToEndTakesNoContacts = ShareError.refusedInput(
        code: "e2e_contacts", message: "an end-to-end encrypted share takes no contacts: the server never has the key their links need; send the link with its #k= yourself")

    private let store: any LinkRecords & ContactRecords
    private let contacts: ContactService
    private let directory: ShareDirectory
    private let audience: ShareAudience
    private let outbox: EventOutbox
    private let mailPlanner: MailPlanner
    private let tokenKey: [UInt8]
    private let clock: any Clock
    private let logger: Logger

    init(store: any LinkRecords & ContactRecords, contacts: ContactService, directory: ShareDirectory, audience: ShareAudience, outbox: EventOutbox,
         mailPlanner: MailPlanner, tokenKey: [UInt8], clock: any Clock, logger: Logger) {
        self.store = store
        self.contacts = contacts
        self.directory = directory
        self.audience = audience
        self.outbox = outbox
        self.mailPlanner = mailPlanner
        self.tokenKey = tokenKey
        self.clock = clock
        self.logger = logger
    }

    /// A personal link's view token: derived from the token key, the share and the link, so that the owner can be
    /// shown its URL again (`GET …/links`) while the store keeps only its hash, as for every token. 192 bits, shaped
    /// as a `Secret`. A new token key (`flare token-key rotate`, the emergency stop) gives new URLs, and the old ones
    /// stop at the restart it asks for (`rekeyLinks`).
    func linkToken(share: ShareID, link: LinkID) -> String {
        ShareLink.viewToken(tokenKey: tokenKey, share: share, link: link)
    }

    /// The mails of an alert to the contacts of a live share (an SOS pressed again, the duress PIN, the ladder): one to
    /// each personal link's contact with an address, within the key's mail budget (`MailPlanner`).
    func alertMails(_ snapshot: ShareSnapshot, owner: Int64?) throws(StoreError) -> [EventDestination] {
        guard outbox.mailsContacts else { return [] }
        var recipients: [(id: LinkID, email: String?)] = []
        for link in directory.links(snapshot.share.id) where !link.isWithdrawn {
            if let contact = link.contactID { recipients.append((link.id, try store.contact(id: contact)?.email)) }
        }
        let plan = try mailPlanner.plan(recipients, owner: owner, now: clock.now())
        return recipients.compactMap { plan[$0.id] == .queued ? .mail($0.id) : nil }
    }

    /// The contacts asked for, checked: well-formed, `owner`'s (or, without an owner, anyone's), no repeats, within
    /// the per-share bound beside `existing` links.
    func contactsForLinks(_ ids: [ContactID], owner: OwnerKeyRecord?, existing: Int) throws(ShareError) -> [Contact] {
        guard !ids.isEmpty else { return [] }
        guard Set(ids).count == ids.count else { throw .refusedInput(code: "invalid_contacts", message: "a contact is named twice") }
        guard existing + ids.count <= Self.linksPerShare else {
            throw .refusedInput(code: "too_many_links", message: "a share has at most \(Self.linksPerShare) personal links")
        }
        var found: [Contact] = []
        for id in ids {
            // Another key's contact is to this one as a contact that does not exist (`ContactService`'s rule).
            let contact: Contact?
            do throws(StoreError) {
                contact = if let owner { try contacts.contact(id, for: owner) } else { try store.contact(id: id) }
            } catch {
                throw .storage(error.description)
            }
            guard let contact else {
                throw .refusedInput(code: "unknown_contact", message: "no such contact: \(id)")
            }
            found.append(contact)
        }
        return found
    }

    /// A link each, not yet stored.
    func makeLinks(for contacts: [Contact], share: ShareID, row: Int64, at: UnixMillis) -> [(link: ShareLink, token: String, contact: Contact)] {
        contacts.map { contact in
            let id = LinkID.generate()
            let token = linkToken(share: share, link: id)
            return (ShareLink(id: id, shareRow: row, contactID: contact.id, name: contact.name, viewTokenHash: SecretHash(of: token), createdAt: at),
                    token, contact)
        }
    }

    /// Which of `links` are mailed, within the owner's budget and one mail per address of the share (`MailPlanner`).
    func planMail(_ links: [(link: ShareLink, token: String, contact: Contact)], share: ShareID, owner: Int64?, now: UnixMillis)
        throws(ShareError) -> [LinkID: LinkMailing] {
        guard outbox.mailsContacts, links.contains(where: { $0.contact.email != nil }) else { return [:] }
        do {
            var mailed = Set<String>()
            for earlier in directory.links(share) where !earlier.isWithdrawn {
                if let id = earlier.contactID, let address = try store.contact(id: id)?.email { mailed.insert(MailPlanner.normalized(address)) }
            }
            return try mailPlanner.plan(links.map { ($0.link.id, $0.contact.email) }, mailedAddresses: mailed, owner: owner, now: now)
        } catch { throw .storage(error.description) }
    }

    /// The share's personal links, oldest first, with their URLs' tokens.
    func links(of snapshot: ShareSnapshot) -> [(link: ShareLink, token: String)] {
        directory.links(snapshot.share.id).map { ($0, linkToken(share: snapshot.share.id, link: $0.id)) }
    }

    /// A link each for contacts of a running share. Their mails are planned as the create's (`MailPlanner`): within
    /// the owning key's budget, and one an address of the share, the share's earlier links counted.
    func addLinks(_ snapshot: ShareSnapshot, contacts ids: [ContactID], owner: OwnerKeyRecord?)
        throws(ShareError) -> (links: [(link: ShareLink, token: String)], mailing: [LinkID: LinkMailing]) {
        guard snapshot.share.isActive else { throw .ended }
        if snapshot.share.endToEnd { throw Self.endToEndTakesNoContacts }
        let contacts = try contactsForLinks(ids, owner: owner, existing: directory.links(snapshot.share.id).count)
        let now = clock.now()
        let links = makeLinks(for: contacts, share: snapshot.share.id, row: snapshot.row, at: now)
        let mailing = try planMail(links, share: snapshot.share.id, owner: snapshot.share.ownerKeyID, now: now)
        let added: Bool
        do {
            added = try store.insertLinks(links.map(\.link), events: links.map {
                outbox.linkCreated(snapshot.share.id, $0.link, mailed: mailing[$0.link.id] == .queued)
            })
        } catch { throw .storage(error.description) }
        guard added else { throw .ended }
        directory.addLinks(snapshot.share.id, links.map(\.link))
        outbox.recorded()
        logger.info("share \(snapshot.share.id): \(links.count) personal links added")
        return (links.map { ($0.link, $0.token) }, mailing)
    }

    /// Withdraws one personal link: its page says so, its live streams end, the share's other links go on.
    func withdrawLink(_ snapshot: ShareSnapshot, link id: LinkID) throws(ShareError) {
        guard directory.links(snapshot.share.id).contains(where: { $0.id == id }) else { throw .notFound }
        let now = clock.now()
        do { _ = try store.withdrawLink(shareRow: snapshot.row, id: id, at: now) } catch { throw .storage(error.description) }
        directory.withdraw(snapshot.share.id, link: id, at: now)
        audience.publish(snapshot)
        logger.info("share \(snapshot.share.id): personal link \(id) withdrawn")
    }

    /// Removes a contact `caller` may see, and withdraws its personal links on every active share: their pages say
    /// withdrawn and their live streams end, here at once and on other instances when they read the shares again.
    /// False when there is no such contact.
    func removeContact(_ id: ContactID, by caller: OwnerKeyRecord) throws(StoreError) -> Bool {
        guard let withdrawn = try contacts.remove(id, by: caller) else { return false }
        let at = clock.now()
        for (row, links) in Dictionary(grouping: withdrawn, by: \.shareRow) {
            guard let shareID = directory.shareID(ofRow: row) else { continue }
            for link in links { directory.withdraw(shareID, link: link.link, at: at) }
            if let snapshot = directory.snapshot(shareID) { audience.publish(snapshot) }
        }
        return true
    }

    /// After `flare token-key rotate`: every personal link whose stored hash is not that of the token the current
    /// key derives gets the new one, so that the old URLs answer 404 and `GET …/links` shows URLs that work. Run at
    /// start (`recover`), before memory takes the links; returns them as they now are.
    func rekeyLinks(_ links: [ShareLink], shareIDs: [Int64: ShareID]) throws(StoreError) -> [ShareLink] {
        var changes: [(shareRow: Int64, link: LinkID, viewTokenHash: SecretHash)] = []
        let rekeyed = links.map { link -> ShareLink in
            guard let share = shareIDs[link.shareRow] else { return link }
            let hash = SecretHash(of: linkToken(share: share, link: link.id))
            guard hash != link.viewTokenHash else { return link }
            changes.append((link.shareRow, link.id, hash))
            return ShareLink(id: link.id, shareRow: link.shareRow, contactID: link.contactID, name: link.name, viewTokenHash: hash,
                             createdAt: link.createdAt, withdrawnAt: link.withdrawnAt, firstOpenedAt: link.firstOpenedAt)
        }
        guard !changes.isEmpty else { return links }
        try store.rekeyLinks(changes)
        logger.info("\(changes.count) personal links given new URLs: the token key changed (flare token-key rotate); the old URLs no longer open")
        return rekeyed
    }

    /// A page opened through a personal link: its first opening is recorded, with `link.opened`, once.
    func linkOpened(_ snapshot: ShareSnapshot, link: ShareLink) {
        guard link.firstOpenedAt == nil, snapshot.share.isActive else { return }
        let now = clock.now()
        do {
            let first = try store.noteLinkOpened(shareRow: snapshot.row, id: link.id, at: now,
                                                 event: outbox.pending(.linkOpened(snapshot.share.id, link: link, at: now)))
            directory.noteLinkOpened(snapshot.share.id, link: link.id, at: now)
            if first {
                outbox.recorded()
                // The phone hears who opened it (its audience topic names the links).
                audience.publish(snapshot)
            }
        } catch {
            // Noted at the link's next request instead.
            directory.warnStore("share \(snapshot.share.id): cannot note that a personal link was opened (\(error))")
        }
    }
}
