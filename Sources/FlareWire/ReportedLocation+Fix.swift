public import FlareAPI
public import FlareCore
public import FlareCodec
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// A fix on the wire. Two shapes: the viewer's (`FlareAPI.ReportedLocation`: the view document's `last`, the live
// `fix` event, a share's `last`) and the OwnTracks `location` message flared publishes for HTTP fixes and restored
// positions (`FlareAPI.Location`). Written by hand here, and only here, because every viewer of every share gets
// each fix; `WireShapeTests` holds each writer equal to its FlareAPI type.
extension Fix {
    /// The viewer's form: `{"lat":…,"lon":…,"tst":…,"acc":…,…}`, optional fields only when known.
    public func writeViewJSON(into writer: inout JSONWriter) {
        writer.beginObject()
        writer.field("lat", latitude)
        writer.field("lon", longitude)
        writeMeasurements(into: &writer)
        writer.endObject()
    }

    /// `tst` and the optional OwnTracks fields, shared by both forms.
    private func writeMeasurements(into writer: inout JSONWriter) {
        writer.field("tst", timestamp)
        if let accuracy { writer.field("acc", accuracy) }
        if let altitude { writer.field("alt", altitude) }
        if let velocity { writer.field("vel", velocity) }
        if let course { writer.field("cog", course) }
        if let battery { writer.field("batt", battery) }
        if let batteryStatus { writer.field("bs", batteryStatus) }
        if let connection { writer.field("conn", connection) }
    }

    /// A ciphertext as the page gets it (`FlareAPI.SealedLocation`): `{"tst": arrival, "data": "…"}`.
    public func writeSealedJSON(into writer: inout JSONWriter) {
        writer.beginObject()
        writer.field("tst", timestamp)
        writer.field("data", sealed ?? "")
        writer.endObject()
    }

    public var sealedJSON: [UInt8] {
        var writer = JSONWriter(capacity: (sealed?.utf8.count ?? 0) + 32)
        writeSealedJSON(into: &writer)
        return writer.bytes
    }

    public var viewJSON: [UInt8] {
        var writer = JSONWriter(capacity: 128)
        writeViewJSON(into: &writer)
        return writer.bytes
    }

    /// An OwnTracks `location` message, as published to the broker for HTTP-ingested fixes.
    public var ownTracksJSON: [UInt8] {
        var writer = JSONWriter(capacity: 160)
        writer.beginObject()
        if let sealed {
            // As the phone sent it: republished after a broker crash, or from the HTTP ingest for integrators.
            writer.field("_type", "encrypted")
            writer.field("data", sealed)
            if let sequence {
                writer.field("seq_stream", sequence.stream)
                writer.field("seq", sequence.number)
            }
            writer.endObject()
            return writer.bytes
        }
        writer.field("_type", "location")
        writer.field("lat", latitude)
        writer.field("lon", longitude)
        writeMeasurements(into: &writer)
        if let trackerID { writer.field("tid", trackerID) }
        if let trigger { writer.field("t", trigger) }
        if let sequence {
            writer.field("seq_stream", sequence.stream)
            writer.field("seq", sequence.number)
        }
        writer.endObject()
        return writer.bytes
    }

    /// The API's form of a stored fix, for the bodies encoded with their FlareAPI type (a share's `last`).
    public var reportedLocation: ReportedLocation {
        ReportedLocation(latitude: latitude, longitude: longitude, timestamp: Date(timeIntervalSince1970: Double(timestamp)),
                         accuracy: accuracy, altitude: altitude, velocity: velocity, course: course, battery: battery,
                         batteryStatus: batteryStatus, connection: connection)
    }
}
