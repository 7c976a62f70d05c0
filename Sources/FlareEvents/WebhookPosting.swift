public import FlareCore

/// What a webhook receiver answered: its HTTP status, or why there was none.
public enum WebhookResponse: Sendable, Equatable {
    case status(Int)
    case failed(String)
}

/// Sends one webhook request.
public protocol WebhookPosting: Sendable {
    /// Posts `body` to `url`, connecting to `addresses` and nowhere else: they are what the address rule checked, and
    /// another lookup of the name could answer something else. Never follows a redirect (a receiver could point
    /// flared anywhere).
    func post(_ url: WebhookURL, connectingTo addresses: [IPAddress], headers: [(name: String, value: String)], body: [UInt8],
              timeout: Duration) -> WebhookResponse
}

/// The operator's webhook (`FLARE_WEBHOOK_URL`, `FLARE_WEBHOOK_SECRET`): every share's events, to any address.
public struct ServerWebhook: Sendable {
    public let url: WebhookURL
    /// Every one signs each delivery (the new one first while receivers move over to it).
    public let secrets: [WebhookSecret]

    public init(url: WebhookURL, secrets: [WebhookSecret]) {
        self.url = url
        self.secrets = secrets
    }
}
