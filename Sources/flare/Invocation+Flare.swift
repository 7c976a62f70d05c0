import FlareAPI
import FlareClient
import FlareCore
import FlareStore
import FlareStoreOpener
import Foundation
import FlareSettings

/// What the shared options are read into: flared's address, the owner key, the data directory, a share's end-to-end
/// key, flared's store. Each reads its flag first, then the environment, then flared's default.
extension Invocation {
    /// Settings `flare` shares with `flared` take `flared`'s defaults, from its one table.
    func shared(_ name: String) -> String { environment[name] ?? FlaredSettings.defaultValue(name) ?? "" }

    var dataDirectory: String { value(SharedOptions.dataDirectory) ?? shared("FLARE_DATA_DIR") }

    func serverURL() throws -> String {
        if let server = value(SharedOptions.server) ?? environment["FLARE_SERVER_URL"] { return server.hasSuffix("/") ? String(server.dropLast()) : server }
        guard let address = HostPort(shared("FLARE_HTTP_ADDR")) else {
            throw CLIError("FLARE_HTTP_ADDR must be host:port (got \(shared("FLARE_HTTP_ADDR"))); or pass --server URL")
        }
        let host = address.host == "0.0.0.0" ? "127.0.0.1" : (address.host == "::" ? "::1" : address.host)
        return "http://" + HostPort(host: host, port: address.port).description
    }

    func ownerKey() throws -> String {
        if let key = value(SharedOptions.key) ?? environment["FLARE_OWNER_KEY"] { return key }
        let path = dataDirectory + "/owner.key"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CLIError("no owner key: pass --key, set FLARE_OWNER_KEY, or run flared once so it writes \(path)")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Flare's client, with the owner key. No retries: a person at a terminal wants the answer (or the error) now.
    func ownerClient() throws -> FlareClient {
        let server = try serverURL()
        guard let url = URL(string: server), url.scheme == "http" || url.scheme == "https" else {
            throw CLIError("--server must be an http:// or https:// URL (got \(server))")
        }
        return FlareClient(baseURL: url, ownerKey: try ownerKey(), retry: .none)
    }

    /// Where an end-to-end encrypted share's passphrase is kept on the owner's machine, beside the owner key:
    /// `$FLARE_DATA_DIR/e2e/<share id>.key`, mode 0600. The server never has it.
    func passphrasePath(_ shareID: String) -> String { dataDirectory + "/e2e/\(shareID).key" }

    /// The passphrase of share `shareID`: `--e2e-key`, or the file `share create --e2e` wrote.
    func passphrase(of shareID: String) throws -> String {
        if let given = value(SharedOptions.e2eKey) {
            try E2EPassphrase.checkGiven(given)
            return given
        }
        let path = passphrasePath(shareID)
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CLIError("no passphrase for share \(shareID): pass --e2e-key, or run this where `flare share create --e2e` wrote \(path)")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// flared's store, opened by this process (SQLite takes the second writer): FLARE_STORE_URL, else the data directory's.
    func openStore() throws -> any ShareStore {
        let location = try StoreLocation(url: environment["FLARE_STORE_URL"], dataDirectory: dataDirectory)
        if case .sqlite(let path) = location, !FileManager.default.fileExists(atPath: path) {
            throw CLIError("no Flare database at \(path): start flared once, or pass --data-dir (or set FLARE_STORE_URL)")
        }
        do { return try StoreOpener.open(location, instance: "flare-keys") } catch {
            throw CLIError("cannot open the store (\(location)): \(error)")
        }
    }

    /// `--limit`: a page of 1 to `maximum` entries, if given.
    func pageLimit(maximum: Int) throws -> Int? {
        guard let text = value(SharedOptions.limit) else { return nil }
        guard let parsed = Int(text), (1...maximum).contains(parsed) else {
            throw CLIError("--limit must be a whole number from 1 to \(maximum) (got \(text))")
        }
        return parsed
    }

    /// A list command's page: `--limit` (1 to `maximum`) and `--cursor` read, the page fetched with the owner key, and
    /// with `--json` printed as it came (nil then: nothing is left to print).
    func page<Page: Encodable>(maximum: Int, of what: String, _ fetch: (FlareClient, Int?, String?) async throws -> Page) async throws -> Page? {
        let client = try ownerClient()
        let limit = try pageLimit(maximum: maximum), cursor = value(SharedOptions.cursor)
        let page = try await call("cannot list \(what)") { try await fetch(client, limit, cursor) }
        if isSet(SharedOptions.json) {
            try printJSON(page)
            return nil
        }
        return page
    }

    /// The option's value as a finite number of 0 or more, if given.
    func number(_ option: OptionSpec) throws -> Double? {
        guard let text = value(option) else { return nil }
        guard let value = Double(text), value.isFinite, value >= 0 else { throw CLIError("\(option.name) needs a number, got \(text)") }
        return value
    }
}

/// One call to flared, its error turned into a message that says what could not be done.
func call<T>(_ what: String, _ body: () async throws -> T) async throws -> T {
    do { return try await body() } catch { throw CLIError("\(what): \(error)") }
}

func printJSON<T: Encodable>(_ value: T) throws {
    print(String(decoding: try APIJSON.encode(value), as: UTF8.self))
}
