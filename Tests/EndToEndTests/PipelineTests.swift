import FlareTestSupport
import Foundation
import Testing

/// The built `flared` and `flare` against a real mosquitto and a real SQLite file: what a user runs.
@Suite struct PipelineTests {
    func createShare(_ flared: FlaredProcess, body: String = #"{"duration_s":600,"name":"Anna"}"#) throws -> [String: String] {
        let response = try flared.request("POST", "/api/v1/shares", body: body, bearer: flared.ownerKey)
        #expect(response.status == 201, "\(response.text)")
        // The original iOS client decodes the answer as [String: String]: every value must be a string.
        let object = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        let strings = object.compactMapValues { $0 as? String }
        #expect(strings.count == object.count, "non-string values in \(response.text)")
        for key in ["share_id", "share_url", "expires_at", "device_token", "mqtt_url", "mqtt_username", "mqtt_topic"] {
            #expect(strings[key]?.isEmpty == false, "missing \(key)")
        }
        return strings
    }

    func viewToken(_ share: [String: String]) -> String { String(share["share_url"]!.split(separator: "/").last!) }

    func location(lat: Double, lon: Double, secondsAgo: Int = 0) -> String {
        #"{"_type":"location","lat":\#(lat),"lon":\#(lon),"tst":\#(Int(Date().timeIntervalSince1970) - secondsAgo),"acc":9,"batt":77,"tid":"an"}"#
    }

    @Test func createPublishWatchStop() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let id = share["share_id"]!, token = viewToken(share)
        #expect(share["mqtt_topic"] == "flare/v1/shares/\(id)/location")
        #expect(share["mqtt_username"] == id)
        // Announced asynchronously after the create answer: wait for it, then it stays retained.
        #expect(eventually { (try? Retained.message(port: broker.port, topic: "flare/v1/shares/\(id)/status"))?.contains(#""state":"active""#) == true })

        let events = try EventStreamReader(port: flared.httpPort, path: "/api/v1/view/\(token)/events")
        #expect(events.waitFor { $0.contains { $0.name == "status" } })
        #expect(events.status == 200)

        // A device publishes over MQTT, as the OwnTracks app does.
        let published = try MosquittoClients.publish(port: broker.port, topic: share["mqtt_topic"]!, payload: location(lat: 48.137, lon: 11.575),
                                                     username: id, password: share["device_token"])
        #expect(published.status == 0, "\(published.stderr)")
        #expect(events.waitFor { $0.contains { $0.name == "fix" && $0.data.contains("48.137") } })
        var view = try flared.request("GET", "/api/v1/view/\(token)")
        #expect(view.status == 200)
        #expect((view.json?["last"] as? [String: Any])?["lat"] as? Double == 48.137)
        #expect((view.json?["last"] as? [String: Any])?["batt"] as? Double == 77)

        // And over HTTP with the device token: stored, then published to the topic, so integrators see it too.
        let ingest = try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":48.2,"lon":11.6}"#, bearer: share["device_token"])
        #expect(ingest.status == 202, "\(ingest.text)")
        #expect(events.waitFor { $0.contains { $0.name == "fix" && $0.data.contains("48.2") } })
        #expect(eventually { (try? Retained.message(port: broker.port, topic: share["mqtt_topic"]!))??.contains("48.2") == true })
        view = try flared.request("GET", "/api/v1/view/\(token)")
        #expect((view.json?["trail"] as? [Any])?.count == 2)

        // The owner stops it: viewers hear the end, the link answers 410, the broker forgets the position.
        let stop = try flared.flare(["share", "stop", id])
        #expect(stop.status == 0, "\(stop.stderr)")
        #expect(events.waitFor { $0.contains { $0.name == "ended" && $0.data.contains("stopped") } })
        #expect(events.waitFor { _ in false } == false && events.ended)
        view = try flared.request("GET", "/api/v1/view/\(token)")
        #expect(view.status == 410)
        #expect(view.json?["state"] as? String == "ended")
        #expect(view.json?["reason"] as? String == "stopped")
        #expect((view.json?["last"] as? [String: Any])?["lat"] as? Double == 48.2)  // last known position still shown
        #expect(eventually { Retained.isEmpty(port: broker.port, topic: share["mqtt_topic"]!) })
        #expect(eventually { (try? Retained.message(port: broker.port, topic: "flare/v1/shares/\(id)/status"))?.contains(#""state":"ended""#) == true })

