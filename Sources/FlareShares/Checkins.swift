import FlareCore
import FlareStore
import FlareSystem

/// Check-ins: "if I have not checked in by ten, tell them where I was". Armed with a share that records positions
/// and has no live link; done, arrived or extended from the phone; missed at the deadline (`CheckinWatcher` asks, under
/// its lease), when the contacts get their personal links.
final class Checkins: Sendable {
    private let store: any CheckinRecords & ContactRecords & ShareRecords
    private let lifecycle: ShareLifecycle
    private let links: PersonalLinks
    private let keys: OwnerKeyService
    private let directory: ShareDirectory
    private let mailPlanner: MailPlanner
    private let outbox: EventOutbox
    private let policy: SharePolicy
    private let clock: any Clock
    private let logger: Logger

    init(store: any CheckinRecords & ContactRecords & ShareRecords, lifecycle: ShareLifecycle, links: PersonalLinks, keys: OwnerKeyService,
         directory: ShareDirectory, mailPlanner: MailPlanner, outbox: EventOutbox, policy: SharePolicy, clock: any Clock, logger: Logger) {
        self.store = store
        self.lifecycle = lifecycle
        self.links = links
        self.keys = keys
        self.directory = directory
        self.mailPlanner = mailPlanner
        self.outbox = outbox
        self.policy = policy
        self.clock = clock
        self.logger = logger
    }

    /// Arms a check-in: a share that records positions from now, whose device token covers the deadline, the grace
    /// and the share's time once missed; nothing is armed when any part of the request is refused.
    func armCheckin(_ request: ShareService.CheckinRequest, owner: OwnerKeyRecord?) throws(ShareError) -> ShareService.ArmedCheckin {
        let now = clock.now()
        let due: UnixMillis, grace: Int64, message: String
        do throws(CheckinRules.Refusal) {
            due = try CheckinRules.dueAt(dueAt: request.dueAt, inSeconds: request.inSeconds, now: now)
            grace = try CheckinRules.grace(request.graceSeconds)
            message = try CheckinRules.validMessage(request.message)
        } catch { throw .refusedInput(code: error.code, message: error.message) }
        guard !request.contacts.isEmpty else {
            throw .refusedInput(code: "no_contacts", message: "a check-in needs at least one contact to tell (flare contacts add)")
        }
        let contacts = try links.contactsForLinks(request.contacts, owner: owner, existing: 0)
        let duration = request.durationSeconds ?? min(CheckinRules.defaultDurationSeconds, policy.maximumDurationSeconds)
        guard duration >= 60 else { throw .refusedInput(code: "invalid_duration", message: "duration_s must be at least 60 seconds") }
        let draft = Checkin(id: .generate(), shareRow: 0, shareID: ShareID.generate(), ownerKeyID: owner?.id, dueAt: due, graceMillis: grace * 1000,
                            message: message, contacts: contacts.map(\.id), arrive: request.arrive, notifyOnArrival: request.notifyOnArrival,
                            durationSeconds: duration, escalateAfterSeconds: request.escalateAfterSeconds ?? EscalationRules.defaultSeconds,
                            createdAt: now)
        let total = (draft.shareEndsAt - now + 999) / 1000
        let longest = min(policy.maximumDurationSeconds, owner?.limits.maxDurationSeconds ?? .max)
        guard total <= longest else {
            throw .refusedInput(code: "deadline_too_far", message: "the deadline, its grace and duration_s must end within \(longest) s of now (the longest a share of this key may run)")
        }
        let created = try lifecycle.create(name: request.name, durationSeconds: Double(total), owner: owner, contacts: [], endToEnd: false)
        guard let row = directory.snapshot(created.share.id)?.row else { throw .storage("the check-in's share is not in memory") }
        let checkin = Checkin(id: draft.id, shareRow: row, shareID: created.share.id, ownerKeyID: owner?.id, dueAt: due, graceMillis: draft.graceMillis,
                              message: message, contacts: draft.contacts, arrive: request.arrive, notifyOnArrival: request.notifyOnArrival,
                              durationSeconds: duration, escalateAfterSeconds: draft.escalateAfterSeconds, createdAt: now)
        do { try store.insertCheckin(checkin) } catch {
            // No share left recording positions for a check-in that does not exist. The caller hears the store's
            // failure (503) either way; a share that cannot be stopped now ends at its expiry.
            _ = try? lifecycle.stop(created.share.id)
            throw .storage(error.description)
        }
        logger.info("check-in \(checkin.id) armed for share \(created.share.id), fires in \((checkin.firesAt - now) / 1000) s")
        return ShareService.ArmedCheckin(checkin: checkin, share: created.share, deviceToken: created.deviceToken)
    }

    /// The check-in with this id (from the store: any instance may have armed it).
    func checkin(_ id: CheckinID) throws(StoreError) -> Checkin? { try store.checkin(id: id) }

    /// The check-in this share was made for, if any.
    func checkin(ofShare row: Int64) throws(StoreError) -> Checkin? { try store.checkin(shareRow: row) }

