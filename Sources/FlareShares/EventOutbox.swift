import FlareCore
import FlareStore

/// How a change's event goes with it into the store's outbox (`PendingEvent`: committed in the change's own
/// transaction), and who is told once it is: every concern that records an event uses this one.
struct EventOutbox: Sendable {
    /// Where every event goes besides the owning key's webhook (`EventDeliverer.destinations`).
    let destinations: [EventDestination]
    /// Whether a personal link's contact with an address is mailed (`EventDeliverer.mailsContacts`).
    let mailsContacts: Bool
    /// Told after an event is committed (the deliverer wakes).
    let recorded: @Sendable () -> Void

    /// The event as the store records it with its change.
    func pending(_ event: ShareEvent) -> PendingEvent { PendingEvent(event, destinations: destinations) }

    /// `link.created`, and the link's mail if `mailed` (`MailPlanner`).
    func linkCreated(_ share: ShareID, _ link: ShareLink, mailed: Bool) -> PendingEvent {
        PendingEvent(.linkCreated(share, link: link), destinations: mailed ? destinations + [.mail(link.id)] : destinations)
    }
}