        // After the end, fixes are refused and nothing changes.
        _ = try MosquittoClients.publish(port: broker.port, topic: share["mqtt_topic"]!, payload: location(lat: 10, lon: 10), retain: false)
        let refusedIngest = try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":1,"lon":1}"#, bearer: share["device_token"])
        #expect(refusedIngest.status == 410)
        #expect(eventually { (try? flared.metrics().contains(#"flare_fixes_rejected_total{reason="share_ended"} 1"#)) == true },
                "\((try? flared.metrics()) ?? "")")
        #expect((try flared.request("GET", "/api/v1/view/\(token)").json?["last"] as? [String: Any])?["lat"] as? Double == 48.2)
        #expect(!flared.log.contains("48.137") && !flared.log.contains(token) && !flared.log.contains(share["device_token"]!))
    }

    @Test func restartKeepsSharesHistoryAndWhatArrivedMeanwhile() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let topic = share["mqtt_topic"]!, token = viewToken(share)
        for (index, lat) in [1.0, 2.0, 3.0].enumerated() {
            _ = try MosquittoClients.publish(port: broker.port, topic: topic, payload: location(lat: lat, lon: 0, secondsAgo: 30 - index))
        }
        #expect(eventually { (try? flared.request("GET", "/api/v1/view/\(token)").json?["trail"] as? [Any])?.count == 3 })
        #expect(flared.stop() == 0)
        #expect(flared.log.contains("stopped cleanly"))

        // Published while flared is down: the broker keeps it in the bridge's persistent session.
        _ = try MosquittoClients.publish(port: broker.port, topic: topic, payload: location(lat: 4, lon: 0, secondsAgo: 5))
        try flared.start()
        #expect(eventually { (try? flared.request("GET", "/api/v1/view/\(token)").json?["trail"] as? [Any])?.count == 4 })
        let view = try flared.request("GET", "/api/v1/view/\(token)")
        #expect(view.status == 200)
        #expect((view.json?["last"] as? [String: Any])?["lat"] as? Double == 4)
        // The retained message replayed on resubscribe was not stored a second time.
        #expect(try flared.metrics().contains("flare_fixes_accepted_total 1\n"))
    }

    @Test func aShareThatExpiredWhileFlaredWasDownIsEndedAtStart() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared, body: #"{"duration_s":2}"#)
        _ = try MosquittoClients.publish(port: broker.port, topic: share["mqtt_topic"]!, payload: location(lat: 5, lon: 5))
        #expect(eventually { (try? flared.request("GET", "/api/v1/view/\(viewToken(share))").json?["last"]) is [String: Any] })
        flared.kill()
        Thread.sleep(forTimeInterval: 2.5)
        try flared.start()
        let view = try flared.request("GET", "/api/v1/view/\(viewToken(share))")
        #expect(view.status == 410)
        #expect(view.json?["reason"] as? String == "expired")
        #expect(eventually { Retained.isEmpty(port: broker.port, topic: share["mqtt_topic"]!) })
        #expect(eventually {
            (try? Retained.message(port: broker.port, topic: "flare/v1/shares/\(share["share_id"]!)/status"))?.contains("expired") == true
        })
    }

    @Test func badInputIsRefusedClearlyAndChangesNothing() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let id = share["share_id"]!, topic = share["mqtt_topic"]!
        for payload in ["{", "[]", #"{"lat":95,"lon":0}"#, #"{"lon":3}"#, #"{"_type":"transition","tst":1}"#, #"{"lat":1,"lon":1,"tst":99999999999}"#] {
            _ = try MosquittoClients.publish(port: broker.port, topic: topic, payload: payload, retain: false)
        }
        _ = try MosquittoClients.publish(port: broker.port, topic: "flare/v1/shares/AAAAAAAAAAAAAAAAAAAAAA/location", payload: #"{"lat":1,"lon":1}"#, retain: false)
        #expect(eventually {
            let metrics = (try? flared.metrics()) ?? ""
            return ["malformed\"} 2", "invalid_coordinates\"} 1", "missing_coordinates\"} 1", "ignored_type\"} 1", "unknown_share\"} 1", "future_timestamp\"} 1"]
                .allSatisfy { metrics.contains("flare_fixes_rejected_total{reason=\"\($0)") }
        })
        #expect((try flared.request("GET", "/api/v1/view/\(viewToken(share))").json?["last"]) is NSNull)

        func expectError(_ response: RawHTTPResponse, _ status: Int, _ code: String, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(response.status == status, "\(response.text)", sourceLocation: sourceLocation)
            #expect(response.json?["error"] as? String == code, "\(response.text)", sourceLocation: sourceLocation)
            #expect(response.json?["message"] is String, sourceLocation: sourceLocation)
        }
        expectError(try flared.request("POST", "/api/v1/shares", body: "{}"), 401, "unauthorized")
        expectError(try flared.request("POST", "/api/v1/shares", body: "{}", bearer: "flare_owner_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), 401, "unauthorized")
        expectError(try flared.request("POST", "/api/v1/shares", body: "{oops", bearer: flared.ownerKey), 400, "invalid_json")
        expectError(try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":"long"}"#, bearer: flared.ownerKey), 400, "invalid_duration")
        expectError(try flared.request("POST", "/api/v1/shares", body: #"{"duration_s":99999999}"#, bearer: flared.ownerKey), 400, "invalid_request")
        expectError(try flared.request("POST", "/api/v1/shares", body: "{\"name\":\"" + String(repeating: "x", count: 70_000) + "\"}", bearer: flared.ownerKey), 413, "body_too_large")
        expectError(try flared.request("DELETE", "/api/v1/shares/\(id)", bearer: flared.ownerKey), 405, "method_not_allowed")
        expectError(try flared.request("GET", "/api/v1/shares/\(id)"), 401, "unauthorized")
        expectError(try flared.request("GET", "/api/v1/shares/AAAAAAAAAAAAAAAAAAAAAA", bearer: flared.ownerKey), 404, "not_found")
        expectError(try flared.request("GET", "/api/v1/view/not-a-token"), 404, "not_found")
        expectError(try flared.request("GET", "/api/v1/view/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), 404, "not_found")
        expectError(try flared.request("GET", "/api/v1/nothing"), 404, "not_found")
        expectError(try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":1,"lon":1}"#), 401, "unauthorized")
        expectError(try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":1,"lon":1}"#, bearer: "x.y.z"), 401, "unauthorized")
        expectError(try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":"x","lon":1}"#, bearer: share["device_token"]), 400, "missing_coordinates")
        expectError(try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":1,"lon":1e9}"#, bearer: share["device_token"]), 400, "invalid_coordinates")
        let other = try createShare(flared)
        expectError(try flared.request("POST", "/api/v1/shares/\(id)/locations", body: #"{"lat":1,"lon":1}"#, bearer: other["device_token"]), 401, "unauthorized")
        expectError(try flared.request("POST", "/api/v1/shares/\(id)/stop", bearer: other["device_token"]), 401, "unauthorized")
        // The page for an unknown token reveals nothing.
        let page = try flared.request("GET", "/s/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        #expect(page.status == 404)
        #expect(page.headers["content-type"]?.hasPrefix("text/html") == true)
        #expect(try flared.request("GET", "/healthz").status == 200)
        #expect((try flared.request("GET", "/api/v1/view/\(viewToken(share))").json?["last"]) is NSNull)
    }

    @Test func behindATrustedProxyEachClientHasItsOwnLimitAndNobodyElseCanClaimOne() throws {
        let broker = try TestBroker()
        let unknownLink = "/api/v1/view/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        func statuses(_ flared: FlaredProcess, forwardedFor: String, count: Int) throws -> [Int] {
            try (0..<count).map { _ in
                try RawHTTP.request("GET", port: flared.httpPort, path: unknownLink, headers: ["X-Forwarded-For": forwardedFor]).status
            }
        }
        // The proxy is 127.0.0.1 (these requests' peer): one abusive client is cut off, the next one is not.
        let proxied = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_TRUSTED_PROXIES": "127.0.0.1"])
        #expect(try statuses(proxied, forwardedFor: "203.0.113.7", count: 12).last == 429)
        #expect(try statuses(proxied, forwardedFor: "203.0.113.8", count: 1) == [404])
        // A client cannot claim an address it does not have: the left end of the header is its own words.
        #expect(try statuses(proxied, forwardedFor: "203.0.113.9, 203.0.113.7", count: 1) == [429])

        // Trusting nobody (the default), the header is ignored: changing it does not reset the limit.
        let direct = try FlaredProcess(broker: broker)
        #expect(try statuses(direct, forwardedFor: "203.0.113.7", count: 12).last == 429)
        #expect(try statuses(direct, forwardedFor: "203.0.113.8", count: 1) == [429])
    }

    @Test func healthzWarnsOfALowDiskBeforeAnyWriteFails() throws {
        let broker = try TestBroker()
        // A minimum no disk here has: the store is idle and writable, yet an operator must hear of it now.
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_STORE_MIN_FREE_MB": "1048576"])
        let health = try flared.request("GET", "/healthz")
        #expect(health.status == 503)
        #expect(health.json?["store"] as? String == "low_space")
        #expect(health.json?["mqtt"] as? String == "connected")
        // How much is free is the operator's to read, in /metrics: the public answer says which part is down, no more.
        #expect(Set(health.json?.keys.map { $0 } ?? []) == ["status", "mqtt", "store"], "\(health.text)")
        #expect(flared.log.contains("below the 1048576 MiB minimum"))
        let free = try flared.metrics().split(separator: "\n").first { $0.hasPrefix("flare_store_free_bytes ") }
        #expect((free.flatMap { Double($0.split(separator: " ")[1]) } ?? 0) > 0)

        let roomy = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_STORE_MIN_FREE_MB": "0"])
        #expect(try roomy.request("GET", "/healthz").json?["store"] as? String == "ok")
    }

    @Test func linkEndpointsAreRateLimited() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        var statuses: [Int] = []
        for _ in 0..<12 { statuses.append(try flared.request("GET", "/api/v1/view/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").status) }
        #expect(statuses.prefix(3).allSatisfy { $0 == 404 })
        #expect(statuses.last == 429)
        let limited = try flared.request("GET", "/api/v1/view/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        #expect(Int(limited.headers["retry-after"] ?? "") ?? 0 >= 1)
        // Owner API is not a link endpoint and keeps working.
        #expect(try flared.request("POST", "/api/v1/shares", body: "{}", bearer: flared.ownerKey).status == 201)
    }

    @Test func pageHeadersProtectTheLink() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let page = try RawHTTP.request("GET", port: flared.httpPort, path: "/s/\(viewToken(share))", headers: ["Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"])
        #expect(page.status == 200)
        #expect(page.headers["referrer-policy"] == "no-referrer")
        #expect(page.headers["x-content-type-options"] == "nosniff")
        #expect(page.headers["content-security-policy"]?.contains("default-src 'none'") == true)
        #expect(page.headers["x-robots-tag"]?.contains("noindex") == true)
        #expect(page.text.contains("lang=\"zh-CN\""))
        // The language menu comes from the string tables in Viewer/i18n/.
        #expect(page.text.contains(#"<option value="en">English</option><option value="zh-CN">简体中文</option>"#))
        #expect(!page.text.contains(viewToken(share)))
        #expect(try flared.request("GET", "/viewer/viewer.js").status == 200)
        // Leaflet from Debian's package, minified and pre-compressed for clients that take gzip.
        let plain = try RawHTTP.request("GET", port: flared.httpPort, path: "/vendor/leaflet/leaflet.js")
        let gzipped = try RawHTTP.request("GET", port: flared.httpPort, path: "/vendor/leaflet/leaflet.js", headers: ["Accept-Encoding": "gzip, br"])
        #expect(plain.status == 200 && gzipped.status == 200)
        #expect(gzipped.headers["content-encoding"] == "gzip")
        #expect(gzipped.body.prefix(2) == [0x1F, 0x8B])
        #expect(gzipped.body.count < plain.body.count / 2)
    }
}
