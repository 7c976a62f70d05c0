import FlareCore
import FlareStore
import FlareSystem

/// Decides which contacts get a mail, so that no key can use the operator's mail server as a cannon:
/// - one mail per address per share: several contacts with one address (say, twenty made for one stranger) get one
///   mail, for the first of them; their links are made all the same, and their owner sends them if wanted;
/// - at most `perKeyPerHour` mails an hour per owner key (`FLARE_MAIL_PER_KEY_PER_HOUR`), admin keys too, counted in
///   the store (`KeyRecords.takeMailBudget`) so that every instance takes from the one budget. A share made without
///   a key (the demo, tests) has none.
/// A link not mailed says why in the answer that made it (`"mailed": false, "reason": …`); every mail not sent is
/// counted in `flare_mail_refused_total{reason}`.
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

    /// For recipients in order (a link or a contact each, with the contact's address), whether each is mailed; none
    /// for one without an address. `mailedAddresses`: the addresses the share's earlier links were mailed at. Takes
    /// the budget for the mails it plans; throws when the store cannot count them.
    func plan<ID: Hashable>(_ recipients: [(id: ID, email: String?)], mailedAddresses: Set<String> = [], owner: Int64?,
                            now: UnixMillis) throws(StoreError) -> [ID: LinkMailing] {
        var decisions: [ID: LinkMailing] = [:]
        var seen = mailedAddresses
        var wanted: [ID] = []
        for (id, email) in recipients {
            guard let address = email.map(Self.normalized) else { continue }
            if seen.insert(address).inserted { wanted.append(id) } else { decisions[id] = .notMailed(reason: LinkMailing.sameAddress) }
        }
        let granted = if let owner { try store.takeMailBudget(key: owner, count: wanted.count, perHour: perKeyPerHour, now: now) } else { wanted.count }
        for (index, id) in wanted.enumerated() { decisions[id] = index < granted ? .queued : .notMailed(reason: LinkMailing.mailBudget) }
        for case .notMailed(let reason) in decisions.values { metrics.increment(FlareMetrics.mailRefused, labels: [("reason", reason)]) }
        return decisions
    }

    /// Addresses are compared without case: mail servers deliver `Anna@Example.org` and `anna@example.org` alike.
    static func normalized(_ address: String) -> String { address.lowercased() }
}

/// What became of a personal link's mail, as its creator is told: queued for its contact, or not sent and why.
public enum LinkMailing: Sendable, Equatable {
    case queued
    case notMailed(reason: String)

    /// The key's hourly budget is spent.
    public static let mailBudget = "mail_budget"
    /// Another link of the share went to the same address.
    public static let sameAddress = "same_address"
}
