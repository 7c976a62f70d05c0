import FlareCore
/// Every setting `flared` reads, declared once: name (the environment variable; the flag is the same in kebab
/// case), kind, default, meaning, secret or not. `flared --help` and `flared --print-config` are generated from this
/// table, the daemon and the gateway read their values through it, and `flare` takes the defaults it shares with
/// the daemon (data directory, addresses) from it. No other place holds a default for any of these.
public enum FlaredSettings {
    public static let all: [Configuration.Setting] = [
        .init("FLARE_DATA_DIR", .text, "./data", "directory for the database, keys and broker data"),
        .init("FLARE_STORE_URL", .text, nil, "the store: unset (or sqlite:PATH) for the SQLite file FLARE_DATA_DIR/flare.db, one instance; postgresql://user@host:port/db for PostgreSQL, which several instances share", secret: true),
        .init("FLARE_HTTP_ADDR", .address, "127.0.0.1:8080", "address the HTTP gateway listens on (host:port, [v6]:port)"),
        // Loopback: the metrics say how many shares are live and how busy the service is, which is nobody's business
        // outside the machine, so reaching them takes a deliberate setting. 9464 is where OpenTelemetry's Prometheus
        // exporter serves an application's own metrics, clear of the ports Flare already takes (8080, 1884, 8883, 8083).
        .init("FLARE_METRICS_ADDR", .address, "127.0.0.1:9464", "address of the listener that serves /metrics (Prometheus) and nothing else; empty for none. The public listener (FLARE_HTTP_ADDR) answers /metrics with 404 unless FLARE_METRICS_TOKEN is set"),
        .init("FLARE_METRICS_TOKEN", .text, nil, "if set, /metrics is served on the public listener too, to requests with Authorization: Bearer <this token> (16 to 256 characters)", secret: true),
        .init("FLARE_PUBLIC_URL", .url(schemes: ["http", "https"]), nil, "base URL of links sent to family members",
              derived: ("http://FLARE_HTTP_ADDR", { config in config.string("FLARE_HTTP_ADDR").flatMap(HostPort.init).map { "http://\($0.description)" } })),
        .init("FLARE_MQTT_PORT", .integer(1...65535), "1884", "port of the broker that `make run` starts (1884: a system mosquitto may hold 1883)"),
        .init("FLARE_MQTT_URL", .url(schemes: ["mqtt"]), nil, "broker the bridge connects to (plain MQTT: use the broker's loopback listener)",
              derived: ("mqtt://127.0.0.1:FLARE_MQTT_PORT", { config in config.string("FLARE_MQTT_PORT").map { "mqtt://127.0.0.1:\($0)" } })),
        .init("FLARE_MQTT_PUBLIC_URL", .url(schemes: ["mqtt", "mqtts"]), nil, "broker address given to devices",
              derived: ("FLARE_MQTT_URL", { config in config.string("FLARE_MQTT_URL") })),
        .init("FLARE_MQTT_CLIENT_ID", .text, "flared", "the bridge's MQTT client id (its persistent session; one per instance; not starting with flare-, which share tokens use)"),
        .init("FLARE_INSTANCE_STALE_AFTER_S", .integer(3...3600), "20", "with a shared store: how long an instance may go without saying it is alive (every 5 s at most) before another takes over its broker session and stores what the broker kept for it"),
        .init("FLARE_MQTT_USERNAME", .text, "", "the bridge's broker username, if the broker requires one"),
        .init("FLARE_MQTT_PASSWORD", .text, "", "the bridge's broker password", secret: true),
        .init("FLARE_MQTT_PASSWORD_FILE", .text, nil, "file holding the bridge's broker password (default FLARE_DATA_DIR/broker/flared.password if it exists; username then defaults to flared)"),
        .init("FLARE_BROKER", .choice(["mosquitto", "nats"]), "mosquitto", "the broker: mosquitto (one broker with Flare's auth plugin) or nats (a NATS cluster with MQTT and JetStream, 2.15.1 measured; flared answers its auth callout and reads the MQTT layer's stream: docs/scaling.md)"),
        .init("FLARE_NATS_URLS", .text, nil, "with FLARE_BROKER=nats: the nodes' client URLs, comma-separated (nats://10.0.0.1:4222,nats://10.0.0.2:4222,…); FLARE_MQTT_URL then names the cluster's MQTT (a balancer in front of the nodes)"),
        .init("FLARE_NATS_ISSUER_SEED_FILE", .text, nil, "with FLARE_BROKER=nats: the account key (seed) flared signs the callout's answers with (default FLARE_DATA_DIR/nats/issuer.seed; `flare nats-issuer` makes it and prints the public key the nodes' configuration names)"),
        .init("FLARE_NATS_PASSWORD_FILE", .text, nil, "with FLARE_BROKER=nats: the password of flared's own full-access login (username flared, checked by flared's callout; the nodes never hold it) (default FLARE_DATA_DIR/nats/password)"),
        .init("FLARE_NATS_CALLOUT_PASSWORD_FILE", .text, nil, "with FLARE_BROKER=nats: the password of the callout's login (flare-auth), as the nodes' configuration holds it (default FLARE_DATA_DIR/nats/callout.password)"),
        .init("FLARE_NATS_SYSTEM_PASSWORD_FILE", .text, nil, "with FLARE_BROKER=nats: the password of the system account's login (flare-sys: connections read and ended), as the nodes' configuration holds it (default FLARE_DATA_DIR/nats/system.password)"),
        .init("FLARE_DEFAULT_DURATION_S", .integer(1...31_536_000), "3600", "share duration when the request names none"),
        .init("FLARE_MAX_DURATION_S", .integer(1...31_536_000), "86400", "longest share (and longest extension) allowed"),
        .init("FLARE_SHUTDOWN_TIMEOUT_S", .integer(1...3600), "30", "on SIGTERM/SIGINT, the longest the ordered shutdown may take before flared exits anyway (a second signal exits at once)"),
        .init("FLARE_SHUTDOWN_STORE_GRACE_S", .integer(1...3600), "20", "on shutdown, how long to keep retrying a failing store before giving up on the fixes still queued"),
        .init("FLARE_STORE_MIN_FREE_MB", .integer(0...1_048_576), "64", "/healthz turns unhealthy when the store's disk has less free space than this"),
        .init("FLARE_MAX_FIXES_PER_SHARE", .integer(1_000...100_000_000), "500000", "the most positions one share keeps (a day at one a second is 86,400); beyond it a share's fixes are refused, fix_limit_reached"),
        .init("FLARE_HISTORY_RETENTION_S", .integer(0...31_536_000), "86400", "how long positions are kept after a share ends (0 = delete at once)"),
        .init("FLARE_TRAIL_LENGTH", .integer(1...1000), "32", "recent positions kept in memory per share for the viewer's trail"),
        .init("FLARE_MAX_PAYLOAD_BYTES", .integer(64...65536), "4096", "largest accepted location payload"),
        .init("FLARE_LEAFLET_DIR", .text, "/usr/share/javascript/leaflet", "Leaflet files (Debian libjs-leaflet)"),
        .init("FLARE_TWEETNACL_DIR", .text, "/usr/share/nodejs/tweetnacl", "TweetNaCl files (Debian node-tweetnacl): the page opens end-to-end encrypted shares' positions with it"),
        .init("FLARE_VIEWER_DIR", .text, "", "serve the viewer page from this directory instead of the built-in files"),
        .init("FLARE_TILE_URL", .url(schemes: ["http", "https"]), "https://tile.openstreetmap.org/{z}/{x}/{y}.png", "map tile URL template (XYZ)"),
        .init("FLARE_TILE_ATTRIBUTION", .text, "&copy; <a href=\"https://www.openstreetmap.org/copyright\">OpenStreetMap</a> contributors", "map attribution (HTML)"),
        .init("FLARE_STALE_AFTER_S", .integer(1...86_400), "120", "a share's tracker is stale (the page says so, and \"locate now\" is offered) after this long without a fix"),
        .init("FLARE_HTTP_THREADS", .integer(1...64), "4", "HTTP worker threads"),
        .init("FLARE_LINK_RATE_PER_ADDRESS", .rate, "5/60", "link requests per client address: per second/burst"),
        .init("FLARE_LINK_RATE_PER_TOKEN", .rate, "20/120", "link requests per view token: per second/burst"),
        .init("FLARE_FIX_RATE_PER_SHARE", .rate, "100/6000", "fixes a share's devices may send, over HTTP (429 beyond) and MQTT (disconnected beyond, to send again; scripts/broker.sh passes it to the broker): per second/burst. An OwnTracks app sends its queue one message at a time, waiting for each acknowledgement: about 1/RTT, under 100/s on any phone network"),
        .init("FLARE_LIVE_STREAMS_PER_LINK", .integer(1...10_000), "20", "live streams (Server-Sent Events) open at once on one link; beyond, 429 and the page polls instead"),
        .init("FLARE_LIVE_STREAMS_PER_ADDRESS", .integer(1...10_000), "50", "live streams open at once from one client address (every link together)"),
        .init("FLARE_TRUSTED_PROXIES", .text, "", "reverse proxies (addresses or CIDR networks, comma-separated) whose X-Forwarded-For names the client, e.g. 127.0.0.1,::1"),
        .init("FLARE_WEBHOOK_URL", .text, nil, "where every share's events are POSTed (Standard Webhooks; any address, loopback and private included); keys may set their own for their shares"),
        .init("FLARE_WEBHOOK_SECRET", .text, nil, "the signing secret of FLARE_WEBHOOK_URL: whsec_ and 24-64 random bytes in base64; several, space-separated, while rotating (each signs)", secret: true),
        .init("FLARE_SMTP_URL", .text, nil, "the SMTP server contacts are mailed through: smtp://[user[:password]@]host[:port] (STARTTLS, required except to a loopback host; port 587) or smtps://… (TLS; port 465)", secret: true),
        .init("FLARE_SOS_RATE_PER_ADDRESS", .rate, "0.1/20", "SOS starts and stops per client address, whichever devices: per second/burst (a family behind one address presses a few times; an address cycling through secrets does not start or stop dozens)"),
        .init("FLARE_SOS_PER_DEVICE_PER_HOUR", .integer(1...1_000), "6", "SOS one device may start an hour, counted in the store for every instance (a bucket refilling over the hour); a press while its SOS is live starts none and does not count"),
        .init("FLARE_MAIL_PER_KEY_PER_HOUR", .integer(1...100_000), "60", "mails to contacts one owner key may cause an hour, admin keys too, counted in the store for every instance (a bucket refilling over the hour); beyond, links are still made and the answer says \"mailed\": false, \"reason\": \"mail_budget\""),
        .init("FLARE_SMTP_FROM", .text, nil, "the address contacts' mail comes from (and its Message-IDs' domain), e.g. flare@example.org; needed with FLARE_SMTP_URL"),
        .init("FLARE_VAPID_SUBJECT", .text, nil, "turns Web Push on (viewers' \"Notify me\", contacts' alerts page, the escalation ladder's pushes): whom a push service's operator contacts about this server, mailto:you@example.org or https://example.org/contact. The VAPID key pair is made on first start and kept in the store, sealed with the token key, so every instance signs with the same"),
        .init("FLARE_PUSH_ALLOW_LOOPBACK", .choice(["0", "1"]), "0", "tests only: 1 lets a push subscription's endpoint be http://127.0.0.1 (a test's push service); refused with a FLARE_PUBLIC_URL that is not loopback"),
        .init("FLARE_LOG_LEVEL", .choice(["debug", "info", "warning", "error"]), "info", "debug, info, warning or error"),
    ]

