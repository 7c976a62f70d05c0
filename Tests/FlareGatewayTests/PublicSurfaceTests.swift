import FlareAPI
import FlareCore
import FlareDaemonSettings
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway
import FlareSettings

/// What the public listener gives away and to whom: /metrics only on its own listener (or to the bearer of its
/// token), /healthz up or down and nothing more, live streams bounded per link and per address, names bounded in
/// Unicode scalars and bytes, and a share's answers not one address's to fill. Each test runs in memory and against
/// the gateway's live listeners.
@Suite struct PublicSurfaceTests {
    /// X-Forwarded-For from the test is believed, so that live requests can come from several addresses.
    static let settings = ["FLARE_TRUSTED_PROXIES": "127.0.0.1"]
    static let metricsToken = "metrics-token-0123456789-abcdef"

    @Test(arguments: Transport.allCases)
    func metricsAreServedOnTheirOwnListenerAndNotOnThePublicOne(_ transport: Transport) throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        _ = try fixture.createShare()
        for method in ["GET", "POST"] {
            let refused = try fixture.request(transport, method, "/metrics")
            #expect(refused.status == 404 && refused.errorCode == "not_found", "\(method): \(refused.status) \(refused.text)")
            #expect(!refused.text.contains("flare_"))
        }
        let served = try fixture.request(transport, "GET", "/metrics", listener: .metrics)
        #expect(served.status == 200)
        #expect(served.contentType == "text/plain; version=0.0.4; charset=utf-8")
        #expect(served.text.contains("flare_shares_active 1\n"))
        #expect(served.header("X-Content-Type-Options") == "nosniff")
        // That listener serves /metrics and nothing else: not the API, not the links.
        for path in ["/healthz", "/api/v1/shares", "/", "/metrics/x"] {
            let other = try fixture.request(transport, "GET", path, listener: .metrics, bearer: fixture.ownerKey)
            #expect(other.status == 404 && other.errorCode == "not_found", "\(path): \(other.status)")
        }
        #expect(try fixture.request(transport, "POST", "/metrics", listener: .metrics).status == 405)
    }

    @Test(arguments: Transport.allCases)
    func withATokenThePublicListenerServesMetricsToItsBearerOnly(_ transport: Transport) throws {
        let fixture = try GatewayFixture(settings: Self.settings.merging(["FLARE_METRICS_TOKEN": Self.metricsToken]) { $1 })
        let token = Self.metricsToken
        let wrong = String(token.dropLast()) + "g"  // same length, last character differs
        for (bearer, headers) in [(nil, [:]), (wrong, [:]), (token + "x", [:]), (String(token.prefix(8)), [:]),
                                  (nil, ["Authorization": "Basic " + Data("x:\(token)".utf8).base64EncodedString()])] as [(String?, [String: String])] {
            let reply = try fixture.request(transport, "GET", "/metrics", bearer: bearer, headers: headers, from: "198.51.100.\(bearer?.count ?? 1)")
            #expect(reply.status == 401 && reply.errorCode == "unauthorized", "\(bearer ?? "none"): \(reply.status)")
            #expect(reply.header("WWW-Authenticate") == "Bearer")
            #expect(!reply.text.contains("flare_"))
        }
        let served = try fixture.request(transport, "GET", "/metrics", bearer: token, from: "198.51.100.50")
        #expect(served.status == 200 && served.text.contains("flare_http_requests_total{status=\"401\"} 5"), "\(served.text.prefix(300))")
        #expect(try fixture.request(transport, "POST", "/metrics", bearer: token).status == 405)
        // Guessing costs the guesser's address: cut off with 429, while another address with the token is served.
        var statuses: [Int] = []
        for _ in 0..<100 where statuses.last != 429 {
            statuses.append(try fixture.request(transport, "GET", "/metrics", bearer: wrong, from: "198.51.100.7").status)
        }
        #expect(statuses.first == 401 && statuses.last == 429, "\(statuses)")
        #expect(try fixture.request(transport, "GET", "/metrics", bearer: token, from: "198.51.100.8").status == 200)
        #expect(try fixture.request(transport, "GET", "/metrics", listener: .metrics).text.contains(#"flare_http_rate_limited_total{scope="metrics"}"#))
    }

    @Test func aMetricsTokenTooShortToBeASecretIsRefusedWithoutShowingIt() throws {
        for bad in ["short-token", String(repeating: "x", count: 257), "has a space in it, which is no token"] {
            let config = try Configuration.defaults(FlaredSettings.all, overriding: ["FLARE_METRICS_TOKEN": bad])
            #expect {
                try GatewayConfiguration(config)
            } throws: { error in
                "\(error)".contains("FLARE_METRICS_TOKEN must be 16 to 256") && !"\(error)".contains(bad)
            }
        }
    }

    @Test(arguments: Transport.allCases)
    func healthzSaysUpOrDownAndWhichPartAndNothingElse(_ transport: Transport) throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        _ = try fixture.createShare()
        for (report, status) in [(HealthReport(mqttConnected: true, storeHealthy: true), 200),
                                 (HealthReport(mqttConnected: true, storeHealthy: true, storeSpaceLow: true), 503),
                                 (HealthReport(mqttConnected: false, storeHealthy: false), 503)] {
            fixture.health.report = report
            let reply = try fixture.request(transport, "GET", "/healthz")
            #expect(reply.status == status)
            #expect(Set(reply.jsonObject?.keys.map { $0 } ?? []) == ["status", "mqtt", "store"], "\(reply.text)")
        }
    }

    @Test(arguments: Transport.allCases)
    func aLinkTakesAtMost20LiveStreamsAndAnotherLinkStillStreams(_ transport: Transport) throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        let crowded = try fixture.createShare(), other = try fixture.createShare(name: "Other")
        for index in 0..<20 {
            let opened = try fixture.openStream(transport, token: crowded.viewToken, from: "203.0.113.\(index % 2)")
            #expect(opened.status == 200, "stream \(index + 1): \(opened)")
        }
        let refused = try fixture.openStream(transport, token: crowded.viewToken, from: "203.0.113.9")
        #expect(refused.status == 429 && refused.error == "too_many_streams" && refused.retryAfter == "30", "\(refused)")
        #expect(try fixture.openStream(transport, token: other.viewToken, from: "203.0.113.0").status == 200)
        #expect(fixture.openStreamCount == 21)
        #expect(fixture.metrics.renderText().contains(#"flare_http_rate_limited_total{scope="streams_per_link"} 1"#))
        // The link's page and view JSON still answer: the page polls them instead.
        #expect(try fixture.request(transport, "GET", "/api/v1/view/\(crowded.viewToken)", from: "203.0.113.9").status == 200)
    }

    @Test func aClosedStreamGivesItsPlaceBack() throws {
        let fixture = try GatewayFixture(settings: Self.settings.merging(["FLARE_LIVE_STREAMS_PER_LINK": "2"]) { $1 })
        let share = try fixture.createShare()
        let first = fixture.send("GET", "/api/v1/view/\(share.viewToken)/events", from: "203.0.113.1")
        #expect(fixture.send("GET", "/api/v1/view/\(share.viewToken)/events", from: "203.0.113.2").status == 200)
        #expect(fixture.send("GET", "/api/v1/view/\(share.viewToken)/events", from: "203.0.113.3").status == 429)
        try #require(first.stream).finish()
        #expect(fixture.send("GET", "/api/v1/view/\(share.viewToken)/events", from: "203.0.113.3").status == 200)
        // A share that ends closes its streams, and they free their places too.
        try fixture.stop(share)
        #expect(eventually { fixture.openStreamCount == 0 })
    }

    @Test(arguments: Transport.allCases)
    func anAddressTakesAtMostItsLiveStreamsOverEveryLink(_ transport: Transport) throws {
        let fixture = try GatewayFixture(settings: Self.settings.merging(["FLARE_LIVE_STREAMS_PER_ADDRESS": "3"]) { $1 })
        let shares = try (0..<3).map { _ in try fixture.createShare() }
        for share in shares {
            #expect(try fixture.openStream(transport, token: share.viewToken, from: "2001:db8::1").status == 200)
        }
        let refused = try fixture.openStream(transport, token: shares[0].viewToken, from: "2001:db8::1")
        #expect(refused.status == 429 && refused.error == "too_many_streams", "\(refused)")
        #expect(try fixture.openStream(transport, token: shares[0].viewToken, from: "192.0.2.1").status == 200)
        #expect(fixture.metrics.renderText().contains(#"flare_http_rate_limited_total{scope="streams_per_address"} 1"#))
    }

    /// "Mom" and thousands of combining marks is 3 characters to Swift's `count`, and a stack of marks that draws over
    /// the rest of the page: refused for answers, share names and key labels alike.
    @Test(arguments: Transport.allCases)
    func namesAreCountedInUnicodeScalarsAndBytesNotCharacters(_ transport: Transport) throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        let share = try fixture.createShare()
        let marks = String(repeating: "\u{0301}", count: 3000)
        #expect(("Mom" + marks).count == 3)
        func answer(_ name: String, from address: String) throws -> Reply {
            try fixture.request(transport, "POST", "/api/v1/view/\(share.viewToken)/answers",
                                json: "{\"kind\":\"on_my_way\",\"name\":\"\(name)\"}", from: address)
        }
        var address = 0
        func next() -> String { address += 1; return "192.0.2.\(address)" }
        for (name, status) in [("Mom" + marks, 400), (String(repeating: "x", count: 41), 400), ("x" + String(repeating: "\u{0301}", count: 40), 400),
                               (String(repeating: "😀", count: 31), 400),  // 124 bytes
                               (String(repeating: "x", count: 40), 201), (String(repeating: "山", count: 40), 201),  // 120 bytes
                               ("Zoë" + String(repeating: "\u{0301}", count: 3), 201)] {
            let reply = try answer(name, from: next())
            #expect(reply.status == status, "\(name.unicodeScalars.count) scalars: \(reply.status) \(reply.text)")
            if status == 400 {
                #expect(reply.errorCode == "invalid_name")
                #expect(reply.text.contains("at most 40 characters (Unicode code points) and 120 bytes"), "\(reply.text)")
            }
        }

        for (name, status) in [("Anna" + marks, 400), (String(repeating: "a", count: 81), 400), (String(repeating: "山", count: 80), 201)] {
            let reply = try fixture.request(transport, "POST", "/api/v1/shares", bearer: fixture.ownerKey, json: "{\"name\":\"\(name)\"}")
            #expect(reply.status == status, "\(name.unicodeScalars.count) scalars: \(reply.status) \(reply.text)")
            if status == 400 {
                #expect(reply.errorCode == "invalid_name" && reply.text.contains("at most 80 characters (Unicode code points) and 240 bytes"), "\(reply.text)")
            }
        }

        for (label, status) in [("ops" + marks, 400), (String(repeating: "l", count: 81), 400), (String(repeating: "山", count: 80), 201)] {
            let reply = try fixture.request(transport, "POST", "/api/v1/keys", bearer: fixture.ownerKey, json: "{\"label\":\"\(label)\"}")
            #expect(reply.status == status, "\(label.unicodeScalars.count) scalars: \(reply.status) \(reply.text)")
            if status == 400 {
                #expect(reply.errorCode == "invalid_label" && reply.text.contains("at most 80 characters (Unicode code points) and 240 bytes"), "\(reply.text)")
            }
        }
    }

    @Test(arguments: Transport.allCases)
    func oneAddressCannotFillAShareWithAnswers(_ transport: Transport) throws {
        // The pace out of the way (its own test is AnswerTests): here, how many in all.
        let fixture = try GatewayFixture(settings: Self.settings) { $0.answerRate = .init(ratePerSecond: 1, burst: 1000) }
        let share = try fixture.createShare(), other = try fixture.createShare(name: "Other")
        func answer(_ share: CreatedShare, from address: String) throws -> Reply {
            try fixture.request(transport, "POST", "/api/v1/view/\(share.viewToken)/answers", json: #"{"kind":"on_my_way"}"#, from: address)
        }
        for index in 0..<10 {
            let reply = try answer(share, from: "198.51.100.1")
            #expect(reply.status == 201, "answer \(index + 1): \(reply.status) \(reply.text)")
        }
        let refused = try answer(share, from: "198.51.100.1")
        #expect(refused.status == 429 && refused.errorCode == "too_many_answers", "\(refused.status) \(refused.text)")
        #expect((Int(refused.header("Retry-After") ?? "") ?? 0) > 60)
        #expect(try answer(share, from: "198.51.100.2").status == 201)
        #expect(try answer(other, from: "198.51.100.1").status == 201)
        #expect(fixture.metrics.renderText().contains(#"flare_http_rate_limited_total{scope="answers_per_address"} 1"#))
    }
}