    /// Ends an armed check-in as `done` (the sharer) or `arrived` (a fix in the zone), and its share with it.
    /// Answers the check-in as it stands after: done twice is done; a check-in already missed stays missed (the
    /// caller says so: its contacts have been told).
    @discardableResult
    func settleCheckin(_ checkin: Checkin, as state: CheckinState) throws(ShareError) -> Checkin {
        let now = clock.now()
        let type: ShareEventType = state == .arrived ? .checkinArrived : .checkinDone
        // An arrival is told to the contacts with an address when the sharer asked for it; checking in, to nobody.
        var mails: [EventDestination] = []
        if state == .arrived && checkin.notifyOnArrival && outbox.mailsContacts {
            for id in checkin.contacts {
                let contact: Contact?
                do { contact = try store.contact(id: id) } catch { throw .storage(error.description) }
                if contact?.email != nil { mails.append(.contactMail(id)) }
            }
        }
        let settled: Bool
        do {
            settled = try store.settleCheckin(checkin.id, as: state, at: now,
                                              event: outbox.pending(.checkin(type, checkin, at: now), also: mails))
        } catch {
            throw .storage(error.description)
        }
        guard settled else {
            do { return try store.checkin(id: checkin.id) ?? checkin } catch { throw .storage(error.description) }
        }
        outbox.recorded()
        logger.info("check-in \(checkin.id): \(state.rawValue)")
        // Nothing to tell, nothing more to record.
        if directory.snapshot(checkin.shareID)?.share.isActive == true { _ = try lifecycle.stop(checkin.shareID) }
        var after = checkin
        after.state = state
        after.stateAt = now
        return after
    }

    /// Moves an armed check-in's deadline, and its share's end with it: the new device token covers the new end.
    func extendCheckin(_ checkin: Checkin, dueAt: UnixMillis?, inSeconds: Double?) throws(ShareError) -> (checkin: Checkin, deviceToken: String) {
        guard checkin.state == .armed else { throw .refusedInput(code: "checkin_\(checkin.state.rawValue)", message: "the check-in is \(checkin.state.rawValue), not armed") }
        let now = clock.now()
        var moved = checkin
        do throws(CheckinRules.Refusal) { moved.dueAt = try CheckinRules.dueAt(dueAt: dueAt, inSeconds: inSeconds, now: now) } catch {
            throw .refusedInput(code: error.code, message: error.message)
        }
        let total = (moved.shareEndsAt - now + 999) / 1000
        // The owning key's longest share counts from the share's start (the arming), as for any share of the key; past
        // it the answer is the arming's own refusal, not a quota's.
        let limits: KeyLimits?
        do { limits = try keys.limits(ofOwner: checkin.ownerKeyID) } catch { throw .storage(error.description) }
        let started = directory.snapshot(checkin.shareID)?.share.createdAt ?? checkin.createdAt
        if let longest = limits?.maxDurationSeconds, moved.shareEndsAt - started > longest * 1000 {
            throw .refusedInput(code: "deadline_too_far", message: "the deadline, its grace and duration_s must end within \(longest) s of the check-in's start (the longest a share of this key may run)")
        }
        guard total <= policy.maximumDurationSeconds else {
            throw .refusedInput(code: "deadline_too_far", message: "the deadline, its grace and duration_s must end within \(policy.maximumDurationSeconds) s of now")
        }
        // The share first: its end must cover the deadline before the deadline moves past the old end.
        let (_, token) = try lifecycle.extend(checkin.shareID, durationSeconds: Double(total))
        let stillArmed: Bool
        do { stillArmed = try store.moveCheckin(checkin.id, dueAt: moved.dueAt) } catch { throw .storage(error.description) }
        guard stillArmed else { throw .refusedInput(code: "checkin_not_armed", message: "the check-in is not armed any more") }
        logger.info("check-in \(checkin.id): deadline moved, fires in \((moved.firesAt - now) / 1000) s")
        return (moved, token)
    }

    /// The deadline and grace passed: the personal links go live, every contact is told (mail to those with an
    /// address, `checkin.missed` to the topic and webhooks), once, whichever instance fires it. Called by the holder
    /// of the check-in lease (`CheckinWatcher`).
    func fireCheckin(_ checkin: Checkin) throws(StoreError) {
        let now = clock.now()
        var contacts: [Contact] = []
        for id in checkin.contacts {
            if let contact = try store.contact(id: id) { contacts.append(contact) }
        }
        // A share stopped before its deadline (stopping is not checking in) takes no links: its contacts are still
        // told, by a mail with the last position and no link.
        let active: Bool
        if let snapshot = directory.snapshot(checkin.shareID) { active = snapshot.share.isActive }
        else { active = try store.share(row: checkin.shareRow)?.share.isActive ?? false }
        let made = active ? links.makeLinks(for: contacts, share: checkin.shareID, row: checkin.shareRow, at: now) : []
        // The key's budget and one mail an address, as for any share's links (`MailPlanner`).
        let mail: [EventDestination]
        if !outbox.mailsContacts {
            mail = []
        } else if active {
            let planned = try mailPlanner.plan(made.map { ($0.link.id, $0.contact.email) }, owner: checkin.ownerKeyID, now: now)
            mail = made.filter { planned[$0.link.id] == .queued }.map { .mail($0.link.id) }
        } else {
            let planned = try mailPlanner.plan(contacts.map { ($0.id, $0.email) }, owner: checkin.ownerKeyID, now: now)
            mail = contacts.filter { planned[$0.id] == .queued }.map { .contactMail($0.id) }
        }
        let events = made.map { outbox.pending(.linkCreated(checkin.shareID, link: $0.link)) }
            + [outbox.pending(.checkin(.checkinMissed, checkin, at: now), also: mail)]
        guard try store.missCheckin(checkin.id, at: now, links: made.map(\.link), events: events) else { return }
        if !made.isEmpty { directory.addLinks(checkin.shareID, made.map(\.link)) }
        directory.updateTracker(checkin.shareID) { $0.missedCheckinDueAt = checkin.dueAt }
        outbox.recorded()
        logger.warning("check-in \(checkin.id) missed: share \(checkin.shareID)'s \(made.count) personal links are live, \(mail.count) contacts mailed")
    }
}
