@_exported public import FlareAPI
import Foundation

/// Flare's error shape, `{"error":"<code>","message":"…"}`, with the HTTP status it came with.
public struct FlareAPIError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    /// Machine-readable: `unauthorized`, `not_found`, `share_ended`, `invalid_coordinates`, `rate_limited`, …
    public let code: String
    public let message: String
    /// From a `Retry-After` header (429, 503), in seconds.
    public let retryAfter: Double?

    public init(status: Int, code: String, message: String, retryAfter: Double? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    /// Worth trying again: the server or something in front of it is unavailable, or asked us to slow down.
    /// An outage, worth asking again soon. Not `sos_limit`: the device started as many SOS as an hour allows, and a
    /// press waiting in a call for up to an hour would leave the person with a button that does nothing they can see.
    public var isRetryable: Bool { (status >= 500 || status == 429 || status == 408) && code != "sos_limit" }
    /// The share is over (ended, or its device token no longer valid): stop reporting.
    public var meansShareIsOver: Bool { code == "share_ended" || status == 410 || status == 401 }

    public var description: String { "\(status) \(code): \(message)" }
}

/// Everything a `FlareClient` call can throw.
public enum FlareClientError: Error, Sendable, CustomStringConvertible {
    /// The server answered with an error.
    case api(FlareAPIError)
    /// No answer: no network, connection refused, timeout. Worth retrying.
    case transport(String)
    /// An answer that is not what the API promises (a proxy's HTML page, a truncated body).
    case unexpectedResponse(status: Int, detail: String)
    /// The client needs a credential it was not given (e.g. creating a share without an owner key).
    case missingCredential(String)

    public var isRetryable: Bool {
        switch self {
        case .api(let error): error.isRetryable
        case .transport: true
        case .unexpectedResponse(let status, _): status >= 500
        case .missingCredential: false
        }
    }

    public var description: String {
        switch self {
        case .api(let error): "Flare answered \(error)"
        case .transport(let detail): "no answer from Flare: \(detail)"
        case .unexpectedResponse(let status, let detail): "unexpected answer from Flare (\(status)): \(detail)"
        case .missingCredential(let detail): detail
        }
    }
}

/// How an OwnTracks app provisioned for a share reaches Flare.
public enum OwnTracksMode: String, Sendable {
    /// MQTT to Flare's broker (the default): live, and the family sees when the phone goes offline.
    case mqtt
    /// The apps' HTTP mode, one POST per message, for networks that block MQTT's ports.
    case http

    var query: [(String, String)] { self == .mqtt ? [] : [("mode", rawValue)] }
}
