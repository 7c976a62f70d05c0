public import FlareCore
public import FlareStore
import FlareCrypto
import FlareSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Delivers the store's outbox: every event at least once to each of its destinations (the MQTT events topic, the
/// operator's webhook, the owning key's webhook, a contact's mail), retried with exponential backoff for 24 h
/// (`EventRetry`).
///
/// One instance delivers at a time: the holder of the store lease `leaseName` (renewed every second, taken over by
/// another instance `leaseMillis` after its holder stops), so that several instances do not send each event several
/// times. Events recorded on this instance wake it at once; those recorded elsewhere are found within a second.
///
/// Deliveries run on threads of their own, one destination per thread at a time and in order within it: ingest and the
/// link endpoints only ever insert a row into the outbox. A receiver that is down or slow holds up only its own events:
/// - the topic, the operator's webhook and the mail to contacts have a thread each; the keys' webhooks share
///   `keyWorkers`, so no number of slow key receivers holds up the topic or the operator's webhook;
/// - a contact's mail ends in an event of its own, `contact.notified` or `contact.notification_failed`, recorded with
///   the end of the delivery in one transaction; its `Message-ID` is derived from the event and the link, so a mail
///   whose outcome was unknown (no answer) and is sent again is one mail to the receiving side;
/// - a webhook lane's turn on a thread ends after `turnMillis`, or at a delivery that got no answer, and the lane that
///   has waited longest goes next: slow keys take turns with the others rather than keeping a thread for a whole batch;
/// - a destination that did not answer rests (`firstRestMillis`, doubling up to `longestRestMillis`) before it is tried
///   again, so a silent receiver costs a thread one request timeout per rest, not one per event.
public final class EventDeliverer: @unchecked Sendable {
    // @unchecked: `state` is only touched with `lock` held; everything else is immutable.
    public static let leaseName = "event-delivery"
    static let leaseMillis: Int64 = 10_000
    /// Threads for the keys' webhooks; the topic and the operator's webhook have one each besides.
    static let keyWorkers = 4
    /// Deliveries read at once per destination.
    static let batch = 500
    /// The shortest time between two reads of the outbox: what a new event may wait before it is sent.
    static let coalesceMillis: Int64 = 50
    /// Deliveries one worker takes from a lane at once: the topic's are published back to back and acknowledged
    /// together, and each batch's successes are recorded in one transaction.
    static let laneBatch = 200
    /// How long a webhook lane keeps its thread; what is left of its batch waits at the front of the lane.
    static let turnMillis: Int64 = 5_000
    /// How long a destination rests after a delivery that got no answer; each further one doubles it, up to
    /// `longestRestMillis`, and an answer ends it.
    static let firstRestMillis: Int64 = EventRetry.firstDelayMillis
    static let longestRestMillis: Int64 = 300_000
    /// A webhook request's time limit unless the deliverer is given another: the receiver answers within it, or the
    /// delivery fails.
    public static let defaultRequestTimeout: Duration = .seconds(10)

    private struct State {
        var holding = false
        /// The last lease renewal failed (the store is away or locked).
        var storeFailing = false
        var nextLeaseAttemptAt: Int64 = 0
        var nextBacklogAt: Int64 = 0
        /// Per destination, the deliveries handed to the workers and not yet done, in order.
        var lanes: [EventDestination: [OutboxDelivery]] = [:]
        var busy: Set<EventDestination> = []
        /// When each lane last had its turn (turns counted): the lane with the oldest goes next.
        var lastTurn: [EventDestination: Int] = [:]
        /// When each owning key's lanes last had a turn: among the lanes a thread takes, the key that waited longest
        /// goes first, so that one key's backlog of mails (a lane each) adds at most one send to another key's mail.
        /// Kept for keys that have nothing waiting too (an old turn sorts before every recent one, as a new key's -1
        /// does): one entry per owner key at most, and no scan of the lanes when one empties.
        var lastKeyTurn: [Int64?: Int] = [:]
        var turns = 0
        /// Destinations whose last delivery got no answer: not tried again before `until` (monotonic ms); `times` in a row.
        var resting: [EventDestination: (until: Int64, times: Int)] = [:]
        /// (event row, destination) of everything in `lanes` or being sent, so that the next read skips them.
        var inFlight: Set<InFlight> = []
        var woken = false
        var stopping = false
        var readerFinished = false
        /// Not joined: see `stop`.
        var threads: [NamedThread] = []
    }

