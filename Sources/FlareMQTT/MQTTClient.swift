internal import CMosquitto
import Dispatch
import FlareSystem

/// An MQTT client on libmosquitto: one `struct mosquitto` handle, its network thread (`NetworkLoop`) and
/// reconnection with backoff. Thread-safe; all callbacks arrive on the network thread.
public final class MQTTClient: @unchecked Sendable {
    // @unchecked: the handle is only used through libmosquitto's own locking; Swift state is behind `lifecycle`
    // or in `ClientCore`.
    public enum ProtocolVersion: Sendable {
        case v311
        case v5
    }

    public struct Options: Sendable {
        public var host: String = "127.0.0.1"
        public var port: Int = 1883
        /// Required; "" is refused (a persistent session is keyed on it).
        public var clientID: String
        public var username: String?
        public var password: String?
        /// false = persistent session: the broker queues QoS 1/2 messages while the client is away.
        public var cleanSession: Bool = true
        /// MQTT v5 only, used when `cleanSession` is false: how long the broker keeps the session after the
        /// connection drops. v5 brokers end a session at disconnect unless this is sent.
        public var sessionExpirySeconds: UInt32 = 86_400
        public var keepAliveSeconds: Int = 30
        public var protocolVersion: ProtocolVersion = .v5
        /// Outgoing QoS 1/2 messages in flight at once (MOSQ_OPT_SEND_MAXIMUM); more are queued in the library.
        public var maxInflightMessages: Int = 100
        /// MQTT v5: incoming QoS 1/2 messages the broker may have in flight to us at once (MOSQ_OPT_RECEIVE_MAXIMUM).
        /// libmosquitto's default of 20 makes a busy subscriber wait a round trip per 20 messages.
        public var receiveMaximum: Int = 20
        /// Seconds between reconnection attempts, growing (quadratically, libmosquitto's "exponential") from min to max.
        public var reconnectDelay: (min: Int, max: Int) = (1, 10)
        /// What the broker publishes for this client when its connection is lost without a DISCONNECT (never retained).
        public var lastWill: LastWill?
        /// Keep reconnecting after the broker refused the login. Off: refused credentials do not fix themselves. On, for
        /// a broker whose logins are decided by a service that can fail for a moment: a NATS cluster asks its auth
        /// callout, which times out while the cluster fails over, and refuses then.
        public var retriesAfterRefusal = false

        public init(clientID: String) {
            self.clientID = clientID
        }
    }

    public struct LastWill: Sendable {
        public var topic: String
        public var payload: [UInt8]
        public var qos: Int

