import FlareHTTP
import Foundation

/// The OpenAPI 3.1 document of the HTTP API (`OpenAPI/openapi.json`, beside the routes): every endpoint, its
/// parameters, bodies, statuses and errors. Read once at start-up and served as it is at `GET /api/v1/openapi.json`;
/// `OpenAPIRouteTests` holds it against `Gateway.routes` and the route switch, and the schemas against `FlareAPI`.
struct OpenAPIDocument: Sendable {
    let bytes: [UInt8]

    init() throws(ViewerAssets.LoadError) {
        guard let url = Bundle.module.url(forResource: "OpenAPI", withExtension: nil)?.appendingPathComponent("openapi.json"),
              let data = FileManager.default.contents(atPath: url.path) else {
            throw ViewerAssets.LoadError(description: "the OpenAPI document (OpenAPI/openapi.json) is missing from the build")
        }
        bytes = Array(data)
    }

    /// The same bytes for everyone, changing only with a new build: an hour in any cache is fine.
    var response: HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "application/json"), ("Cache-Control", "public, max-age=3600")], body: .bytes(bytes))
    }
}
