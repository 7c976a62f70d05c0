import Testing
@testable import FlareCore

@Suite struct ConfigurationTests {
    let settings: [Configuration.Setting] = [
        .init("FLARE_HTTP_ADDR", "127.0.0.1:8080", "listen address"),
        .init("FLARE_DATA_DIR", "./data", "data"),
        .init("FLARE_PUBLIC_URL", nil, "public URL"),
        .init("FLARE_MAX_DURATION_S", "86400", "max"),
    ]

    func load(_ arguments: [String], _ environment: [String: String] = [:], file: String = "") throws -> Configuration {
        try Configuration(settings: settings, arguments: arguments, environment: environment, readFile: { _ in file })
    }

    @Test func precedenceIsFileThenEnvironmentThenFlags() throws {
        let file = "FLARE_HTTP_ADDR=0.0.0.0:1\nFLARE_DATA_DIR = /file\n# comment\nFLARE_PUBLIC_URL=\"https://f\"\n"
        let config = try load(["--config", "x.conf", "--http-addr", "127.0.0.1:3"], ["FLARE_HTTP_ADDR": "127.0.0.1:2", "FLARE_DATA_DIR": "/env"], file: file)
        #expect(config.string("FLARE_HTTP_ADDR") == "127.0.0.1:3")
        #expect(config.string("FLARE_DATA_DIR") == "/env")
        #expect(config.string("FLARE_PUBLIC_URL") == "https://f")
        #expect(config.string("FLARE_MAX_DURATION_S") == "86400")
        #expect(config.sources["FLARE_HTTP_ADDR"] == "flag")
        #expect(config.sources["FLARE_DATA_DIR"] == "environment")
    }

    @Test func configFileFromEnvironmentAndEqualsFlags() throws {
        let config = try load(["--data-dir=/flag"], ["FLARE_CONFIG": "/etc/flare.conf"], file: "FLARE_PUBLIC_URL=https://x\n")
        #expect(config.string("FLARE_DATA_DIR") == "/flag")
        #expect(config.string("FLARE_PUBLIC_URL") == "https://x")
    }

    @Test func errorsNameTheSetting() {
        #expect { try load(["--bogus", "1"]) } throws: { "\($0)".contains("--bogus") }
        #expect { try load(["--http-addr"]) } throws: { "\($0)".contains("--http-addr") }
        #expect { try load(["--config", "f"], file: "FLARE_NOPE=1") } throws: { "\($0)".contains("FLARE_NOPE") }
        #expect { try load(["--config", "f"], file: "just words") } throws: { "\($0)".contains("f:1") }
        #expect { try load([], ["FLARE_MAX_DURATION_S": "lots"]).integer("FLARE_MAX_DURATION_S", in: 1...10) } throws: {
            "\($0)".contains("FLARE_MAX_DURATION_S")
        }
    }

    @Test func helpListsEverySettingWithItsFlagAndDefault() {
        let help = Configuration.helpText(usage: "usage: x", settings: settings)
        for setting in settings {
            #expect(help.contains(setting.flag))
            #expect(help.contains(setting.name))
        }
        #expect(help.contains("default 127.0.0.1:8080"))
    }

    @Test func addresses() {
        #expect(HostPort("127.0.0.1:8080") == HostPort(host: "127.0.0.1", port: 8080))
        #expect(HostPort("[::1]:80") == HostPort(host: "::1", port: 80))
        #expect(HostPort(":9") == HostPort(host: "0.0.0.0", port: 9))
        #expect(HostPort("nohost") == nil)
        #expect(HostPort("1.2.3.4:99999") == nil)
        #expect(HostPort("::1:80") == nil)
        #expect(MQTTURL("mqtt://127.0.0.1:1883")?.port == 1883)
        #expect(MQTTURL("mqtts://broker.example")?.port == 8883)
        #expect(MQTTURL("http://x:1") == nil)
    }
}

@Suite struct RateLimiterTests {
    @Test func allowsABurstThenRefusesWithRetryAfterThenRefills() {
        let limiter = RateLimiter(rule: .init(ratePerSecond: 2, burst: 3))
        #expect(limiter.take("a", nowMillis: 0) == nil)
        #expect(limiter.take("a", nowMillis: 0) == nil)
        #expect(limiter.take("a", nowMillis: 0) == nil)
        #expect(limiter.take("a", nowMillis: 0) == 1)
        #expect(limiter.take("b", nowMillis: 0) == nil)  // other keys are not hurt
        #expect(limiter.take("a", nowMillis: 500) == nil)  // one token back after 0.5 s at 2/s
        #expect(limiter.take("a", cost: 3, nowMillis: 500) == 2)
    }

    @Test func memoryIsBounded() {
        let limiter = RateLimiter(rule: .init(ratePerSecond: 1, burst: 5), maximumKeys: 100)
        for index in 0..<1000 { _ = limiter.take("k\(index)", cost: 5, nowMillis: 0) }
        #expect(limiter.trackedKeys <= 100)
    }
}

@Suite struct MetricsTests {
    @Test func rendersPrometheusText() {
        let metrics = Metrics()
        let family = Metrics.Family("flare_test_total", .counter, "A test counter.")
        metrics.register(family)
        metrics.increment(family, labels: [("reason", "a\"b")])
        metrics.increment(family, labels: [("reason", "a\"b")], by: 2)
        metrics.registerGauge(Metrics.Family("flare_test_gauge", .gauge, "A gauge.")) { 7 }
        let text = metrics.renderText()
        #expect(text.contains("# TYPE flare_test_total counter"))
        #expect(text.contains("flare_test_total{reason=\"a\\\"b\"} 3"))
        #expect(text.contains("flare_test_gauge 7"))
    }

    @Test func lockFreeCountersAddToTheSameSeries() async {
        let metrics = Metrics()
        let family = Metrics.Family("flare_requests_total", .counter, "Requests.")
        let ok = metrics.counter(family, labels: [("status", "200")])
        #expect(metrics.counter(family, labels: [("status", "200")]) === ok)
        #expect(metrics.renderText().contains("flare_requests_total 0"))  // nothing counted yet: the family's zero
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 { group.addTask { for _ in 0..<1000 { ok.increment() } } }
        }
        metrics.increment(family, labels: [("status", "200")])
        metrics.increment(family, labels: [("status", "404")])
        #expect(metrics.value(family, labels: [("status", "200")]) == 4001)
        let text = metrics.renderText()
        #expect(text.contains("flare_requests_total{status=\"200\"} 4001"))
        #expect(text.contains("flare_requests_total{status=\"404\"} 1"))
    }
}
