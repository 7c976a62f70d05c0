import FlareAPI
import FlareCrypto
import FlareSystem
import FlareCodec

/// What happened to a share, for integrators: published on `flare/v1/shares/{id}/events` and sent to webhooks.
public enum ShareEventType: String, Sendable, CaseIterable {
    case started = "share.started"
    /// The link was opened for the first time.
    case opened = "share.opened"
    /// A personal link was made for a contact (with the share, or added to it): what an SMS gateway texts, having
    /// fetched the contact's number and the link's URL with its key.
    case linkCreated = "link.created"
    /// A personal link was opened for the first time (once per link; `share.opened` is the share's first view).
    case linkOpened = "link.opened"
    case answered = "share.answered"
    case locateRequested = "share.locate_requested"
    case extended = "share.extended"
    case ended = "share.ended"
    /// The broker delivered the tracker's last will: its connection was lost.
    case trackerOffline = "tracker.offline"
    /// No fix for longer than the stale limit (the only sign an HTTP-mode phone gives of stopping).
    case trackerStale = "tracker.stale"
    /// The first fix after the tracker was offline or stale (a share's tracker counts as online from its creation).
    case trackerOnline = "tracker.online"
    /// The phone reports ≤ 15 % and is not charging (once, until it charges or reports over 20 %).
    case batteryLow = "tracker.battery_low"
    /// A check-in's deadline and grace passed without the sharer checking in: its personal links are live now, and
    /// each contact is told.
    case checkinMissed = "checkin.missed"
    /// The sharer checked in (the check-in's share ends).
    case checkinDone = "checkin.done"
    /// A fix inside the check-in's zone ended it (as `done`, with contacts told only if asked).
    case checkinArrived = "checkin.arrived"
    /// A contact was mailed their personal link (the server took the mail).
    case contactNotified = "contact.notified"
    /// A contact could not be mailed: the server refused for good, 24 h of retries ran out, or there was nothing to
    /// send any more (the link withdrawn, the contact deleted or without an address, no SMTP server configured).
    case contactNotificationFailed = "contact.notification_failed"
    /// A device's SOS started: its share was made with a personal link per contact (each a `link.created`).
    case sosStarted = "sos.started"
    /// The device pressed SOS again while its SOS was live (no second share).
    case sosRepeated = "sos.repeated"
    /// The device's duress PIN was entered: the device was told its SOS stopped; the share goes on for the viewers.
    case sosDuress = "sos.duress"
    /// Wrong PINs locked stopping the device's SOS: someone is trying to stop it.
    case sosStopRefused = "sos.stop_refused"
    /// Nobody answered "on my way" or "called emergency services" within the share's `escalate_after_s` (step 1) or
    /// three times that (step 2) after its SOS started or its check-in was missed: every contact is alerted again.
    case sosEscalated = "sos.escalated"
}

/// One event, as it is recorded in the store's outbox in the same transaction as the change it reports, and
/// delivered from there at least once to every destination: `id` is the same in every delivery, so a receiver drops
/// repeats by it. The body holds no token and no coordinate: `{"id", "type", "share_id", "at", …}` and the few
/// fields the type needs.
public struct ShareEvent: Sendable, Equatable {
    public let id: String
    public let type: ShareEventType
    public let shareID: ShareID
    public let at: UnixMillis
    /// The JSON body, exactly as every destination receives it (and as a webhook signature covers it).
    public let body: [UInt8]

    /// `msg_` and 128 random bits (base64url), the form Standard Webhooks suggests for message ids.
    public static func newID() -> String { "msg_" + Base64URL.encode(Crypto.randomBytes(16)) }

    public init(id: String, type: ShareEventType, shareID: ShareID, at: UnixMillis, body: [UInt8]) {
        self.id = id
        self.type = type
        self.shareID = shareID
        self.at = at
        self.body = body
    }

    /// A new event; `details` writes the type's own fields after the common ones.
    public init(_ type: ShareEventType, share: ShareID, at: UnixMillis, details: (inout JSONWriter) -> Void = { _ in }) {
        let id = Self.newID()
        var writer = JSONWriter(capacity: 192)
        writer.beginObject()
        writer.field("id", id)
        writer.field("type", type.rawValue)
        writer.field("share_id", share.rawValue)
        writer.field("at", RFC3339.format(millis: at))
        details(&writer)
        writer.endObject()
        self.init(id: id, type: type, shareID: share, at: at, body: writer.bytes)
    }