    private struct InFlight: Hashable {
        let row: Int64
        let destination: EventDestination
    }

    /// Which lanes a delivery thread takes.
    private enum Crew {
        case topic, serverWebhook, keyWebhooks, mail, push

        func takes(_ destination: EventDestination) -> Bool {
            switch (self, destination) {
            case (.topic, .mqtt), (.serverWebhook, .serverWebhook), (.keyWebhooks, .keyWebhook), (.mail, .mail), (.mail, .contactMail),
                 (.push, .push), (.push, .pushFanOut): true
            default: false
            }
        }
    }

    /// Threads for Web Push: each subscription is a lane of its own, so several push services (or one slow one) are
    /// posted to at once.
    static let pushWorkers = 4

    let store: any EventRecords & KeyRecords & LeaseRecords & PushRecords
    private let publisher: any BrokerPublisher
    private let poster: any WebhookPosting
    let resolver: any HostResolving
    let requestTimeout: Duration
    private let serverWebhook: ServerWebhook?
    private let mailing: ContactMailing?
    let pushing: WebPushing?
    let pusher: any PushPosting
    /// The VAPID header per push service origin, reused until `vapidRenewMillis` before it expires (RFC 8292 §2 allows
    /// reuse; signing one per notification would cost an ECDSA signature each).
    let vapidHeaders = Mutex<[String: (header: String, expiresAt: Int64)]>([:])
    private let sealer: WebhookSecretSealer
    private let holder: String
    let clock: any Clock
    let metrics: Metrics
    let logger: Logger
    private let lock = ConditionLock(conditions: 2)
    private var state = State()
    private let warningLimiter = RateLimiter(rule: .init(ratePerSecond: 0.1, burst: 3), maximumKeys: 1024)

    /// - Parameters:
    ///   - poster: sends each webhook request, to the addresses `resolver` answered and the address rule passed.
    ///   - resolver: looks up a webhook's host name, once per delivery.
    ///   - requestTimeout: for each webhook request and mail, and for the broker's acknowledgement of a batch for the topic.
    ///   - mailing: the SMTP server contacts are mailed through (nil: none is configured, and a mail delivery is
    ///     reported failed).
    public init(store: any EventRecords & KeyRecords & LeaseRecords & PushRecords, publisher: any BrokerPublisher, poster: any WebhookPosting,
                resolver: any HostResolving = SystemHostResolver(), requestTimeout: Duration = defaultRequestTimeout,
                serverWebhook: ServerWebhook?, mailing: ContactMailing? = nil, pushing: WebPushing? = nil, pusher: any PushPosting = WebhookClient(),
                sealer: WebhookSecretSealer, holder: String, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.store = store
        self.publisher = publisher
        self.poster = poster
        self.resolver = resolver
        self.requestTimeout = requestTimeout
        self.serverWebhook = serverWebhook
        self.mailing = mailing
        self.pushing = pushing
        self.pusher = pusher
        self.sealer = sealer
        self.holder = holder
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        metrics.register(FlareMetrics.eventDeliveries, FlareMetrics.eventsWaiting, FlareMetrics.eventsOldestWaiting, FlareMetrics.contactNotices)
        if pushing != nil { metrics.register(FlareMetrics.pushSent, FlareMetrics.pushFailed, FlareMetrics.pushSubscriptions) }
    }

    /// Where this instance sends every new event besides the owning key's webhook: the events topic, and the
    /// operator's webhook if there is one.
    public var destinations: [EventDestination] { serverWebhook == nil ? [.mqtt] : [.mqtt, .serverWebhook] }

    /// Whether this instance mails contacts (an SMTP server is configured): a personal link's `link.created` then
    /// also goes to `mail:<link>` when its contact has an address.
    public var mailsContacts: Bool { mailing != nil }

    /// Whether this instance pushes to browsers (a VAPID subject is configured): an event with a `PushRule` then also
    /// goes to `push`, split per subscription when it is delivered.
    public var pushes: Bool { pushing != nil }

