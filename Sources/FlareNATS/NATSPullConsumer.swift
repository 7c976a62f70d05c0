internal import CNats

/// A durable JetStream pull consumer: messages are fetched in batches and stay the stream's until acknowledged, so a
/// consumer that dies before acknowledging gets them again (or another member of the same durable does). Every member
/// that binds the same durable name shares one position in the stream.
public final class NATSPullConsumer: @unchecked Sendable {
    // @unchecked: libnats subscriptions are thread-safe; fetched from one thread at a time by Flare.
    private let connection: NATSConnection
    private let context: OpaquePointer
    private let subscription: OpaquePointer

    /// Binds the durable `durable` on `stream`, creating it (explicit acknowledgement, `ackWait` before a message is
    /// delivered again, at most `maxAckPending` unacknowledged at once) if it does not exist. Throws while the stream
    /// does not exist yet.
    public init(connection: NATSConnection, stream: String, durable: String, filter: String, ackWait: Duration, maxAckPending: Int) throws(NATSError) {
        self.connection = connection
        var jsOptions = jsOptions()
        jsOptions_Init(&jsOptions)
        var created: OpaquePointer?
        var status = natsConnection_JetStream(&created, connection.connection, &jsOptions)
        guard status == NATS_OK, let created else { throw NATSError("jetstream", status) }
        context = created
        let context = created
        var options = jsSubOptions()
        jsSubOptions_Init(&options)
        var errorCode = jsErrCode(0)
        var subscription: OpaquePointer?
        status = stream.withCString { streamName in
            durable.withCString { durableName in
                filter.withCString { filterSubject in
                    options.Stream = streamName
                    options.Config.Durable = durableName
                    options.Config.FilterSubject = filterSubject
                    options.Config.AckPolicy = js_AckExplicit
                    options.Config.DeliverPolicy = js_DeliverAll
                    options.Config.AckWait = ackWait.components.seconds * 1_000_000_000 + ackWait.components.attoseconds / 1_000_000_000
                    options.Config.MaxAckPending = Int64(maxAckPending)
                    return js_PullSubscribe(&subscription, context, filterSubject, durableName, &jsOptions, &options, &errorCode)
                }
            }
        }
        guard status == NATS_OK, let subscription else {
            jsCtx_Destroy(context)
            throw NATSError("consumer \(durable) on \(stream) (JetStream error \(errorCode.rawValue))", status)
        }
        self.subscription = subscription
    }

    deinit {
        natsSubscription_Destroy(subscription)
        jsCtx_Destroy(context)
    }

    /// Up to `batch` messages, waiting at most `timeout` for the first: empty when none came.
    public func fetch(batch: Int, timeout: Duration) throws(NATSError) -> [NATSStreamMessage] {
        var list = natsMsgList()
        var errorCode = jsErrCode(0)
        let millis = max(1, timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        let status = natsSubscription_Fetch(&list, subscription, Int32(batch), millis, &errorCode)
        if status == NATS_TIMEOUT { return [] }
        guard status == NATS_OK else { throw NATSError("fetch", status) }
        var messages: [NATSStreamMessage] = []
        messages.reserveCapacity(Int(list.Count))
        for index in 0..<Int(list.Count) {
            guard let message = list.Msgs[index] else { continue }
            list.Msgs[index] = nil   // now the NATSStreamMessage's to destroy
            messages.append(NATSStreamMessage(message))
        }
        natsMsgList_Destroy(&list)
        return messages
    }
}

/// A message fetched from a stream, until it is acknowledged (or dropped unacknowledged: it is delivered again).
public final class NATSStreamMessage: @unchecked Sendable {
    // @unchecked: used by the one thread that fetched it.
    private let message: OpaquePointer
    public let content: NATSMessage

    init(_ message: OpaquePointer) {
        self.message = message
        content = NATSConnection.copy(message)
    }

    deinit { natsMsg_Destroy(message) }

    /// Tells the stream this message is done with; it is not delivered again.
    public func acknowledge() throws(NATSError) {
        let status = natsMsg_Ack(message, nil)
        guard status == NATS_OK else { throw NATSError("ack", status) }
    }
}
