import FlareCore
import FlareNATS
import FlareStore
import FlareSystem

/// Answers the NATS cluster's auth callout: every login to any node (a phone's, an integrator's, flared's own) comes
/// here as a request on `$SYS.REQ.USER.AUTH`, and every flared instance answers as one member of the queue group
/// `flared`, so no login depends on one process. The rules are `NATSAuthCallout.decide`'s; this is the transport and
/// the store look-up.
public final class AuthCalloutResponder: Sendable {
    public static let requestSubject = "$SYS.REQ.USER.AUTH"
    public static let queueGroup = "flared"
    /// The account every login lands in (broker/nats/node.conf.in).
    public static let account = "APP"

    private let connection: NATSConnection
    private let tokenKey: [UInt8]
    private let servicePassword: [UInt8]
    private let issuerSeed: [UInt8]
    private let shares: any ShareRecords
    private let clock: any WallClock
    private let logger: Logger
    /// Wrong passwords for flared's full-access login, per client address: 10 at once, then one a minute. Past that the
    /// address's service logins are refused unchecked (phones' share tokens are not: one phone's carrier address is
    /// many people's, and a token cannot be guessed).
    private let serviceGuesses = RateLimiter(rule: .init(ratePerSecond: 1.0 / 60, burst: 10), maximumKeys: 10_000)

    /// Connects to the cluster as the callout's own user (`flare-auth`, in the AUTH account, with `calloutPassword`) and
    /// starts answering; `servicePassword` is flared's own full-access login's, which only this checks.
    public init(servers: [String], calloutPassword: String, servicePassword: String, issuerSeed: [UInt8], tokenKey: [UInt8],
                shares: any ShareRecords, clock: any WallClock, logger: Logger, instanceName: String) throws(NATSError) {
        self.tokenKey = tokenKey
        self.servicePassword = Array(servicePassword.utf8)
        self.issuerSeed = issuerSeed
        self.shares = shares
        self.clock = clock
        self.logger = logger
        connection = try NATSConnection(servers: servers, user: "flare-auth", password: calloutPassword, name: "\(instanceName)-auth")
        try connection.subscribe(Self.requestSubject, queue: Self.queueGroup) { [self] message in answer(message) }
        try connection.flush()
    }

    /// Stops answering (the subscription's handler holds the responder: it lives until this or the process ends).
    public func close() {
        connection.close()
    }

    private func answer(_ message: NATSMessage) {
        guard let reply = message.reply else { return }
        let now = clock.now() / 1000
        let request: NATSAuthCallout.Request
        do {
            request = try NATSAuthCallout.parseRequest(message.payload, nowSeconds: now)
        } catch {
            // Nothing to answer to: without a user key the server cannot match an answer. It times the login out.
            logger.warning("auth callout: unreadable request (\(error))")
            return
        }
        let shares = self.shares
        let isService = request.username == NATSAuthCallout.serviceUsername
        let guessing = isService && serviceGuesses.wouldRefuse(request.clientHost, nowMillis: monotonicMillis())
        var decision = guessing ? .refuse("too many wrong passwords from this address; wait a minute")
            : NATSAuthCallout.decide(request, tokenKey: tokenKey, servicePassword: servicePassword, nowSeconds: now) { id throws in
                guard let stored = try shares.share(id: id) else { return false }
                return stored.share.isActive
            }
        if isService, !guessing, case .refuse = decision, serviceGuesses.take(request.clientHost, nowMillis: monotonicMillis()) != nil {
            decision = .refuse("too many wrong passwords from this address; wait a minute")
        }
        if case .refuse(let reason) = decision {
            // The username is a share id or a service name, never a secret; the password is never logged.
            logger.info("auth callout: refused \(request.clientType) login of \(Self.printable(request.username)): \(reason)")
        }
        let response = NATSAuthCallout.response(to: request, decision: decision, account: Self.account, issuerSeed: issuerSeed, nowSeconds: now)
        do {
            try connection.publish(reply, response)
        } catch {
            logger.warning("auth callout: could not answer (\(error))")
        }
    }

    /// At most 40 characters of [A-Za-z0-9_-], so a hostile username cannot write into the log.
    static func printable(_ name: String) -> String {
        String(name.unicodeScalars.prefix(40).map { scalar -> Character in
            scalar.properties.isASCIIHexDigit || ("A"..."Z").contains(scalar) || ("a"..."z").contains(scalar) || scalar == "-" || scalar == "_"
                ? Character(scalar) : "?"
        })
    }
}
