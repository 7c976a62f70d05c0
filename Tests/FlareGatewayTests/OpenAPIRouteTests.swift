import FlareAPI
import Foundation
import Testing
@testable import FlareGateway

/// The OpenAPI document (`Sources/FlareGateway/OpenAPI/openapi.json`) against the routes: it is served, every
/// documented operation is in `Gateway.routes` and every route in the document, the route switch answers each with a
/// status the document gives it (never the router's own "no such endpoint" or 405), and another method on a
/// documented path is refused.
@Suite struct OpenAPIRouteTests {
    /// With a metrics token, /metrics on the public listener is routed (without one it answers the router's 404).
    static let settings = ["FLARE_METRICS_TOKEN": "metrics-token-0123456789-abcdef", "FLARE_TRUSTED_PROXIES": "127.0.0.1"]
    static let methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    /// What the router may be asked beyond the documented methods.
    static let otherMethods = ["OPTIONS", "TRACE"]

    /// The document as `GET /api/v1/openapi.json` serves it.
    static func document(_ fixture: GatewayFixture) throws -> [String: Any] {
        let reply = fixture.send("GET", "/api/v1/openapi.json")
        try #require(reply.status == 200, "\(reply.status): \(reply.text.prefix(200))")
        return try #require(try JSONSerialization.jsonObject(with: Data(reply.bytes)) as? [String: Any])
    }

    /// Every documented operation: its method, path template, and the operation object.
    static func operations(_ document: [String: Any]) throws -> [(method: String, path: String, operation: [String: Any])] {
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        return paths.flatMap { path, item in
            item.compactMap { key, value -> (String, String, [String: Any])? in
                guard methods.contains(key.uppercased()), let operation = value as? [String: Any] else { return nil }
                return (key.uppercased(), path, operation)
            }
        }.sorted { ($0.path, $0.method) < ($1.path, $1.method) }
    }

    /// The path with each `{name}` replaced by its parameter's example.
    static func concrete(_ path: String, _ operation: [String: Any], _ document: [String: Any]) throws -> String {
        let components = document["components"] as? [String: Any]
        let shared = components?["parameters"] as? [String: [String: Any]] ?? [:]
        var examples: [String: String] = [:]
        for parameter in operation["parameters"] as? [[String: Any]] ?? [] {
            let resolved = (parameter["$ref"] as? String).flatMap { shared[String($0.split(separator: "/").last ?? "")] } ?? parameter
            if resolved["in"] as? String == "path", let name = resolved["name"] as? String {
                examples[name] = try #require(resolved["example"] as? String, "\(path): path parameter \(name) has no example")
            }
        }
        var result = path
        while let open = result.firstIndex(of: "{"), let close = result[open...].firstIndex(of: "}") {
            let name = String(result[result.index(after: open)..<close])
            result.replaceSubrange(open...close, with: try #require(examples[name], "\(path): {\(name)} is not a documented path parameter"))
        }
        return result
    }

    @Test func theDocumentIsServedOnceBuiltAsOpenAPI31WithItsVersionAndARelativeServer() throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        let reply = fixture.send("GET", "/api/v1/openapi.json")
        #expect(reply.status == 200)
        #expect(reply.contentType == "application/json")
        #expect(reply.header("Cache-Control")?.contains("max-age=") == true)
        let document = try Self.document(fixture)
        #expect(document["openapi"] as? String == "3.1.0")
        let info = try #require(document["info"] as? [String: Any])
        #expect((info["version"] as? String)?.isEmpty == false)
        #expect((info["description"] as? String)?.isEmpty == false)
        #expect((document["servers"] as? [[String: Any]])?.map { $0["url"] as? String } == ["/"])
        // Every credential the API takes has its scheme.
        let schemes = try #require((document["components"] as? [String: Any])?["securitySchemes"] as? [String: Any])
        #expect(Set(schemes.keys).isSuperset(of: ["ownerKey", "deviceToken", "deviceSecret", "alertsSecret", "ownTracksBasic"]))
        // A served document is the file in the build, byte for byte.
        #expect(fixture.send("GET", "/api/v1/openapi.json").bytes == reply.bytes)
        for method in ["POST", "PUT", "DELETE"] {
            #expect(fixture.send(method, "/api/v1/openapi.json").errorCode == "method_not_allowed", "\(method)")
        }
    }