    public static func started(_ share: Share) -> ShareEvent {
        ShareEvent(.started, share: share.id, at: share.createdAt) { $0.field("expires_at", RFC3339.format(millis: share.expiresAt)) }
    }

    public static func opened(_ id: ShareID, at: UnixMillis) -> ShareEvent { ShareEvent(.opened, share: id, at: at) }

    /// Names the link by its id and the contact by theirs: never the link's URL (its token), never a name.
    public static func linkCreated(_ id: ShareID, link: ShareLink) -> ShareEvent {
        ShareEvent(.linkCreated, share: id, at: link.createdAt) { writer in
            writer.field("link_id", link.id.rawValue)
            if let contact = link.contactID { writer.field("contact_id", contact.rawValue) }
        }
    }

    /// Names the link by its id and the contact by theirs: never the link's URL (its token), never a name.
    public static func linkOpened(_ id: ShareID, link: ShareLink, at: UnixMillis) -> ShareEvent {
        ShareEvent(.linkOpened, share: id, at: at) { writer in
            writer.field("link_id", link.id.rawValue)
            if let contact = link.contactID { writer.field("contact_id", contact.rawValue) }
        }
    }

    /// The answer's kind and name: what the family said is what an integrator acts on.
    public static func answered(_ id: ShareID, answer: Answer) -> ShareEvent {
        ShareEvent(.answered, share: id, at: answer.at) { writer in
            writer.key("answer")
            writer.beginObject()
            writer.field("id", answer.id)
            writer.field("kind", answer.kind.rawValue)
            writer.field("name", answer.name)
            writer.endObject()
        }
    }

    public static func locateRequested(_ id: ShareID, at: UnixMillis) -> ShareEvent { ShareEvent(.locateRequested, share: id, at: at) }

    public static func extended(_ id: ShareID, at: UnixMillis, expiresAt: UnixMillis) -> ShareEvent {
        ShareEvent(.extended, share: id, at: at) { $0.field("expires_at", RFC3339.format(millis: expiresAt)) }
    }

    public static func ended(_ id: ShareID, at: UnixMillis, reason: EndReason) -> ShareEvent {
        ShareEvent(.ended, share: id, at: at) { $0.field("reason", reason.rawValue) }
    }

    /// The event a newly recorded tracker state is, if any: `before` is the state recorded until now (nil: none yet).
    public static func tracker(_ id: ShareID, record: TrackerRecord, before: TrackerState?) -> ShareEvent? {
        let type: ShareEventType
        switch record.state {
        case .offline: type = .trackerOffline
        case .stale: type = .trackerStale
        case .live:
            guard before == .offline || before == .stale else { return nil }
            type = .trackerOnline
        }
        return ShareEvent(type, share: id, at: record.since) { writer in
            if let reason = record.reason { writer.field("reason", reason) }
            if let transport = record.transport { writer.field("transport", transport.rawValue) }
        }
    }

    public static func batteryLow(_ id: ShareID, at: UnixMillis, level: Int) -> ShareEvent {
        ShareEvent(.batteryLow, share: id, at: at) { $0.field("battery", level) }
    }

    /// A check-in ended or fired: its id and deadline, never its zone, its message or a position.
    public static func checkin(_ type: ShareEventType, _ checkin: Checkin, at: UnixMillis) -> ShareEvent {
        ShareEvent(type, share: checkin.shareID, at: at) { writer in
            writer.field("checkin_id", checkin.id.rawValue)
            writer.field("due_at", RFC3339.format(millis: checkin.dueAt))
        }
    }

    /// The ladder climbed a step (1: after `escalate_after_s`, 2: after three times that) with nobody answering.
    public static func escalated(_ id: ShareID, step: Int, at: UnixMillis) -> ShareEvent {
        ShareEvent(.sosEscalated, share: id, at: at) { $0.field("step", step) }
    }

