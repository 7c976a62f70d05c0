import FlareCore
import FlareServiceTestSupport
import FlareTestSupport
import Synchronization
import Testing
@testable import FlareShares
import FlareSystem
import FlareCodec

/// What flared says on the broker, and what it keeps while the broker is away.
@Suite struct BrokerAnnouncerTests {
    let publisher = RecordingPublisher()
    let clock = ManualClock()
    var announcer: BrokerAnnouncer {
        BrokerAnnouncer(publisher: publisher, policy: SharePolicy(defaultDurationSeconds: 3600, maximumDurationSeconds: 86_400, historyRetentionSeconds: 600),
                        clock: clock, logger: Logger(label: "test", level: .error))
    }

    func share(expiresIn seconds: Int64) -> Share {
        Share(id: ShareID.generate(), viewTokenHash: Secret.generate().hash, name: "Anna", createdAt: clock.now(),
              expiresAt: clock.now() + seconds * 1000, ownerKeyID: nil, endToEnd: false)
    }

    @Test func whatTheBrokerDidNotTakeIsSentOnReconnectNewestPerTopic() {
        let announcer = announcer
        let anna = share(expiresIn: 60)
        publisher.setDown(true)
        announcer.retain(topic: "t/a", payload: [1], expiry: nil)
        announcer.retain(topic: "t/a", payload: [2], expiry: nil)
        announcer.revoke(anna)
        let worth = Mutex(true)
        announcer.sendOrKeep("locate", what: "a request") { [publisher] in
            !worth.withLock { $0 } || publisher.publish(topic: "t/cmd", payload: [9], qos: 1, retain: false, expirySeconds: nil)
        }
        #expect(publisher.messages.isEmpty)
        publisher.setDown(false)
        announcer.flush()
        #expect(publisher.messages.filter { $0.topic == "t/a" }.map(\.payload) == [[2]])
        let revocation = publisher.messages.first { $0.topic == Topics.brokerControl }
        #expect(revocation.flatMap { try? JSONValue.parse($0.payload) }?["until"]?.doubleValue == Double((anna.expiresAt + 999) / 1000))
        #expect(publisher.messages.filter { $0.topic == "t/cmd" }.count == 1)
        // Sent once: a second reconnect sends nothing again.
        let count = publisher.messages.count
        announcer.flush()
        #expect(publisher.messages.count == count)
    }

    @Test func aKeptMessageNoLongerWorthSendingIsDropped() {
        let announcer = announcer
        publisher.setDown(true)
        let worth = Mutex(true)
        announcer.sendOrKeep("locate", what: "a request") { [publisher] in
            !worth.withLock { $0 } || publisher.publish(topic: "t/cmd", payload: [9], qos: 1, retain: false, expirySeconds: nil)
        }
        announcer.flush()  // still away: kept
        worth.withLock { $0 = false }
        publisher.setDown(false)
        announcer.flush()
        #expect(publisher.messages.isEmpty)
    }

    /// An active share's status outlives it by the retention (an hour at least), so a broker Flare stops talking to
    /// still drops it; an ended one's lasts the retention from now.
    @Test func aStatusIsKeptByTheBrokerForTheShareAndItsRetention() {
        let announcer = announcer
        let active = share(expiresIn: 120)
        #expect(announcer.statusMessage(of: active).expiry == 120 + 3600)
        var ended = active
        ended.endedAt = clock.now()
        ended.endReason = .stopped
        #expect(announcer.statusMessage(of: ended).expiry == 3600)
    }
}
