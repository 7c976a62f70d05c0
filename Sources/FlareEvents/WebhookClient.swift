public import FlareCore
import FlareCurl

/// Posts webhooks with libcurl (`HTTPPostClient`): HTTP/1.1 or HTTP/2, HTTPS verified against the system's CAs, to the
/// addresses the address rule checked and nowhere else. No cookies, no proxy from the environment, and never a
/// redirect: the receiver's answer to the request sent is the outcome. Called from the deliverer's threads, each
/// waiting for its own request.
public struct WebhookClient: WebhookPosting {
    private let client: HTTPPostClient

    /// - Parameter connectTimeout: for each address tried; a request's whole time limit is the deliverer's.
    public init(connectTimeout: Duration = .seconds(5)) {
        client = HTTPPostClient(connectTimeout: connectTimeout)
    }

    public func post(_ url: WebhookURL, connectingTo addresses: [IPAddress], headers: [(name: String, value: String)], body: [UInt8],
                     timeout: Duration) -> WebhookResponse {
        do {
            return .status(try client.post(url: url.text, connectingTo: addresses.map(\.text), headers: headers, body: body, timeout: timeout))
        } catch {
            return .failed(error.reason)
        }
    }
}

extension WebhookClient: PushPosting {
    public func post(_ url: WebhookURL, connectingTo addresses: [IPAddress], headers: [(name: String, value: String)], body: [UInt8],
                     timeout: Duration) -> PushResponse {
        do {
            let answer = try client.answer(url: url.text, connectingTo: addresses.map(\.text), headers: headers, body: body, timeout: timeout)
            return .status(answer.status, retryAfterSeconds: answer.retryAfterSeconds)
        } catch {
            return .failed(error.reason)
        }
    }
}
