import FlareWire
import Testing
@testable import FlareCore
import FlareCodec

/// The rules that turn what was heard of a tracker into live, stale or offline.
@Suite struct TrackerRulesTests {
    let rules = TrackerRules(staleAfterMillis: 120_000)
    let live = TrackerRecord(state: .live, since: 1_000_000, transport: .mqtt)

    @Test func liveUntilTheSilenceGrowsPastTheLimitThenStaleSinceTheLimit() {
        #expect(rules.current(recorded: live, lastHeardAt: 1_500_000, transport: .mqtt, now: 1_620_000) == live)
        #expect(rules.current(recorded: live, lastHeardAt: 1_500_000, transport: .mqtt, now: 1_620_001)
                == TrackerRecord(state: .stale, since: 1_620_000, transport: .mqtt))
        let stale = TrackerRecord(state: .stale, since: 1_620_000, transport: .mqtt)
        #expect(rules.current(recorded: stale, lastHeardAt: 1_500_000, transport: nil, now: 9_000_000) == stale)
        // The next fix ends the silence: live since that fix.
        #expect(rules.current(recorded: stale, lastHeardAt: 1_700_000, transport: .http, now: 1_700_010)
                == TrackerRecord(state: .live, since: 1_700_000, transport: .http))
    }

    @Test func offlineFromTheWillUntilAFixHeardAfterIt() {
        let offline = TrackerRecord(state: .offline, since: 2_000_000, reason: TrackerRecord.connectionLost, transport: .mqtt)
        #expect(rules.current(recorded: offline, lastHeardAt: 1_990_000, transport: .mqtt, now: 2_001_000) == offline)
        // Still offline long after: a lost connection is not a mere silence.
        #expect(rules.current(recorded: offline, lastHeardAt: 1_990_000, transport: .mqtt, now: 9_000_000) == offline)
        #expect(rules.current(recorded: offline, lastHeardAt: 2_000_500, transport: .mqtt, now: 2_001_000)
                == TrackerRecord(state: .live, since: 2_000_500, transport: .mqtt))
    }

    @Test func aTrackerReportingOverHTTPIsRecordedOnceAndAnMQTTOneNever() {
        // Over HTTP: recorded (the page says only `stale` can apply), still live since the same moment.
        let overHTTP = TrackerRecord(state: .live, since: 1_000_000, transport: .http)
        #expect(rules.current(recorded: live, lastHeardAt: 1_100_000, transport: .http, now: 1_100_001) == overHTTP)
        #expect(rules.current(recorded: overHTTP, lastHeardAt: 1_200_000, transport: .http, now: 1_200_001) == overHTTP)
        #expect(rules.current(recorded: overHTTP, lastHeardAt: 1_200_000, transport: nil, now: 1_200_001) == overHTTP)
        #expect(rules.current(recorded: overHTTP, lastHeardAt: 1_300_000, transport: .mqtt, now: 1_300_001) == live)
        // A new share (nothing recorded, as MQTT) hearing MQTT fixes: nothing to write.
        let new = TrackerRecord(state: .live, since: 1_000_000, transport: nil)
        #expect(rules.current(recorded: new, lastHeardAt: 1_100_000, transport: .mqtt, now: 1_100_001) == new)
    }

    @Test func theBatteryIsLowAtFifteenPercentOrLessWhileNotCharging() {
        #expect(TrackerRules.isBatteryLow(level: 15, status: 1))
        #expect(TrackerRules.isBatteryLow(level: 8, status: nil))
        #expect(!TrackerRules.isBatteryLow(level: 16, status: 1))
        #expect(!TrackerRules.isBatteryLow(level: 8, status: 2))     // charging
        #expect(!TrackerRules.isBatteryLow(level: 8, status: 3))     // full (plugged in)
        #expect(!TrackerRules.isBatteryLow(level: nil, status: 1))
    }

    @Test func theSummaryNamesBatteryAndConnectivityAndANewShareIsLive() throws {
        let share = Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: 5_000, expiresAt: 9_000_000)
        let fix = Fix(latitude: 1, longitude: 2, timestamp: 6, battery: 9, batteryStatus: 1, connection: "m")
        let json = try JSONValue.parse(TrackerSummary(share: share, last: fix).json)
        #expect(json["state"]?.stringValue == "live")
        #expect(json["since"]?.stringValue == "1970-01-01T00:00:05Z")
        #expect(json["battery"]?.doubleValue == 9)
        #expect(json["battery_low"] == .bool(true))
        #expect(json["battery_status"]?.stringValue == "unplugged")
        #expect(json["connection"]?.stringValue == "mobile")
        #expect(json["reason"] == nil && json["locate_requested_at"] == nil)
    }
}
