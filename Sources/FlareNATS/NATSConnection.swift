internal import CNats
import FlareSystem
#if canImport(Glibc)
import Glibc
#endif

/// A NATS error: the library's status text and where it happened (never a payload or a credential).
public struct NATSError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let status: String
    public var description: String { "NATS \(operation): \(status)" }

    init(_ operation: String, _ status: natsStatus) {
        self.operation = operation
        self.status = String(cString: natsStatus_GetText(status))
    }
}

/// One message as Flare sees it: copied out of the library's buffer before the callback returns.
public struct NATSMessage: Sendable {
    public let subject: String
    public let reply: String?
    public let payload: [UInt8]
    /// The QoS an MQTT client published it with (the MQTT layer's `Nmqtt-Pub` header); nil for a plain NATS publish.
    public let mqttQoS: Int?
}

/// A connection to a NATS cluster through Debian's C client (libnats): the only importer of CNats. It reconnects by
/// itself, to any of `servers` (and to the nodes the cluster announces), forever; what was subscribed is subscribed
/// again. Callbacks run on the library's threads, one per subscription, in order.
public final class NATSConnection: @unchecked Sendable {
    // @unchecked: libnats connections are thread-safe; `connection` is set once in init and destroyed in deinit.
    let connection: OpaquePointer
    private var subscriptions: [OpaquePointer] = []
    private var handlers: [Unmanaged<Handler>] = []
    private let lock = ConditionLock()

    final class Handler {
        let body: @Sendable (NATSMessage) -> Void
        init(_ body: @escaping @Sendable (NATSMessage) -> Void) { self.body = body }
    }