    @Test func everyRouteIsDocumentedAndEveryDocumentedOperationIsARoute() throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        let documented = Set(try Self.operations(try Self.document(fixture)).map { "\($0.method) \($0.path)" })
        let listed = Gateway.routes.map { "\($0.method) \($0.path)" }
        #expect(Set(listed).count == listed.count, "Gateway.routes lists a route twice")
        let undocumented = Set(listed).subtracting(documented).sorted(), unlisted = documented.subtracting(listed).sorted()
        #expect(undocumented.isEmpty, "routes not in the document: \(undocumented)")
        #expect(unlisted.isEmpty, "documented operations not in Gateway.routes: \(unlisted)")
    }

    /// Each documented operation, asked with its path's examples and no credential: routed to its handler, which
    /// answers with a status the document gives it.
    @Test func theSwitchRoutesEveryDocumentedOperationToAnAnswerTheDocumentGivesIt() throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        let document = try Self.document(fixture)
        let operations = try Self.operations(document)
        try #require(operations.count == Gateway.routes.count)
        for (index, (method, template, operation)) in operations.enumerated() {
            let path = try Self.concrete(template, operation, document)
            // From an address of its own: no request spends another's rate limit.
            let reply = try fixture.request(.memory, method, path, from: "198.51.100.\(index % 250 + 1)")
            let body = try? reply.decode(APIErrorBody.self)
            #expect(!(reply.status == 404 && body?.message == "no such endpoint") && reply.status != 405,
                    "\(method) \(template) (\(path)) was not routed: \(reply.status) \(reply.text.prefix(120))")
            let statuses = Set((operation["responses"] as? [String: Any] ?? [:]).keys)
            #expect(statuses.contains(String(reply.status)), "\(method) \(template) answered \(reply.status), not in the document's \(statuses.sorted())")
        }
    }

    /// A method the document does not give a path is refused there: 405 with `Allow` (the documented methods) on the
    /// API, the links and the operator's endpoints; 404 on the pages' files, which answer only what they serve.
    @Test func anotherMethodOnADocumentedPathIsRefused() throws {
        let fixture = try GatewayFixture(settings: Self.settings)
        let document = try Self.document(fixture)
        let operations = try Self.operations(document)
        let byPath = Dictionary(grouping: operations, by: \.path)
        var index = 0
        for (template, documented) in byPath.sorted(by: { $0.key < $1.key }) {
            let path = try Self.concrete(template, documented[0].operation, document)
            let refusesWith405 = template.hasPrefix("/api/") || template.hasPrefix("/s/") || template == "/healthz" || template == "/metrics"
            for method in Self.methods + Self.otherMethods where !documented.contains(where: { $0.method == method }) {
                index += 1
                let reply = try fixture.request(.memory, method, path, from: "203.0.113.\(index % 250 + 1)")
                if refusesWith405 {
                    #expect(reply.status == 405 && reply.errorCode == "method_not_allowed", "\(method) \(template): \(reply.status) \(reply.text.prefix(120))")
                    // RFC 9110: a 405 says which methods the path takes, the document's.
                    let allowed = Set((reply.header("Allow") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
                    #expect(allowed == Set(documented.map(\.method)), "\(method) \(template): Allow \(reply.header("Allow") ?? "none")")
                } else {
                    #expect(reply.status == 404, "\(method) \(template): \(reply.status) \(reply.text.prefix(120))")
                }
            }
        }
        let metrics = try fixture.request(.memory, "POST", "/metrics", listener: .metrics)
        #expect(metrics.status == 405 && metrics.header("Allow") == "GET")
    }
}
