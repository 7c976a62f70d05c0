public import FlareCore
public import FlareEvents
public import FlareStore
import FlareCodec
import FlareAPI

/// Writes each Web Push notification at the moment it is sent, from the store as it is then, in the language the
/// browser's page had: a title and a line the service worker shows as they are, the tag that makes a newer one
/// replace an older one on the phone, and for a contact's alerts the URL of their personal link (a viewer's page
/// opens its own). Never a coordinate or a place: a lock screen is seen by others.
public struct PushNotices: PushComposing {
    private let store: any ShareRecords & LinkRecords
    private let tokenKey: [UInt8]
    private let publicURL: String

    /// - Parameter publicURL: what links start with (`FLARE_PUBLIC_URL`).
    public init(store: any ShareRecords & LinkRecords, tokenKey: [UInt8], publicURL: String) {
        self.store = store
        self.tokenKey = tokenKey
        self.publicURL = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
    }

    public func notice(for event: ShareEvent, to subscription: PushSubscription) throws(StoreError) -> PushNotice {
        guard let rule = event.type.pushRule else { return .nothing(reason: "not pushed") }
        guard let stored = try store.share(id: event.shareID), !stored.share.historyPurged else { return .nothing(reason: "the share is gone") }
        var url: String?
        switch subscription.subscriber {
        case .link(let shareRow, _):
            guard shareRow == stored.row else { return .nothing(reason: "the subscription is another share's") }
        case .contact(let contact):
            // Their own link on this share: the alert opens it.
            guard let link = try store.links(shareRow: stored.row).first(where: { $0.contactID == contact && !$0.isWithdrawn }) else {
                return .nothing(reason: "the contact has no link on this share")
            }
            url = "\(publicURL)/s/\(ShareLink.viewToken(tokenKey: tokenKey, share: stored.share.id, link: link.id))"
        }
        let text = PushNoticeText(language: subscription.language, sharer: stored.share.name)
        guard let (title, body) = text.words(for: event) else { return .nothing(reason: "not pushed") }
        var writer = JSONWriter(capacity: 384)
        writer.beginObject()
        writer.field("type", event.type.rawValue)
        writer.field("title", title)
        writer.field("body", body)
        writer.field("tag", "flare-\(event.shareID.rawValue)")
        writer.field("urgent", rule.urgency == .high)
        if let url { writer.field("url", url) }
        writer.field("at", RFC3339.format(millis: event.at))
        writer.endObject()
        return .send(payload: writer.bytes)
    }
}

/// The words of a notification, in the subscriber's language.
struct PushNoticeText {
    let language: ContactLanguage
    let sharer: String

    init(language: ContactLanguage, sharer: String) {
        self.language = language
        // Share names are trimmed when the share is made; a purged share has none.
        self.sharer = sharer.isEmpty ? (language == .zhCN ? "你认识的人" : "Someone you know") : sharer
    }

    func words(for event: ShareEvent) -> (title: String, body: String)? {
        let en = language == .en
        let look = en ? "Tap to see where \(sharer) is." : "点按查看 \(sharer) 的位置。"
        switch event.type {
        case .sosStarted:
            return en ? ("\(sharer) pressed SOS", look) : ("\(sharer) 按下了 SOS", look)
        case .sosRepeated:
            return en ? ("\(sharer) pressed SOS again", look) : ("\(sharer) 再次按下了 SOS", look)
        case .sosEscalated:
            return en ? ("Nobody has answered \(sharer)'s SOS yet", "Tap to see where \(sharer) is, and answer.")
                : ("还没有人回应 \(sharer) 的紧急求助", "点按查看 \(sharer) 的位置并回复。")
        case .sosDuress:
            return en ? ("\(sharer) may be under duress", "Do not call or message \(sharer)'s phone. \(look)")
                : ("\(sharer) 可能正受到胁迫", "请不要给 \(sharer) 的手机打电话或发消息。\(look)")
        case .sosStopRefused:
            return en ? ("Someone is trying to stop \(sharer)'s SOS", look) : ("有人试图停止 \(sharer) 的紧急求助", look)
        case .checkinMissed:
            return en ? ("\(sharer) missed a check-in", look) : ("\(sharer) 错过了报平安", look)
        case .trackerOffline, .trackerStale:
            return en ? ("\(sharer)'s phone stopped sending its location", look) : ("\(sharer) 的手机已停止发送位置", look)
        case .batteryLow:
            return en ? ("\(sharer)'s phone battery is low", look) : ("\(sharer) 的手机电量低", look)
        case .answered:
            let kind = AnswerKind.allCases.first { event.body.contains(subsequence: Array("\"kind\":\"\($0.rawValue)\"".utf8)) }
            switch kind {
            case .onMyWay: return en ? ("Someone is on the way to \(sharer)", look) : ("有人正在赶往 \(sharer) 身边", look)
            case .calledEmergency: return en ? ("Someone called emergency services for \(sharer)", look) : ("有人已为 \(sharer) 报警", look)
            case .cannotHelp, nil: return en ? ("Someone answered \(sharer)", look) : ("有人回复了 \(sharer)", look)
            }
        case .ended:
            return en ? ("\(sharer) stopped sharing", "The link no longer shows where \(sharer) is.") : ("\(sharer) 已停止共享", "该链接不再显示 \(sharer) 的位置。")
        default:
            return nil
        }
    }
}

extension [UInt8] {
    func contains(subsequence needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, count >= needle.count else { return needle.isEmpty }
        return (0...(count - needle.count)).contains { self[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}
