import Testing
@testable import FlareCore

/// `Share` and `Fix` hold their optional numbers in eight bytes each (`Packed`): every value comes back as it went
/// in, absent stays absent, and the sizes that 100,000 live shares pay stay where docs/performance.md puts them.
@Suite struct PackedTests {
    @Test func optionalNumbersComeBackAsTheyWentIn() {
        var fix = Fix(latitude: 1, longitude: 2, timestamp: 3)
        #expect(fix.accuracy == nil && fix.altitude == nil && fix.velocity == nil && fix.course == nil)
        #expect(fix.battery == nil && fix.batteryStatus == nil)
        fix.accuracy = 0
        fix.altitude = -412.5
        fix.velocity = .greatestFiniteMagnitude
        fix.course = -0.0
        fix.battery = 0
        fix.batteryStatus = 3
        #expect(fix.accuracy == 0 && fix.altitude == -412.5 && fix.velocity == .greatestFiniteMagnitude && fix.course == 0)
        #expect(fix.battery == 0 && fix.batteryStatus == 3)
        fix.accuracy = nil
        fix.battery = nil
        #expect(fix.accuracy == nil && fix.battery == nil && fix.altitude == -412.5)

        var share = Share(id: ShareID.generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: 1, expiresAt: 2)
        #expect(share.endedAt == nil && share.ownerKeyID == nil && share.missedCheckinDueAt == nil)
        share.endedAt = 0
        share.ownerKeyID = Int64.max
        share.lastAnswerID = -1
        #expect(share.endedAt == 0 && share.ownerKeyID == Int64.max && share.lastAnswerID == -1)
        share.endedAt = nil
        #expect(share.endedAt == nil && share.isActive)
    }

    @Test func equalityIsTheValuesEquality() {
        let plain = Fix(latitude: 1, longitude: 2, timestamp: 3)
        var measured = plain
        measured.accuracy = 5
        #expect(plain == Fix(latitude: 1, longitude: 2, timestamp: 3))
        #expect(plain != measured)
        measured.accuracy = nil
        #expect(plain == measured)
        var charged = plain
        charged.battery = 0
        #expect(plain != charged)
    }

    /// The sentinels are values Flare never holds; a battery past 32 bits is clamped rather than wrapped.
    @Test func theSentinelsReadAsAbsentAndLargeBatteriesAreClamped() {
        var fix = Fix(latitude: 0, longitude: 0, timestamp: 0)
        fix.accuracy = -.infinity
        #expect(fix.accuracy == nil)
        fix.battery = Int.max
        #expect(fix.battery == Int(Int32.max))
        fix.battery = Int.min
        #expect(fix.battery == Int(Int32.min) + 1)
        var share = Share(id: ShareID.generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: 1, expiresAt: 2)
        share.batteryLowAt = Int64.min
        #expect(share.batteryLowAt == nil)
    }

    @Test func theSizesEveryLiveShareHolds() {
        #expect(MemoryLayout<Packed<Int64>>.size == 8)
        #expect(MemoryLayout<Packed<Double>>.size == 8)
        #expect(MemoryLayout<Fix?>.size <= 152)
        #expect(MemoryLayout<Share>.size <= 200)
    }
}
