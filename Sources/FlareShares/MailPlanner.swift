import FlareCore
import FlareStore

/// Decides which personal links' contacts get a mail, so that no key can use the operator's mail server as a cannon:
/// - one mail per address per share: several contacts with one address (say, twenty made for one stranger) get one
///   mail, for the first of their links; the others are made all the same, and their owner sends them if wanted;
/// - at most `perKeyPerHour` mails an hour per owner key (`FLARE_MAIL_PER_KEY_PER_HOUR`), admin keys too, counted in
///   the store (`KeyRecords.takeMailBudget`) so that every instance takes from the one budget. A share made without
///   a key (the demo, tests) has none.
/// A link not mailed says why in the create answer (`"mailed": false, "reason": …`) and in
/// `flare_mail_refused_total{reason}`.
struct MailPlanner: Sendable {
    let store: any KeyRecords
    let perKeyPerHour: Int
    let metrics: Metrics

    init(store: any KeyRecords, perKeyPerHour: Int, metrics: Metrics) {
        self.store = store
        self.perKeyPerHour = perKeyPerHour
        self.metrics = metrics
        metrics.register(FlareMetrics.mailRefused)
    }

    /// Why a link's contact is not mailed.
    enum Refusal: String, Error, Sendable {
        /// The key's hourly budget is spent.
        case mailBudget = "mail_budget"
        /// Another link of the share went to the same address.
        case sameAddress = "same_address"
    }

    /// For links just made (in order), whether each is mailed: nil for a contact Flare does not mail (no address, or
    /// no SMTP server), else mailed or why not. `mailedAddresses`: the addresses the share's earlier links were mailed
    /// at. Takes the budget for the mails it plans; throws when the store cannot count them.
    func plan(_ links: [(link: ShareLink, contact: Contact)], mailedAddresses: Set<String>, owner: Int64?, mailsContacts: Bool,
              now: UnixMillis) throws(StoreError) -> [LinkID: Result<Void, Refusal>] {
        guard mailsContacts else { return [:] }
        var decisions: [LinkID: Result<Void, Refusal>] = [:]
        var seen = mailedAddresses
        var wanted: [LinkID] = []
        for (link, contact) in links {
            guard let address = contact.email.map(Self.normalized) else { continue }
            if seen.contains(address) {
                decisions[link.id] = .failure(.sameAddress)
            } else {
                seen.insert(address)
                wanted.append(link.id)
            }
        }
        let granted = if let owner { try store.takeMailBudget(key: owner, count: wanted.count, perHour: perKeyPerHour, now: now) } else { wanted.count }
        for (index, id) in wanted.enumerated() { decisions[id] = index < granted ? .success(()) : .failure(.mailBudget) }
        for refusal in decisions.values.compactMap({ if case .failure(let why) = $0 { why } else { nil } }) {
            metrics.increment(FlareMetrics.mailRefused, labels: [("reason", refusal.rawValue)])
        }
        return decisions
    }

    /// Addresses are compared without case: mail servers deliver `Anna@Example.org` and `anna@example.org` alike.
    static func normalized(_ address: String) -> String { address.lowercased() }
}

extension Result where Success == Void {
    /// Whether the mail is to be sent.
    var isMailed: Bool { if case .success = self { true } else { false } }
}

/// What became of a personal link's mail, as its creator is told: queued for its contact, or not sent and why.
public enum LinkMailing: Sendable, Equatable {
    case queued
    case notMailed(reason: String)

    init(_ decision: Result<Void, MailPlanner.Refusal>) {
        switch decision {
        case .success: self = .queued
        case .failure(let refusal): self = .notMailed(reason: refusal.rawValue)
        }
    }
}
