import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The device's side of Flare, with the one credential a phone or a button needs: its device secret (from
/// `flare devices add`, `POST /api/v1/devices`). It starts the device's SOS (a share with a personal link for each of
/// the device's contacts, who are told at once), reports positions into it, reads it and stops it; nothing else. A
/// stolen phone exposes one person's SOS, not the owner's account: the owner issues a new secret
/// (`flare devices secret ID`) and the old one stops at once.
///
/// Every call sends the secret as `Authorization: Bearer`, and retries outages as `FlareClient` does (5xx, 408, 429,
/// no answer; honouring `Retry-After`). An unknown or replaced secret answers 404 `unknown_device`; retrying cannot
/// help then, only a new secret from the owner.
public final class DeviceClient: Sendable {
    public let baseURL: URL
    private let secret: String
    private let transport: FlareClient

    /// The retry policy and per-request timeout of every call.
    public var retry: RetryPolicy { transport.retry }
    public var timeout: TimeInterval { transport.timeout }

    /// - Parameters:
    ///   - baseURL: Flare's public address, e.g. `https://flare.example.org`.
    ///   - secret: the device's secret; keep it in the Keychain (docs/ios.md), never in logs.
    public init(baseURL: URL, secret: String, session: URLSession = .shared, retry: RetryPolicy = RetryPolicy(), timeout: TimeInterval = 15) {
        self.baseURL = baseURL
        self.secret = secret
        transport = FlareClient(baseURL: baseURL, session: session, retry: retry, timeout: timeout)
    }

    /// Starts the device's SOS, or finds it live: `repeated` is then true, the share and links are the same, and the
    /// contacts read that it was pressed again (a mail at most once a minute, the start's mail counting as the first).
    /// So a retry after a lost answer starts nothing twice. After a stop (or a duress PIN) a press starts a new SOS.
    /// `first`, when given, is stored with the start: the contacts' map has a position at once.
    ///
    /// Refusals: 429 `sos_limit` (as many starts as an hour allows; `retryAfter` says when), 409 `sos_refused`.
    public func startSOS(first: Location? = nil) async throws(FlareClientError) -> SOSStarted {
        let body = try first.map { location throws(FlareClientError) in try FlareClient.encode(location) }
        let answer = try await transport.exchange("POST", "api/v1/devices/sos", query: [], bearer: secret, body: body, accepting: [200, 201],
                                                  retry: transport.retry)
        return try FlareClient.decode(SOSStarted.self, from: answer.data, status: answer.status)
    }

    /// Reports one position: true when it went into the live SOS, false when there is none (the server answered
    /// `not_sharing` and dropped it, keeping nothing). Positions are only ever stored during an SOS, so an app may
    /// report whenever it has one. A fix Flare refuses (`invalid_coordinates`, `stale_timestamp`, …) throws its 4xx.
    public func reportLocation(_ location: Location) async throws(FlareClientError) -> Bool {
        let answer = try await transport.exchange("POST", "api/v1/devices/locations", query: [], bearer: secret,
                                                  body: try FlareClient.encode(location), accepting: [200, 202], retry: transport.retry)
        if answer.status == 202 { return true }
        let dropped = try FlareClient.decode(DevicePositionDropped.self, from: answer.data, status: answer.status)
        guard dropped.status == "not_sharing" else {
            throw .unexpectedResponse(status: answer.status, detail: "a position answered \(dropped.status), not not_sharing")
        }
        return false
    }

    /// Stops the device's SOS. A device with a PIN needs it: a wrong one answers 403 `wrong_pin` and the SOS goes on;
    /// after five, stopping is locked for a while (403 `stop_locked`, `retryAfter`) and the contacts are told. Stopping
    /// when nothing is live answers what `sosState` would.
    public func stopSOS(pin: String? = nil) async throws(FlareClientError) -> SOSState {
        try await transport.call("POST", "api/v1/devices/sos/stop", bearer: secret, encodable: SOSStopRequest(pin: pin), expecting: 200,
                                 retry: transport.retry)
    }

    /// The device's SOS: `none` (never started), `live` (with its share, its end, who opened their links and the
    /// family's answers) or `stopped`.
    public func sosState() async throws(FlareClientError) -> SOSState {
        try await transport.call("GET", "api/v1/devices/sos", bearer: secret, body: nil, expecting: 200)
    }

    /// What an SOS button shows before a press: the person's name, the countdown, whether stopping needs a PIN, and
    /// the contacts with their numbers (for an SMS when Flare cannot be reached).
    public func card() async throws(FlareClientError) -> DeviceCard {
        try await transport.call("GET", "api/v1/devices/me", bearer: secret, body: nil, expecting: 200)
    }

    /// Moves the live SOS's end to `durationSeconds` from now (nil: the device's own duration). 409 `not_sharing`
    /// without a live SOS.
    public func extendSOS(durationSeconds: Double? = nil) async throws(FlareClientError) -> SOSState {
        try await transport.call("POST", "api/v1/devices/sos/extend", bearer: secret, encodable: SOSExtendRequest(durationSeconds: durationSeconds),
                                 expecting: 200, retry: transport.retry)
    }
}
