public import FlareCore
public import FlareEvents
public import FlareStore
import FlareAPI
import FlareWire
public import FlareSystem

/// Writes each contact's mail at the moment it is sent, from the store as it is then: a link withdrawn, a contact
/// deleted or an address removed since the event means no mail. The link's URL is derived here (never stored) and
/// goes only to its contact.
public struct ContactNotices: ContactMailComposing {
    private let store: any ShareRecords & LinkRecords & ContactRecords & FixRecords & CheckinRecords & DeviceRecords & PushRecords
    private let tokenKey: [UInt8]
    private let publicURL: String
    private let offersAlerts: Bool
    private let clock: any Clock

    /// - Parameters:
    ///   - publicURL: what links start with (`FLARE_PUBLIC_URL`).
    ///   - offersAlerts: push is on: the mail that tells a contact of a new link ends with their alerts page's link.
    public init(store: any ShareRecords & LinkRecords & ContactRecords & FixRecords & CheckinRecords & DeviceRecords & PushRecords, tokenKey: [UInt8],
                publicURL: String, offersAlerts: Bool = false, clock: any Clock) {
        self.store = store
        self.tokenKey = tokenKey
        self.publicURL = publicURL
        self.offersAlerts = offersAlerts
        self.clock = clock
    }

    public func mail(for event: ShareEvent, to target: MailTarget, messageID: String, server: MailServer) throws(StoreError) -> ContactMail {
        guard let stored = try store.share(id: event.shareID) else { return .nothing(reason: "the share is gone", contact: nil) }
        // Whom it is for, and the link it carries (none for a contact told without one: an arrival, or a miss on a
        // share that had ended and so took no links).
        let contact: Contact, url: String?
        switch target {
        case .contact(let contactID):
            guard let found = try store.contact(id: contactID) else { return .nothing(reason: "the contact was deleted", contact: contactID) }
            contact = found
            url = nil
        case .link(let id):
            guard let link = try store.links(shareRow: stored.row).first(where: { $0.id == id }) else {
                return .nothing(reason: "the link is gone", contact: nil)
            }
            guard !link.isWithdrawn else { return .nothing(reason: "the link was withdrawn", contact: link.contactID) }
            guard stored.share.isActive else { return .nothing(reason: "the share ended before its contact was told", contact: link.contactID) }
            guard let contactID = link.contactID, let found = try store.contact(id: contactID) else {
                return .nothing(reason: "the contact was deleted", contact: link.contactID)
            }
            contact = found
            url = "\(publicURL)/s/\(ShareLink.viewToken(tokenKey: tokenKey, share: stored.share.id, link: id))"
        }
        guard let address = contact.email else { return .nothing(reason: "the contact has no email address", contact: contact.id) }
        let text = ContactNoticeText(language: contact.language, sharer: stored.share.name, contact: contact.name)
        let (subject, body): (String, String)
        if event.type == .checkinMissed, let checkin = try store.checkin(shareRow: stored.row) {
            (subject, body) = text.checkinMissed(url: url, until: stored.share.expiresAt, checkin: checkin, last: try store.recentFixes(row: stored.row, limit: 1).first)
        } else if let url, let sos = try sosMail(event, text: text, url: url, share: stored) {
            (subject, body) = sos
        } else if let url {
            (subject, body) = text.linkCreated(url: url, expiresAt: stored.share.expiresAt)
        } else {
            (subject, body) = text.arrived(at: event.at)
        }
        var full = body
        if offersAlerts, event.type == .linkCreated {
            // Where the contact can get the next alert at once, in the browser: the secret's hash recorded first.
            let secret = try PushAlerts.issueAlertsSecret(of: contact.id, tokenKey: tokenKey, store: store)
            full += "\n\n" + text.alertsOffer(url: "\(publicURL)/alerts#c=\(secret)")
        }
        let message = MailMessage(fromName: "Flare", fromAddress: server.from, toName: contact.name, toAddress: address, subject: subject,
                                  body: full, messageID: messageID, date: clock.now(), language: contact.language.rawValue)
        return .send(recipient: address, message: message.bytes, contact: contact.id)
    }
}

