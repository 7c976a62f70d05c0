import FlareCore

/// Every setting `flared` reads. Names are environment variables; flags are the same in kebab case.
enum FlaredSettings {
    static let all: [Configuration.Setting] = [
        .init("FLARE_DATA_DIR", "./data", "directory for the database, keys and broker data"),
        .init("FLARE_HTTP_ADDR", "127.0.0.1:8080", "address the HTTP gateway listens on (host:port, [v6]:port)"),
        .init("FLARE_PUBLIC_URL", nil, "base URL of links sent to family members (default http://FLARE_HTTP_ADDR)"),
        .init("FLARE_MQTT_PORT", "1884", "port of the broker that `make run` starts (1884: a system mosquitto may hold 1883)"),
        .init("FLARE_MQTT_URL", nil, "broker the bridge connects to (default mqtt://127.0.0.1:FLARE_MQTT_PORT)"),
        .init("FLARE_MQTT_PUBLIC_URL", nil, "broker address given to devices (default FLARE_MQTT_URL)"),
        .init("FLARE_MQTT_CLIENT_ID", "flared", "the bridge's MQTT client id (its persistent session)"),
        .init("FLARE_MQTT_USERNAME", "", "the bridge's broker username, if the broker requires one"),
        .init("FLARE_MQTT_PASSWORD", "", "the bridge's broker password"),
        .init("FLARE_MQTT_PASSWORD_FILE", nil, "file holding the bridge's broker password (default FLARE_DATA_DIR/broker/flared.password if it exists; username then defaults to flared)"),
        .init("FLARE_DEFAULT_DURATION_S", "3600", "share duration when the request names none"),
        .init("FLARE_MAX_DURATION_S", "86400", "longest share (and longest extension) allowed"),
        .init("FLARE_SHUTDOWN_STORE_GRACE_S", "20", "on shutdown, how long to keep retrying a failing store before giving up on the fixes still queued"),
        .init("FLARE_STORE_MIN_FREE_MB", "64", "/healthz turns unhealthy when the store's disk has less free space than this"),
        .init("FLARE_HISTORY_RETENTION_S", "86400", "how long positions are kept after a share ends (0 = delete at once)"),
        .init("FLARE_TRAIL_LENGTH", "32", "recent positions kept in memory per share for the viewer's trail"),
        .init("FLARE_MAX_PAYLOAD_BYTES", "4096", "largest accepted location payload"),
        .init("FLARE_LEAFLET_DIR", "/usr/share/javascript/leaflet", "Leaflet files (Debian libjs-leaflet)"),
        .init("FLARE_VIEWER_DIR", "", "serve the viewer page from this directory instead of the built-in files"),
        .init("FLARE_TILE_URL", "https://tile.openstreetmap.org/{z}/{x}/{y}.png", "map tile URL template (XYZ)"),
        .init("FLARE_TILE_ATTRIBUTION", "&copy; <a href=\"https://www.openstreetmap.org/copyright\">OpenStreetMap</a> contributors", "map attribution (HTML)"),
        .init("FLARE_STALE_AFTER_S", "120", "the viewer warns when the last position is older than this"),
        .init("FLARE_HTTP_THREADS", "4", "HTTP worker threads"),
        .init("FLARE_LINK_RATE_PER_ADDRESS", "5/60", "link requests per client address: per second/burst"),
        .init("FLARE_LINK_RATE_PER_TOKEN", "20/120", "link requests per view token: per second/burst"),
        .init("FLARE_TRUSTED_PROXIES", "", "reverse proxies (addresses or CIDR networks, comma-separated) whose X-Forwarded-For names the client, e.g. 127.0.0.1,::1"),
        .init("FLARE_LOG_LEVEL", "info", "debug, info, warning or error"),
    ]

    static let usage = """
        flared: Flare's service. Bridges MQTT location topics into SQLite, ends shares at their expiry, and serves
        the HTTP API, the viewer page and live updates.

        usage: flared [--config FILE] [--OPTION VALUE ...]
               flared --help
        """
}