    /// Connects to one of `servers` (`nats://host:port`), as `user`, waiting at most `timeout` for the first connection.
    public init(servers: [String], user: String, password: String, name: String, timeout: Duration = .seconds(5)) throws(NATSError) {
        _ = NATSConnection.libraryOpened
        var options: OpaquePointer?
        var status = natsOptions_Create(&options)
        guard status == NATS_OK, let options else { throw NATSError("options", status) }
        defer { natsOptions_Destroy(options) }
        var urls = servers.map { strdup($0) }
        defer { urls.forEach { free($0) } }
        status = urls.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: UnsafePointer<CChar>?.self) { natsOptions_SetServers(options, $0.baseAddress, Int32($0.count)) }
        }
        guard status == NATS_OK else { throw NATSError("servers", status) }
        natsOptions_SetUserInfo(options, user, password)
        natsOptions_SetName(options, name)
        natsOptions_SetTimeout(options, Int64(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        natsOptions_SetMaxReconnect(options, -1)
        natsOptions_SetReconnectWait(options, 250)
        natsOptions_SetPingInterval(options, 2000)
        var connected: OpaquePointer?
        status = natsConnection_Connect(&connected, options)
        guard status == NATS_OK, let connected else { throw NATSError("connect", status) }
        connection = connected
    }

    /// Closes the connection: no more reconnection attempts, subscriptions ended. What holds the connection may keep
    /// it; every call on it then fails.
    public func close() {
        natsConnection_Close(connection)
    }

    deinit {
        natsConnection_Close(connection)
        for subscription in subscriptions { natsSubscription_Destroy(subscription) }
        natsConnection_Destroy(connection)
        for handler in handlers { handler.release() }
    }

    /// Publishes `payload` on `subject`.
    public func publish(_ subject: String, _ payload: [UInt8]) throws(NATSError) {
        let status = payload.withUnsafeBytes { natsConnection_Publish(connection, subject, $0.baseAddress, Int32($0.count)) }
        guard status == NATS_OK else { throw NATSError("publish", status) }
    }

    /// Sends everything buffered and waits for the server's answer to a ping.
    public func flush(timeout: Duration = .seconds(2)) throws(NATSError) {
        let status = natsConnection_FlushTimeout(connection, Int64(timeout.components.seconds * 1000))
        guard status == NATS_OK else { throw NATSError("flush", status) }
    }

    /// Subscribes to `subject` as one member of `queue` (each message goes to one member of the group, across every
    /// connection in it), calling `handler` for each message on the subscription's own thread.
    public func subscribe(_ subject: String, queue: String, handler: @escaping @Sendable (NATSMessage) -> Void) throws(NATSError) {
        let box = Unmanaged.passRetained(Handler(handler))
        var subscription: OpaquePointer?
        let status = natsConnection_QueueSubscribe(&subscription, connection, subject, queue, { _, _, message, closure in
            guard let message, let closure else { return }
            defer { natsMsg_Destroy(message) }
            let handler = Unmanaged<Handler>.fromOpaque(closure).takeUnretainedValue()
            handler.body(NATSConnection.copy(message))
        }, box.toOpaque())
        guard status == NATS_OK, let subscription else {
            box.release()
            throw NATSError("subscribe", status)
        }
        lock.withLock {
            subscriptions.append(subscription)
            handlers.append(box)
        }
    }

    static func copy(_ message: OpaquePointer) -> NATSMessage {
        let length = Int(natsMsg_GetDataLength(message))
        var payload: [UInt8] = []
        if length > 0, let data = natsMsg_GetData(message) {
            payload = Array(UnsafeRawBufferPointer(start: data, count: length))
        }
        return NATSMessage(subject: String(cString: natsMsg_GetSubject(message)),
                           reply: natsMsg_GetReply(message).map { String(cString: $0) },
                           payload: payload, mqttQoS: mqttQoS(message))
    }

    /// The first character of `Nmqtt-Pub` is the QoS (later characters are flags the server may add).
    static func mqttQoS(_ message: OpaquePointer) -> Int? {
        var value: UnsafePointer<CChar>?
        guard natsMsgHeader_Get(message, "Nmqtt-Pub", &value) == NATS_OK, let value, let first = value.pointee.asDigit else { return nil }
        return first
    }

    /// Publishes `payload` on `subject` with a fresh reply inbox and gathers every answer that comes within `window`
    /// (a request that every server of the cluster answers, `$SYS.REQ.SERVER.PING.…`), or the first `expecting`.
    public func gather(_ subject: String, _ payload: [UInt8], window: Duration, expecting: Int = .max) throws(NATSError) -> [NATSMessage] {
        var inbox: UnsafeMutablePointer<natsInbox>?
        var status = natsInbox_Create(&inbox)
        guard status == NATS_OK, let inbox else { throw NATSError("inbox", status) }
        defer { natsInbox_Destroy(inbox) }
        let inboxName = String(cString: inbox)
        var subscription: OpaquePointer?
        status = natsConnection_SubscribeSync(&subscription, connection, inboxName)
        guard status == NATS_OK, let subscription else { throw NATSError("subscribe", status) }
        defer { natsSubscription_Destroy(subscription) }
        status = payload.withUnsafeBytes { natsConnection_PublishRequest(connection, subject, inboxName, $0.baseAddress, Int32($0.count)) }
        guard status == NATS_OK else { throw NATSError("request", status) }
        var answers: [NATSMessage] = []
        let deadline = ContinuousClock.now + window
        while ContinuousClock.now < deadline && answers.count < expecting {
            let left = deadline - ContinuousClock.now
            var message: OpaquePointer?
            let millis = max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)
            guard natsSubscription_NextMsg(&message, subscription, millis) == NATS_OK, let message else { break }
            answers.append(Self.copy(message))
            natsMsg_Destroy(message)
        }
        return answers
    }

    /// libnats keeps process-wide state (its timers and threads); opened once, before the first connection.
    private static let libraryOpened: Bool = nats_Open(-1) == NATS_OK
}

private extension CChar {
    var asDigit: Int? { self >= 0x30 && self <= 0x39 ? Int(self - 0x30) : nil }
}
