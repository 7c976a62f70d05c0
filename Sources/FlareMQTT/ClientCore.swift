internal import CMosquitto
import FlareSystem
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The state the network thread shares with `MQTTClient`.
///
/// It is a separate object so the C side can own a reference to it: `MQTTClient.init` passes it retained as
/// the userdata pointer and `MQTTClient.deinit` releases it only after `mosquitto_destroy`, when no callback
/// can run any more. Callbacks never touch `MQTTClient` itself, so they cannot outlive what they use.
/// Rule for every method here: never call libmosquitto while holding `lock` (the network thread holds
/// libmosquitto's own mutexes while it calls us; taking them in the other order would deadlock).
final class ClientCore: @unchecked Sendable {
    // @unchecked: every mutable property is guarded by `lock`.
    let lock = ConditionLock()
    let isV5: Bool

    var messageHandler: (@Sendable (MQTTMessage) -> Void)?
    var connectionHandler: (@Sendable (MQTTConnectionEvent) -> Void)?
    /// Everything `subscribe` was asked for, re-sent on each CONNACK.
    var subscriptions: [(pattern: String, qos: Int32)] = []
    var connected = false
    /// Bumped on each CONNACK so a subscribe() racing a reconnect does not wait for a SUBACK that will never come.
    var generation = 0
    /// The thread running the callbacks, to refuse `disconnect()` from a callback (it would join itself).
    var networkThread: ThreadID?
    /// The broker refused the credentials: the network loop stops reconnecting until disconnect() and connect().
    var refused = false
    /// Asked before acknowledgements of received QoS 1/2 messages are written (see `NetworkLoop`).
    var acknowledgementGate: (@Sendable () -> Bool)?
    var publishHandler: (@Sendable (Int32, Int32) -> Void)?
    /// Network thread only: QoS 1/2 messages were handed to the message handler since the last write.
    var deliveriesAwaitingAcknowledgement = false
    var publishes = AckTracker()
    var subscribes = AckTracker()

    /// `MQTTClient.Options.retriesAfterRefusal`.
    let retriesAfterRefusal: Bool

    init(isV5: Bool, retriesAfterRefusal: Bool = false) {
        self.isV5 = isV5
        self.retriesAfterRefusal = retriesAfterRefusal
    }

    static func from(_ userdata: UnsafeMutableRawPointer?) -> ClientCore {
        Unmanaged<ClientCore>.fromOpaque(userdata!).takeUnretainedValue()
    }

    var isOnNetworkThread: Bool {
        lock.withLock { networkThread == ThreadID.current }
    }

    // MARK: events from the network thread

    func didConnect(_ handle: OpaquePointer, code: Int32, flags: Int32) {
        guard code == 0 else {
            // Refused credentials do not fix themselves: close the connection and, through `refused`, stop the
            // network loop's reconnecting, for v5 and v3.1.1 alike (the caller may disconnect() and connect() again).
            // Unless the client was told that its broker's refusals can pass (`retriesAfterRefusal`): then the loop
            // goes on trying, at its reconnection pace.
            _ = mosquitto_disconnect(handle)
            let reason = isV5 ? String(cString: mosquitto_reason_string(code)) : String(cString: mosquitto_connack_string(code))
            let handler = lock.withLock { refused = !retriesAfterRefusal; return connectionHandler }
            handler?(.refused(reason: reason))
            return
        }
        let (patterns, handler) = lock.withLock {
            connected = true
            generation += 1
            subscribes.reset()
            subscribes.willRegister()
            lock.broadcast()
            return (subscriptions, connectionHandler)
        }
        // Re-sent even when the broker kept the session: harmless, and right if it lost it.
        var mids: [Int32] = []
        for subscription in patterns {
            var mid: Int32 = 0
            if mosquitto_subscribe(handle, &mid, subscription.pattern, subscription.qos) == MOSQ_ERR_SUCCESS.rawValue {
                mids.append(mid)
            }
        }
        lock.withLock {
            subscribes.register(mids)
            lock.broadcast()
        }
        handler?(.connected(sessionPresent: flags & 1 != 0))
    }

    func didDisconnect(code: Int32) {
        let handler = lock.withLock {
            connected = false
            subscribes.reset()
            lock.broadcast()
            return connectionHandler
        }
        handler?(.disconnected(reason: Self.disconnectReason(code)))
    }

    func didPublish(mid: Int32, code: Int32) {
        let handler = lock.withLock {
            publishes.ack(mid, code: code)
            lock.broadcast()
            return publishHandler
        }
        handler?(mid, code)
    }

    func didSubscribe(mid: Int32, granted: UnsafeBufferPointer<Int32>) {
        // A granted QoS of 0x80 or more is a refusal (v3.1.1: 0x80, v5: a reason code such as 0x87).
        let code = granted.first { $0 >= 0x80 } ?? 0
        lock.withLock {
            subscribes.ack(mid, code: code)
            lock.broadcast()
        }
    }

    func didReceive(_ message: MQTTMessage) {
        if message.qos > 0 { deliveriesAwaitingAcknowledgement = true }
        let handler = lock.withLock { messageHandler }
        handler?(message)
    }

    /// `code` is a MOSQ_ERR_* value from the network loop, or an MQTT v5 reason code (>= 0x80) from a
    /// DISCONNECT the broker sent.
    static func disconnectReason(_ code: Int32) -> String {
        if code == 0 { return "disconnected by the client" }
        if code >= 0x80 { return String(cString: mosquitto_reason_string(code)) }
        return String(cString: mosquitto_strerror(code))
    }
}
