import FlareAPI
public import FlareCore
public import FlareCodec

// Whether the phone is reporting, on the wire: `FlareAPI.TrackerReport` (the view document's `tracker`, the live
// `tracker` event) and, its state fields only, the retained status's `tracker`. Written here only.
extension TrackerSummary {
    public func writeJSON(into writer: inout JSONWriter) {
        writer.beginObject()
        writeStateFields(into: &writer)
        if let battery {
            writer.field("battery", battery)
            writer.field("battery_low", isBatteryLow)
        }
        if let batteryStatus, let status = BatteryStatus(rawValue: batteryStatus) { writer.field("battery_status", status.name) }
        if let connection, let name = Self.connectionNames[connection] { writer.field("connection", name) }
        if let locateRequestedAt { writer.field("locate_requested_at", RFC3339.format(millis: locateRequestedAt)) }
        if let locateAnsweredAt { writer.field("locate_answered_at", RFC3339.format(millis: locateAnsweredAt)) }
        if underDuress { writer.field("duress", true) }
        writer.endObject()
    }

    /// `state`, `since`, `reason` and `transport`: all the retained status topic says (it is republished on a change
    /// of state, not on every battery reading).
    public func writeStateFields(into writer: inout JSONWriter) {
        writer.field("state", record.state.rawValue)
        writer.field("since", RFC3339.format(millis: record.since))
        if let reason = record.reason { writer.field("reason", reason) }
        if let transport = record.transport { writer.field("transport", transport.rawValue) }
    }

    public var json: [UInt8] {
        var writer = JSONWriter(capacity: 256)
        writeJSON(into: &writer)
        return writer.bytes
    }
}
