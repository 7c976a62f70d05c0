import FlareCore
import FlareSystem
import FlareMQTT
import FlareShares
import FlareStore
import Synchronization
import FlareCodec
#if canImport(Glibc)
import Glibc
#endif

/// Reads the broker's epoch mark over a connection of its own (a clean session, so no backlog of fixes delays it).
///
/// The mark is retained, so the broker sends it right after SUBSCRIBE, or nothing when it has none. To tell "none"
/// from "not yet" without guessing a delay, the probe then publishes a message to a topic only it listens to: the
/// broker queues that message behind the retained one, so once the probe's message is back, a mark that did not come
/// first does not exist.
public struct BrokerEpochProbe: BrokerEpochReading {
    let options: MQTTClient.Options

    struct Unavailable: Error, CustomStringConvertible {
        let description: String
    }

    /// - Parameter bridgeOptions: the bridge's options (host, credentials); the probe uses `<client id>-epoch`.
    public init(bridgeOptions: MQTTClient.Options) {
        var options = bridgeOptions
        options.clientID = bridgeOptions.clientID + "-epoch"
        options.cleanSession = true
        options.lastWill = nil
        self.options = options
    }

    public func readEpoch() throws -> Int64? {
        let client = try MQTTClient(options: options)
        let probeTopic = Topics.brokerEpoch + "/probe-" + String(Secret.generate().text.prefix(16))
        // (epoch mark seen, its value; probe back)
        let seen = Mutex<(mark: Int64??, probeBack: Bool)>((nil, false))
        client.setMessageHandler { message in
            seen.withLock { seen in
                if message.topic == Topics.brokerEpoch, seen.mark == nil, !seen.probeBack {
                    // A mark that does not parse is no mark: the state is restored and the mark written anew.
                    let epoch = (try? JSONValue.parse(message.payload))?["epoch"]?.doubleValue.flatMap { Int64(exactly: $0) }
                    seen.mark = .some(epoch)
                } else if message.topic == probeTopic {
                    seen.probeBack = true
                }
            }
        }
        try client.subscribe(Topics.brokerEpoch, qos: 0)
        try client.subscribe(probeTopic, qos: 0)
        try client.connect()
        defer { client.disconnect() }
        guard try client.waitUntilSubscribed(timeout: .seconds(10)) else {
            throw Unavailable(description: "no connection to the broker within 10 s")
        }
        try client.publishAndWait(topic: probeTopic, payload: Array("probe".utf8), qos: 1, retain: false, timeout: .seconds(10))
        let deadline = monotonicMillis() + 10_000
        while monotonicMillis() < deadline {
            if let result = seen.withLock({ $0.probeBack ? .some($0.mark ?? nil) : nil }) { return result }
            usleep(5_000)
        }
        throw Unavailable(description: "the probe message did not come back within 10 s")
    }
}

extension BrokerStateKeeper {
    /// The keeper of a bridge's broker connection: its epoch mark goes out through `publisher`, is read back by a probe
    /// on `options` (`<client id>-epoch`), and the lease is held under the client id. Both brokers' bridges use it.
    public static func keeping(_ client: MQTTClient, options: MQTTClient.Options, publisher: any BrokerPublisher, store: any LeaseRecords,
                               shares: ShareService, clock: any Clock, metrics: Metrics, logger: Logger) -> BrokerStateKeeper {
        BrokerStateKeeper(store: store, shares: shares, publisher: publisher, reader: BrokerEpochProbe(bridgeOptions: options),
                          holder: options.clientID, connection: { [client] in client.connectionNumber },
                          clock: clock, metrics: metrics, logger: logger.with(label: "keeper"))
    }
}
