import FlareCore
import FlareHTTP
import Foundation
import FlareSystem
import FlareCodec

/// The viewer's files, read once at start-up and served from memory: the page templates with their settings
/// filled in, the scripts, styles and string tables under /viewer/, and Debian's Leaflet under /vendor/leaflet/.
public struct ViewerAssets: Sendable {
    public struct LoadError: Error, CustomStringConvertible {
        public let description: String
    }

    struct Asset: Sendable {
        let bytes: [UInt8]
        let contentType: String
    }

    private var files: [String: Asset] = [:]
    /// Pre-compressed copies (Debian's `.gz` files), served to clients that accept gzip.
    private var gzippedFiles: [String: [UInt8]] = [:]
    /// Per language, the viewer page with every setting filled in, split where the share's title goes: a request
    /// only adds its title between them (Foundation's replacingOccurrences took ~80 % of the page's CPU time, 2,700
    /// req/s), and the server joins them once, into the buffer it sends from.
    private var pageParts: [String: [[UInt8]]] = [:]
    private var notFoundPages: [String: [UInt8]] = [:]
    /// Per language, a contact's alerts page (`/alerts#c=…`), if the viewer files have one.
    private var alertsPages: [String: [UInt8]] = [:]
    private let contentSecurityPolicy: String
    private let configuration: GatewayConfiguration
    /// Language tags that have a string table (`i18n/<tag>.json`), first is the default.
    let languages: [String]
    /// The language menu's `<option>`s, each language named in its own words (the SOS page has the same menu).
    let languageOptions: String

    /// The script, style sheet, string tables and pages as served: without each line's indentation, blank lines and
    /// (scripts) lines that are only a `//` comment. The comments are for the code's readers, not for a phone on a poor connection. Safe
    /// for these files: no template literals or strings continued across lines (the browser tests run what is served).
    static func compact(_ bytes: [UInt8], dropLineComments: Bool) -> [UInt8] {
        compactLines(bytes, dropLineComments: dropLineComments)
    }

    /// Every file below `root` as it is served, by its path relative to `root`: scripts, style sheets, string tables and
    /// pages compacted (the JSON and HTML hold no text that spans lines), the rest as it is. Nil when `root` cannot be read.
    static func filesAsServed(below root: URL) -> [(relative: String, bytes: [UInt8])]? {
        guard let enumerator = FileManager.default.enumerator(at: root, includingPropertiesForKeys: [.isRegularFileKey]) else { return nil }
        var found: [(relative: String, bytes: [UInt8])] = []
        for case let url as URL in enumerator {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true,
                  let data = FileManager.default.contents(atPath: url.path) else { continue }
            let relative = String(url.standardizedFileURL.path.dropFirst(root.standardizedFileURL.path.count + 1))
            let bytes: [UInt8]
            if relative.hasSuffix(".css") { bytes = compactStyles(Array(data)) }
            else if relative.hasSuffix(".js") { bytes = compact(Array(data), dropLineComments: true) }
            else if relative.hasSuffix(".html") { bytes = compact(dropHTMLComments(Array(data)), dropLineComments: false) }
            else if relative.hasSuffix(".json") { bytes = compact(Array(data), dropLineComments: false) }
            else { bytes = Array(data) }
            found.append((relative, bytes))
        }
        return found
    }

    /// A page as served: without its `<!-- … -->` comments (notes for the page's readers and the tests' hooks; the pages
    /// have no inline script or style in which the sequence could mean something else).
    static func dropHTMLComments(_ bytes: [UInt8]) -> [UInt8] {
        let open = Array("<!--".utf8), close = Array("-->".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == open[0], bytes[index...].starts(with: open) {
                var end = index + open.count
                while end < bytes.count && !bytes[end...].starts(with: close) { end += 1 }
                index = min(bytes.count, end + close.count)
                continue
            }
            out.append(bytes[index])
            index += 1
        }
        return out
    }