    /// A setting that `flared` does not read: the scripts behind `make run` and `make cluster` do, or the `flare`
    /// command line. Listed by `flared --help` apart from its own, never by `--print-config` (flared has no value for
    /// it). docs/configuration.md has the one table of both kinds, which `SettingsTableTests` holds to these lists.
    public struct ReadElsewhere: Sendable {
        public let name: String
        /// The programs that read it.
        public let readBy: String
        public let defaultValue: String
        public let help: String
    }

    public static let readElsewhere: [ReadElsewhere] = [
        .init(name: "FLARE_MQTT_BIND", readBy: "scripts/broker.sh", defaultValue: "127.0.0.1", help: "address of the broker's plain MQTT listener (on FLARE_MQTT_PORT)"),
        .init(name: "FLARE_MQTT_TLS_PORT", readBy: "scripts/broker.sh, scripts/run.sh", defaultValue: "8883 under make run (empty: none)", help: "the broker's MQTT-over-TLS listener for devices"),
        .init(name: "FLARE_MQTT_TLS_BIND", readBy: "scripts/broker.sh", defaultValue: "FLARE_MQTT_BIND", help: "address of the TLS listener"),
        .init(name: "FLARE_MQTT_TLS_CERT", readBy: "scripts/broker.sh, scripts/run.sh", defaultValue: "a self-signed certificate in FLARE_DATA_DIR/broker/tls/", help: "the TLS listener's certificate (PEM), with FLARE_MQTT_TLS_KEY"),
        .init(name: "FLARE_MQTT_TLS_KEY", readBy: "scripts/broker.sh", defaultValue: "that certificate's key", help: "the TLS listener's private key (PEM)"),
        .init(name: "FLARE_MQTT_WS_PORT", readBy: "scripts/broker.sh, scripts/run.sh", defaultValue: "8083 under make run (empty: none)", help: "the broker's MQTT-over-WebSockets listener"),
        .init(name: "FLARE_MQTT_WS_BIND", readBy: "scripts/broker.sh", defaultValue: "FLARE_MQTT_BIND", help: "address of the WebSockets listener"),
        .init(name: "FLARE_NATS_PORT", readBy: "scripts/nats-cluster.sh", defaultValue: "14222", help: "make cluster BROKER=nats: the first port the three NATS nodes take (client, MQTT, monitoring, route each; the next free ones)"),
        .init(name: "FLARE_MQTT_AUTOSAVE", readBy: "scripts/broker.sh", defaultValue: "5", help: "how often the broker saves its state: seconds, changes:N, or off (docs/durability.md)"),
        .init(name: "FLARE_BROKER_PLUGIN", readBy: "scripts/broker.sh", defaultValue: ".build/broker/flare_auth.so", help: "the broker's auth plugin"),
        .init(name: "FLARE_BIN", readBy: "scripts/run.sh", defaultValue: ".build/debug", help: "directory of the flared and flare binaries that make run and make cluster start"),
        .init(name: "FLARE_DEMO_INTERVAL", readBy: "scripts/run.sh", defaultValue: "2", help: "seconds between the demo share's fixes"),
        .init(name: "FLARE_PG_PORT", readBy: "scripts/run.sh, scripts/postgres.sh", defaultValue: "the first free port from 15432", help: "port of the PostgreSQL that make cluster starts"),
        .init(name: "FLARE_INSTANCES", readBy: "scripts/run.sh", defaultValue: "1 (make cluster: 2)", help: "how many flared instances scripts/run.sh starts (1 to 9)"),
        .init(name: "FLARE_SERVER_URL", readBy: "flare", defaultValue: "http://FLARE_HTTP_ADDR", help: "Flare's HTTP address for the command line (also --server URL)"),
        .init(name: "FLARE_OWNER_KEY", readBy: "flare", defaultValue: "FLARE_DATA_DIR/owner.key", help: "the owner key the command line sends (also --key KEY)"),
        .init(name: "FLARE_DEVICE_PIN", readBy: "flare", defaultValue: "asked for at the terminal", help: "flare devices add --pin: the device's PIN (4 to 12 digits), kept out of the command line"),
        .init(name: "FLARE_DEVICE_DURESS_PIN", readBy: "flare", defaultValue: "asked for at the terminal", help: "flare devices add --duress-pin: the duress PIN, likewise"),
        .init(name: "FLARE_DEVICE_SECRET", readBy: "flare", defaultValue: "(none: <secret> is shown)", help: "flare devices setup: the device's secret, filled into each app's fields here (also --secret S)"),
        .init(name: "FLARE_SWIFT_TEST_TIMEOUT_S", readBy: "scripts/swift-test.py", defaultValue: "1500", help: "the deadline of make swift-test, build included"),
    ]

    /// `flared --help`: its own settings, then those other programs read.
    public static var helpText: String {
        var text = Configuration.helpText(usage: usage, settings: all)
        text += "\nRead by other programs, not by flared (environment only; see docs/configuration.md):\n"
        let width = (readElsewhere.map(\.name.count).max() ?? 20) + 4
        for setting in readElsewhere {
            text += "  " + setting.name + String(repeating: " ", count: max(1, width - setting.name.count - 2)) + setting.help + "\n"
            text += String(repeating: " ", count: width) + "[\(setting.readBy); default \(setting.defaultValue)]\n"
        }
        return text
    }

    /// A setting's built-in default, for the tools that share it with the daemon.
    public static func defaultValue(_ name: String) -> String? {
        all.first { $0.name == name }?.defaultValue
    }

    public static let usage = """
        flared: Flare's service. Bridges MQTT location topics into the store, ends shares at their expiry, and serves
        the HTTP API, the viewer page and live updates.

        usage: flared [--config FILE] [--OPTION VALUE ...]
               flared --print-config [--config FILE] [--OPTION VALUE ...]   effective settings and where each came from
               flared --help
        """
}
