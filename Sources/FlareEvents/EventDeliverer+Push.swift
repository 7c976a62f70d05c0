import FlareCore
import FlareCrypto
import FlareStore
import FlareSystem

/// Web Push (RFC 8030) from the outbox: an event's `push` delivery is split into one per subscription it goes to
/// (`PushRecords.fanOutPush`, as the subscriptions are at that moment), and each is encrypted for its browser (RFC 8291,
/// `aes128gcm`), signed for its push service (RFC 8292 VAPID) and posted, pinned to the addresses checked, like a
/// webhook. A subscription is a lane of its own: retried with backoff, 429 and 5xx no sooner than their `Retry-After`.
extension EventDeliverer {
    /// A VAPID token is made to last this long (RFC 8292 §2: at most 24 h)...
    static let vapidLifetimeSeconds: Int64 = 12 * 3_600
    /// ...and a new one is made this long before it expires, so that none arrives expired at a push service.
    static let vapidRenewMillis: Int64 = 3_600_000

    /// Splits the event's `push` delivery per subscription, and wakes the workers for them.
    func fanOut(_ delivery: OutboxDelivery) {
        guard let rule = delivery.event.type.pushRule, pushing != nil else {
            // Recorded by an instance that pushes, delivered by one that does not (or the type's rule changed).
            return failed(delivery, .dropped(pushing == nil ? "no FLARE_VAPID_SUBJECT is set on the delivering instance" : "not pushed"))
        }
        do {
            let made = try store.fanOutPush(eventRow: delivery.row, alerts: rule.reachesAlertSubscribers)
            if made > 0 { wake() }
        } catch {
            warn("push", "cannot split an event's push notifications per subscription (\(error)); trying again")
            failed(delivery, .unreachable("the store is not answering"))
        }
    }

    /// Sends a subscription's notifications, in order; the rest of the batch waits when the push service did not answer.
    func pushAll(_ batch: [OutboxDelivery], subscription row: Int64) -> [OutboxDelivery] {
        var delivered: [OutboxDelivery] = []
        var untried: [OutboxDelivery] = []
        var unreachable = false
        for (index, delivery) in batch.enumerated() {
            let outcome = push(delivery, subscription: row)
            switch outcome {
            case .delivered: delivered.append(delivery)
            default: failed(delivery, outcome)
            }
            if case .unreachable = outcome {
                unreachable = true
                untried = Array(batch.dropFirst(index + 1))
                break
            }
        }
        if unreachable { rest(.push(row)) }
        if !delivered.isEmpty {
            do {
                try store.eventsDelivered(delivered.map { ($0.row, $0.destination) })
                metrics.increment(FlareMetrics.eventDeliveries, labels: [("destination", "push"), ("result", "delivered")], by: Double(delivered.count))
            } catch {
                // Not recorded: sent again (the same Topic replaces it at the push service; the tag on the phone).
                warn("record", "cannot record push deliveries in the store (\(error))")
            }
        }
        return untried
    }

    private func push(_ delivery: OutboxDelivery, subscription row: Int64) -> Outcome {
        guard let pushing, let rule = delivery.event.type.pushRule else { return .dropped("not pushed") }
        let subscription: PushSubscription?
        do { subscription = try store.pushSubscription(row: row) } catch {
            return .unreachable("cannot read the subscription (\(error))")
        }
        guard let subscription else { return .dropped("the subscription ended") }
        let outcome = send(delivery.event, rule: rule, to: subscription, with: pushing)
        // The share's end is the last a link's viewer hears of it: their subscription ends once it is told (or given up).
        if delivery.event.type == .ended, case .link = subscription.subscriber, outcome.isFinal {
            endSubscription(row, "its share ended")
        }
        return outcome
    }

