import FlareCore
import Dispatch
import Synchronization
import Testing
import FlareSystem

@Suite struct ServiceGroupTests {
    final class Journal: Sendable {
        let entries = Mutex<[String]>([])
        func note(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    struct Refused: Error, CustomStringConvertible { var description: String { "port taken" } }

    func service(_ name: String, _ journal: Journal, failsToStart: Bool = false, finishes: Bool = true,
                 stopWaitsFor release: DispatchSemaphore? = nil) -> ServiceGroup.Service {
        .init(name, start: {
            if failsToStart { throw Refused() }
            journal.note("start \(name)")
        }, stop: { _ in
            release?.wait()
            journal.note("stop \(name)")
            return finishes
        })
    }

    let logger = Logger(label: "test", level: .error)

    @Test func startsInOrderAndStopsInReverse() throws {
        let journal = Journal()
        let group = ServiceGroup(["store", "bridge", "http"].map { service($0, journal) }, logger: logger)
        try group.start()
        #expect(group.stopAndWait(deadline: .seconds(10)) == .clean)
        #expect(journal.all == ["start store", "start bridge", "start http", "stop http", "stop bridge", "stop store"])
        #expect(group.remaining.isEmpty)
    }

    @Test func aFailedStartStopsWhatHadStartedAndNamesTheService() {
        let journal = Journal()
        let group = ServiceGroup([service("store", journal), service("bridge", journal), service("http", journal, failsToStart: true),
                                  service("never", journal)], logger: logger)
        #expect { try group.start() } throws: { "\($0)" == "cannot start http: port taken" }
        #expect(journal.all == ["start store", "start bridge", "stop bridge", "stop store"])
    }

    @Test func aStopThatCannotFinishIsReported() throws {
        let journal = Journal()
        let group = ServiceGroup([service("writer", journal, finishes: false), service("http", journal)], logger: logger)
        try group.start()
        #expect(group.stopAndWait(deadline: .seconds(10)) == .incomplete(["writer"]))
    }

    /// The overall deadline holds even when a stop hangs (this one until the test releases it); what was not
    /// stopped is named, the one stopping first.
    @Test func theDeadlineNamesWhatWasNotStopped() throws {
        let journal = Journal()
        let release = DispatchSemaphore(value: 0)
        let group = ServiceGroup([service("shares", journal), service("writer", journal, stopWaitsFor: release),
                                  service("http", journal)], logger: logger)
        try group.start()
        #expect(group.stopAndWait(deadline: .milliseconds(200)) == .timedOut(["writer", "shares"]))
        #expect(group.remaining == ["writer", "shares"])
        release.signal()
        #expect(group.stopAndWait(deadline: .seconds(30)) == .clean)  // the same shutdown, finished
        #expect(journal.all.suffix(3) == ["stop http", "stop writer", "stop shares"])
    }
}