    public func start() {
        let reader = NamedThread.start(name: "flare-events") { [self] in
            while !isStopping {
                let readAt = clock.monotonicMillis()
                step()
                // Wakes within `coalesceMillis` of a read wait for the next: while events come fast (thousands of shares
                // created a second), each read takes many, rather than one read (and one transaction) per event.
                usleep(UInt32(max(0, Self.coalesceMillis - (clock.monotonicMillis() - readAt)) * 1000))
                lock.withLock {
                    if !state.woken && !state.stopping { lock.wait(0, timeout: .milliseconds(1_000 - Self.coalesceMillis)) }
                    state.woken = false
                }
            }
            // Let the lease go so that another instance takes the job at once (not when the store is failing: the lease
            // then runs out by itself).
            if lock.withLock({ state.holding && !state.storeFailing }) { try? store.releaseLease(Self.leaseName, holder: holder) }
            lock.withLock { state.readerFinished = true }
        }
        var threads = [reader]
        threads.append(NamedThread.start(name: "flare-ev-topic") { [self] in work(.topic) })
        threads.append(NamedThread.start(name: "flare-ev-server") { [self] in work(.serverWebhook) })
        threads.append(NamedThread.start(name: "flare-ev-mail") { [self] in work(.mail) })
        for index in 0..<Self.keyWorkers {
            threads.append(NamedThread.start(name: "flare-ev-key-\(index)") { [self] in work(.keyWebhooks) })
        }
        for index in 0..<Self.pushWorkers {
            threads.append(NamedThread.start(name: "flare-ev-push-\(index)") { [self] in work(.push) })
        }
        lock.withLock { state.threads = threads }
    }

    /// An event was recorded here: look at the outbox now rather than at the next second.
    public func wake() {
        lock.withLock {
            state.woken = true
            lock.signal(0)
        }
    }

    /// Stops reading the outbox and lets the lease go. Waits a moment for that, but never for a store or a receiver
    /// that does not answer (a shutdown must not hang on them): a delivery in progress ends by its timeout, whatever was
    /// not delivered stays in the outbox for the next holder, and an unreleased lease runs out by itself.
    public func stop() {
        lock.withLock {
            state.stopping = true
            state.lanes.removeAll()
            lock.broadcast(0)
            lock.broadcast(1)
        }
        let deadline = clock.monotonicMillis() + 1_000
        while !lock.withLock({ state.readerFinished }) && clock.monotonicMillis() < deadline { usleep(10_000) }
    }

    private var isStopping: Bool { lock.withLock { state.stopping } }

    /// One round: hold the lease, publish the backlog gauges now and then, and hand the due deliveries to the workers.
    /// Called by the reading thread every second or when woken (and by tests directly). True when it ran (false:
    /// another instance holds the lease, or the store could not be asked; the next round tries again).
    @discardableResult
    func step() -> Bool {
        let now = clock.monotonicMillis()
        guard holdLease(now: now) else { return false }
        let backlogDue: Bool = lock.withLock {
            guard now >= state.nextBacklogAt else { return false }
            state.nextBacklogAt = now + 5_000
            return true
        }
        if backlogDue {
            updateBacklogGauges()
            updatePushGauge()
        }
        let due: [OutboxDelivery]
        do { due = try store.dueEvents(now: clock.now(), limit: Self.batch) } catch {
            warn("read", "cannot read the events outbox (\(error)); trying again")
            return false
        }
        lock.withLock {
            for delivery in due {
                let key = InFlight(row: delivery.row, destination: delivery.destination)
                guard !state.inFlight.contains(key) else { continue }
                state.inFlight.insert(key)
                state.lanes[delivery.destination, default: []].append(delivery)
            }
            // A rest long over says nothing about the next try: forget it (the map holds only destinations with trouble).
            state.resting = state.resting.filter { now < $0.value.until + Self.longestRestMillis }
            // Also what wakes the workers for a lane whose rest has ended.
            lock.broadcast(1)
        }
        return true
    }

    /// Delivers until every lane handed over is empty or resting: for tests, which call `step` themselves.
    func drain() {
        while let (destination, batch) = lock.withLock({ takeBatch(for: nil, markBusy: false) }) {
            finish(batch, of: destination, untried: deliver(batch, to: destination))
        }
    }

    private func work(_ crew: Crew) {
        while true {
            let next: (EventDestination, [OutboxDelivery])? = lock.withLock {
                while !state.stopping {
                    if let batch = takeBatch(for: crew, markBusy: true) { return batch }
                    lock.wait(1)
                }
                return nil
            }
            guard let (destination, batch) = next else { return }
            finish(batch, of: destination, untried: deliver(batch, to: destination))
        }
    }

