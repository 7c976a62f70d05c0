import FlareAPI
import FlareCore
import FlareShares
import Foundation
import Testing
@testable import FlareGateway

/// The family answers: through the link, to every viewer live and in the view document, to the phone over MQTT and
/// HTTP.
@Suite struct AnswerTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    func answer(_ share: CreatedShare, _ json: String, from address: String = "127.0.0.1") -> Reply {
        fixture.send("POST", "/api/v1/view/\(share.viewToken)/answers", body: Array(json.utf8), from: address)
    }

    @Test func anAnswerReachesViewersThePhoneAndTheViewDocument() throws {
        let share = try fixture.createShare()
        let events = fixture.send("GET", "/api/v1/view/\(share.viewToken)/events")
        let reader = EventStreamReader(try #require(events.stream))
        for _ in 0..<3 { _ = reader.next() }  // retry, status, tracker

        let reply = answer(share, #"{"kind":"on_my_way","name":"  Mum <b>  "}"#)
        #expect(reply.status == 201, "\(reply.text)")
        let made = try reply.decode(ShareAnswer.self)
        #expect(made.kind == .onMyWay && made.name == "Mum <b>")  // text, trimmed; the page shows it as text
        // Live, to every viewer.
        let live = try #require(reader.next())
        #expect(live.name == "answer")
        let liveAnswer = try APIJSON.decode(ShareAnswer.self, from: Array(try #require(live.data).utf8))
        #expect(liveAnswer == made)
        // In the view document, for a viewer who opens the link later.
        let view = try fixture.send("GET", "/api/v1/view/\(share.viewToken)").decode(ViewDocument.self)
        #expect(view.answers == [made])
        // To the phone: on its MQTT topic (QoS 1, not retained), and over HTTP with its device token.
        let sent = try #require(fixture.brokerPublisher.messages.last { $0.topic == "flare/v1/shares/\(share.shareID)/answers" })
        let sentAnswer = try APIJSON.decode(ShareAnswer.self, from: sent.payload)
        #expect(!sent.retain && sentAnswer == made)
        let second = try answer(share, #"{"kind":"called_emergency"}"#).decode(ShareAnswer.self)
        #expect(second.name == "")
        let all = try fixture.send("GET", "/api/v1/shares/\(share.shareID)/answers", bearer: share.deviceToken).decode(ShareAnswerList.self)
        #expect(all.answers == [made, second])
        let newer = try fixture.send("GET", "/api/v1/shares/\(share.shareID)/answers", query: ["after": made.id], bearer: share.deviceToken)
            .decode(ShareAnswerList.self)
        #expect(newer.answers == [second])
        #expect(try fixture.send("GET", "/api/v1/shares/\(share.shareID)/answers", bearer: fixture.ownerKey).decode(ShareAnswerList.self).answers.count == 2)
        #expect(fixture.metrics.renderText().contains(#"flare_answers_total{kind="on_my_way"} 1"#))
    }

    @Test func badAnswersAreRefusedAndAnEndedShareTakesNone() throws {
        let share = try fixture.createShare()
        for (body, code) in [(#"{"kind":"coming_maybe"}"#, "invalid_kind"), (#"{"name":"Mum"}"#, "invalid_kind"),
                             ("{\"kind\":\"on_my_way\",\"name\":\"" + String(repeating: "x", count: 41) + "\"}", "invalid_name"),
                             (#"{"kind":"on_my_way","name":"a\u0000b"}"#, "invalid_name"), (#"{"kind":"on_my_way","name":7}"#, "invalid_name"),
                             ("not json", "invalid_json"), ("", "invalid_json")] {
            let reply = answer(share, body)
            #expect(reply.status == 400 && reply.errorCode == code, "\(body): \(reply.status) \(reply.text)")
        }
        #expect(fixture.send("POST", "/api/v1/view/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/answers", body: Array(#"{"kind":"on_my_way"}"#.utf8)).status == 404)
        #expect(fixture.send("GET", "/api/v1/shares/\(share.shareID)/answers").status == 401)
        #expect(fixture.send("GET", "/api/v1/shares/\(share.shareID)/answers", query: ["after": "-1"], bearer: share.deviceToken).errorCode == "invalid_after")
        try fixture.stop(share)
        let late = answer(share, #"{"kind":"on_my_way"}"#)
        #expect(late.status == 410 && late.errorCode == "share_ended")
    }

    @Test func answersAreRateLimitedPerAddressAndShare() throws {
        let share = try fixture.createShare(), other = try fixture.createShare()
        let statuses = (0..<7).map { _ in answer(share, #"{"kind":"on_my_way"}"#, from: "127.0.0.7").status }
        #expect(statuses.prefix(5).allSatisfy { $0 == 201 } && statuses.last == 429)
        #expect(answer(share, #"{"kind":"on_my_way"}"#, from: "127.0.0.8").status == 201)
        #expect(answer(other, #"{"kind":"on_my_way"}"#, from: "127.0.0.7").status == 201)
    }

    /// A share full of answers refuses the next for good (409 `answers_full`): a refusal, not a store failure to retry.
    @Test func aShareFullOfAnswersRefusesTheNextWith409() throws {
        let fixture = try GatewayFixture(settings: ["FLARE_LINK_RATE_PER_TOKEN": "1000/1000"])
        let share = try fixture.createShare()
        for n in 0..<200 {
            let reply = fixture.send("POST", "/api/v1/view/\(share.viewToken)/answers", body: Array(#"{"kind":"on_my_way"}"#.utf8),
                                     from: "10.0.\(n / 4).\(n % 4 + 1)")
            try #require(reply.status == 201, "answer \(n): \(reply.status) \(reply.text)")
        }
        let full = fixture.send("POST", "/api/v1/view/\(share.viewToken)/answers", body: Array(#"{"kind":"on_my_way"}"#.utf8), from: "10.1.0.1")
        #expect(full.status == 409 && full.errorCode == "answers_full", "\(full.status) \(full.text)")
    }
}
