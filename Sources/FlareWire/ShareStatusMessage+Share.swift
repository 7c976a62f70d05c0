import FlareAPI
public import FlareCore
import FlareCodec

// The retained status on the wire (`FlareAPI.ShareStatusMessage`). Written here only.
extension Share {
    /// The body of the share's retained status message.
    public var statusMessage: [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        if let reason = endReason, let endedAt {
            writer.field("state", "ended")
            writer.field("reason", reason.rawValue)
            writer.field("ended_at", RFC3339.format(millis: endedAt))
        } else {
            writer.field("state", "active")
            writer.field("expires_at", RFC3339.format(millis: expiresAt))
            writer.key("tracker")
            writer.beginObject()
            TrackerSummary(share: self, last: nil).writeStateFields(into: &writer)
            writer.endObject()
        }
        writer.endObject()
        return writer.bytes
    }
}