    /// The next deliveries of the lane that has waited longest among those `crew` takes (any, for nil) that are not
    /// resting, up to `laneBatch` of them, in order (call with the lock held). `markBusy`: skip lanes a worker is on,
    /// and mark this one so.
    private func takeBatch(for crew: Crew?, markBusy: Bool) -> (EventDestination, [OutboxDelivery])? {
        let now = clock.monotonicMillis()
        // Keys in turn first, then the lanes of the chosen key in turn (turns compared as (key's, lane's)).
        var chosen: (destination: EventDestination, key: Int64?, turn: (key: Int, lane: Int))?
        for (destination, lane) in state.lanes where !lane.isEmpty && crew?.takes(destination) ?? true {
            if markBusy && state.busy.contains(destination) { continue }
            if let rest = state.resting[destination], now < rest.until { continue }
            let key = lane[0].ownerKey
            let turn = (key: state.lastKeyTurn[key] ?? -1, lane: state.lastTurn[destination] ?? -1)
            if chosen == nil || turn < chosen!.turn { chosen = (destination, key, turn) }
        }
        guard let destination = chosen?.destination, let lane = state.lanes[destination] else { return nil }
        if markBusy { state.busy.insert(destination) }
        state.turns += 1
        state.lastTurn[destination] = state.turns
        state.lastKeyTurn[chosen?.key] = state.turns
        let batch = Array(lane.prefix(Self.laneBatch))
        state.lanes[destination] = lane.count > batch.count ? Array(lane.dropFirst(batch.count)) : nil
        return (destination, batch)
    }

    /// A worker is done with `batch`: what it tried is out of flight, and what it did not (the end of the batch) goes
    /// back to the front of its lane.
    private func finish(_ batch: [OutboxDelivery], of destination: EventDestination, untried: [OutboxDelivery]) {
        lock.withLock {
            state.busy.remove(destination)
            let done = state.stopping ? batch : Array(batch.dropLast(untried.count))
            for delivery in done { state.inFlight.remove(InFlight(row: delivery.row, destination: destination)) }
            if !state.stopping && !untried.isEmpty { state.lanes[destination] = untried + (state.lanes[destination] ?? []) }
            if state.lanes[destination] == nil { state.lastTurn[destination] = nil }
            lock.broadcast(1)
        }
    }

    /// Sends a batch of one lane's events, in order, and records the outcomes in the store.
    /// - Returns: the end of the batch, not tried: the lane's turn ended (see the type's comment).
    func deliver(_ batch: [OutboxDelivery], to destination: EventDestination) -> [OutboxDelivery] {
        var delivered: [OutboxDelivery] = []
        var untried: [OutboxDelivery] = []
        if destination == .mqtt {
            // Published back to back, the last one waited for: the broker acknowledges a connection's QoS 1 messages in
            // order, so its acknowledgement covers the batch (a batch cut by a lost connection is sent again whole).
            var sent = true
            for (index, delivery) in batch.enumerated() where sent {
                let event = delivery.event
                sent = index == batch.count - 1
                    ? publisher.publishAndWait(topic: Topics.events(event.shareID), payload: event.body, qos: 1, retain: false,
                                               expirySeconds: nil, timeout: requestTimeout)
                    : publisher.publish(topic: Topics.events(event.shareID), payload: event.body, qos: 1, retain: false, expirySeconds: nil)
            }
            if sent {
                delivered = batch
            } else {
                for delivery in batch { failed(delivery, .failed("the broker did not acknowledge it")) }
            }
        } else if destination == .pushFanOut {
            for delivery in batch { fanOut(delivery) }
            return []
        } else if case .push(let row) = destination {
            return pushAll(batch, subscription: row)
        } else {
            let turnEnds = clock.monotonicMillis() + Self.turnMillis
            var answered = false, unreachable = false
            for (index, delivery) in batch.enumerated() {
                if let target = MailTarget(destination) {
                    let (outcome, contact) = mail(delivery.event, to: target)
                    if case .delivered = outcome {
                        report(delivery, target: target, contact: contact, failure: nil)
                    } else {
                        failed(delivery, outcome, mailTo: target, contact: contact)
                    }
                    switch outcome {
                    case .delivered, .failed, .dropped, .later: answered = true
                    case .unreachable: unreachable = true
                    }
                    if unreachable || clock.monotonicMillis() >= turnEnds {
                        untried = Array(batch.dropFirst(index + 1))
                        break
                    }
                    continue
                }
                // The target is read for each delivery: a webhook removed, or a key revoked, stops the rest of a batch.
                let outcome = send(delivery.event, to: webhookTarget(destination))
                switch outcome {
                case .delivered: delivered.append(delivery)
                default: failed(delivery, outcome)
                }
                switch outcome {
                case .delivered, .failed, .later: answered = true
                case .unreachable: unreachable = true
                case .dropped: break
                }
                if unreachable || clock.monotonicMillis() >= turnEnds {
                    untried = Array(batch.dropFirst(index + 1))
                    break
                }
            }
            if unreachable { rest(destination) } else if answered { lock.withLock { state.resting[destination] = nil } }
        }
        guard !delivered.isEmpty else { return untried }
        do {
            try store.eventsDelivered(delivered.map { ($0.row, $0.destination) })
            metrics.increment(FlareMetrics.eventDeliveries, labels: [("destination", destination.metricLabel), ("result", "delivered")],
                              by: Double(delivered.count))
        } catch {
            // Not recorded: these events are sent again (receivers drop repeats by their id).
            warn("record", "cannot record event deliveries in the store (\(error))")
        }
        return untried
    }

