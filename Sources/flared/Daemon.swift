import Dispatch
import FlareBridge
import FlareEvents
import FlareShares
import FlareCore
import FlareCrypto
import FlareGateway
import FlareHTTP
import FlareMQTT
import FlareNATS
import FlareNATSBroker
import FlareDaemonSettings
import FlareSQLite
import FlareStore
import FlareStoreOpener
import Foundation
import FlareSystem
import FlareIngest
import FlareSettings

/// Builds the service from its configuration: the parts, and the list they start and stop in.
final class Daemon: Sendable {
    let logger: Logger
    let services: ServiceGroup
    let shutdownTimeout: Duration

    init(configuration config: Configuration) throws {
        // Every setting read and checked before anything is created or opened: a bad one leaves nothing half-started.
        let settings = try DaemonSettings(config)
        let logger = Logger(label: "flared", level: settings.logLevel)
        self.logger = logger
        shutdownTimeout = settings.shutdownTimeout
        let storeGraceSeconds = settings.storeGraceSeconds
        let clock = SystemClock()
        let metrics = Metrics()
        let dataDirectory = settings.dataDirectory
        try DataDirectory.prepare(dataDirectory)
        let httpAddress = settings.httpAddress, metricsAddress = settings.metricsAddress
        let location = try StoreLocation(url: settings.storeURL, dataDirectory: dataDirectory)
        let clientID = settings.clientID
        let store: any ShareStore
        do { store = try StoreOpener.open(location, instance: clientID) } catch {
            throw StartupFailure("open the store (FLARE_STORE_URL: \(location))", error)
        }
        let tokenKey = try DataDirectory.tokenKey(in: dataDirectory, logger: logger)
        try DataDirectory.ensureOwnerKey(in: dataDirectory, store: store, clock: clock, logger: logger)

        let broker = try BrokerChoice.from(settings)
        let mqttOptions = broker.clientOptions(clientID: clientID, url: settings.mqttURL)
        let client = try MQTTClient(options: mqttOptions)
        let wiring = try broker.wire(client: client, options: mqttOptions, tokenKey: tokenKey, store: store, clock: clock, logger: logger)

        let mailing = settings.mailServer.map { server in
            ContactMailing(server: server, sender: SMTPMailer(server: server),
                           composer: ContactNotices(store: store, tokenKey: tokenKey, publicURL: settings.gateway.publicURL,
                                                     offersAlerts: settings.push != nil, clock: clock))
        }
        var gatewayConfiguration = settings.gateway
        let pushing = try settings.push.map { push in
            let vapid: (key: VAPIDKey, created: Bool)
            do { vapid = try WebPushing.key(in: store, tokenKey: tokenKey) } catch { throw StartupFailure("read the VAPID key (FLARE_VAPID_SUBJECT)", error) }
            logger.info(vapid.created ? "made the Web Push (VAPID) key; it is kept in the store" : "Web Push is on")
            gatewayConfiguration.push = .init(publicKey: vapid.key.publicKey, allowsLoopback: push.allowsLoopback)
            return WebPushing(key: vapid.key, subject: push.subject,
                              composer: PushNotices(store: store, tokenKey: tokenKey, publicURL: settings.gateway.publicURL),
                              allowsLoopback: push.allowsLoopback)
        }
        if pushing == nil { logger.info("Web Push is off: set FLARE_VAPID_SUBJECT=mailto:you@example.org to alert family members in their browsers") }
        let deliverer = EventDeliverer(store: store, publisher: wiring.publisher, poster: WebhookClient(), serverWebhook: settings.serverWebhook,
                                       mailing: mailing, pushing: pushing, sealer: WebhookSecretSealer(tokenKey: tokenKey), holder: clientID,
                                       clock: clock, metrics: metrics, logger: logger.with(label: "events"))
        let sweeper = RetainedSweeper(bridgeOptions: mqttOptions, logger: logger.with(label: "sweeper"))
        let shares = ShareService(store: store, trailLength: settings.trailLength, publisher: wiring.publisher,
                                  tokenKey: tokenKey, policy: settings.policy, trackerRules: settings.trackerRules, clock: clock, metrics: metrics,
                                  logger: logger.with(label: "shares"), eventDestinations: deliverer.destinations,
                                  mailsContacts: deliverer.mailsContacts, pushes: deliverer.pushes, mailPerKeyPerHour: settings.mailPerKeyPerHour,
                                  eventRecorded: { deliverer.wake() }, sweepRetained: { sweeper.sweep($0) },
                                  sosPerDevicePerHour: settings.sosPerDevicePerHour)
        let checkins = CheckinWatcher(shares: shares, store: store, holder: clientID, clock: clock, logger: logger.with(label: "checkins"))
        let ingestor = FixIngestor(store: store, shares: shares, metrics: metrics, logger: logger.with(label: "bridge"), clock: clock, parser: settings.parser)
        // With a shared store, every instance takes a share of the location stream; each learns of the fixes and
        // shares the others stored from the store's change feed (PostgreSQL LISTEN/NOTIFY: it is sent in the same
        // transaction as the write, so an instance hears of exactly what is stored, in commit order, even while the
        // broker is away; the retained status topic stays what integrators follow).
        let isShared: Bool
        if case .postgresql = location { isShared = true } else { isShared = false }
        let bridgeService = wiring.bridge(ingestor: ingestor, shares: shares, store: store, settings: settings, isShared: isShared,
                                          clock: clock, metrics: metrics, logger: logger.with(label: "bridge"))

        // The free-space check watches the disk of the SQLite file; a database server watches its own.
        let space: StoreSpace?
        if case .sqlite(let path) = location {
            let sqliteSpace = StoreSpace(storePath: path, minimumFreeBytes: settings.storeMinimumFreeBytes,
                                         logger: logger.with(label: "store"))
            metrics.registerGauge(FlareMetrics.storeFreeBytes) { Double(sqliteSpace.read().freeBytes ?? -1) }
            space = sqliteSpace
        } else {
            space = nil
        }
        let gateway = try Gateway(configuration: gatewayConfiguration, shares: shares, ingestor: ingestor,
                                  metrics: metrics, logger: logger.with(label: "gateway"), clock: clock, parser: settings.parser) {
            HealthReport(mqttConnected: client.isConnected, storeHealthy: ingestor.isStoreHealthy, storeSpaceLow: space?.read().isLow ?? false)
        }
        var serverConfiguration = HTTPServer.Configuration(host: httpAddress.host, port: httpAddress.port)
        serverConfiguration.threadPoolSize = settings.httpThreads
        serverConfiguration.maxHeaderBytes = 8 * 1024
        let httpLogger = logger.with(label: "http")
        serverConfiguration.errorLog = { message in httpLogger.warning(Logger.redactingSecrets(message)) }
        let server = HTTPServer(configuration: serverConfiguration, handler: gateway.handle)
        // /metrics on a listener of its own: one thread and a few connections are plenty for scrapers.
        let metricsServer = metricsAddress.map { address in
            var metricsConfiguration = HTTPServer.Configuration(host: address.host, port: address.port, threadPoolSize: 1, connectionLimit: 64,
                                                                 maxBodyBytes: 1024, maxHeaderBytes: 8 * 1024)
            metricsConfiguration.errorLog = serverConfiguration.errorLog
            return HTTPServer(configuration: metricsConfiguration, handler: gateway.handleMetricsListener)
        }

        // Started top to bottom, stopped bottom to top: HTTP stops taking requests first, then the bridge stops taking
        // MQTT messages, then the writer stores what is queued, and the expiry timers go last.
        services = ServiceGroup([
            .init("shares (load, expiry timers, other instances' changes)", start: {
                shares.followOtherInstances()
                try shares.recover()
            }, stop: { _ in
                shares.stopFollowing()
                shares.stopScheduler()
                sweeper.stop()
                return true
            }),
            .init("store writer", start: { ingestor.start() }, stop: { remaining in
                logger.info("writing \(ingestor.queueDepth) queued fixes")
                let grace = min(storeGraceSeconds, max(1, Int(remaining.components.seconds) - 1))
                if let unwritten = ingestor.drain(failingStoreGraceSeconds: grace) {
                    logger.error("the store kept failing: \(unwritten) received fixes could not be written; those that came at QoS 1 were not acknowledged, so the broker delivers them again when flared is back (QoS 0 ones are lost)")
                    return false
                }
                return true
            }),
            bridgeService,
            .init("check-in deadlines", start: { checkins.start() }, stop: { _ in
                checkins.stop()
                return true
            }),
            .init("event delivery", start: { deliverer.start() }, stop: { _ in
                deliverer.stop()
                return true
            }),
            .init("HTTP gateway", start: {
                try server.start()
                logger.info("HTTP gateway listening on port \(server.port)")
            }, stop: { _ in
                gateway.closeLiveStreams()
                server.stop()
                return true
            }),
            .init("metrics listener", start: {
                guard let metricsServer, let metricsAddress else {
                    logger.info("no metrics listener (FLARE_METRICS_ADDR is empty)")
                    return
                }
                do { try metricsServer.start() } catch {
                    throw StartupFailure("listen at FLARE_METRICS_ADDR=\(metricsAddress.description)", error,
                                         advice: "set it to a free address, or empty for no metrics listener")
                }
                logger.info("metrics at http://\(metricsAddress.description)/metrics")
            }, stop: { _ in
                metricsServer?.stop()
                return true
            }),
        ], logger: logger)
        if let serverWebhook = settings.serverWebhook { logger.info("events go to the webhook at \(serverWebhook.url.host) as well") }
        if let mailServer = settings.mailServer {
            logger.info("contacts are mailed through \(mailServer) from \(mailServer.from)\(mailServer.requiresTLS || mailServer.url.hasPrefix("smtps") ? "" : " (STARTTLS if offered: a loopback relay)")")
        } else {
            logger.info("contacts are not mailed (no FLARE_SMTP_URL): personal links are for the owner to send")
        }
        logger.info("data in \(dataDirectory), store \(location); links as \(settings.gateway.publicURL)/s/…; broker \(settings.nats == nil ? "" : "NATS cluster, MQTT at ")\(settings.mqttURL.host):\(settings.mqttURL.port)")
    }

    func start() throws {
        try services.start(stopDeadline: shutdownTimeout)
    }

    /// The ordered drain under the overall deadline. Returns the exit status: 0 when everything stopped cleanly.
    func shutdown() -> Int32 {
        logger.info("shutting down (at most \(shutdownTimeout.components.seconds) s; a second signal stops at once)")
        switch services.stopAndWait(deadline: shutdownTimeout) {
        case .clean:
            logger.info("stopped cleanly")
            return 0
        case .incomplete(let services):
            logger.error("stopped, but \(services.joined(separator: ", ")) could not finish")
            return 1
        case .timedOut(let services):
            logger.error("shutdown took longer than \(shutdownTimeout.components.seconds) s (FLARE_SHUTDOWN_TIMEOUT_S); exiting with \(services.joined(separator: ", ")) not stopped")
            return 1
        }
    }

    /// A second signal during the drain: exit now, saying what was left undone.
    func abandonShutdown() -> Never {
        let left = services.remaining
        logger.error("second signal: exiting now\(left.isEmpty ? "" : "; not stopped: \(left.joined(separator: ", "))")")
        exit(1)
    }
}
