import FlareCore
import FlareServiceTestSupport
import FlareTestSupport
import Synchronization
import Testing
@testable import FlareShares
import FlareSystem

/// Each concern registers its own job type; one scheduler runs them all, in deadline order.
@Suite struct DeadlinesTests {
    enum Lights: Hashable, Sendable { case on(Int), off(Int) }
    enum Doors: Hashable, Sendable { case open(Int) }
    /// Equal raw values in two job types: they must never be taken for each other.
    enum Same: Hashable, Sendable { case one }
    enum Other: Hashable, Sendable { case one }

    @Test func eachTypeIsRunByItsOwnRunnerInDeadlineOrder() {
        let clock = ManualClock()
        let deadlines = Deadlines(clock: clock)
        defer { deadlines.stop() }
        let ran = Mutex<[String]>([])
        deadlines.on(Lights.self) { job in ran.withLock { $0.append("\(job)") } }
        deadlines.on(Doors.self) { job in ran.withLock { $0.append("\(job)") } }
        let now = clock.now()
        deadlines.schedule(Lights.off(1), at: now + 30)
        deadlines.schedule(Doors.open(1), at: now + 20)
        deadlines.schedule(Lights.on(1), at: now + 10)
        deadlines.schedule(Lights.on(2), at: now + 40)
        deadlines.cancel(Lights.on(2))
        clock.advance(by: 50)
        #expect(eventually { ran.withLock { $0.count } == 3 })
        #expect(ran.withLock { $0 } == ["on(1)", "open(1)", "off(1)"])
    }

    @Test func equalValuesOfTwoTypesAreTwoJobs() {
        let clock = ManualClock()
        let deadlines = Deadlines(clock: clock)
        defer { deadlines.stop() }
        let ran = Mutex<[String]>([])
        deadlines.on(Same.self) { _ in ran.withLock { $0.append("same") } }
        deadlines.on(Other.self) { _ in ran.withLock { $0.append("other") } }
        deadlines.schedule(Same.one, at: clock.now() + 10)
        deadlines.schedule(Other.one, at: clock.now() + 20)
        deadlines.cancel(Same.one)  // cancels that type's job only
        clock.advance(by: 30)
        #expect(eventually { ran.withLock { $0 } == ["other"] })
        // Scheduling one type's job again replaces only that type's.
        deadlines.schedule(Same.one, at: clock.now() + 10)
        deadlines.schedule(Same.one, at: clock.now() + 20)
        deadlines.schedule(Other.one, at: clock.now() + 30)
        clock.advance(by: 30)
        #expect(eventually { ran.withLock { $0 } == ["other", "same", "other"] })
    }

    @Test func untrackedJobsRunEachTimeTheyWereScheduled() {
        let clock = ManualClock()
        let deadlines = Deadlines(clock: clock)
        defer { deadlines.stop() }
        let ran = Mutex(0)
        deadlines.on(Doors.self) { _ in ran.withLock { $0 += 1 } }
        deadlines.scheduleUntracked(Doors.open(7), at: clock.now() + 10)
        deadlines.scheduleUntracked(Doors.open(7), at: clock.now() + 20)
        deadlines.cancel(Doors.open(7))
        clock.advance(by: 20)
        #expect(eventually { ran.withLock { $0 } == 2 })
    }
}