extension ContactNotices {
    /// The mail of an SOS (a device's share): its start (the link's creation), a repeated press, the duress PIN, the
    /// stop locked by wrong PINs. Nil for a share no device started.
    private func sosMail(_ event: ShareEvent, text: ContactNoticeText, url: String, share stored: StoredShare) throws(StoreError) -> (subject: String, body: String)? {
        switch event.type {
        case .linkCreated:
            guard let device = try store.device(sosShareRow: stored.row)?.device else { return nil }
            return text.sosStarted(url: url, at: stored.share.createdAt, until: stored.share.expiresAt, message: device.message)
        case .sosRepeated: return text.sosRepeated(url: url, at: event.at)
        case .sosDuress: return text.sosDuress(url: url, at: event.at)
        case .sosStopRefused: return text.sosStopRefused(url: url, at: event.at)
        case .sosEscalated: return text.sosEscalated(url: url, since: stored.share.createdAt, again: event.body.containsStep2)
        default: return nil
        }
    }
}

/// The words of a contact's mail, in the contact's language. Times are written in UTC, with the zone named: the
/// server does not know where the contact is.
struct ContactNoticeText {
    let language: ContactLanguage
    /// The share's name: the person who shares, as they named themselves.
    let sharer: String
    let contact: String

    init(language: ContactLanguage, sharer: String, contact: String) {
        self.language = language
        // Share names are trimmed when the share is made.
        self.sharer = sharer.isEmpty ? (language == .zhCN ? "你认识的人" : "Someone you know") : sharer
        self.contact = contact
    }

    func linkCreated(url: String, expiresAt: UnixMillis) -> (subject: String, body: String) {
        let until = Self.utc(expiresAt)
        switch language {
        case .en:
            return ("\(sharer) is sharing a live location with you",
                    """
                    Hello \(contact),

                    \(sharer) is sharing a live location with you through Flare, until \(until).

                    Open your personal link to see where \(sharer) is, and to answer:
                    \(url)

                    This link is yours alone: please do not forward it.
                    """)
        case .zhCN:
            return ("\(sharer) 正在与你共享实时位置",
                    """
                    \(contact)，你好：

                    \(sharer) 正在通过 Flare 与你共享实时位置，直到 \(until)。

                    打开你的专属链接，查看 \(sharer) 的位置并回复：
                    \(url)

                    此链接仅供你本人使用，请勿转发。
                    """)
        }
    }

    /// A device's SOS started: the first the contact hears of it.
    func sosStarted(url: String, at: UnixMillis, until: UnixMillis, message: String) -> (subject: String, body: String) {
        let when = Self.utc(at), end = Self.utc(until)
        switch language {
        case .en:
            let said = message.isEmpty ? "" : "\n\(sharer) left this message: “\(message)”\n"
            return ("SOS: \(sharer) needs help",
                    """
                    Hello \(contact),

                    \(sharer) pressed SOS at \(when) and asked Flare to tell you.
                    \(said)
                    Open your personal link to see where \(sharer) is, follow them live, and answer (it stays live until \(end)):
                    \(url)

                    If you think \(sharer) is in danger, call the emergency services.

                    This link is yours alone: please do not forward it.
                    """)
        case .zhCN:
            let said = message.isEmpty ? "" : "\n\(sharer) 留言：“\(message)”\n"
            return ("紧急求助：\(sharer) 需要帮助",
                    """
                    \(contact)，你好：

                    \(sharer) 在 \(when) 按下了紧急求助（SOS），并请 Flare 通知你。
                    \(said)
                    打开你的专属链接，实时查看 \(sharer) 的位置并回复（有效至 \(end)）：
                    \(url)

                    如果你认为 \(sharer) 有危险，请拨打急救电话。

                    此链接仅供你本人使用，请勿转发。
                    """)
        }
    }

