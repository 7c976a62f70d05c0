import FlareCore
import FlareStore
import FlareStoreOpener
import FlareTestSupport
import Foundation
import Synchronization
import Testing
import FlareSystem

/// Devices in both engines: kept as given (the secret's hash, the PINs' slow hashes), found by their secret, listed per
/// key; the SOS start made once across instances, within its hourly budget; the repeat mark; wrong PINs and their lock.
@Suite struct DeviceStoreTests {
    let base: ShareStoreTests

    init() throws { base = try ShareStoreTests() }

    func device(owner: Int64 = 1, secret: Secret = .generate()) -> Device {
        Device(id: .generate(), ownerKeyID: owner, name: "Anna", secretHash: secret.hash, contacts: [.generate(), .generate()], durationSeconds: 1_800,
               message: "At the trailhead", pin: PINHash.make("4711"), duressPin: PINHash.make("9999"), createdAt: 1_000)
    }

    func started(_ store: any ShareStore, _ device: Device, now: UnixMillis, perHour: Int = 6) throws -> SOSStart {
        let share = base.makeShare(now: now)
        return try store.startSOS(device: device.id, share: share, perHour: perHour, now: now,
                                  events: [PendingEvent(.started(share), destinations: [.mqtt]),
                                           PendingEvent(.sos(.sosStarted, share.id, device: device.id, at: now), destinations: [.mqtt])])
    }

    @Test(arguments: Engine.allCases) func devicesRoundTripAndAreFoundByTheirSecretOnly(engine: Engine) throws {
        let secret = Secret.generate()
        let made = device(secret: secret)
        do {
            let store = try base.open(engine)
            #expect(try store.insertDevice(made, limit: 5))
            #expect(try store.insertDevice(device(owner: 2), limit: 5))
        }
        let store = try base.open(engine)
        #expect(try store.device(id: made.id)?.device == made)
        #expect(try store.device(secretHash: secret.hash)?.device.id == made.id)
        #expect(try store.device(secretHash: Secret.generate().hash) == nil)
        #expect(try store.device(id: made.id)?.device.pin?.matches("4711") == true)
        #expect(try store.device(id: made.id)?.device.pin?.matches("4712") == false)
        #expect(try store.listDevices(owner: 1, after: nil, limit: 10).map(\.device.id) == [made.id])
        #expect(try store.listDevices(owner: nil, after: nil, limit: 10).count == 2)
        var changed = made
        changed.name = "Anna B"
        changed.secretHash = Secret.generate().hash
        changed.pin = nil
        #expect(try store.updateDevice(changed))
        #expect(try store.device(secretHash: secret.hash) == nil, "a new secret stops the old one")
        #expect(try store.device(id: made.id)?.device == changed)
        #expect(try store.deleteDevice(id: made.id))
        #expect(try !store.deleteDevice(id: made.id))
    }

    @Test(arguments: Engine.allCases) func aKeyKeepsAtMostItsLimitOfDevices(engine: Engine) throws {
        let store = try base.open(engine)
        #expect(try store.insertDevice(device(), limit: 2))
        #expect(try store.insertDevice(device(), limit: 2))
        #expect(try !store.insertDevice(device(), limit: 2))
        #expect(try store.insertDevice(device(owner: 2), limit: 2), "another key's count is its own")
    }

    @Test(arguments: Engine.allCases) func anSOSStartsOnceWhileLiveAndWithinItsHourlyBudget(engine: Engine) throws {
        let store = try base.open(engine)
        let made = device()
        #expect(try store.insertDevice(made, limit: 5))
        let now: UnixMillis = 1_000_000
        guard case .started(let row) = try started(store, made, now: now, perHour: 2) else { Issue.record("not started"); return }
        #expect(try started(store, made, now: now + 1) == .live(row: row), "a press while live starts none")
        #expect(try store.device(sosShareRow: row)?.device.id == made.id)
        #expect(try store.device(id: made.id)?.sos.shareRow == row)
        let events = try store.dueEvents(now: .max, limit: 10).map(\.event.type)
        #expect(events.filter { $0 == .sosStarted }.count == 1 && events.contains(.started))
        #expect(try store.markEnded(row: row, at: now + 2, reason: .stopped))
        guard case .started(let second) = try started(store, made, now: now + 3, perHour: 2) else { Issue.record("not started"); return }
        #expect(try store.markEnded(row: second, at: now + 4, reason: .stopped))
        guard case .tooMany(let wait) = try started(store, made, now: now + 5, perHour: 2) else { Issue.record("not refused"); return }
        #expect(wait > 0 && wait <= 1_800)
        guard case .started = try started(store, made, now: now + 1_800_000, perHour: 2) else { Issue.record("the budget refills"); return }
    }

    @Test(arguments: Engine.allCases) func anExpiredSOSIsNotLive(engine: Engine) throws {
        let store = try base.open(engine)
        let made = device()
        #expect(try store.insertDevice(made, limit: 5))
        guard case .started(let row) = try started(store, made, now: 1_000_000) else { Issue.record("not started"); return }
        guard case .started(let next) = try started(store, made, now: 1_000_000 + 3_600_001) else { Issue.record("an expired share is not live"); return }
        #expect(next != row)
    }

