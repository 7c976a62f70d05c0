import FlareWire
import Testing
@testable import FlareCore
import FlareSystem

@Suite struct LocationPayloadTests {
    let parser = LocationPayloadParser(maximumBytes: 4096)
    let now: UnixMillis = 1_795_963_000_000
    var created: UnixMillis { now - 60_000 }

    func parse(_ text: String) -> Result<Fix, RejectReason> {
        parser.parse(Array(text.utf8), receivedAt: now, shareCreatedAt: created)
    }

    @Test func acceptsAnOwnTracksIOSLocation() throws {
        // Shaped like the OwnTracks iOS app's message (extra fields are ignored).
        let text = #"{"_type":"location","acc":5,"alt":520,"batt":81,"bs":1,"conn":"w","created_at":1795962990,"lat":48.137154,"lon":11.576124,"m":1,"t":"u","tid":"an","tst":1795962990,"vac":3,"vel":4,"cog":270,"BSSID":"aa:bb","SSID":"home","topic":"flare/v1/shares/x/location"}"#
        let fix = try parse(text).get()
        #expect(fix.latitude == 48.137154)
        #expect(fix.longitude == 11.576124)
        #expect(fix.timestamp == 1_795_962_990)
        #expect(fix.accuracy == 5)
        #expect(fix.altitude == 520)
        #expect(fix.velocity == 4)
        #expect(fix.course == 270)
        #expect(fix.battery == 81)
        #expect(fix.batteryStatus == 1)
        #expect(fix.connection == "w")
        #expect(fix.trigger == "u")
        #expect(fix.trackerID == "an")
    }

    /// Both apps' last wills, and the Wi-Fi keys in both spellings (iOS moved to `ssid`/`bssid` in 2025), which are
    /// read and never kept.
    @Test func readsBothLastWillFormsAndTheFieldsThePhonesReportAboutThemselves() throws {
        let androidWill = parser.parseMessage(Array(#"{"_type":"lwt"}"#.utf8), receivedAt: now, shareCreatedAt: created)
        #expect(androidWill == .success(.lastWill))
        let iOSWill = parser.parseMessage(Array(#"{"_type":"lwt","tst":1795962000}"#.utf8), receivedAt: now, shareCreatedAt: created)
        #expect(iOSWill == .success(.lastWill))
        #expect(parse(#"{"_type":"lwt"}"#) == .failure(.ignoredType))   // not a position for the HTTP ingest

        let iOSReply = try parse(#"{"_type":"location","lat":1,"lon":2,"tst":1795962990,"t":"r","batt":8,"bs":1,"conn":"m","ssid":"home","bssid":"aa:bb"}"#).get()
        #expect(iOSReply.isCommandResponse && iOSReply.battery == 8 && iOSReply.batteryStatus == 1 && iOSReply.connection == "m")
        let android = try parse(#"{"_type":"location","lat":1,"lon":2,"tst":1795962990,"t":"r","batt":90,"bs":2,"conn":"w","SSID":"home","BSSID":"aa:bb"}"#).get()
        #expect(android.isCommandResponse && android.batteryStatus == 2 && android.connection == "w")
        // Out of range or unknown: dropped, the position kept.
        let odd = try parse(#"{"lat":1,"lon":2,"bs":7,"conn":"x","t":"long"}"#).get()
        #expect(odd.batteryStatus == nil && odd.connection == nil && odd.trigger == nil)
    }

    @Test func acceptsABareObjectAndUsesReceiveTime() throws {
        let fix = try parse(#"{"lat":-33.86,"lon":151.21}"#).get()
        #expect(fix.timestamp == now / 1000)
        #expect(fix.accuracy == nil)
    }

    @Test func acceptsTheOriginalIOSClientsBody() throws {
        // The seed app posts share_id alongside lat/lon.
        let fix = try parse(#"{"share_id":"abc","lat":31.2304,"lon":121.4737}"#).get()
        #expect(fix.latitude == 31.2304)
    }

    @Test(arguments: [
        (#"{"_type":"lwt","tst":1}"#, RejectReason.ignoredType),
        (#"{"_type":"transition","event":"enter","lat":1,"lon":2}"#, .ignoredType),
        (#"{"_type":"status"}"#, .ignoredType),
        (#"{"lat":1}"#, .missingCoordinates),
        (#"{"lat":"north","lon":2}"#, .missingCoordinates),
        (#"{"lat":91,"lon":2}"#, .invalidCoordinates),
        (#"{"lat":1,"lon":-180.5}"#, .invalidCoordinates),
        (#"{"lat":1e400,"lon":2}"#, .invalidCoordinates),
        (#"[1,2]"#, .malformed),
        (#"not json"#, .malformed),
        (#"{"lat":1,"lon":2,"tst":"yesterday"}"#, .malformed),
        (#"{"lat":1,"lon":2,"tst":-5}"#, .malformed),
        (#"{"lat":1,"lon":2,"tst":1795963000000}"#, .malformed),
        (#"{"lat":1,"lon":2,"tst":1795969000}"#, .futureTimestamp),
        (#"{"lat":1,"lon":2,"tst":1600000000}"#, .staleTimestamp),
    ])
    func rejectsWithTheRightReason(_ payload: String, _ reason: RejectReason) {
        #expect(parse(payload) == .failure(reason))
    }

    @Test func rejectsOversizedPayloads() {
        let big = #"{"lat":1,"lon":2,"pad":""# + String(repeating: "x", count: 5000) + #""}"#
        #expect(parse(big) == .failure(.tooLarge))
    }

    @Test func dropsOutOfRangeOptionalFieldsButKeepsThePosition() throws {
        let fix = try parse(#"{"lat":1,"lon":2,"acc":-1,"vel":-1,"batt":150,"cog":400,"tid":"far-too-long-id"}"#).get()
        #expect(fix.latitude == 1)
        #expect(fix.accuracy == nil && fix.velocity == nil && fix.battery == nil && fix.course == nil && fix.trackerID == nil)
    }

    @Test func rejectReasonsNeverEchoThePayload() {
        for reason in RejectReason.allCases {
            #expect(!reason.message.contains("48.1"))
            #expect(reason.rawValue.allSatisfy { $0.isLowercase || $0 == "_" })
        }
    }

    @Test func ownTracksOutputParsesBackToTheSameFix() throws {
        let fix = Fix(latitude: 48.1, longitude: 11.5, timestamp: now / 1000 - 5, accuracy: 12, altitude: 500, velocity: 3, course: 90, battery: 50, trackerID: "ab")
        #expect(try parse(String(decoding: fix.ownTracksJSON, as: UTF8.self)).get() == fix)
    }
}

@Suite struct SharePolicyTests {
    let policy = SharePolicy(defaultDurationSeconds: 3600, maximumDurationSeconds: 7200, historyRetentionSeconds: 60)

    @Test func durations() throws {
        #expect(try policy.duration(requested: nil) == 3600)
        #expect(try policy.duration(requested: 60) == 60)
        #expect(try policy.duration(requested: 7200) == 7200)
        for bad in [0, -1, 7201, 1.5, .nan, .infinity] {
            #expect(throws: SharePolicy.Violation.self) { try policy.duration(requested: bad) }
        }
    }

    @Test func names() throws {
        #expect(try policy.validName(nil) == "")
        #expect(try policy.validName("  Anna ") == "Anna")
        #expect(throws: SharePolicy.Violation.nameHasHiddenCharacters, "refused, not cleaned") { try policy.validName("  Anna\u{07} ") }
        #expect(throws: SharePolicy.Violation.nameTooLong) { try policy.validName(String(repeating: "a", count: 81)) }
    }
}
