import FlareCore
import FlareStore
import FlareSystem
import FlareWire

/// The family's answers ("on my way"): stored with the share, shown to every viewer on every instance, and sent to
/// the phone on `…/answers`.
final class FamilyAnswers: Sendable {
    private let store: any AnswerRecords
    private let directory: ShareDirectory
    private let announcer: BrokerAnnouncer
    private let outbox: EventOutbox
    private let clock: any Clock
    private let metrics: Metrics
    private let logger: Logger

    init(store: any AnswerRecords, directory: ShareDirectory, announcer: BrokerAnnouncer, outbox: EventOutbox, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.store = store
        self.directory = directory
        self.announcer = announcer
        self.outbox = outbox
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
    }

    /// A family member answers (`name` already validated, `Answer.validName`): stored with the share, shown to every
    /// viewer of it on every instance (view document and live event), and sent to the phone on `…/answers` (QoS 1,
    /// not retained). The broker keeps nothing for a device that is not connected (the auth plugin checks each
    /// delivery against a connected client's token), so a phone that was away asks `GET …/answers?after=<last id>`.
    func answer(_ snapshot: ShareSnapshot, kind: AnswerKind, name: String) throws(ShareService.AnswerRefusal) -> Answer {
        guard snapshot.share.isActive else { throw .ended }
        let stored: Answer?
        do {
            guard try store.answers(row: snapshot.row, after: 0, limit: ShareService.answersPerShare).count < ShareService.answersPerShare else {
                throw ShareService.AnswerRefusal.full
            }
            let id = snapshot.share.id
            stored = try store.insertAnswer(row: snapshot.row, kind: kind, name: name, at: clock.now()) { [outbox] answer in
                outbox.pending(ShareEvent.answered(id, answer: answer))
            }
        } catch let refusal as ShareService.AnswerRefusal {
            throw refusal
        } catch {
            throw .storage("\(error)")
        }
        guard let answer = stored else { throw .ended }
        directory.addAnswers(snapshot.share.id, [answer])
        outbox.recorded()
        let remaining = max(1, (snapshot.share.expiresAt - clock.now()) / 1000)
        // Under duress the phone may be in someone else's hands: its topic hears no answer (the viewers still see them).
        if directory.snapshot(snapshot.share.id)?.share.underDuress == true {
            logger.info("share \(snapshot.share.id): answered (\(kind.rawValue)); not sent to the phone: the share is under duress")
            metrics.increment(FlareMetrics.answers, labels: [("kind", kind.rawValue)])
            return answer
        }
        if !announcer.publish(topic: Topics.answers(snapshot.share.id), payload: answer.json, qos: 1, retain: false,
                              expirySeconds: UInt32(clamping: remaining)) {
            logger.warning("share \(snapshot.share.id): broker unavailable; an answer is stored and shown, and the phone gets it over HTTP")
        }
        metrics.increment(FlareMetrics.answers, labels: [("kind", kind.rawValue)])
        logger.info("share \(snapshot.share.id): answered (\(kind.rawValue))")
        return answer
    }

    /// A share's answers after `after`, oldest first, from the store (for the phone over HTTP).
    func answers(of row: Int64, after: Int64, limit: Int) throws(ShareError) -> [Answer] {
        do { return try store.answers(row: row, after: after, limit: limit) } catch { throw .storage(error.description) }
    }
}
