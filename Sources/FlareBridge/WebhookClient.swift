import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Posts webhooks with Foundation's URLSession (libcurl on Linux: HTTP/1.1 and HTTPS with the system's CAs). No
/// cookies, no cache, no proxy from the environment, and never a redirect: the receiver's answer to the request sent
/// is the outcome. Called from the deliverer's worker threads, each waiting for its own request.
public final class WebhookClient: NSObject, WebhookPosting, URLSessionTaskDelegate, @unchecked Sendable {
    // @unchecked: `session` is set once in init; URLSession is thread-safe.
    private var session: URLSession!

    public override init() {
        super.init()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.httpShouldSetCookies = false
        configuration.connectionProxyDictionary = [:]
        configuration.httpMaximumConnectionsPerHost = 1
        session = URLSession(configuration: configuration, delegate: self, delegateQueue: nil)
    }

    public func post(url: String, headers: [(name: String, value: String)], body: [UInt8], timeout: Duration) -> WebhookResponse {
        guard let target = URL(string: url) else { return .failed("not a URL") }
        var request = URLRequest(url: target)
        request.httpMethod = "POST"
        request.timeoutInterval = Double(timeout.components.seconds)
        for header in headers { request.setValue(header.value, forHTTPHeaderField: header.name) }
        request.httpBody = Data(body)
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        let task = session.dataTask(with: request) { _, response, error in
            if let http = response as? HTTPURLResponse {
                outcome.set(.status(http.statusCode))
            } else {
                outcome.set(.failed(error.map { Self.describe($0) } ?? "no answer"))
            }
            done.signal()
        }
        task.resume()
        if done.wait(timeout: .now() + .seconds(Int(timeout.components.seconds) + 5)) == .timedOut {
            task.cancel()
            return .failed("no answer within \(timeout.components.seconds) s")
        }
        return outcome.value ?? .failed("no answer")
    }

    /// A redirect is answered with the redirect itself (a 3xx: failed, tried again later), never followed.
    public func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                           newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    /// What went wrong, without the URL (it may hold a path the key's owner considers private).
    private static func describe(_ error: Error) -> String {
        let nsError = error as NSError
        switch nsError.code {
        case NSURLErrorTimedOut: return "timed out"
        case NSURLErrorCannotConnectToHost: return "connection refused"
        case NSURLErrorCannotFindHost, NSURLErrorDNSLookupFailed: return "host not found"
        case NSURLErrorNetworkConnectionLost: return "connection lost"
        case NSURLErrorSecureConnectionFailed, NSURLErrorServerCertificateUntrusted, NSURLErrorServerCertificateHasBadDate,
             NSURLErrorServerCertificateNotYetValid, NSURLErrorServerCertificateHasUnknownRoot: return "TLS failed"
        default: return "request failed (\(nsError.code))"
        }
    }

    private final class Outcome: @unchecked Sendable {
        // @unchecked: written once by the completion handler before the semaphore is signalled, read after it.
        private(set) var value: WebhookResponse?
        func set(_ value: WebhookResponse) { self.value = value }
    }
}