    /// Every destination may be tried again at once: for tests, which bring a receiver back and do not wait.
    func endRests() {
        lock.withLock { state.resting.removeAll() }
    }

    /// `destination` did not answer: it is not tried again before its rest is over.
    func rest(_ destination: EventDestination) {
        lock.withLock {
            let times = (state.resting[destination]?.times ?? 0) + 1
            let millis = min(Self.firstRestMillis << Int64(min(times - 1, 16)), Self.longestRestMillis)
            state.resting[destination] = (clock.monotonicMillis() + millis, times)
        }
    }

    /// Records a failed attempt: the next one with backoff, or none after 24 h (or for an event that can never be
    /// delivered). A mail's end (given up, or nothing to send) is reported with `contact.notification_failed`.
    func failed(_ delivery: OutboxDelivery, _ outcome: Outcome, mailTo target: MailTarget? = nil, contact: ContactID? = nil) {
        let destination = delivery.destination.name
        let attempts = delivery.attempts + 1
        var why = ""
        var retryAt: UnixMillis? = nil
        switch outcome {
        case .delivered: return
        case .failed(let reason), .unreachable(let reason):
            why = reason
            retryAt = EventRetry.nextAttempt(after: attempts, now: clock.now(), eventAt: delivery.event.at)
        case .later(let reason, let seconds):
            why = reason
            retryAt = EventRetry.nextAttempt(after: attempts, now: clock.now(), eventAt: delivery.event.at).map {
                min(max($0, clock.now() + Int64(seconds) * 1000), delivery.event.at + EventRetry.giveUpAfterMillis)
            }
        case .dropped(let reason):
            why = reason
        }
        if retryAt == nil, let target {
            logger.warning("event \(delivery.event.type.rawValue) to \(destination): \(why); given up after \(attempts) attempts")
            return report(delivery, target: target, contact: contact, failure: why)
        }
        do {
            try store.eventFailed(row: delivery.row, destination: delivery.destination, attempts: attempts, retryAt: retryAt)
        } catch {
            warn("record", "cannot record an event delivery in the store (\(error))")
            return
        }
        metrics.increment(FlareMetrics.eventDeliveries, labels: [("destination", delivery.destination.metricLabel),
                                                                  ("result", retryAt == nil ? "given_up" : "failed")])
        if let retryAt {
            warn(destination, "event \(delivery.event.type.rawValue) to \(destination): \(why); attempt \(attempts), next in \((retryAt - clock.now() + 999) / 1000) s")
        } else {
            logger.warning("event \(delivery.event.type.rawValue) to \(destination): \(why); given up after \(attempts) attempts")
        }
    }