        public init(topic: String, payload: [UInt8], qos: Int) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
        }
    }

    private let options: Options
    private let handle: OpaquePointer
    private let core: ClientCore
    private let loop: NetworkLoop
    /// Serialises connect() and disconnect(); `running` = the network thread was started.
    private let lifecycle = ConditionLock()
    private var running = false

    /// `mosquitto_lib_init` must run once per process, before the first handle.
    private static let libraryInitialized: Int32 = mosquitto_lib_init()

    public init(options: Options) throws {
        guard !options.clientID.isEmpty else {
            throw MQTTError(operation: "init", code: Int32(MOSQ_ERR_INVAL.rawValue), message: "clientID must not be empty")
        }
        let delay = options.reconnectDelay
        guard delay.min >= 1, delay.max >= delay.min else {
            throw MQTTError(operation: "reconnectDelay", code: Int32(MOSQ_ERR_INVAL.rawValue), message: "needs 1 <= min <= max")
        }
        try MQTTError.check(Self.libraryInitialized, "mosquitto_lib_init")
        let core = ClientCore(isV5: options.protocolVersion == .v5, retriesAfterRefusal: options.retriesAfterRefusal)
        let userdata = Unmanaged.passRetained(core).toOpaque()  // released in deinit, after mosquitto_destroy
        guard let handle = mosquitto_new(options.clientID, options.cleanSession, userdata) else {
            Unmanaged<ClientCore>.fromOpaque(userdata).release()
            throw MQTTError(operation: "mosquitto_new", code: Int32(MOSQ_ERR_NOMEM.rawValue), message: "could not create the client")
        }
        let loop: NetworkLoop
        do {
            loop = try NetworkLoop(handle: handle, core: core, reconnectDelay: delay)
        } catch {
            mosquitto_destroy(handle)
            Unmanaged<ClientCore>.fromOpaque(userdata).release()
            throw error
        }
        self.options = options
        self.handle = handle
        self.core = core
        self.loop = loop
        // From here on a throw runs deinit, which destroys the handle.
        let version = options.protocolVersion == .v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311
        try MQTTError.check(mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, version), "protocol version")
        try MQTTError.check(mosquitto_int_option(handle, MOSQ_OPT_SEND_MAXIMUM, Int32(clamping: options.maxInflightMessages)), "maxInflightMessages")
        if options.protocolVersion == .v5 {
            try MQTTError.check(mosquitto_int_option(handle, MOSQ_OPT_RECEIVE_MAXIMUM, Int32(clamping: options.receiveMaximum)), "receiveMaximum")
        }
        if options.username != nil || options.password != nil {
            try MQTTError.check(mosquitto_username_pw_set(handle, options.username, options.password), "credentials")
        }
        if let will = options.lastWill {
            try MQTTError.check(will.payload.withUnsafeBytes { bytes in
                mosquitto_will_set(handle, will.topic, Int32(bytes.count), bytes.baseAddress, Int32(will.qos), false)
            }, "last will")
        }
        Self.installCallbacks(on: handle)
    }

    deinit {
        let handle = HandleBox(handle), core = core, loop = loop, running = running
        let teardown: @Sendable () -> Void = {
            if running { Self.stopNetworkThread(loop, core) }
            mosquitto_destroy(handle.pointer)
            Unmanaged.passUnretained(core).release()  // balances passRetained in init
        }
        // The last reference can be dropped inside a callback (a handler holding the client weakly);
        // the network thread cannot join itself, so tear down from elsewhere.
        if running && core.isOnNetworkThread {
            DispatchQueue.global().async(execute: teardown)
        } else {
            teardown()
        }
    }

    // MARK: - handlers and subscriptions

    /// Called on the network thread with a copy of the message (payload copied inside the C callback). May block
    /// to apply back-pressure: the network thread then reads nothing more, and the broker keeps what follows.
    /// Set before connect(). Handlers live as long as the client: capture the client weakly in them, or neither
    /// is ever freed.
    public func setMessageHandler(_ handler: @escaping @Sendable (MQTTMessage) -> Void) {
        core.lock.withLock { core.messageHandler = handler }
    }

    /// Called on the network thread after it has handed QoS 1/2 messages to the message handler and before it
    /// acknowledges them to the broker; it may block until they are safe (stored). Returning false means they
    /// cannot be made safe: they are never acknowledged, the connection is dropped, and with a persistent
    /// session the broker delivers them again on the next one. Without a gate, messages are acknowledged once
    /// the handler returns. Set before connect().
    public func setAcknowledgementGate(_ gate: @escaping @Sendable () -> Bool) {
        core.lock.withLock { core.acknowledgementGate = gate }
    }

    /// Called on the network thread with a publish's message id and reason code once the broker acknowledged it (QoS 1:
    /// PUBACK; QoS 0: once written). For load tools that count what the broker took. Set before connect().
    public func setPublishAcknowledgedHandler(_ handler: @escaping @Sendable (_ mid: Int32, _ code: Int32) -> Void) {
        core.lock.withLock { core.publishHandler = handler }
    }

    /// Called on the network thread, except that a first connection attempt failing at once inside
    /// `connect()` is reported on the thread calling `connect()`.
    public func setConnectionHandler(_ handler: @escaping @Sendable (MQTTConnectionEvent) -> Void) {
        core.lock.withLock { core.connectionHandler = handler }
    }

    /// Subscriptions are remembered and re-sent on every (re)connect.
    public func subscribe(_ pattern: String, qos: Int) throws {
        try MQTTError.check(mosquitto_sub_topic_check(pattern), "subscribe")
        guard (0...2).contains(qos) else {
            throw MQTTError(operation: "subscribe", code: Int32(MOSQ_ERR_INVAL.rawValue), message: "QoS must be 0, 1 or 2")
        }
        let (sendNow, generation) = core.lock.withLock {
            core.subscriptions.removeAll { $0.pattern == pattern }
            core.subscriptions.append((pattern, Int32(qos)))
            if core.connected { core.subscribes.willRegister() }
            return (core.connected, core.generation)
        }
        // Not connected: the next CONNACK sends it.
        guard sendNow else { return }
        var mid: Int32 = 0
        let rc = mosquitto_subscribe(handle, &mid, pattern, Int32(qos))
        loop.wake()
        core.lock.withLock {
            let sameConnection = rc == MOSQ_ERR_SUCCESS.rawValue && core.generation == generation
            core.subscribes.register(sameConnection ? [mid] : [])
            core.lock.broadcast()
        }
        // NO_CONN: the connection dropped meanwhile, and the reconnect re-sends the subscription.
        if rc != MOSQ_ERR_NO_CONN.rawValue { try MQTTError.check(rc, "subscribe") }
    }

    /// Forgets a subscription (it is not sent again on reconnect) and, when connected, sends UNSUBSCRIBE. Messages the
    /// broker had already queued for this session still arrive.
    public func unsubscribe(_ pattern: String) throws {
        let connected = core.lock.withLock {
            core.subscriptions.removeAll { $0.pattern == pattern }
            return core.connected
        }
        guard connected else { return }
        let rc = mosquitto_unsubscribe(handle, nil, pattern)
        loop.wake()
        if rc != MOSQ_ERR_NO_CONN.rawValue { try MQTTError.check(rc, "unsubscribe") }
    }

    /// True once connected and every remembered subscription has its SUBACK on the current connection.
    /// Throws if the broker refused a subscription (e.g. an ACL denies it).
    public func waitUntilSubscribed(timeout: Duration) throws -> Bool {
        let (done, refused) = core.lock.withLock {
            let done = core.lock.wait(timeout: timeout) { core.connected && core.subscribes.allAcknowledged }
            return (done, core.subscribes.awaitedCodes.first { $0 >= 0x80 })
        }
        if let refused {
            throw MQTTError(operation: "subscribe", code: refused, message: "the broker refused a subscription: \(Self.reasonString(refused))")
        }
        return done
    }

    // MARK: - connection

    /// Starts the network thread. Returns without waiting for the broker; the network thread then reconnects
    /// forever with backoff until `disconnect()`. Throws only for unusable options. Calling it again while
    /// running does nothing; after `disconnect()` it connects again.
    public func connect() throws {
        let firstAttemptFailure: String? = try lifecycle.withLock {
            guard !running else { return nil }
            if options.protocolVersion == .v5 { try storeConnectProperties() }
            let rc = mosquitto_connect_bind_async(handle, options.host, Int32(clamping: options.port), Int32(clamping: options.keepAliveSeconds), nil)
            var failure: String?
            switch rc {
            case MOSQ_ERR_SUCCESS.rawValue:
                break
            case MOSQ_ERR_ERRNO.rawValue, MOSQ_ERR_EAI.rawValue, MOSQ_ERR_CONN_REFUSED.rawValue, MOSQ_ERR_NO_CONN.rawValue:
                // The broker is not there yet; the network thread keeps trying. Read the text now: for
                // MOSQ_ERR_ERRNO it comes from errno.
                failure = "connecting to the broker failed: \(String(cString: mosquitto_strerror(rc)))"
            default:
                throw MQTTError("connect", rc: rc)
            }
            core.lock.withLock { core.refused = false }
            loop.start()
            running = true
            return failure
        }
        // libmosquitto reports no event for a failed attempt; tell the handler (outside the lifecycle lock,
        // so it may call disconnect()).
        if let firstAttemptFailure {
            core.lock.withLock { core.connectionHandler }?(.disconnected(reason: firstAttemptFailure))
        }
    }

    /// libmosquitto 2.0 has no asynchronous connect that takes CONNECT properties, yet the v5 session-expiry
    /// interval must be in every CONNECT (the first and each automatic reconnect) or the broker drops the
    /// session when the connection ends. `mosquitto_connect_bind_v5` copies the properties into the handle,
    /// where every later (re)connect picks them up, before it validates the host. Calling it with no host
    /// stores them and returns MOSQ_ERR_INVAL without touching the network; the asynchronous connect follows.
    /// The persistent-session tests fail if a libmosquitto update changes this.
    private func storeConnectProperties() throws {
        var properties: OpaquePointer?
        defer { mosquitto_property_free_all(&properties) }
        if !options.cleanSession {
            try MQTTError.check(mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), options.sessionExpirySeconds), "session expiry")
        }
        _ = mosquitto_connect_bind_v5(handle, nil, 0, 0, nil, properties)
    }

    public func waitUntilConnected(timeout: Duration) -> Bool {
        core.lock.withLock { core.lock.wait(timeout: timeout) { core.connected } }
    }

    public var isConnected: Bool { core.lock.withLock { core.connected } }

    /// Which connection this is, counting from 1 (each reconnection makes a new one); nil while not connected.
    public var connectionNumber: Int? { core.lock.withLock { core.connected ? core.generation : nil } }

    /// Sends DISCONNECT (queued publishes already handed over are written first), stops the network thread
    /// and waits for it. Idempotent. Never call it from a handler: that thread would wait for itself.
    /// - Parameter endingSession: MQTT v5 only: the DISCONNECT sets the session expiry to 0, so the broker deletes
    ///   the persistent session (and with it this client's place in shared subscriptions) instead of keeping it.
    public func disconnect(endingSession: Bool = false) {
        lifecycle.withLock {
            guard running else { return }
            precondition(!core.isOnNetworkThread, "MQTTClient.disconnect() called from an MQTT callback")
            Self.stopNetworkThread(loop, core, endingSession: endingSession)
            running = false
        }
    }

    private static func stopNetworkThread(_ loop: NetworkLoop, _ core: ClientCore, endingSession: Bool = false) {
        loop.stop(endingSession: endingSession)  // sends DISCONNECT, wakes a reconnect back-off sleep and joins the thread
        core.lock.withLock {
            core.connected = false
            core.networkThread = nil  // a later thread may get the same id
            core.subscribes.reset()
            core.lock.broadcast()
        }
    }

    // MARK: - publishing

    /// Returns when the message is handed to libmosquitto (non-blocking). While the connection is down it
    /// throws `notConnectedCode`, whatever the QoS: libmosquitto 2.0 queues only while it has a socket (then
    /// it re-sends unacknowledged QoS 1/2 messages after a reconnect).
    /// `messageExpirySeconds` and `userProperties` are sent with MQTT v5 only (v3.1.1 has no way to say them).
    @discardableResult
    public func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool, messageExpirySeconds: UInt32? = nil,
                        userProperties: [MQTTUserProperty] = []) throws -> Int32 {
        guard (0...2).contains(qos) else {
            throw MQTTError(operation: "publish", code: Int32(MOSQ_ERR_INVAL.rawValue), message: "QoS must be 0, 1 or 2")
        }
        var properties: OpaquePointer?
        defer { mosquitto_property_free_all(&properties) }
        if let messageExpirySeconds, options.protocolVersion == .v5 {
            try MQTTError.check(mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), messageExpirySeconds), "publish")
        }
        if options.protocolVersion == .v5 {
            for property in userProperties {
                try MQTTError.check(mosquitto_property_add_string_pair(&properties, Int32(MQTT_PROP_USER_PROPERTY.rawValue), property.name, property.value), "publish")
            }
        }
        var mid: Int32 = 0
        // An empty payload (clears a retained message) is length 0 with a null pointer, which libmosquitto accepts.
        let rc = payload.withUnsafeBytes { bytes in
            mosquitto_publish_v5(handle, &mid, topic, Int32(clamping: bytes.count), bytes.baseAddress, Int32(qos), retain, properties)
        }
        loop.wake()
        try MQTTError.check(rc, "publish")
        return mid
    }

    /// Returns when the broker acknowledged (QoS 1: PUBACK, QoS 2: PUBCOMP, QoS 0: when written to the socket),
    /// or throws: on timeout (`isTimeout`; a QoS 1/2 message stays queued and may still be delivered later),
    /// or when an MQTT v5 broker answers with a failure reason code (e.g. not authorised).
    /// Not from a handler: the acknowledgement is read by the very thread that would be waiting.
    public func publishAndWait(topic: String, payload: [UInt8], qos: Int, retain: Bool, messageExpirySeconds: UInt32? = nil,
                               userProperties: [MQTTUserProperty] = [], timeout: Duration) throws {
        guard !core.isOnNetworkThread else {
            throw MQTTError(operation: "publishAndWait", code: Int32(MOSQ_ERR_INVAL.rawValue), message: "called from an MQTT callback, where the acknowledgement can never arrive")
        }
        core.lock.withLock { core.publishes.willRegister() }
        let mid: Int32
        do {
            mid = try publish(topic: topic, payload: payload, qos: qos, retain: retain, messageExpirySeconds: messageExpirySeconds,
                              userProperties: userProperties)
        } catch {
            core.lock.withLock { core.publishes.register([]) }
            throw error
        }
        let (code, connected): (Int32?, Bool) = core.lock.withLock {
            core.publishes.register([mid])
            _ = core.lock.wait(timeout: timeout) { core.publishes.code(for: mid) != nil }
            return (core.publishes.remove(mid), core.connected)
        }
        guard let code else {
            let state = connected ? "connected" : "not connected to the broker"
            throw MQTTError(operation: "publishAndWait", code: MQTTError.timedOutCode, message: "no acknowledgement within \(timeout) (\(state))")
        }
        if code >= 0x80 {
            throw MQTTError(operation: "publish", code: code, message: "the broker refused the message: \(Self.reasonString(code))")
        }
    }

    // MARK: - helpers

    /// MQTT topic-filter matching (`+`, `#`, `$`-topics) as the broker does it. False for an invalid filter or topic.
    public static func topicMatches(filter: String, topic: String) -> Bool {
        var result = false
        return mosquitto_topic_matches_sub(filter, topic, &result) == MOSQ_ERR_SUCCESS.rawValue && result
    }

    static func reasonString(_ code: Int32) -> String { String(cString: mosquitto_reason_string(code)) }
}

/// Carries the C handle into the deinit teardown closure.
private struct HandleBox: @unchecked Sendable {
    // @unchecked: a raw C pointer; nothing else uses the handle by the time the teardown runs.
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

extension MQTTClient.Options: CustomStringConvertible {
    /// For logs: never shows the password.
    public var description: String {
        "mqtt://\(host):\(port) clientID=\(clientID) user=\(username ?? "-") password=\(password == nil ? "-" : "***") "
            + "v\(protocolVersion == .v5 ? "5" : "3.1.1") cleanSession=\(cleanSession)"
    }
}
