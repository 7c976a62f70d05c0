import FlareAPI
import FlareCore
import FlareStore
import FlareEvents
import FlareSystem
import Synchronization

extension ShareService {
    // MARK: Trackers

    /// How often the silences that grew past the stale limit are looked for: a tracker is reported stale at most
    /// this long after the limit.
    static let trackerSweepMillis: Int64 = 5_000

    /// The broker delivered the tracker's last will (from the MQTT thread): recorded on the scheduler's thread.
    package func lastWillArrived(_ id: ShareID, at: UnixMillis) {
        schedule(.trackerLost(id, at), at: at)
    }

    /// Records the tracker state the rules give now, if it differs from the recorded one. With several instances
    /// each may see the same change; the store says which one records and announces it, the others take its row.
    /// False when the store could not be written.
    @discardableResult
    func updateTracker(_ id: ShareID, now: UnixMillis) -> Bool {
        updateBattery(id, now: now)
        guard let tracker = registry.currentTracker(id, now: now), tracker.isActive, tracker.current != tracker.recorded else { return true }
        let condition = tracker.current.state == .stale
            ? TrackerCondition(from: .live, noFixReceivedAfter: tracker.lastHeardAt)
            : TrackerCondition()
        return recordTracker(id, row: tracker.row, tracker.current, condition: condition)
    }

    func trackerLost(_ id: ShareID, at: UnixMillis) {
        guard let tracker = registry.currentTracker(id, now: at), tracker.isActive else { return }
        // A fix heard after the will (the phone reconnected at once) already says more.
        guard tracker.lastHeardAt <= at else { return }
        let offline = TrackerRecord(state: .offline, since: at, reason: TrackerRecord.connectionLost, transport: .mqtt)
        recordTracker(id, row: tracker.row, offline, condition: TrackerCondition(noFixReceivedAfter: at))
    }

    /// Records that the battery became low (with `tracker.battery_low`) or recovered, when the newest fix says so.
    func updateBattery(_ id: ShareID, now: UnixMillis) {
        guard let change = registry.batteryChange(id) else { return }
        let event = change.low ? ShareEvent.batteryLow(id, at: now, level: change.level) : nil
        do {
            guard try store.recordBatteryLow(row: change.row, lowSince: change.low ? now : nil, event: event.map(pending)) else {
                follow(try store.share(id: id))
                return
            }
        } catch {
            logger.warning("share \(id): cannot record its battery state (\(error))")
            return
        }
        registry.updateTracker(id) { $0.batteryLowAt = change.low ? now : nil }
        if event != nil {
            eventRecorded()
            logger.info("share \(id): battery low")
        }
    }

    @discardableResult
    func recordTracker(_ id: ShareID, row: Int64, _ record: TrackerRecord, condition: TrackerCondition) -> Bool {
        let recorded: Bool
        let event = ShareEvent.tracker(id, record: record, before: registry.snapshot(id)?.share.tracker?.state)
        do {
            recorded = try store.recordTracker(row: row, record, condition: condition, event: event.map(pending))
        } catch {
            // Tried again by the next fix or sweep.
            logger.warning("share \(id): cannot record its tracker state (\(error))")
            return false
        }
        guard recorded else {
            // Another instance recorded this change (or a fix it stored says otherwise): memory follows the store.
            do { follow(try store.share(id: id)) } catch { warnStore("share \(id): cannot read its tracker state (\(error))") }
            return true
        }
        registry.updateTracker(id) { $0.tracker = record }
        if event != nil { eventRecorded() }
        guard let share = registry.snapshot(id)?.share else { return true }
        publishStatus(of: share)
        metrics.increment(FlareMetrics.trackerChanges, labels: [("state", record.state.rawValue)])
        logger.info("share \(id): tracker \(record.state.rawValue)\(record.reason.map { " (\($0))" } ?? "")")
        return true
    }

    func sweepTrackers() {
        defer { schedule(.trackerSweep, at: clock.now() + Self.trackerSweepMillis) }
        let now = clock.now()
        // While the store cannot be written, one failure per sweep is enough to say so (and to try again).
        for id in registry.trackersOutOfDate(now: now) where !updateTracker(id, now: now) { break }
    }
}
