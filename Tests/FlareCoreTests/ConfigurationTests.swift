import Testing
@testable import FlareCore
import FlareSystem
import FlareSettings

@Suite struct ConfigurationTests {
    let settings: [Configuration.Setting] = [
        .init("FLARE_HTTP_ADDR", .address, "127.0.0.1:8080", "listen address"),
        .init("FLARE_DATA_DIR", .text, "./data", "data"),
        .init("FLARE_PUBLIC_URL", .url(schemes: ["http", "https"]), nil, "public URL",
              derived: ("http://FLARE_HTTP_ADDR", { "http://" + ($0.string("FLARE_HTTP_ADDR") ?? "") })),
        .init("FLARE_MAX_DURATION_S", .integer(1...100_000), "86400", "max"),
        .init("FLARE_MQTT_PASSWORD", .text, "", "password", secret: true),
        .init("FLARE_LOG_LEVEL", .choice(["info", "error"]), "info", "level"),
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
        #expect(config.sources["FLARE_PUBLIC_URL"] == "file x.conf")
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

    /// Every value is checked against its declared kind when it is read, and the error names the setting.
    @Test func valuesAreCheckedAgainstTheirKind() {
        #expect { try load([], ["FLARE_MAX_DURATION_S": "0"]) } throws: { "\($0)".contains("FLARE_MAX_DURATION_S=0 is not a whole number in 1...100000") }
        #expect { try load(["--http-addr", "nowhere"]) } throws: { "\($0)".contains("FLARE_HTTP_ADDR must be host:port") }
        #expect { try load([], ["FLARE_PUBLIC_URL": "ftp://x"]) } throws: { "\($0)".contains("FLARE_PUBLIC_URL must be a http:// or https:// URL") }
        #expect { try load([], ["FLARE_LOG_LEVEL": "loud"]) } throws: { "\($0)".contains("FLARE_LOG_LEVEL must be info, error") }
        #expect(throws: Never.self) { try load([], ["FLARE_MAX_DURATION_S": "100000"]) }
    }

    @Test func derivedValuesFollowWhatTheyDeriveFrom() throws {
        let derived = try load(["--http-addr", "[::1]:9"])
        #expect(derived.string("FLARE_PUBLIC_URL") == "http://[::1]:9")
        #expect(derived.sources["FLARE_PUBLIC_URL"] == "derived")
        let given = try load([], ["FLARE_PUBLIC_URL": "https://sos.example.org"])
        #expect(given.string("FLARE_PUBLIC_URL") == "https://sos.example.org")
    }

    /// `--print-config`: every setting, its effective value and its source; a secret's value never.
    @Test func printedConfigurationShowsSourcesAndHidesSecrets() throws {
        let config = try load(["--data-dir", "/srv/flare"], ["FLARE_MQTT_PASSWORD": "hunter2-secret"])
        let text = config.printed
        #expect(!text.contains("hunter2"))
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.count == settings.count)
        #expect(lines.contains { $0.hasPrefix("FLARE_MQTT_PASSWORD=(set)") && $0.hasSuffix("# environment") })
        #expect(lines.contains { $0.hasPrefix("FLARE_DATA_DIR=/srv/flare") && $0.hasSuffix("# flag") })
        #expect(lines.contains { $0.hasPrefix("FLARE_HTTP_ADDR=127.0.0.1:8080") && $0.hasSuffix("# default") })
        #expect(lines.contains { $0.hasPrefix("FLARE_PUBLIC_URL=http://127.0.0.1:8080") && $0.hasSuffix("# derived") })
        let unset = try load([])
        #expect(unset.printed.contains("FLARE_MQTT_PASSWORD= "))  // empty: not "(set)"
    }

    /// flared's own table: every default is valid for its kind, names are unique, secrets are marked.
    @Test func flaredSettingsAreValidAsDeclared() throws {
        let config = try Configuration.defaults(FlaredSettings.all)
        #expect(Set(FlaredSettings.all.map(\.name)).count == FlaredSettings.all.count)
        #expect(config.string("FLARE_PUBLIC_URL") == "http://127.0.0.1:8080")
        #expect(config.string("FLARE_MQTT_URL") == "mqtt://127.0.0.1:1884")
        #expect(config.string("FLARE_MQTT_PUBLIC_URL") == "mqtt://127.0.0.1:1884")
        #expect(FlaredSettings.all.filter(\.isSecret).map(\.name) == ["FLARE_STORE_URL", "FLARE_METRICS_TOKEN", "FLARE_MQTT_PASSWORD", "FLARE_WEBHOOK_SECRET", "FLARE_SMTP_URL"])  // a store URL may hold a password
        #expect(config.string("FLARE_METRICS_ADDR") == "127.0.0.1:9464")
        for setting in FlaredSettings.all { #expect(!setting.help.isEmpty, "\(setting.name)") }
    }

    @Test func helpListsEverySettingWithItsFlagAndDefault() {
        let help = Configuration.helpText(usage: "usage: x", settings: settings)
        for setting in settings {
            #expect(help.contains(setting.flag))
            #expect(help.contains(setting.name))
        }
        #expect(help.contains("default 127.0.0.1:8080"))
        #expect(help.contains("default http://FLARE_HTTP_ADDR"))
        #expect(help.contains("secret"))
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
