// swift-tools-version:6.0
import PackageDescription

/// One list of settings for every Swift target, so the whole package builds the same way.
let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
]

let package = Package(
    name: "Flare",
    // Only FlareClient is meant for Apple platforms (async URLSession needs iOS 15 / macOS 12).
    platforms: [.macOS(.v12), .iOS(.v15), .tvOS(.v15), .watchOS(.v8)],
    products: [
        .executable(name: "flared", targets: ["flared"]),
        .executable(name: "flare", targets: ["flare"]),
        .library(name: "FlareClient", targets: ["FlareClient"]),
    ],
    targets: [
        // C libraries from Debian, one systemLibrary each: a modulemap and a shim.h, nothing else.
        .systemLibrary(name: "CMosquitto", pkgConfig: "libmosquitto", providers: [.apt(["libmosquitto-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CQREncode", pkgConfig: "libqrencode", providers: [.apt(["libqrencode-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CNats", pkgConfig: "libnats", providers: [.apt(["libnats-dev"])]),

        // Locks, named threads, timed waits and the monotonic clock: the one home of Flare's system primitives.
        .target(name: "FlareSystem", dependencies: [], swiftSettings: swiftSettings),

        // One Swift module per C boundary.
        .target(name: "FlareCrypto", dependencies: ["COpenSSL", "FlareCodec"], swiftSettings: swiftSettings),
        .target(name: "FlareMQTT", dependencies: ["CMosquitto", "FlareSystem"], swiftSettings: swiftSettings),
        // libnats: the NATS cluster as the broker (its auth callout, the MQTT layer's stream).
        .target(name: "FlareNATS", dependencies: ["CNats", "FlareSystem"], swiftSettings: swiftSettings),
        .target(name: "FlareSQLite", dependencies: ["CSQLite", "FlareCore", "FlareStore", "FlareSystem"], swiftSettings: swiftSettings),
        .target(name: "FlarePostgres", dependencies: ["CLibPQ", "FlareCore", "FlareStore", "FlareSystem"], swiftSettings: swiftSettings),
        // Opens the store FLARE_STORE_URL names: the one module that knows every engine.
        .target(name: "FlareStoreOpener", dependencies: ["FlareStore", "FlareSQLite", "FlarePostgres"], swiftSettings: swiftSettings),
        .target(name: "FlareHTTP", dependencies: ["CMicroHTTPD", "FlareSystem"], swiftSettings: swiftSettings),
        .target(name: "FlareQR", dependencies: ["CQREncode"], swiftSettings: swiftSettings),
        // libcurl: webhook requests (an HTTP POST pinned to the addresses its caller checked) and mail (SMTP).
        .target(name: "FlareCurl", dependencies: ["CCurl"], swiftSettings: swiftSettings),
        // libsodium: NaCl's secretbox, the OwnTracks apps' payload encryption (end-to-end encrypted shares).
        .target(name: "FlareSodium", dependencies: ["CSodium"], swiftSettings: swiftSettings),

        // The HTTP API's contract: every request and response body as a Codable type (Foundation only, so apps use it).
        .target(name: "FlareAPI", dependencies: [], swiftSettings: swiftSettings),

        // Every setting declared once (the table: name, kind, default, meaning) and read with one precedence (the parser).
        .target(name: "FlareSettings", dependencies: ["FlareSystem", "FlareCore"], swiftSettings: swiftSettings),
        // JSON (a parser and a writer that never go through Foundation) and base64url: the codecs every layer writes with.
        .target(name: "FlareCodec", dependencies: [], swiftSettings: swiftSettings),

        // The domain: plain Swift, tested in memory.
        .target(name: "FlareCore", dependencies: ["FlareAPI", "FlareCrypto", "FlareSystem", "FlareCodec"], swiftSettings: swiftSettings),
        // The hand writers of the hottest wire shapes (FlareAPI types written straight into bytes), beside FlareAPI and not
        // in it: FlareClient depends on FlareAPI alone.
        .target(name: "FlareWire", dependencies: ["FlareAPI", "FlareCore", "FlareSystem", "FlareCodec"], swiftSettings: swiftSettings),
        // The store protocol and its value types; each engine conforms in a module of its own (FlareSQLite).
        .target(name: "FlareStore", dependencies: ["FlareCore", "FlareSystem"], swiftSettings: swiftSettings),

        // The application layer, one module per thing it holds; arrows go one way: Gateway → Bridge → Shares → Events.
        // Event delivery: the outbox's deliverer, webhooks and the host lookups their address rule needs.
        .target(name: "FlareEvents", dependencies: ["FlareCore", "FlareCrypto", "FlareStore", "FlareCurl", "FlareSystem"], swiftSettings: swiftSettings),
        // The share lifecycle and its state: shares, keys, trackers, the people side, what is announced on the broker.
        .target(name: "FlareShares", dependencies: ["FlareAPI", "FlareCore", "FlareCrypto", "FlareEvents", "FlareStore", "FlareSystem", "FlareWire", "FlareCodec"], swiftSettings: swiftSettings),
        // Ingest, whichever way a fix comes (a broker's bridge, HTTP): validate, queue, commit in batches, tell the shares.
        .target(name: "FlareIngest", dependencies: ["FlareCore", "FlareShares", "FlareStore", "FlareSystem"], swiftSettings: swiftSettings),
        // The MQTT broker's session and its retained state.
        .target(name: "FlareBridge", dependencies: ["FlareAPI", "FlareCore", "FlareIngest", "FlareShares", "FlareStore", "FlareMQTT", "FlareSystem", "FlareCodec"], swiftSettings: swiftSettings),
        // The NATS cluster as the broker: the auth callout's responder, ingest from the MQTT layer's stream.
        .target(name: "FlareNATSBroker", dependencies: ["FlareCore", "FlareNATS", "FlareStore", "FlareSystem", "FlareMQTT", "FlareBridge", "FlareShares", "FlareIngest", "FlareCrypto", "FlareCodec"], swiftSettings: swiftSettings),
        // The HTTP API, the viewer page and live streams.
        .target(
            name: "FlareGateway",
            dependencies: ["FlareAPI", "FlareCore", "FlareEvents", "FlareIngest", "FlareShares", "FlareHTTP", "FlareQR", "FlareStore", "FlareSystem", "FlareWire", "FlareCodec"],
            resources: [.copy("Viewer"), .copy("SOS"), .copy("OpenAPI")],
            swiftSettings: swiftSettings
        ),

        // Every setting read into the typed values the components take, once, by flared's wiring.
        .target(name: "FlareDaemonSettings", dependencies: ["FlareCore", "FlareEvents", "FlareGateway", "FlareSystem", "FlareSettings"], swiftSettings: swiftSettings),

        .executableTarget(name: "flared", dependencies: ["FlareDaemonSettings", "FlareCore", "FlareCrypto", "FlareSystem", "FlareStore", "FlareSQLite", "FlareStoreOpener", "FlareMQTT", "FlareNATS", "FlareNATSBroker", "FlareEvents", "FlareShares", "FlareBridge", "FlareGateway", "FlareHTTP", "FlareIngest", "FlareCodec", "FlareSettings"], swiftSettings: swiftSettings),
        .executableTarget(name: "flare", dependencies: ["FlareAPI", "FlareClient", "FlareCore", "FlareWire", "FlareStore", "FlareStoreOpener", "FlareMQTT", "FlareCrypto", "FlareSystem", "FlareQR", "FlareSodium", "FlareCodec", "FlareSettings"], swiftSettings: swiftSettings),

        // The Swift client for apps (Foundation only; builds on Linux and Apple platforms).
        .target(name: "FlareClient", dependencies: ["FlareAPI"], swiftSettings: swiftSettings),

        // Shared by the tests: a real mosquitto on a free loopback port, temp dirs, built binaries.
        .target(name: "FlareTestSupport", dependencies: [], path: "Tests/FlareTestSupport", swiftSettings: swiftSettings),

        .testTarget(name: "FlareWireTests", dependencies: ["FlareAPI", "FlareCore", "FlareWire", "FlareSystem", "FlareCodec"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareCoreTests", dependencies: ["FlareAPI", "FlareCore", "FlareCrypto", "FlareWire", "FlareSystem", "FlareCodec", "FlareSettings"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareStoreTests", dependencies: ["FlareStore", "FlareSQLite", "FlarePostgres", "FlareStoreOpener", "FlareCore", "FlareCrypto", "FlareSystem", "FlareTestSupport", "FlareCodec"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareMQTTTests", dependencies: ["FlareMQTT", "FlareTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareHTTPTests", dependencies: ["FlareHTTP", "FlareTestSupport"], swiftSettings: swiftSettings),
        // The application layer's doubles and fixture (a recording broker, a clock, a resolver, a service on SQLite).
        .target(name: "FlareServiceTestSupport", dependencies: ["FlareDaemonSettings", "FlareBridge", "FlareCore", "FlareCrypto", "FlareEvents", "FlareShares", "FlareSQLite", "FlareStore", "FlareTestSupport", "FlareSystem", "FlareIngest", "FlareCodec", "FlareSettings"],
                path: "Tests/FlareServiceTestSupport", swiftSettings: swiftSettings),
        .testTarget(name: "FlareEventsTests", dependencies: ["FlareAPI", "FlareCore", "FlareCrypto", "FlareEvents", "FlareShares", "FlareStore", "FlareServiceTestSupport", "FlareTestSupport", "FlareSystem", "FlareCodec"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareSharesTests", dependencies: ["FlareAPI", "FlareCore", "FlareShares", "FlareStore", "FlareServiceTestSupport", "FlareTestSupport", "FlareSystem", "FlareSQLite", "FlareCrypto", "FlareCodec"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareBridgeTests", dependencies: ["FlareAPI", "FlareBridge", "FlareCore", "FlareShares", "FlareStore", "FlareServiceTestSupport", "FlareTestSupport", "FlareSystem", "FlareIngest", "FlareCodec"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareSodiumTests", dependencies: ["FlareSodium", "FlareCore", "FlareTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareCurlTests", dependencies: ["FlareCurl", "FlareTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareGatewayTests", dependencies: ["FlareAPI", "FlareGateway", "FlareDaemonSettings", "FlareBridge", "FlareEvents", "FlareShares", "FlareServiceTestSupport", "FlareCore", "FlareStore", "FlareSQLite", "FlareHTTP", "FlareTestSupport", "FlareSystem", "FlareIngest", "FlareCodec", "FlareCrypto", "FlareSettings"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareQRTests", dependencies: ["FlareQR", "FlareTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "FlareClientTests", dependencies: ["FlareAPI", "FlareClient", "FlareTestSupport", "FlareSodium", "FlareCore"], swiftSettings: swiftSettings),
        // The command table of `flare`: every command refuses what it does not declare, and its help lists what it takes.
        .testTarget(name: "flareTests", dependencies: ["flare", "FlareTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "EndToEndTests", dependencies: ["FlareTestSupport", "FlareMQTT", "FlareHTTP", "FlareCrypto", "FlareSodium", "FlareCore", "FlareCodec"], swiftSettings: swiftSettings),
        // Both brokers' access rules: mosquitto with the flare_auth plugin, and three real NATS nodes with flared's callout.
        .testTarget(name: "BrokerAuthTests", dependencies: ["FlareTestSupport", "FlareMQTT", "FlareCore", "FlareCrypto", "FlareSodium", "FlareNATSBroker", "FlareNATS", "FlareStore", "FlareSQLite", "FlareSystem", "FlareCodec"],
                    swiftSettings: swiftSettings),
    ]
)
