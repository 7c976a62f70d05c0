import FlareAPI
public import FlareCore
public import FlareSystem
import FlareCodec

/// Renders `FlareAPI.ViewDocument` by hand: it is the most requested body of all (every open link polls it), so it
/// is written straight into bytes instead of through an encoder. `WireShapeTests` and the gateway tests decode
/// renderings with the Codable type, which keeps the two in step.
public enum ViewDocumentRenderer {
    /// The document without its closing `server_time` field and brace: the part that depends only on the share.
    /// An end-to-end encrypted share's document has `e2e: true`, no `last` and no `trail`: its positions are
    /// `sealed`, the newest ciphertexts oldest first, for the page to open with the key in its link.
    public static func body(share: Share, last: Fix?, trail: [TrailPoint], sealed: [Fix] = [], answers: [Answer] = []) -> [UInt8] {
        var writer = JSONWriter(capacity: 256 + trail.count * 48 + sealed.count * 400)
        writer.beginObject()
        if share.isActive {
            writer.field("state", "active")
        } else {
            writer.field("state", "ended")
            writer.field("reason", share.endReason?.rawValue ?? EndReason.expired.rawValue)
            if let endedAt = share.endedAt { writer.field("ended_at", RFC3339.format(millis: endedAt)) }
        }
        writer.field("name", share.name)
        writer.field("expires_at", RFC3339.format(millis: share.expiresAt))
        writer.key("last")
        if let last, !last.isSealed { last.writeViewJSON(into: &writer) } else { writer.null() }
        if share.endToEnd {
            writer.field("e2e", true)
            writer.key("sealed")
            writer.beginArray()
            for fix in sealed { fix.writeSealedJSON(into: &writer) }
            writer.endArray()
        }
        writer.key("trail")
        writer.beginArray()
        for point in trail where !share.endToEnd {
            writer.beginObject()
            writer.field("lat", point.latitude)
            writer.field("lon", point.longitude)
            writer.field("tst", point.timestamp)
            writer.endObject()
        }
        writer.endArray()
        writer.key("answers")
        writer.beginArray()
        for answer in answers { answer.writeJSON(into: &writer) }
        writer.endArray()
        if share.isActive {
            writer.key("tracker")
            TrackerSummary(share: share, last: last).writeJSON(into: &writer)
        }
        if let due = share.missedCheckinDueAt {
            writer.key("checkin")
            writer.beginObject()
            writer.field("state", "missed")
            writer.field("due_at", RFC3339.format(millis: due))
            writer.endObject()
        }
        return writer.bytes
    }

    /// What a withdrawn personal link shows: that it was withdrawn and when, nothing of the share (no name, no
    /// position, no answers, no expiry: the holder must not learn of each extension, nor whether the share still
    /// runs). The `expires_at` every document has is the link's own end, its withdrawal.
    public static func withdrawn(withdrawnAt: UnixMillis) -> [UInt8] {
        let expiresAt = withdrawnAt
        var writer = JSONWriter(capacity: 160)
        writer.beginObject()
        writer.field("state", "ended")
        writer.field("reason", "withdrawn")
        writer.field("ended_at", RFC3339.format(millis: withdrawnAt))
        writer.field("name", "")
        writer.field("expires_at", RFC3339.format(millis: expiresAt))
        writer.key("last")
        writer.null()
        writer.key("trail")
        writer.beginArray()
        writer.endArray()
        writer.key("answers")
        writer.beginArray()
        writer.endArray()
        return writer.bytes
    }

    /// Closes a rendered body with the one field that changes every second.
    public static func closing(_ body: [UInt8], serverTime: UnixMillis) -> [UInt8] {
        var document: [UInt8] = []
        document.reserveCapacity(body.count + serverTimeSuffixLength)
        document += body
        document += serverTimeKey
        RFC3339.append(millis: serverTime, to: &document)
        document.append(UInt8(ascii: "\""))
        document.append(UInt8(ascii: "}"))
        return document
    }

    private static let serverTimeKey = Array(#","server_time":""#.utf8)
    /// The key, the 20 bytes of the time, the quote and the brace.
    private static let serverTimeSuffixLength = serverTimeKey.count + 22
}
