public import FlareSystem

/// The metric families of the broker's side: its connection and its retained state.
extension FlareMetrics {
    public static let ownPositionReplays = Metrics.Family("flare_own_position_replays_total", .counter, "Copies of flared's own marked positions published again long after (NATS): dropped, and the share's newest position put back.")
    public static let ownPositionsSkipped = Metrics.Family("flare_own_positions_skipped_total", .counter, "Positions flared published itself (HTTP fixes, restored last positions) that came back through the bridge and were skipped.")
    public static let mqttConnected = Metrics.Family("flare_mqtt_connected", .gauge, "1 while the bridge is connected to the broker.")
    public static let brokerRateDisconnects = Metrics.Family("flare_broker_rate_disconnects", .gauge, "Devices disconnected for sending beyond their share's FLARE_FIX_RATE_PER_SHARE: on mosquitto since the broker started, as it last said on flare/v1/broker/stats; on NATS since this flared started.")
    public static let brokerRestores = Metrics.Family("flare_broker_restores_total", .counter, "Times the broker was found to have lost retained messages and they were published again.")
    public static let brokerRestoredMessages = Metrics.Family("flare_broker_restored_messages_total", .counter, "Retained statuses and positions published again after the broker lost them.")
    public static let brokerEpoch = Metrics.Family("flare_broker_epoch", .gauge, "The broker's epoch mark as last acknowledged (0 on instances that do not keep it).")
}