    /// Mails the contact `target` names about `event`: the composer writes the mail from the store as it is now.
    private func mail(_ event: ShareEvent, to target: MailTarget) -> (Outcome, ContactID?) {
        let named: ContactID? = if case .contact(let id) = target { id } else { nil }
        guard let mailing else { return (.dropped("no FLARE_SMTP_URL is set on the delivering instance"), named) }
        let mail: ContactMail
        do {
            mail = try mailing.composer.mail(for: event, to: target, messageID: mailing.messageID(event: event, target: target), server: mailing.server)
        } catch {
            return (.unreachable("cannot read the link and its contact (\(error))"), named)
        }
        switch mail {
        case .nothing(let reason, let contact):
            return (.dropped(reason), contact)
        case .send(let recipient, let message, let contact):
            switch mailing.sender.send(from: mailing.server.from, to: [recipient], message: message, timeout: requestTimeout) {
            case .accepted: return (.delivered, contact)
            case .refused(true, let reason): return (.dropped(reason), contact)
            case .refused(false, let reason): return (.failed(reason), contact)
            case .unanswered(let reason): return (.unreachable(reason), contact)
            }
        }
    }

    /// A mail's delivery is over: it leaves the outbox with the event that says how it went, in one transaction.
    private func report(_ delivery: OutboxDelivery, target: MailTarget, contact: ContactID?, failure: String?) {
        let event = ShareEvent.contactNotice(delivery.event.shareID, at: clock.now(), link: target.link, contact: contact, cause: delivery.event,
                                             failure: failure)
        do {
            try store.eventDelivered(row: delivery.row, destination: delivery.destination,
                                     reporting: PendingEvent(event, destinations: destinations))
        } catch {
            // Not recorded: the mail is sent again (the same Message-ID), or its failure found again.
            warn("record", "cannot record a contact's mail in the store (\(error))")
            return
        }
        metrics.increment(FlareMetrics.eventDeliveries, labels: [("destination", "mail"), ("result", failure == nil ? "delivered" : "given_up")])
        metrics.increment(FlareMetrics.contactNotices, labels: [("channel", "email"), ("result", failure == nil ? "notified" : "failed")])
        if let failure { logger.warning("share \(delivery.event.shareID): \(target)'s contact could not be mailed: \(failure)") }
        else { logger.info("share \(delivery.event.shareID): \(target)'s contact was mailed (\(delivery.event.type.rawValue))") }
        wake()
    }

    enum Outcome {
        case delivered
        /// The receiver answered, but not 2xx: worth trying again later.
        case failed(String)
        /// No answer, or nowhere to ask (no address the rule allows, no connection, no answer in time, or the store
        /// cannot say where): worth trying again later, and the destination rests meanwhile.
        case unreachable(String)
        /// Never deliverable (the key's webhook is gone): dropped at once.
        case dropped(String)
        /// The receiver asked to be tried again no sooner than this many seconds from now (429, 503 with `Retry-After`).
        case later(String, seconds: Int)
    }

    /// Where a webhook delivery goes (for a key: its row and sealed secrets, as the store has them now), or why it
    /// cannot go anywhere.
    private enum WebhookTarget {
        case post(url: WebhookURL, secrets: [WebhookSecret], mustBePublic: Bool)
        case refuse(Outcome)
    }

    private func webhookTarget(_ destination: EventDestination) -> WebhookTarget {
        switch destination {
        case .mqtt, .mail, .contactMail, .pushFanOut, .push:
            return .refuse(.dropped("not a webhook"))  // the topic's batches and mails go out in `deliver`
        case .serverWebhook:
            guard let serverWebhook else { return .refuse(.dropped("no FLARE_WEBHOOK_URL is set on the delivering instance")) }
            return .post(url: serverWebhook.url, secrets: serverWebhook.secrets, mustBePublic: false)
        case .keyWebhook(let id):
            let webhook: KeyWebhook?
            let key: OwnerKeyRecord?
            do {
                webhook = try store.keyWebhook(id: id)
                key = try store.ownerKey(id: id)
            } catch { return .refuse(.unreachable("cannot read the key's webhook (\(error))")) }
            guard let webhook, let key, !key.isRevoked else { return .refuse(.dropped("the key has no webhook any more")) }
            guard let url = try? WebhookURL(webhook.url), let secret = sealer.open(webhook.sealedSecret, ownerKey: id) else {
                return .refuse(.dropped("the key's webhook cannot be read (sealed with another token key?)"))
            }
            var secrets = [secret]
            if let previous = webhook.previousSealedSecret, let rotatedAt = webhook.rotatedAt,
               clock.now() - rotatedAt < Self.previousSecretMillis, let old = sealer.open(previous, ownerKey: id) {
                secrets.append(old)
            }
            return .post(url: url, secrets: secrets, mustBePublic: !key.isAdmin)
        }
    }

