import FlareCore

/// Which store `FLARE_STORE_URL` names: unset or `sqlite:PATH` is the embedded SQLite file (one instance),
/// `postgresql://user@host:port/db` a PostgreSQL database that several instances share.
public enum StoreLocation: Sendable, Equatable, CustomStringConvertible {
    case sqlite(path: String)
    case postgresql(url: String)

    /// A `FLARE_STORE_URL` that names no store Flare knows; `message` says what it should look like.
    public struct Malformed: Error, Equatable, CustomStringConvertible {
        public let message: String
        init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    public init(url: String?, dataDirectory: String) throws(Malformed) {
        guard let url, !url.isEmpty else {
            self = .sqlite(path: dataDirectory + "/flare.db")
            return
        }
        if url.hasPrefix("sqlite:") {
            let path = String(url.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw .init("FLARE_STORE_URL sqlite:PATH needs a path (or leave it unset for FLARE_DATA_DIR/flare.db)") }
            self = .sqlite(path: path)
            return
        }
        guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") else {
            throw .init("FLARE_STORE_URL must be postgresql://user@host:port/database or sqlite:PATH (got \(Self.redacted(url)))")
        }
        let rest = url.drop { $0 != "/" }.dropFirst(2)
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        let host = authority.split(separator: "@").last.map(String.init) ?? ""
        guard !host.isEmpty, rest.count > authority.count else {
            throw .init("FLARE_STORE_URL must name a host and a database, e.g. postgresql://flare@127.0.0.1:5432/flare (got \(Self.redacted(url)))")
        }
        self = .postgresql(url: url)
    }

    /// A URL without its password: `postgresql://flare:***@db:5432/flare`.
    public static func redacted(_ url: String) -> String {
        let characters = Array(url)
        guard let schemeEnd = (0..<max(0, characters.count - 2)).first(where: { characters[$0..<$0 + 3] == [":", "/", "/"] }) else { return url }
        let start = schemeEnd + 3
        guard let at = characters[start...].firstIndex(of: "@"),
              let colon = characters[start..<at].firstIndex(of: ":") else { return url }
        return String(characters[..<colon]) + ":***" + String(characters[at...])
    }

    public var description: String {
        switch self {
        case .sqlite(let path): "SQLite \(path)"
        case .postgresql(let url): "PostgreSQL \(Self.redacted(url))"
        }
    }
}
