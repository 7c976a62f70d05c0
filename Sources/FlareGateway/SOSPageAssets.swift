import FlareHTTP
import FlareSystem
import Foundation

/// The SOS page's files (`Sources/FlareGateway/SOS`): `GET /sos` (the page, in the language the viewer would choose),
/// `GET /sos/<file>` (its script, style sheet, string tables, manifest, icon) and `GET /sos-sw.js` (its service
/// worker, whose scope is `/sos`). Served compacted as the viewer's are. The device's secret is never in these URLs:
/// the setup link carries it in the fragment, which no browser sends.
struct SOSPageAssets: Sendable {
    private struct Asset: Sendable {
        let bytes: [UInt8]
        let contentType: String
    }

    private var files: [String: Asset] = [:]
    /// The page per language, its language menu filled in.
    private var pages: [String: [UInt8]] = [:]

    /// The page may also fetch its manifest and register its worker; nothing else than the viewer may.
    static let contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "manifest-src 'self'; worker-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// - Parameters:
    ///   - languages: the languages the viewer offers (the SOS page has a string table for each).
    ///   - languageOptions: the viewer's language menu, `<option>`s.
    init(languages: [String], languageOptions: String, logger: Logger) {
        guard let root = Bundle.module.url(forResource: "SOS", withExtension: nil), let found = ViewerAssets.filesAsServed(below: root) else {
            logger.warning("the SOS page's files are missing from the build: GET /sos answers 404")
            return
        }
        for (relative, bytes) in found {
            let type = relative.hasSuffix(".webmanifest") ? "application/manifest+json" : ViewerAssets.contentType(of: relative)
            files[relative] = Asset(bytes: bytes, contentType: type)
        }
        if let page = files["sos.html"] {
            let template = String(decoding: page.bytes, as: UTF8.self).replacingOccurrences(of: "{{LANGUAGE_OPTIONS}}", with: languageOptions)
            for language in languages {
                pages[language] = Array(template.replacingOccurrences(of: "{{LANG}}", with: ViewerAssets.escapeHTML(language)).utf8)
            }
        }
    }

    /// `GET /sos` in `language` (nil when the build has no page).
    func page(language: String) -> HTTPResponse? {
        guard let page = pages[language] ?? pages.values.first else { return nil }
        return HTTPResponse(status: 200, headers: [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Security-Policy", Self.contentSecurityPolicy),
            // The worker keeps its own copy for offline use; the network's is always the newest.
            ("Cache-Control", "no-cache"),
            ("X-Robots-Tag", "noindex, nofollow"),
            ("X-Frame-Options", "DENY"),
            ("Content-Language", language),
            ("Vary", "Accept-Language"),
        ], body: .bytes(page))
    }

    /// `GET /sos/<name>`, and the service worker (`sw.js`, served at `/sos-sw.js`).
    func file(_ name: String) -> HTTPResponse? {
        guard name != "sos.html", let asset = files[name] else { return nil }
        var headers: [(name: String, value: String)] = [("Content-Type", asset.contentType), ("Cache-Control", "no-cache")]
        if name == "sw.js" { headers.append(("Service-Worker-Allowed", "/sos")) }
        return HTTPResponse(status: 200, headers: headers, body: .bytes(asset.bytes))
    }
}
