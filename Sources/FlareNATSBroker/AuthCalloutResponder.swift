import Dispatch
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
    private let clock: any Clock
    private let logger: Logger
    /// Wrong passwords for flared's full-access login, per client address: 10 at once, then one a minute. Past that each
    /// further wrong one is answered only after `guessDelay`, so one connection tries one password in that time; the
    /// right one is never held back or refused. Not a lock-out: behind the phones' balancer every client has the
    /// balancer's address, flared's own MQTT login too, and a lock-out would let anyone cut flared off the cluster.
    /// (Share tokens are not counted: they cannot be guessed, and one carrier address is many people's.)
    private let serviceGuesses = RateLimiter(rule: .init(ratePerSecond: 1.0 / 60, burst: 10), maximumKeys: 10_000)
    public static let guessDelay: Duration = .seconds(2)

    /// Connects to the cluster as the callout's own user (`flare-auth`, in the AUTH account, with `calloutPassword`) and
    /// starts answering; `servicePassword` is flared's own full-access login's, which only this checks.
    public init(servers: [String], calloutPassword: String, servicePassword: String, issuerSeed: [UInt8], tokenKey: [UInt8],
                shares: any ShareRecords, clock: any Clock, logger: Logger, instanceName: String) throws(NATSError) {
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
        let decision = NATSAuthCallout.decide(request, tokenKey: tokenKey, servicePassword: servicePassword, nowSeconds: now) { id throws in
            guard let stored = try shares.share(id: id) else { return false }
            return stored.share.isActive
        }
        var heldBack = false
        if case .refuse(let reason) = decision {
            // The username is a share id or a service name, never a secret; the password is never logged.
            logger.info("auth callout: refused \(request.clientType) login of \(Self.printable(request.username)): \(reason)")
            heldBack = request.username == NATSAuthCallout.serviceUsername
                && serviceGuesses.take(request.clientHost, nowMillis: clock.monotonicMillis()) != nil
        }
        let response = NATSAuthCallout.response(to: request, decision: decision, account: Self.account, issuerSeed: issuerSeed, nowSeconds: now)
        guard heldBack else { return send(response, to: reply) }
        // Off this thread, which answers every login.
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(Self.guessDelay.components.seconds * 1000))) { [self] in
            send(response, to: reply)
        }
    }

    private func send(_ response: [UInt8], to reply: String) {
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
