import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A blocking JSON-over-HTTP call for a command-line tool: one request, its status and body, or a clear error.
struct HTTPClient {
    struct Response {
        let status: Int
        let body: Data
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] }
        var errorMessage: String {
            if let json, let message = json["message"] as? String {
                return "\(message) (\(json["error"] as? String ?? "HTTP \(status)"))"
            }
            return "HTTP \(status)"
        }
    }

    let baseURL: String
    let bearer: String?

    func send(_ method: String, _ path: String, body: [String: Any]? = nil) throws -> Response {
        guard let url = URL(string: baseURL + path) else { throw CLIError("invalid server URL \(baseURL)") }
        var request = URLRequest(url: url, timeoutInterval: 15)
        request.httpMethod = method
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = try JSONSerialization.data(withJSONObject: body)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: request) { data, response, error in
            outcome.set(data: data, status: (response as? HTTPURLResponse)?.statusCode, error: error)
            done.signal()
        }.resume()
        done.wait()
        let (data, status, error) = outcome.get()
        if let error { throw CLIError("cannot reach Flare at \(baseURL): \(error.localizedDescription)") }
        return Response(status: status ?? 0, body: data ?? Data())
    }

    /// Carries the completion handler's results back to the waiting thread.
    private final class Outcome: @unchecked Sendable {
        // @unchecked: written once by the completion handler before the semaphore is signalled, read after.
        private var data: Data?
        private var status: Int?
        private var error: (any Error)?
        func set(data: Data?, status: Int?, error: (any Error)?) {
            self.data = data
            self.status = status
            self.error = error
        }
        func get() -> (Data?, Int?, (any Error)?) { (data, status, error) }
    }
}

struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
