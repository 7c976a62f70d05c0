import FlareTestSupport
import Foundation
import Testing

/// The built `flared`'s /metrics: on the listener FLARE_METRICS_ADDR names, not on FLARE_HTTP_ADDR (unless a token is
/// set and presented), none when it is empty, and a clear refusal to start when its address is taken.
@Suite struct MetricsListenerTests {
    @Test func metricsAreOnTheirOwnListenerAndThePublicOneAnswers404() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let refused = try flared.request("GET", "/metrics")
        #expect(refused.status == 404 && refused.json?["error"] as? String == "not_found", "\(refused.text)")
        let served = try RawHTTP.request("GET", port: flared.metricsPort, path: "/metrics")
        #expect(served.status == 200 && served.text.contains("flare_mqtt_connected 1\n"), "\(served.text.prefix(300))")
        // The metrics listener serves nothing else.
        #expect(try RawHTTP.request("GET", port: flared.metricsPort, path: "/healthz").status == 404)
        #expect(try RawHTTP.request("GET", port: flared.metricsPort, path: "/api/v1/shares", headers: ["Authorization": "Bearer \(flared.ownerKey)"]).status == 404)
        #expect(flared.log.contains("metrics at http://127.0.0.1:\(flared.metricsPort)/metrics"))
        // /healthz stays public, with nothing but up or down.
        let health = try flared.request("GET", "/healthz")
        #expect(health.status == 200 && Set(health.json?.keys.map { $0 } ?? []) == ["status", "mqtt", "store"], "\(health.text)")
    }

    @Test func withATokenThePublicListenerServesMetricsToItsBearerAndNeverLogsIt() throws {
        let broker = try TestBroker()
        let token = "e2e-metrics-token-\(UUID().uuidString)"
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_METRICS_TOKEN": token])
        #expect(try flared.request("GET", "/metrics").status == 401)
        #expect(try flared.request("GET", "/metrics", bearer: token + "x").status == 401)
        let served = try flared.request("GET", "/metrics", bearer: token)
        #expect(served.status == 200 && served.text.contains("flare_http_requests_total{status=\"401\"} 2"), "\(served.text.prefix(300))")
        #expect(try RawHTTP.request("GET", port: flared.metricsPort, path: "/metrics").status == 200)
        #expect(!flared.log.contains(token))
    }

    @Test func anEmptyAddressMeansNoMetricsListener() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_METRICS_ADDR": ""])
        #expect(eventually { flared.log.contains("no metrics listener (FLARE_METRICS_ADDR is empty)") }, "\(flared.log)")
        #expect((try? RawHTTP.request("GET", port: flared.metricsPort, path: "/metrics")) == nil)
        #expect(try flared.request("GET", "/metrics").status == 404)
    }

    @Test func aTakenMetricsAddressOrABadTokenIsAClearError() throws {
        let broker = try TestBroker()
        let first = try FlaredProcess(broker: broker)
        var environment = first.environment
        environment["FLARE_DATA_DIR"] = try TempDirectory.make().path
        environment["FLARE_HTTP_ADDR"] = "127.0.0.1:\(try FreePort.next())"
        environment["FLARE_MQTT_CLIENT_ID"] = "flared-second"
        let second = try runCommand(try BuiltProducts.path("flared"), [], environment: environment, timeout: .seconds(60))
        #expect(second.status == 1)
        #expect(second.stderr.contains("FLARE_METRICS_ADDR=127.0.0.1:\(first.metricsPort): ") && second.stderr.contains("in use"), "\(second.stderr)")
        // Everything it had started is stopped again, the HTTP gateway first.
        #expect(second.stderr.contains("stopping HTTP gateway"), "\(second.stderr)")

        environment["FLARE_METRICS_ADDR"] = "nonsense"
        let badAddress = try runCommand(try BuiltProducts.path("flared"), [], environment: environment)
        #expect(badAddress.status == 1 && badAddress.stderr.contains("FLARE_METRICS_ADDR must be host:port"), "\(badAddress.stderr)")
        environment["FLARE_METRICS_ADDR"] = nil
        environment["FLARE_METRICS_TOKEN"] = "sesame"
        let badToken = try runCommand(try BuiltProducts.path("flared"), [], environment: environment)
        #expect(badToken.status == 1 && badToken.stderr.contains("FLARE_METRICS_TOKEN must be 16 to 256") && !badToken.stderr.contains("sesame"),
                "\(badToken.stderr)")
        let printed = try runCommand(try BuiltProducts.path("flared"), ["--print-config"], environment: environment)
        #expect(printed.stdout.contains("FLARE_METRICS_TOKEN=(set)") && !printed.stdout.contains("sesame"), "\(printed.stdout)")
        #expect(printed.stdout.split(separator: "\n").contains { $0.hasPrefix("FLARE_METRICS_ADDR=127.0.0.1:9464 ") && $0.hasSuffix("# default") },
                "\(printed.stdout)")
        let help = try runCommand(try BuiltProducts.path("flared"), ["--help"])
        for name in ["FLARE_METRICS_ADDR", "FLARE_METRICS_TOKEN", "FLARE_LIVE_STREAMS_PER_LINK", "FLARE_LIVE_STREAMS_PER_ADDRESS"] {
            #expect(help.stdout.contains(name), "flared --help lacks \(name)")
        }
    }
}
