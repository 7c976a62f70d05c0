import FlareAPI
public import FlareCore
public import FlareCodec

// The family's answer on the wire (`FlareAPI.ShareAnswer`); the audience (`FlareAPI.ShareAudience`). Written here only.
extension Answer {
    /// `{"id":"…","kind":…,"name":…,"at":…}`: the view document's, the live event's and the MQTT message's form.
    public func writeJSON(into writer: inout JSONWriter) {
        writer.beginObject()
        writer.field("id", String(id))
        writer.field("kind", kind.rawValue)
        writer.field("name", name)
        writer.field("at", RFC3339.format(millis: at))
        writer.endObject()
    }

    public var json: [UInt8] {
        var writer = JSONWriter(capacity: 96)
        writeJSON(into: &writer)
        return writer.bytes
    }
}

extension Audience {
    /// `{"first_opened_at":"…"|null,"opened":N,"watching":N,"links":[…]}` (`links` only for a share with personal
    /// links): the share status's `audience` and the retained MQTT topic's.
    public var json: [UInt8] {
        var writer = JSONWriter(capacity: 80)
        writer.beginObject()
        writer.key("first_opened_at")
        if let firstOpenedAt { writer.string(RFC3339.format(millis: firstOpenedAt)) } else { writer.null() }
        writer.field("opened", opened)
        writer.field("watching", watching)
        if !links.isEmpty {
            writer.key("links")
            writer.beginArray()
            for link in links {
                writer.beginObject()
                writer.field("link_id", link.id.rawValue)
                writer.field("name", link.name)
                if let firstOpenedAt = link.firstOpenedAt { writer.field("first_opened_at", RFC3339.format(millis: firstOpenedAt)) }
                writer.field("watching_now", link.watchingNow)
                if let withdrawnAt = link.withdrawnAt { writer.field("withdrawn_at", RFC3339.format(millis: withdrawnAt)) }
                writer.endObject()
            }
            writer.endArray()
        }
        writer.endObject()
        return writer.bytes
    }
}