    /// A style sheet as served: `compact`, and without its `/* … */` comments (outside quoted strings).
    static func compactStyles(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        var quote: UInt8?
        while index < bytes.count {
            let byte = bytes[index]
            if let open = quote {
                out.append(byte)
                if byte == UInt8(ascii: "\\"), index + 1 < bytes.count {
                    out.append(bytes[index + 1])
                    index += 2
                    continue
                }
                if byte == open { quote = nil }
                index += 1
                continue
            }
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                quote = byte
            } else if byte == UInt8(ascii: "/"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "*") {
                var end = index + 2
                while end + 1 < bytes.count && !(bytes[end] == UInt8(ascii: "*") && bytes[end + 1] == UInt8(ascii: "/")) { end += 1 }
                index = min(bytes.count, end + 2)
                continue
            }
            out.append(byte)
            index += 1
        }
        return compactLines(out, dropLineComments: false)
    }

    private static func compactLines(_ bytes: [UInt8], dropLineComments: Bool) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            let text = line.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
            if text.isEmpty { continue }
            if dropLineComments, text.starts(with: Array("//".utf8)) { continue }
            out.append(contentsOf: text)
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }

    init(configuration: GatewayConfiguration, logger: Logger) throws(LoadError) {
        self.configuration = configuration
        let directory = configuration.viewerDirectory ?? Bundle.module.url(forResource: "Viewer", withExtension: nil)?.path
        guard let directory else { throw LoadError(description: "the viewer files are missing from the build (FLARE_VIEWER_DIR to point at them)") }
        guard let found = Self.filesAsServed(below: URL(fileURLWithPath: directory)) else {
            throw LoadError(description: "cannot read the viewer directory \(directory)")
        }
        for (relative, bytes) in found { files["/viewer/" + relative] = Asset(bytes: bytes, contentType: Self.contentType(of: relative)) }
        guard let page = files["/viewer/index.html"], let notFound = files["/viewer/notfound.html"] else {
            throw LoadError(description: "index.html or notfound.html is missing in \(directory)")
        }
        let pageTemplate = String(decoding: page.bytes, as: UTF8.self)
        let notFoundTemplate = String(decoding: notFound.bytes, as: UTF8.self)
        var languages = files.keys.filter { $0.hasPrefix("/viewer/i18n/") && $0.hasSuffix(".json") }
            .map { String($0.dropFirst("/viewer/i18n/".count).dropLast(".json".count)) }
            .sorted()
        if let english = languages.firstIndex(of: "en") { languages.insert(languages.remove(at: english), at: 0) }
        self.languages = languages.isEmpty ? ["en"] : languages
        // The page's language menu, each language named in its own words by its string table.
        var options = ""
        for code in self.languages {
            let table = files["/viewer/i18n/\(code).json"].flatMap { try? JSONValue.parse($0.bytes) }
            let name = table?["language_name"]?.stringValue ?? code
            options += "<option value=\"\(Self.escapeHTML(code))\">\(Self.escapeHTML(name))</option>"
        }
        self.languageOptions = options
        let pageWithMenu = pageTemplate.replacingOccurrences(of: "{{LANGUAGE_OPTIONS}}", with: options)
        for language in self.languages {
            let filled = pageWithMenu
                .replacingOccurrences(of: "{{LANG}}", with: Self.escapeHTML(language))
                .replacingOccurrences(of: "{{TILE_URL}}", with: Self.escapeHTML(configuration.tileURLTemplate))
                .replacingOccurrences(of: "{{TILE_ATTRIBUTION}}", with: Self.escapeHTML(configuration.tileAttribution))
                .replacingOccurrences(of: "{{STALE_AFTER_S}}", with: String(configuration.staleAfterSeconds))
            pageParts[language] = filled.components(separatedBy: "{{TITLE}}").map { Array($0.utf8) }
            notFoundPages[language] = Array(notFoundTemplate.replacingOccurrences(of: "{{LANG}}", with: Self.escapeHTML(language)).utf8)
            if let alerts = files["/viewer/alerts.html"] {
                alertsPages[language] = Array(String(decoding: alerts.bytes, as: UTF8.self)
                    .replacingOccurrences(of: "{{LANG}}", with: Self.escapeHTML(language))
                    .replacingOccurrences(of: "{{LANGUAGE_OPTIONS}}", with: options).utf8)
            }
        }

        // Debian ships Leaflet minified and pre-compressed too: a phone on a poor connection gets ~40 KB
        // instead of ~430 KB for the same script.
        let leaflet = URL(fileURLWithPath: configuration.leafletDirectory)
        var leafletFiles: [(served: String, file: String)] = [("leaflet.css", "leaflet.css")]
        let minified = FileManager.default.fileExists(atPath: leaflet.appendingPathComponent("leaflet.min.js").path)
        leafletFiles.append(("leaflet.js", minified ? "leaflet.min.js" : "leaflet.js"))
        if let images = try? FileManager.default.contentsOfDirectory(atPath: leaflet.appendingPathComponent("images").path) {
            leafletFiles += images.filter { $0.hasSuffix(".png") }.map { ("images/" + $0, "images/" + $0) }
        }
        var missing = false
        for (served, file) in leafletFiles {
            let path = leaflet.appendingPathComponent(file).path
            guard let data = FileManager.default.contents(atPath: path) else {
                missing = true
                continue
            }
            files["/vendor/leaflet/" + served] = Asset(bytes: Array(data), contentType: Self.contentType(of: served))
            if let gzipped = FileManager.default.contents(atPath: path + ".gz") {
                gzippedFiles["/vendor/leaflet/" + served] = Array(gzipped)
            }
        }
        if missing {
            logger.warning("Leaflet not found in \(configuration.leafletDirectory) (Debian package libjs-leaflet); the viewer works without the map")
        }

        // TweetNaCl, for end-to-end encrypted shares: the page loads it only for one (a plain share's page never does).
        let tweetnacl = URL(fileURLWithPath: configuration.tweetnaclDirectory)
        let naclFile = FileManager.default.fileExists(atPath: tweetnacl.appendingPathComponent("nacl-fast.min.js").path) ? "nacl-fast.min.js" : "nacl-fast.js"
        if let data = FileManager.default.contents(atPath: tweetnacl.appendingPathComponent(naclFile).path) {
            files["/vendor/tweetnacl/nacl-fast.min.js"] = Asset(bytes: Array(data), contentType: Self.contentType(of: "nacl-fast.min.js"))
        } else {
            logger.warning("TweetNaCl not found in \(configuration.tweetnaclDirectory) (Debian package node-tweetnacl); end-to-end encrypted shares' pages cannot show positions")
        }

        var imageSources = "'self' data:"
        if let origin = configuration.tileOrigin { imageSources += " " + origin }
        contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src \(imageSources); "
            + "connect-src 'self'; manifest-src 'self'; worker-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    }

    static func contentType(of name: String) -> String {
        switch name.split(separator: ".").last.map(String.init) ?? "" {
        case "html": "text/html; charset=utf-8"
        case "js": "text/javascript; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        case "json": "application/json"
        case "svg": "image/svg+xml"
        case "webmanifest": "application/manifest+json"
        case "png": "image/png"
        case "ico": "image/x-icon"
        default: "application/octet-stream"
        }
    }

    func response(for request: HTTPRequest) -> HTTPResponse? {
        let path = request.path
        guard let asset = files[path], path != "/viewer/index.html", path != "/viewer/notfound.html", path != "/viewer/alerts.html" else { return nil }
        var headers: [(name: String, value: String)] = [("Content-Type", asset.contentType), ("Cache-Control", "public, max-age=3600")]
        if let gzipped = gzippedFiles[path] {
            headers.append(("Vary", "Accept-Encoding"))
            if request.header("accept-encoding")?.contains("gzip") == true {
                headers.append(("Content-Encoding", "gzip"))
                return HTTPResponse(status: 200, headers: headers, body: .bytes(gzipped))
            }
        }
        return HTTPResponse(status: 200, headers: headers, body: .bytes(asset.bytes))
    }

    /// The language for a request: `?lang=` if it names a table, else the best `Accept-Language` match, else English.
    func negotiateLanguage(_ request: HTTPRequest) -> String {
        if let requested = request.query["lang"], let match = match(requested) { return match }
        guard let header = request.header("accept-language") else { return languages[0] }
        let ranked = header.split(separator: ",").compactMap { part -> (String, Double)? in
            let pieces = part.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let tag = pieces.first, !tag.isEmpty else { return nil }
            var quality = 1.0
            for piece in pieces.dropFirst() where piece.hasPrefix("q=") { quality = Double(piece.dropFirst(2)) ?? 0 }
            return (tag, quality)
        }.filter { $0.1 > 0 }.sorted { $0.1 > $1.1 }
        for (tag, _) in ranked { if let match = match(tag) { return match } }
        return languages[0]
    }

    private func match(_ tag: String) -> String? {
        let lower = tag.lowercased()
        if let exact = languages.first(where: { $0.lowercased() == lower }) { return exact }
        let primary = lower.split(separator: "-").first.map(String.init) ?? lower
        return languages.first { $0.lowercased().split(separator: "-").first.map(String.init) == primary }
    }

    /// `language` is one of `languages` (from `negotiateLanguage`).
    func viewerPage(language: String, title: String) -> HTTPResponse {
        let parts = pageParts[language] ?? pageParts[languages[0]] ?? []
        let escapedTitle = Array(Self.escapeHTML(title.isEmpty ? "Flare" : title).utf8)
        var segments: [[UInt8]] = []
        segments.reserveCapacity(2 * parts.count)
        for (index, part) in parts.enumerated() {
            if index > 0 { segments.append(escapedTitle) }
            segments.append(part)
        }
        return page(200, .segments(segments), language: language)
    }

    /// A contact's alerts page; nil when the viewer files have none (a customised `FLARE_VIEWER_DIR` from before it).
    func alertsPage(language: String) -> HTTPResponse? {
        guard let html = alertsPages[language] ?? alertsPages[languages[0]] else { return nil }
        return page(200, .bytes(html), language: language)
    }

    func notFoundPage(language: String) -> HTTPResponse {
        page(404, .bytes(notFoundPages[language] ?? notFoundPages[languages[0]] ?? []), language: language)
    }

    private func page(_ status: Int, _ html: HTTPResponse.Body, language: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Security-Policy", contentSecurityPolicy),
            ("Cache-Control", "no-store"),
            ("X-Robots-Tag", "noindex, nofollow"),
            ("X-Frame-Options", "DENY"),
            ("Content-Language", language),
            ("Vary", "Accept-Language"),
        ], body: html)
    }

    static func escapeHTML(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for char in text {
            switch char {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(char)
            }
        }
        return out
    }
}
