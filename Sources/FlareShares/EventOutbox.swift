import FlareCore
import FlareStore

/// How a change's event goes with it into the store's outbox (`PendingEvent`: committed in the change's own
/// transaction), and who is told once it is: every concern that records an event uses this one.
struct EventOutbox: Sendable {
    /// Where every event goes besides the owning key's webhook (`EventDeliverer.destinations`).
    let destinations: [EventDestination]
    /// Whether a personal link's contact with an address is mailed (`EventDeliverer.mailsContacts`).
    let mailsContacts: Bool
    /// Whether events with a `PushRule` are pushed to browsers (`EventDeliverer.pushes`).
    let pushes: Bool
    /// Told after an event is committed (the deliverer wakes).
    let recorded: @Sendable () -> Void

    /// The event as the store records it with its change: to every destination, `also` (its mails), and to the
    /// browsers subscribed to it if it is pushed.
    func pending(_ event: ShareEvent, also: [EventDestination] = []) -> PendingEvent {
        var all = destinations + also
        if pushes, event.type.pushRule != nil { all.append(.pushFanOut) }
        return PendingEvent(event, destinations: all)
    }

    /// `link.created`, and the link's mail if `mailed` (`MailPlanner`).
    func linkCreated(_ share: ShareID, _ link: ShareLink, mailed: Bool) -> PendingEvent {
        pending(.linkCreated(share, link: link), also: mailed ? [.mail(link.id)] : [])
    }
}
