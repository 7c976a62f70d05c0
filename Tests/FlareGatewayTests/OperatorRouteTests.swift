import FlareAPI
import FlareCore
import FlareGateway
import FlareHTTP
import Foundation
import Testing
import FlareSystem

/// /healthz, /metrics (on the metrics listener's handler), the answers for unknown endpoints and methods, and the
/// headers on every answer. What the public listener must not give away: PublicSurfaceTests.
@Suite struct OperatorRouteTests {
    @Test func healthzAnswers200WhileTheBrokerAndStoreAreUp() throws {
        let fixture = try GatewayFixture()
        _ = try fixture.createShare()
        _ = try fixture.createShare(name: "Second")
        let reply = fixture.send("GET", "/healthz")
        #expect(reply.status == 200)
        #expect(reply.contentType == "application/json")
        #expect(try reply.decode(HealthStatus.self) == HealthStatus(status: .ok, mqtt: "connected", store: "ok"))
    }

    @Test func healthzAnswers503WhenTheStoreIsFailing() throws {
        let fixture = try GatewayFixture()
        fixture.health.report = HealthReport(mqttConnected: true, storeHealthy: false)
        let reply = fixture.send("GET", "/healthz")
        #expect(reply.status == 503)
        #expect(try reply.decode(HealthStatus.self) == HealthStatus(status: .unhealthy, mqtt: "connected", store: "failing"))
    }

    @Test func healthzAnswers503WhenTheBrokerIsDisconnectedOrTheDiskIsLow() throws {
        let fixture = try GatewayFixture()
        fixture.health.report = HealthReport(mqttConnected: false, storeHealthy: true)
        let disconnected = fixture.send("GET", "/healthz")
        #expect(disconnected.status == 503)
        #expect(try disconnected.decode(HealthStatus.self).mqtt == "disconnected")
        fixture.health.report = HealthReport(mqttConnected: true, storeHealthy: true, storeSpaceLow: true)
        let low = fixture.send("GET", "/healthz")
        #expect(low.status == 503)
        let status = try low.decode(HealthStatus.self)
        #expect(status.status == .unhealthy && status.store == "low_space")
    }

    @Test func metricsAnswersPrometheusTextWithFlareMetricsAndCountsAnswersByStatus() throws {
        let fixture = try GatewayFixture()
        _ = try fixture.createShare()
        fixture.send("GET", "/api/v1/nope")
        let reply = Reply(fixture.gateway.handleMetricsListener(HTTPRequest(method: "GET", path: "/metrics")))
        #expect(reply.status == 200)
        #expect(reply.contentType == "text/plain; version=0.0.4; charset=utf-8")
        let lines = reply.text.split(separator: "\n").map(String.init)
        #expect(lines.contains("flare_shares_active 1"))
        #expect(lines.contains("flare_shares_created_total 1"))
        #expect(lines.contains("flare_http_requests_total{status=\"201\"} 1"))
        #expect(lines.contains("flare_http_requests_total{status=\"404\"} 1"))
        #expect(lines.contains { $0.hasPrefix("# TYPE flare_sse_clients gauge") })
        #expect(lines.filter { !$0.hasPrefix("#") }.allSatisfy { $0.hasPrefix("flare_") })
    }

    @Test func aMethodAnEndpointDoesNotTakeIsMethodNotAllowed() throws {
        let fixture = try GatewayFixture()
        let id = ShareID.generate().rawValue
        for (method, path) in [("DELETE", "/api/v1/shares"), ("PUT", "/api/v1/shares/\(id)"), ("GET", "/api/v1/shares/\(id)/stop"),
                               ("POST", "/api/v1/view/\(Secret.generate().text)"), ("POST", "/healthz"),
                               ("POST", "/s/\(Secret.generate().text)")] {
            let reply = fixture.send(method, path, bearer: fixture.ownerKey)
            #expect(reply.status == 405, "\(method) \(path)")
            #expect(reply.errorCode == "method_not_allowed", "\(method) \(path)")
        }
    }

    @Test func anUnknownEndpointIsNotFound() throws {
        let fixture = try GatewayFixture()
        for path in ["/api/v1/nope", "/api/v2/shares", "/nope", "/", "/api/v1/shares/a/b/c/d/e"] {
            let reply = fixture.send("GET", path, bearer: fixture.ownerKey)
            #expect(reply.status == 404, "\(path)")
            #expect(reply.errorCode == "not_found", "\(path)")
            #expect(reply.contentType == "application/json", "\(path)")
        }
    }

    @Test func everyAnswerCarriesNosniffAndNoReferrer() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let id = created.shareID
        let requests: [(String, String, String?)] = [
            ("GET", "/api/v1/shares", fixture.ownerKey), ("GET", "/api/v1/shares", nil), ("GET", "/api/v1/shares/\(id)", fixture.ownerKey),
            ("GET", "/api/v1/shares/\(id)/owntracks/qr.svg", fixture.ownerKey), ("GET", "/api/v1/view/\(created.viewToken)", nil),
            ("GET", "/api/v1/view/\(created.viewToken)/events", nil), ("GET", "/s/\(created.viewToken)", nil),
            ("GET", "/s/unknown", nil), ("GET", "/healthz", nil), ("GET", "/metrics", nil), ("GET", "/viewer/nothing-here", nil),
            ("DELETE", "/api/v1/shares", nil), ("GET", "/api/v1/nope", nil), ("POST", "/api/v1/shares/\(id)/stop", fixture.ownerKey),
        ]
        for (method, path, bearer) in requests {
            // `send` checks X-Content-Type-Options on every answer; here Referrer-Policy too.
            let reply = fixture.send(method, path, bearer: bearer)
            #expect(reply.header("X-Content-Type-Options") == "nosniff", "\(method) \(path)")
            #expect(reply.header("Referrer-Policy") == "no-referrer", "\(method) \(path)")
        }
    }
}