    private func send(_ event: ShareEvent, rule: PushRule, to subscription: PushSubscription, with pushing: WebPushing) -> Outcome {
        guard let url = pushing.acceptsEndpoint(subscription.endpoint) else {
            endSubscription(subscription.row, "its endpoint is not one flared posts to")
            count(failure: "not_allowed")
            return .dropped("the subscription's endpoint is not one flared posts to")
        }
        let notice: PushNotice
        do { notice = try pushing.composer.notice(for: event, to: subscription) } catch {
            return .unreachable("cannot read what to tell (\(error))")
        }
        guard case .send(let payload) = notice else {
            if case .nothing(let reason) = notice { return .dropped(reason) }
            return .dropped("nothing to send")
        }
        guard let body = WebPushEncryption.encrypt(payload, userAgentPublicKey: subscription.p256dh, authSecret: subscription.auth) else {
            endSubscription(subscription.row, "its keys are not usable")
            count(failure: "cannot_encrypt")
            return .dropped("the subscription's keys are not usable")
        }
        let origin = WebPushing.origin(of: url)
        guard let authorization = vapidHeader(for: origin, pushing: pushing) else { return .unreachable("cannot sign the VAPID token") }
        let addresses: [IPAddress]
        do { addresses = try resolver.permittedAddresses(for: url, publicOnly: !pushing.allowsLoopback) } catch {
            count(failure: "not_allowed")
            return .unreachable(error.description)
        }
        if pushing.allowsLoopback, addresses.contains(where: { !$0.isPublic && !$0.isLoopback }) {
            count(failure: "not_allowed")
            return .unreachable("the push service's address is neither public nor this machine's")
        }
        let headers: [(name: String, value: String)] = [
            ("authorization", authorization), ("content-encoding", "aes128gcm"), ("content-type", "application/octet-stream"),
            ("ttl", String(rule.ttlSeconds)), ("urgency", rule.urgency.rawValue), ("topic", rule.topic(for: event.shareID)),
            ("user-agent", "flared"),
        ]
        switch pusher.post(url, connectingTo: addresses, headers: headers, body: body, timeout: requestTimeout) {
        case .status(let status, _) where (200..<300).contains(status):
            metrics.increment(FlareMetrics.pushSent)
            return .delivered
        case .status(let status, _) where status == 404 || status == 410:
            // RFC 8030 §7.3: the subscription expired or was withdrawn; it is never valid again.
            endSubscription(subscription.row, "the push service answered \(status)")
            count(failure: String(status))
            logger.info("share \(event.shareID): a push subscription ended (the push service answered \(status))")
            return .dropped("the push service says the subscription is gone (\(status))")
        case .status(let status, let retryAfter) where status == 429 || status >= 500:
            count(failure: String(status))
            return .later("the push service answered \(status)", seconds: retryAfter ?? 0)
        case .status(413, _):
            // Payloads stay far below the 4,096 bytes every push service takes: this is a bug, and sending it again
            // would not help.
            count(failure: "413")
            logger.error("share \(event.shareID): a push service refused a \(body.count)-byte notification as too large (413)")
            return .dropped("the push service refused the payload as too large")
        case .status(let status, _):
            count(failure: String(status))
            return .dropped("the push service answered \(status)")
        case .failed(let why):
            count(failure: "no_answer")
            return .unreachable(why)
        }
    }

    /// Deletes a subscription that will never take a notification again. A store that cannot delete it now loses
    /// nothing: the delivery is over either way, and the next event sent to the subscription ends it again (the same
    /// answer, the same deletion); the share's purge deletes what is left. So the failure is said, and not retried.
    private func endSubscription(_ row: Int64, _ why: String) {
        do { try store.deletePushSubscription(row: row) } catch {
            warn("push-end", "cannot delete a push subscription (\(why)): \(error); the next delivery to it ends it again")
        }
    }

    /// The `Authorization: vapid …` header for a push service's origin: one token per origin, made again an hour
    /// before it expires.
    private func vapidHeader(for origin: String, pushing: WebPushing) -> String? {
        let now = clock.now()
        if let cached = vapidHeaders.withLock({ $0[origin] }), cached.expiresAt - Self.vapidRenewMillis > now { return cached.header }
        let expiresAt = now / 1000 + Self.vapidLifetimeSeconds
        guard let header = pushing.key.authorization(audience: origin, subject: pushing.subject, expiresAt: expiresAt) else { return nil }
        vapidHeaders.withLock { headers in
            // Bounded by the push services in use (a handful); cleared if a stream of odd endpoints makes it large.
            if headers.count >= 256 { headers.removeAll() }
            headers[origin] = (header, expiresAt * 1000)
        }
        return header
    }

    private func count(failure status: String) {
        metrics.increment(FlareMetrics.pushFailed, labels: [("status", status)])
    }

    /// The subscription gauge, read with the backlog gauges. When the store cannot count, the gauge keeps its last value
    /// until the next reading, 5 s later (the backlog gauges do the same).
    func updatePushGauge() {
        guard pushing != nil, let count = try? store.pushSubscriptionCount() else { return }
        metrics.setSeries(FlareMetrics.pushSubscriptions, [([], Double(count))])
    }
}

extension EventDeliverer.Outcome {
    /// The delivery is over (done or dropped), not to be tried again.
    var isFinal: Bool {
        switch self {
        case .delivered, .dropped: true
        case .failed, .unreachable, .later: false
        }
    }
}