    @Test(arguments: Engine.allCases) func twoInstancesPressingAtOnceStartOneSOS(engine: Engine) throws {
        let location = try base.location(engine)
        let stores: [any ShareStore] = try (0..<4).map { try StoreOpener.open(location, instance: "instance-\($0)") }
        let made = device()
        #expect(try stores[0].insertDevice(made, limit: 5))
        let outcomes = Mutex<[SOSStart]>([])
        let threads = stores.map { store in
            Thread { [base] in
                let share = base.makeShare(now: 1_000_000)
                if let outcome = try? store.startSOS(device: made.id, share: share, perHour: 6, now: 1_000_000,
                                                     events: [PendingEvent(.started(share), destinations: [.mqtt])]) {
                    outcomes.withLock { $0.append(outcome) }
                }
            }
        }
        for thread in threads { thread.start() }
        #expect(eventually(timeout: .seconds(20)) { outcomes.withLock { $0.count } == 4 })
        let all = outcomes.withLock { $0 }
        let rows = all.compactMap { if case .started(let row) = $0 { row } else { nil } }
        #expect(rows.count == 1, "\(all)")
        #expect(all.allSatisfy { $0 == .started(row: rows.first ?? -1) || $0 == .live(row: rows.first ?? -1) })
    }

    @Test(arguments: Engine.allCases) func fiveWrongPinsLockStoppingAndRecordTheAlertOnce(engine: Engine) throws {
        let store = try base.open(engine)
        let made = device()
        #expect(try store.insertDevice(made, limit: 5))
        guard case .started(let row) = try started(store, made, now: 1_000_000) else { Issue.record("not started"); return }
        let share = try #require(try store.share(row: row)).share
        func wrong(at: UnixMillis) throws -> DeviceSOSState {
            try store.noteWrongPIN(device: made.id, now: at, window: 900_000, limit: 5, lock: 900_000,
                                   lockEvent: (row, PendingEvent(.sos(.sosStopRefused, share.id, device: made.id, at: at), destinations: [.mqtt])))
        }
        for minute in 0..<4 { #expect(try wrong(at: 1_000_000 + Int64(minute) * 60_000).stopLockedUntil == nil) }
        let locked = try wrong(at: 1_300_000)
        let lockEnd: UnixMillis = 2_200_000
        #expect(locked.stopLockedUntil == lockEnd)
        #expect(try store.dueEvents(now: .max, limit: 20).filter { $0.event.type == .sosStopRefused }.count == 1)
        // Wrong PINs far apart never lock.
        let other = device()
        #expect(try store.insertDevice(other, limit: 5))
        for step in 0..<10 {
            let after = try store.noteWrongPIN(device: other.id, now: Int64(step) * 1_000_000, window: 900_000, limit: 5, lock: 900_000, lockEvent: nil)
            #expect(after.stopLockedUntil == nil)
        }
    }

    @Test(arguments: Engine.allCases) func aRepeatIsMailedAtMostOnceAnInterval(engine: Engine) throws {
        let store = try base.open(engine)
        let made = device()
        #expect(try store.insertDevice(made, limit: 5))
        #expect(try store.takeRepeatMail(device: made.id, now: 1_000_000, interval: 60_000))
        #expect(try !store.takeRepeatMail(device: made.id, now: 1_030_000, interval: 60_000))
        #expect(try store.takeRepeatMail(device: made.id, now: 1_060_000, interval: 60_000))
        guard case .started = try started(store, made, now: 2_000_000) else { Issue.record("not started"); return }
        #expect(try !store.takeRepeatMail(device: made.id, now: 2_030_000, interval: 60_000), "a start counts as the contacts told")
        #expect(try store.takeRepeatMail(device: made.id, now: 2_060_000, interval: 60_000))
        try store.noteDeviceHeard(device: made.id, at: 2_000_000)
        try store.noteDeviceHeard(device: made.id, at: 1_500_000)
        #expect(try store.device(id: made.id)?.sos.lastHeardAt == 2_000_000, "never moved back")
    }

    @Test(arguments: Engine.allCases) func duressIsMarkedOnceAndReadBack(engine: Engine) throws {
        let store = try base.open(engine)
        let share = base.makeShare()
        let row = try store.insertShare(share)
        #expect(try store.markDuress(row: row, at: 1_500_000, event: nil))
        #expect(try !store.markDuress(row: row, at: 1_600_000, event: nil))
        #expect(try store.share(row: row)?.share.underDuress == true)
        #expect(try store.loadOpenShares().first { $0.row == row }?.share.underDuress == true)
        // A device whose SOS it is reads when, and may start a new one (it was told this one stopped).
        let made = device()
        #expect(try store.insertDevice(made, limit: 5))
        guard case .started(let sos) = try started(store, made, now: 1_000_000) else { Issue.record("not started"); return }
        #expect(try store.markDuress(row: sos, at: 1_200_000, event: nil))
        #expect(try store.device(id: made.id)?.sos.duressAt == 1_200_000)
        guard case .started(let next) = try started(store, made, now: 1_300_000) else { Issue.record("a press after a duress starts anew"); return }
        #expect(next != sos)
    }
}