    private func send(_ event: ShareEvent, to target: WebhookTarget) -> Outcome {
        switch target {
        case .refuse(let outcome):
            return outcome
        case .post(let url, let secrets, let mustBePublic):
            // One lookup per delivery, and its answers, once checked, are the only addresses the request may connect to:
            // a name pointed inside since the URL was set is refused now, and one whose answer changes between this check
            // and the connection (DNS rebinding, a TTL of 0) is never looked up a second time.
            let addresses: [IPAddress]
            do { addresses = try resolver.permittedAddresses(for: url, publicOnly: mustBePublic) } catch {
                return .unreachable(error.description)
            }
            return post(event, to: url, addresses: addresses, secrets: secrets)
        }
    }

    /// After a key sets a new webhook secret, the old one keeps signing this long beside it.
    public static let previousSecretMillis: Int64 = 86_400_000

    private func post(_ event: ShareEvent, to url: WebhookURL, addresses: [IPAddress], secrets: [WebhookSecret]) -> Outcome {
        var headers = WebhookSignature.headers(id: event.id, timestamp: clock.now() / 1000, body: event.body, secrets: secrets)
        headers.append(("content-type", "application/json"))
        headers.append(("user-agent", "flared"))
        switch poster.post(url, connectingTo: addresses, headers: headers, body: event.body, timeout: requestTimeout) {
        case .status(let status) where (200..<300).contains(status): return .delivered
        case .status(let status): return .failed("the receiver answered \(status)")
        case .failed(let why): return .unreachable(why)
        }
    }

    private func holdLease(now: Int64) -> Bool {
        let (holding, attemptDue) = lock.withLock { (state.holding, now >= state.nextLeaseAttemptAt) }
        guard attemptDue else { return holding }
        lock.withLock { state.nextLeaseAttemptAt = now + 1_000 }
        let value: Int64?
        do {
            value = try store.holdLease(Self.leaseName, holder: holder, now: clock.now(), durationMillis: Self.leaseMillis)
        } catch {
            warn("lease", "cannot renew the event-delivery lease (\(error))")
            lock.withLock { state.storeFailing = true }
            return holding
        }
        let held = value != nil
        let changed = lock.withLock {
            let changed = state.holding != held
            state.holding = held
            state.storeFailing = false
            return changed
        }
        if changed { logger.info(held ? "delivering events" : "another instance delivers events now") }
        if !held { updateBacklogGauges(clear: true) }
        return held
    }

    private func updateBacklogGauges(clear: Bool = false) {
        guard !clear else {
            metrics.setSeries(FlareMetrics.eventsWaiting, [])
            metrics.setSeries(FlareMetrics.eventsOldestWaiting, [])
            return
        }
        guard let backlog = try? store.outboxBacklog() else { return }
        let now = clock.now()
        // Summed per label: every key's webhook is one series (`metricLabel`).
        var waiting: [String: (count: Int, oldestAt: UnixMillis)] = [:]
        for entry in backlog {
            let label = entry.destination.metricLabel
            let sum = waiting[label] ?? (0, .max)
            waiting[label] = (sum.count + entry.waiting, min(sum.oldestAt, entry.oldestAt))
        }
        let labels = waiting.keys.sorted()
        metrics.setSeries(FlareMetrics.eventsWaiting, labels.map { ([("destination", $0)], Double(waiting[$0]!.count)) })
        metrics.setSeries(FlareMetrics.eventsOldestWaiting, labels.map { ([("destination", $0)], Double(max(0, now - waiting[$0]!.oldestAt)) / 1000) })
    }

    func warn(_ key: String, _ message: @autoclosure () -> String) {
        if warningLimiter.take(key, nowMillis: clock.monotonicMillis()) == nil { logger.warning(message()) }
    }
}

extension EventDestination {
    /// The destination as metrics name it: `mqtt`, `server`, and `key` for every key's webhook. `/metrics` may be
    /// public, and a series per key would tell anyone whether that key's receiver answers and how much its shares do.
    /// The logs name the key.
    var metricLabel: String {
        switch self {
        case .keyWebhook: return "key"
        case .mail, .contactMail: return "mail"
        case .push, .pushFanOut: return "push"
        default: return name
        }
    }
}
