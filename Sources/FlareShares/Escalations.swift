import FlareCore
public import FlareStore
import FlareSystem

/// The escalation ladder: when nobody answers "on my way" or "called emergency services" within the share's
/// `escalate_after_s` after its SOS started or its check-in was missed, every contact is alerted again (push, and mail
/// within the key's budget), and once more at three times that; `sos.escalated` with the step. Any such answer ends
/// the ladder, as does the share's end.
///
/// Run by the holder of the check-in lease (`CheckinWatcher`), from the store: each step is taken by a conditional
/// update with its event (`EscalationRecords.escalate`), so two holders overlapping at a hand-over, or a restart
/// between reading and taking it, take it once; a step that fell due while every instance was down is taken at the
/// next start.
public struct Escalations: Sendable {
    /// Ladders looked at per round.
    static let batch = 200

    let store: any EscalationRecords
    let directory: ShareDirectory
    let links: PersonalLinks
    let outbox: EventOutbox
    let clock: any Clock
    let logger: Logger

    /// Takes every step due now. Throws when the store cannot be read (the next round tries again).
    public func sweep() throws(StoreError) {
        for due in try store.dueEscalations(now: clock.now(), limit: Self.batch) {
            // A store that cannot say where the share stands ends the round (thrown), never the ladder.
            guard !due.over, case .live(let snapshot)? = try directory.share(due.shareID), snapshot.share.isActive else {
                try store.endEscalation(shareRow: due.shareRow)
                continue
            }
            let now = clock.now()
            let event = ShareEvent.escalated(due.shareID, step: due.step, at: now)
            if try store.escalate(shareRow: due.shareRow, step: due.step, event: outbox.pending(event, also: try links.alertMails(snapshot, owner: snapshot.share.ownerKeyID))) {
                outbox.recorded()
                logger.warning("share \(due.shareID): nobody has answered; every contact alerted again (step \(due.step))")
            }
        }
    }
}
