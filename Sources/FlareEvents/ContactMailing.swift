public import FlareCore
public import FlareStore
import FlareCurl

/// The mail for one `mail:<link>` delivery, as the composer makes it at the moment of sending (from the store: the
/// link's URL is never in the outbox, whose rows are not secrets), or why there is nothing to send.
public enum ContactMail: Sendable, Equatable {
    case send(recipient: String, message: [UInt8], contact: ContactID?)
    /// Nothing to send any more: the link was withdrawn, the contact deleted or left without an address, the share
    /// ended. Reported as `contact.notification_failed` with this reason.
    case nothing(reason: String, contact: ContactID?)
}

/// Whom a mail delivery is for: a personal link's contact (the mail holds the link), or a contact with no link.
public enum MailTarget: Sendable, Equatable, CustomStringConvertible {
    case link(LinkID)
    case contact(ContactID)

    /// The target of a mail destination; nil for one that is not a mail.
    public init?(_ destination: EventDestination) {
        switch destination {
        case .mail(let link): self = .link(link)
        case .contactMail(let contact): self = .contact(contact)
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .link(let link): "link \(link)"
        case .contact(let contact): "contact \(contact)"
        }
    }

    var link: LinkID? { if case .link(let link) = self { link } else { nil } }
    var idText: String {
        switch self {
        case .link(let link): link.rawValue
        case .contact(let contact): contact.rawValue
        }
    }
}

/// Writes the mail telling a contact of an event.
public protocol ContactMailComposing: Sendable {
    /// - Parameters:
    ///   - messageID: the mail's `Message-ID` (without brackets), the same at every attempt.
    ///   - server: where it goes out (its `from` address).
    func mail(for event: ShareEvent, to target: MailTarget, messageID: String, server: MailServer) throws(StoreError) -> ContactMail
}

/// What an SMTP server did with a mail.
public enum MailResponse: Sendable, Equatable {
    case accepted
    /// It answered, and refused. `permanent`: a 5xx reply (the same mail would be refused again).
    case refused(permanent: Bool, reason: String)
    /// It did not answer, or the connection broke: the mail may or may not have gone (a retry reuses its Message-ID).
    case unanswered(String)
}

/// Hands one mail to an SMTP server.
public protocol MailSending: Sendable {
    func send(from sender: String, to recipients: [String], message: [UInt8], timeout: Duration) -> MailResponse
}

/// libcurl's SMTP (`SMTPClient`) to the configured server.
public struct SMTPMailer: MailSending {
    private let client: SMTPClient

    public init(server: MailServer) {
        client = SMTPClient(url: server.url, username: server.username, password: server.password, requireTLS: server.requiresTLS)
    }

    public func send(from sender: String, to recipients: [String], message: [UInt8], timeout: Duration) -> MailResponse {
        do {
            try client.send(from: sender, to: recipients, message: message, timeout: timeout)
            return .accepted
        } catch {
            if error.isUnanswered { return .unanswered(error.description) }
            return .refused(permanent: error.isPermanent, reason: error.description)
        }
    }
}

/// What the deliverer needs to mail contacts: the server, the way to it, and the writer of each mail.
public struct ContactMailing: Sendable {
    public let server: MailServer
    public let sender: any MailSending
    public let composer: any ContactMailComposing

    public init(server: MailServer, sender: any MailSending, composer: any ContactMailComposing) {
        self.server = server
        self.sender = sender
        self.composer = composer
    }

    /// The `Message-ID` of the mail for this event and target: derived from both, so every attempt sends the same one.
    public func messageID(event: ShareEvent, target: MailTarget) -> String {
        let eventPart = event.id.hasPrefix("msg_") ? String(event.id.dropFirst(4)) : event.id
        return "\(eventPart).\(target.idText)@\(server.messageIDDomain)"
    }
}
