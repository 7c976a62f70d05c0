import FlareAPI
import FlareCore
import FlareWire
import Foundation
import Testing
import FlareSystem
import FlareCodec

/// Each hand writer against the FlareAPI type it mirrors: what it writes decodes into the type with the values it was
/// given, and encoding that decoded value again gives the same JSON (so the writer has no key the type lacks, and
/// the type none the writer leaves out). Absent and `null` count as the same.
@Suite struct WireShapeTests {
    // Whole seconds: the wire's times are RFC 3339 to the second.
    static let time: UnixMillis = 1_764_684_000_000
    static let share = Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "Ana <on the hill>", createdAt: time - 60_000,
                             expiresAt: time + 3_600_000, tracker: TrackerRecord(state: .offline, since: time - 5_000,
                                                                                   reason: "connection_lost", transport: .mqtt),
                             locateRequestedAt: time - 9_000, locateAnsweredAt: time - 8_000)
    static let fullFix = Fix(latitude: 52.520008, longitude: 13.404954, timestamp: 1_764_684_000, accuracy: 12.5, altitude: 34,
                             velocity: 4.5, course: 270, battery: 14, batteryStatus: 1, connection: "m", trackerID: "ab", trigger: "r")
    static let bareFix = Fix(latitude: -33.8688, longitude: 151.2093, timestamp: 1_764_684_001)

    /// Decodes `bytes` as `T`, then checks that `T` encodes back to the same JSON.
    func decodeExactly<T: Codable>(_ type: T.Type, _ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
        let value = try JSONDecoder().decode(T.self, from: Data(bytes))
        let again = try JSONValue.parse(Array(try JSONEncoder().encode(value)))
        #expect(Self.withoutNulls(again) == Self.withoutNulls(try JSONValue.parse(bytes)),
                "\(String(decoding: bytes, as: UTF8.self)) is not what \(T.self) writes", sourceLocation: sourceLocation)
        return value
    }

    static func withoutNulls(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members): .object(members.filter { $0.value != .null }.mapValues(withoutNulls))
        case .array(let items): .array(items.map(withoutNulls))
        default: value
        }
    }

    @Test(arguments: [fullFix, bareFix])
    func aViewersFixIsAReportedLocation(_ fix: Fix) throws {
        let decoded = try decodeExactly(ReportedLocation.self, fix.viewJSON)
        #expect(decoded == fix.reportedLocation)
        #expect(decoded.batteryStatus == fix.batteryStatus && decoded.connection == fix.connection && decoded.battery == fix.battery)
    }

    @Test(arguments: [fullFix, bareFix])
    func theOwnTracksMessageIsALocation(_ fix: Fix) throws {
        // The OwnTracks message carries more than `Location` knows (bs, conn, seq): only decoding is held equal.
        let location = try JSONDecoder().decode(Location.self, from: Data(fix.ownTracksJSON))
        #expect(location.latitude == fix.latitude && location.longitude == fix.longitude)
        #expect(Int64(location.timestamp.timeIntervalSince1970) == fix.timestamp)
        #expect(location.accuracy == fix.accuracy && location.altitude == fix.altitude && location.speedKmh == fix.velocity)
        #expect(location.course == fix.course && location.battery == fix.battery && location.trackerID == fix.trackerID)
        #expect(location.answersLocateRequest == fix.isCommandResponse)
    }

    @Test func theTrackerIsATrackerReport() throws {
        let summary = TrackerSummary(share: Self.share, last: Self.fullFix)
        let report = try decodeExactly(TrackerReport.self, summary.json)
        #expect(report.state == .offline && report.reason == "connection_lost" && report.transport == "mqtt")
        #expect(report.since == Date(unixMillis: Self.time - 5_000))
        #expect(report.battery == 14 && report.batteryLow == true && report.batteryStatus == "unplugged" && report.connection == "mobile")
        #expect(report.locateRequestedAt == Date(unixMillis: Self.time - 9_000) && report.locateAnsweredAt == Date(unixMillis: Self.time - 8_000))
        let quiet = try decodeExactly(TrackerReport.self, TrackerSummary(share: Self.share, last: Self.bareFix).json)
        #expect(quiet.battery == nil && quiet.batteryLow == nil && quiet.connection == nil)
    }

    @Test func answersAndTheAudienceAreTheirTypes() throws {
        let answer = Answer(id: 7, kind: .calledEmergency, name: "Mum \"M\"", at: Self.time)
        #expect(try decodeExactly(ShareAnswer.self, answer.json)
                == ShareAnswer(id: "7", kind: .calledEmergency, name: "Mum \"M\"", at: Date(unixMillis: Self.time)))
        let links = [LinkAudience(id: .generate(), name: "Mum", firstOpenedAt: Self.time, watchingNow: true, withdrawnAt: nil),
                     LinkAudience(id: .generate(), name: "王芳", firstOpenedAt: nil, watchingNow: false, withdrawnAt: Self.time)]
        for audience in [Audience(firstOpenedAt: Self.time, opened: 3, watching: 1), Audience(firstOpenedAt: nil, opened: 0, watching: 0),
                         Audience(firstOpenedAt: Self.time, opened: 1, watching: 1, links: links)] {
            #expect(try decodeExactly(ShareAudience.self, audience.json)
                    == ShareAudience(firstOpenedAt: audience.firstOpenedAt.map(Date.init(unixMillis:)), opened: audience.opened,
                                     watching: audience.watching, links: audience.links.isEmpty ? nil : audience.links.map {
                                         ShareAudience.Link(linkID: $0.id.rawValue, name: $0.name, firstOpenedAt: $0.firstOpenedAt.map(Date.init(unixMillis:)),
                                                            watchingNow: $0.watchingNow, withdrawnAt: $0.withdrawnAt.map(Date.init(unixMillis:)))
                                     }))
        }
    }

    @Test func theViewDocumentIsAViewDocument() throws {
        let trail = [TrailPoint(latitude: 52.5, longitude: 13.4, timestamp: 1_764_683_990), TrailPoint(latitude: 52.52, longitude: 13.40, timestamp: 1_764_684_000)]
        let answers = [Answer(id: 1, kind: .onMyWay, name: "", at: Self.time)]
        let active = ViewDocumentRenderer.closing(ViewDocumentRenderer.body(share: Self.share, last: Self.fullFix, trail: trail, answers: answers),
                                                  serverTime: Self.time)
        let document = try decodeExactly(ViewDocument.self, active)
        #expect(document.state == .active && document.name == Self.share.name && document.last == Self.fullFix.reportedLocation)
        #expect(document.trail == trail.map { ViewDocument.TrailPoint(lat: $0.latitude, lon: $0.longitude, tst: $0.timestamp) })
        #expect(document.answers?.map(\.id) == ["1"] && document.tracker?.state == .offline && document.serverTime == Date(unixMillis: Self.time))
        var ended = Self.share
        ended.endedAt = Self.time
        ended.endReason = .stopped
        let closed = try decodeExactly(ViewDocument.self, ViewDocumentRenderer.closing(ViewDocumentRenderer.body(share: ended, last: nil, trail: []),
                                                                                      serverTime: Self.time))
        #expect(closed.state == .ended && closed.reason == "stopped" && closed.endedAt == Date(unixMillis: Self.time))
        #expect(closed.last == nil && closed.tracker == nil)
        let withdrawn = try decodeExactly(ViewDocument.self, ViewDocumentRenderer.closing(
            ViewDocumentRenderer.withdrawn(withdrawnAt: Self.time), serverTime: Self.time))
        #expect(withdrawn.state == .ended && withdrawn.reason == "withdrawn" && withdrawn.name == "" && withdrawn.last == nil)
        #expect(withdrawn.expiresAt == Date(unixMillis: Self.time), "the link's own end, not the share's expiry")
        #expect(withdrawn.trail.isEmpty && withdrawn.answers == [] && withdrawn.tracker == nil)
    }

    @Test func theRetainedStatusIsAShareStatusMessage() throws {
        let active = try decodeExactly(ShareStatusMessage.self, Self.share.statusMessage)
        #expect(active.state == .active && active.expiresAt == Date(unixMillis: Self.share.expiresAt) && active.reason == nil)
        #expect(active.tracker == ShareStatusMessage.Tracker(state: .offline, since: Date(unixMillis: Self.time - 5_000),
                                                              reason: "connection_lost", transport: "mqtt"))
        var ended = Self.share
        ended.endedAt = Self.time
        ended.endReason = .expired
        let over = try decodeExactly(ShareStatusMessage.self, ended.statusMessage)
        #expect(over.state == .ended && over.reason == "expired" && over.endedAt == Date(unixMillis: Self.time))
        #expect(over.tracker == nil && over.expiresAt == nil)
    }
}