    /// The SOS button was pressed again while the SOS was live.
    func sosRepeated(url: String, at: UnixMillis) -> (subject: String, body: String) {
        let when = Self.utc(at)
        switch language {
        case .en:
            return ("SOS: \(sharer) pressed SOS again",
                    """
                    Hello \(contact),

                    \(sharer) pressed SOS again at \(when). Their SOS is still live; your personal link shows where they are:
                    \(url)
                    """)
        case .zhCN:
            return ("紧急求助：\(sharer) 再次按下了 SOS",
                    """
                    \(contact)，你好：

                    \(sharer) 在 \(when) 再次按下了 SOS。求助仍在进行中，你的专属链接显示其位置：
                    \(url)
                    """)
        }
    }

    /// The duress PIN: the device was made to stop; the share goes on.
    func sosDuress(url: String, at: UnixMillis) -> (subject: String, body: String) {
        let when = Self.utc(at)
        switch language {
        case .en:
            return ("\(sharer) may be under duress",
                    """
                    Hello \(contact),

                    \(sharer) may be under duress: at \(when) they were made to stop sharing, and entered the PIN that only seems to stop it.
                    Their phone now shows that sharing stopped. Flare goes on showing you where they are:
                    \(url)

                    Do not call or message \(sharer)'s phone: someone else may be watching it. If you think they are in danger,
                    call the emergency services.
                    """)
        case .zhCN:
            return ("\(sharer) 可能正受到胁迫",
                    """
                    \(contact)，你好：

                    \(sharer) 可能正受到胁迫：在 \(when)，其被迫停止共享，并输入了只会“假装停止”的胁迫密码。
                    其手机现在显示共享已停止，但 Flare 仍会继续向你显示其位置：
                    \(url)

                    请不要给 \(sharer) 的手机打电话或发消息：可能有人正在看着这部手机。如果你认为其有危险，请拨打急救电话。
                    """)
        }
    }

    /// The end of a link's first mail, with push on: their alerts page.
    func alertsOffer(url: String) -> String {
        switch language {
        case .en:
            return """
                To be alerted at once in your browser next time (no app needed), open this page once and allow notifications:
                \(url)
                """
        case .zhCN:
            return """
                如需下次在浏览器中立即收到警报（无需安装应用），请打开此页面一次并允许通知：
                \(url)
                """
        }
    }

    /// The ladder: nobody answered "on my way" or "called emergency services" yet (`again`: the second step).
    func sosEscalated(url: String, since: UnixMillis, again: Bool) -> (subject: String, body: String) {
        switch language {
        case .en:
            return (again ? "Still nobody has answered \(sharer)'s SOS" : "Nobody has answered \(sharer)'s SOS yet",
                    """
                    Hello \(contact),

                    Nobody has answered \(sharer)'s alert yet (it started at \(Self.utc(since))). Open your personal link to see where
                    \(sharer) is, and answer "on my way" or "called emergency services" so that everyone knows help is coming:
                    \(url)

                    If you think \(sharer) is in danger, call the emergency services.
                    """)
        case .zhCN:
            return (again ? "仍然没有人回应 \(sharer) 的紧急求助" : "还没有人回应 \(sharer) 的紧急求助",
                    """
                    \(contact)，你好：

                    还没有人回应 \(sharer) 的求助（开始于 \(Self.utc(since))）。请打开你的专属链接查看 \(sharer) 的位置，
                    并回复“我在路上”或“已报警”，让大家知道有人在帮忙：
                    \(url)

                    如果你认为其有危险，请拨打急救电话。
                    """)
        }
    }

    /// Wrong PINs locked stopping the SOS.
    func sosStopRefused(url: String, at: UnixMillis) -> (subject: String, body: String) {
        let when = Self.utc(at)
        switch language {
        case .en:
            return ("Someone is trying to stop \(sharer)'s SOS",
                    """
                    Hello \(contact),

                    By \(when), a wrong PIN was entered five times to stop \(sharer)'s SOS. Stopping it is locked for 15 minutes, and
                    \(sharer)'s location is still shared with you:
                    \(url)
                    """)
        case .zhCN:
            return ("有人试图停止 \(sharer) 的紧急求助",
                    """
                    \(contact)，你好：

                    截至 \(when)，有人五次输入错误的密码试图停止 \(sharer) 的紧急求助。停止功能已被锁定 15 分钟，
                    \(sharer) 的位置仍在与你共享：
                    \(url)
                    """)
        }
    }

