import FlareCore
import FlareCrypto
import Testing
import FlareSystem

/// flared's mark on its own positions (NATS): believed only for its topic, its payload and its moment.
@Suite struct OwnPositionMarkTests {
    let mark = OwnPositionMark(tokenKey: Crypto.randomBytes(32))
    let topic = "flare/v1/shares/AAAAAAAAAAAAAAAAAAAAAA/location"
    let payload = Array(#"{"_type":"location","lat":48.1,"lon":11.5,"tst":1796500000}"#.utf8)
    let now: UnixMillis = 1_796_500_000_000

    @Test func flaredsOwnComesBackAsItWas() {
        let marked = mark.marked(payload, topic: topic, at: now)
        #expect(mark.verdict(on: marked, topic: topic, now: now + 50) == .own(payload))
        #expect(mark.verdict(on: marked, topic: topic, now: now + OwnPositionMark.replayAfterMillis) == .own(payload), "a redelivery, clocks apart")
        #expect(mark.verdict(on: payload, topic: topic, now: now) == .unmarked)
    }

    /// Published again later, by whoever captured it: a replay, dropped. Moved to another topic, another payload,
    /// another time, or made with another key: no mark at all, a fix like any other.
    @Test func replaysAndForgeriesAreToldApart() throws {
        let marked = mark.marked(payload, topic: topic, at: now)
        #expect(mark.verdict(on: marked, topic: topic, now: now + OwnPositionMark.replayAfterMillis + 1) == .replayed)
        #expect(mark.verdict(on: marked, topic: topic, now: now - OwnPositionMark.replayAfterMillis - 1) == .replayed)
        #expect(mark.verdict(on: marked, topic: topic.replacingOccurrences(of: "AAAA", with: "BBBB"), now: now) == .unmarked)
        let text = String(decoding: marked, as: UTF8.self)
        let otherPlace = Array(text.replacingOccurrences(of: "48.1", with: "10.5").utf8)
        #expect(mark.verdict(on: otherPlace, topic: topic, now: now) == .unmarked)
        let otherTime = Array(text.replacingOccurrences(of: "\"_flare\":\"\(now)", with: "\"_flare\":\"\(now + 7_200_000)").utf8)
        #expect(otherTime != marked)
        #expect(mark.verdict(on: otherTime, topic: topic, now: now + 7_200_000) == .unmarked, "the time is signed")
        #expect(OwnPositionMark(tokenKey: Crypto.randomBytes(32)).verdict(on: marked, topic: topic, now: now) == .unmarked)
        for broken in [#"{"_flare":"x.y"}"#, #"{"a":1,"_flare":"12.short"}"#, #"{"a":1,"_flare":""}"#, "not json"] {
            #expect(mark.verdict(on: Array(broken.utf8), topic: topic, now: now) == .unmarked, "\(broken)")
        }
    }
}
