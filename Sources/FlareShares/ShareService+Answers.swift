import FlareAPI
import FlareCore
import FlareStore
import FlareEvents
import FlareSystem
import FlareWire
import Synchronization

extension ShareService {
    // MARK: The family's answers

    public enum AnswerRefusal: Error, Equatable {
        case ended
        /// The share holds `answersPerShare` answers already: a refusal for good, not a failure to retry.
        case full
        case storage(String)
    }

    /// How many answers a share takes at most: a family answers a few times; a script that got the link does not
    /// get to fill the store (the gateway limits the rate too).
    public static let answersPerShare = 200

    /// A family member answers (`name` already validated, `Answer.validName`): stored with the share, shown to every
    /// viewer of it on every instance (view document and live event), and sent to the phone on `…/answers` (QoS 1,
    /// not retained). The broker keeps nothing for a device that is not connected (the auth plugin checks each
    /// delivery against a connected client's token), so a phone that was away asks `GET …/answers?after=<last id>`.
    public func answer(_ snapshot: ShareSnapshot, kind: AnswerKind, name: String) throws(AnswerRefusal) -> Answer {
        guard snapshot.share.isActive else { throw .ended }
        let stored: Answer?
        do {
            guard try store.answers(row: snapshot.row, after: 0, limit: Self.answersPerShare).count < Self.answersPerShare else {
                throw AnswerRefusal.full
            }
            let id = snapshot.share.id
            stored = try store.insertAnswer(row: snapshot.row, kind: kind, name: name, at: clock.now()) { [self] answer in
                pending(ShareEvent.answered(id, answer: answer))
            }
        } catch let refusal as AnswerRefusal {
            throw refusal
        } catch {
            throw .storage("\(error)")
        }
        guard let answer = stored else { throw .ended }
        registry.addAnswers(snapshot.share.id, [answer])
        eventRecorded()
        let remaining = max(1, (snapshot.share.expiresAt - clock.now()) / 1000)
        if !publisher.publish(topic: Topics.answers(snapshot.share.id), payload: answer.json, qos: 1, retain: false,
                              expirySeconds: UInt32(clamping: remaining)) {
            logger.warning("share \(snapshot.share.id): broker unavailable; an answer is stored and shown, and the phone gets it over HTTP")
        }
        metrics.increment(FlareMetrics.answers, labels: [("kind", kind.rawValue)])
        logger.info("share \(snapshot.share.id): answered (\(kind.rawValue))")
        return answer
    }

    /// A share's answers after `after`, oldest first, from the store (for the phone over HTTP).
    public func answers(of row: Int64, after: Int64, limit: Int) throws(ShareError) -> [Answer] {
        do { return try store.answers(row: row, after: after, limit: limit) } catch { throw .storage(error.description) }
    }

    func takeAnswers(_ id: ShareID, row: Int64) throws(StoreError) {
        let found = try store.answers(row: row, after: registry.lastAnswerID(id), limit: Self.answersPerShare)
        registry.addAnswers(id, Array(found.suffix(ShareRegistry.answersKept)))
    }
}