    /// The check-in ended by a fix inside its zone.
    func arrived(at: UnixMillis) -> (subject: String, body: String) {
        let when = Self.utc(at)
        switch language {
        case .en:
            return ("\(sharer) has arrived",
                    """
                    Hello \(contact),

                    \(sharer) has arrived where they were going (\(when)). Flare tells you because they asked it to.
                    """)
        case .zhCN:
            return ("\(sharer) 已到达",
                    """
                    \(contact)，你好：

                    \(sharer) 已到达目的地（\(when)）。这是 \(sharer) 请 Flare 通知你的。
                    """)
        }
    }

    /// The check-in was missed: when, the sharer's message, the last position (its time and accuracy), the link and
    /// how long it stays live.
    func checkinMissed(url: String?, until expiresAt: UnixMillis, checkin: Checkin, last: Fix?) -> (subject: String, body: String) {
        let due = Self.utc(checkin.dueAt), until = Self.utc(expiresAt)
        let position = last.map { fix in
            let where_ = "\(Self.degrees(fix.latitude)), \(Self.degrees(fix.longitude))"
            let accuracy = fix.accuracy.map { " ±\(Int($0.rounded())) m" } ?? ""
            let map = "https://www.openstreetmap.org/?mlat=\(Self.degrees(fix.latitude))&mlon=\(Self.degrees(fix.longitude))#map=16/\(Self.degrees(fix.latitude))/\(Self.degrees(fix.longitude))"
            return (time: Self.utc(fix.timestamp * 1000), where_: where_, accuracy: accuracy, map: map)
        }
        switch language {
        case .en:
            let said = checkin.message.isEmpty ? "" : "\n\(sharer) left this message: “\(checkin.message)”\n"
            let lastLine = position.map { "Last position, at \($0.time)\($0.accuracy): \($0.where_)\n\($0.map)" }
                ?? "Flare has no position from \(sharer) yet."
            let follow = url.map { "Follow \(sharer) live, and answer, with your personal link (live until \(until)):\n\($0)\n\nThis link is yours alone: please do not forward it." }
                ?? "\(sharer)'s live sharing had been stopped before the deadline: there is no live link to open."
            return ("\(sharer) did not check in by \(due)",
                    """
                    Hello \(contact),

                    \(sharer) asked Flare to tell you if they had not checked in by \(due). They have not.
                    \(said)
                    \(lastLine)

                    \(follow)
                    """)
        case .zhCN:
            let said = checkin.message.isEmpty ? "" : "\n\(sharer) 留言：“\(checkin.message)”\n"
            let lastLine = position.map { "最后位置（\($0.time)\($0.accuracy)）：\($0.where_)\n\($0.map)" }
                ?? "Flare 尚未收到 \(sharer) 的位置。"
            let follow = url.map { "打开你的专属链接，实时查看 \(sharer) 的位置并回复（有效至 \(until)）：\n\($0)\n\n此链接仅供你本人使用，请勿转发。" }
                ?? "\(sharer) 的实时共享在时限前已被停止，因此没有可打开的实时链接。"
            return ("\(sharer) 未在 \(due) 前报平安",
                    """
                    \(contact)，你好：

                    \(sharer) 请 Flare 在其未于 \(due) 前报平安时通知你。现在已过时限，仍未报平安。
                    \(said)
                    \(lastLine)

                    \(follow)
                    """)
        }
    }

    /// Five decimals: about a metre.
    static func degrees(_ value: Double) -> String {
        let scaled = (value * 100_000).rounded() / 100_000
        return String(scaled)
    }

    /// `2026-12-02 22:00 UTC`.
    static func utc(_ millis: UnixMillis) -> String {
        let text = RFC3339.format(millis: millis)  // 2026-12-02T22:00:00Z or with fractions
        let date = text.prefix(10), time = text.dropFirst(11).prefix(5)
        return "\(date) \(time) UTC"
    }
}

extension [UInt8] {
    /// Whether an `sos.escalated` event's body is its second step (`"step":2`, as `ShareEvent.escalated` writes it).
    var containsStep2: Bool { contains(subsequence: Array(#""step":2"#.utf8)) }
}