    /// An SOS event: the device by its id, never its name, secret or a position.
    public static func sos(_ type: ShareEventType, _ id: ShareID, device: DeviceID, at: UnixMillis) -> ShareEvent {
        ShareEvent(type, share: id, at: at) { $0.field("device_id", device.rawValue) }
    }

    /// What became of mailing a contact about `cause` (the event the mail told of, by its id and type): the link and
    /// contact by their ids, the channel, and for a failure why, in Flare's own words (never the address).
    public static func contactNotice(_ id: ShareID, at: UnixMillis, link: LinkID?, contact: ContactID?, cause: ShareEvent,
                                     failure: String?) -> ShareEvent {
        ShareEvent(failure == nil ? .contactNotified : .contactNotificationFailed, share: id, at: at) { writer in
            if let link { writer.field("link_id", link.rawValue) }
            if let contact { writer.field("contact_id", contact.rawValue) }
            writer.field("channel", "email")
            writer.field("cause", cause.type.rawValue)
            writer.field("cause_id", cause.id)
            if let failure { writer.field("reason", failure) }
        }
    }
}

/// Where an event goes. Every event goes to the MQTT events topic; to the server-wide webhook when one is set; and
/// to the webhook of the key that owns the share when that key has one (the store adds that one itself, from the
/// key's row, in the same transaction).
public enum EventDestination: Hashable, Sendable, CustomStringConvertible {
    case mqtt
    case serverWebhook
    case keyWebhook(Int64)
    /// A mail to the contact of this personal link, telling them of the event (`link.created`: the share started
    /// or the link was added). Named by the link, so that each contact's mail is retried and recorded on its own.
    case mail(LinkID)
    /// A mail to a contact that has no link to open (a check-in's arrival, when its contacts are to be told).
    case contactMail(ContactID)
    /// The event's Web Push notifications, not yet split per subscription: the deliverer turns it into one `push`
    /// delivery per subscription the event goes to (`PushRule`), as they are at that moment.
    case pushFanOut
    /// One Web Push subscription (its row), so that each browser's notification is retried and recorded on its own.
    case push(Int64)

    /// How the store names it.
    public var name: String {
        switch self {
        case .mqtt: "mqtt"
        case .serverWebhook: "server"
        case .keyWebhook(let id): "key:\(id)"
        case .mail(let link): "mail:\(link.rawValue)"
        case .contactMail(let contact): "contact:\(contact.rawValue)"
        case .pushFanOut: "push"
        case .push(let row): "push:\(row)"
        }
    }

    public init?(name: String) {
        switch name {
        case "mqtt": self = .mqtt
        case "server": self = .serverWebhook
        case "push": self = .pushFanOut
        default:
            if name.hasPrefix("push:") {
                guard let row = Int64(name.dropFirst(5)), row > 0 else { return nil }
                self = .push(row)
                return
            }
            if name.hasPrefix("contact:") {
                guard let contact = ContactID(name.dropFirst(8)) else { return nil }
                self = .contactMail(contact)
                return
            }
            if name.hasPrefix("mail:") {
                guard let link = LinkID(name.dropFirst(5)) else { return nil }
                self = .mail(link)
                return
            }
            guard name.hasPrefix("key:"), let id = Int64(name.dropFirst(4)), id > 0 else { return nil }
            self = .keyWebhook(id)
        }
    }

    public var description: String { name }
}

/// The retry schedule of an undelivered event: exponential from 5 s, doubling to at most an hour between attempts,
/// given up 24 h after the event.
public enum EventRetry {
    public static let firstDelayMillis: Int64 = 5_000
    public static let longestDelayMillis: Int64 = 3_600_000
    public static let giveUpAfterMillis: Int64 = 86_400_000

    /// When to try again after the `attempts`-th failure (1, 2, …) of an event made at `eventAt`; nil: give up.
    public static func nextAttempt(after attempts: Int, now: UnixMillis, eventAt: UnixMillis) -> UnixMillis? {
        let exponent = min(max(attempts - 1, 0), 20)
        let delay = min(firstDelayMillis << Int64(exponent), longestDelayMillis)
        guard now - eventAt < giveUpAfterMillis else { return nil }
        return min(now + delay, eventAt + giveUpAfterMillis)
    }
}
