public import FlareCore
public import FlareSystem

/// Devices (`Device`): standing SOS triggers, owned by keys as contacts are, and what the store keeps of each one's
/// SOS (`DeviceSOSState`), so that every instance answers a device the same way.
public protocol DeviceRecords: Sendable {
    /// Stores a device, unless its key owns `limit` devices already (counted in the same transaction). False when
    /// refused for the limit.
    func insertDevice(_ device: Device, limit: Int) throws(StoreError) -> Bool
    func device(id: DeviceID) throws(StoreError) -> StoredDevice?
    /// The device with this secret's hash (compared in constant time).
    func device(secretHash: SecretHash) throws(StoreError) -> StoredDevice?
    /// The device whose SOS this share is (its current or last one).
    func device(sosShareRow: Int64) throws(StoreError) -> StoredDevice?
    /// Up to `limit` devices, newest first, after `position` (nil: from the newest); `owner`: only that key's.
    func listDevices(owner: Int64?, after position: DeviceListPosition?, limit: Int) throws(StoreError) -> [StoredDevice]
    /// Writes what may change of a device: name, contacts, duration, message, PINs, the secret's hash. False when
    /// there is no such device.
    func updateDevice(_ device: Device) throws(StoreError) -> Bool
    /// False when there was no such device. A live SOS it started goes on (its key may stop it).
    func deleteDevice(id: DeviceID) throws(StoreError) -> Bool

    /// Starts the device's SOS, in one transaction that sees every other instance's: when its last SOS share is still
    /// active (and not under duress: the device was told that one stopped), nothing is written and the answer names it
    /// (`.live`); when its hourly budget of `perHour` starts is
    /// spent, nothing is written either (`.tooMany`); otherwise `share` is inserted with `events` (each recorded
    /// against it), made the device's SOS, one start taken from the budget, the wrong PINs cleared, and the repeat
    /// mark set to now (the contacts were just told: a press again within the interval is no news).
    func startSOS(device: DeviceID, share: Share, perHour: Int, now: UnixMillis, events: [PendingEvent]) throws(StoreError) -> SOSStart
    /// Whether the contacts may be told of a repeated press now: true (and marked, for every instance) when they were
    /// not told within `interval`.
    func takeRepeatMail(device: DeviceID, now: UnixMillis, interval: Int64) throws(StoreError) -> Bool
    /// Counts a wrong PIN (a new count once `window` has passed since the first); at `limit`, stopping is locked
    /// until `now + lock`, and `lockEvent` is recorded in the same transaction. Returns the state after.
    func noteWrongPIN(device: DeviceID, now: UnixMillis, window: Int64, limit: Int, lock: Int64, lockEvent: (shareRow: Int64, event: PendingEvent)?) throws(StoreError) -> DeviceSOSState
    /// Records when the device was last heard (any request with its secret).
    func noteDeviceHeard(device: DeviceID, at: UnixMillis) throws(StoreError)
}

/// What `startSOS` did.
public enum SOSStart: Sendable, Equatable {
    /// A new SOS share, in this row.
    case started(row: Int64)
    /// The device's SOS was live already: this share (no new one).
    case live(row: Int64)
    /// The device started as many SOS as an hour allows; the next start is possible after this many seconds.
    case tooMany(retryAfterSeconds: Int)
}

/// A device, its place in the store's order, and its SOS state.
public struct StoredDevice: Sendable, Equatable {
    public let row: Int64
    public let device: Device
    public let sos: DeviceSOSState

    public init(row: Int64, device: Device, sos: DeviceSOSState) {
        self.row = row
        self.device = device
        self.sos = sos
    }
}

/// Where a device listing continues: the row of the last device of the previous page.
public struct DeviceListPosition: Sendable, Equatable {
    public let row: Int64
    public init(row: Int64) { self.row = row }
}

/// The arithmetic both engines share for a device's SOS: the start budget (a bucket as a key's mail budget) and the
/// wrong-PIN count.
public enum DeviceSOSArithmetic {
    /// Takes one start from a bucket that held `held`: nil when refused, with the seconds until one is there.
    public static func takeStart(from held: (tokens: Double, at: UnixMillis)?, now: UnixMillis, perHour: Int)
        -> Result<(tokens: Double, at: UnixMillis), SOSWait> {
        let taken = MailBudget.take(count: 1, from: held, now: now, perHour: perHour)
        guard taken.granted == 1 else {
            let missing = 1 - taken.tokens
            return .failure(SOSWait(seconds: max(1, Int((missing * 3_600 / Double(max(1, perHour))).rounded(.up)))))
        }
        return .success((taken.tokens, taken.at))
    }

    public struct SOSWait: Error, Sendable { public let seconds: Int }

    /// The wrong-PIN state after one more wrong PIN at `now`.
    public static func wrongPIN(_ state: DeviceSOSState, now: UnixMillis, window: Int64, limit: Int, lock: Int64) -> DeviceSOSState {
        var after = state
        if let since = state.wrongPinsSince, now - since < window {
            after.wrongPins = state.wrongPins + 1
        } else {
            after.wrongPins = 1
            after.wrongPinsSince = now
        }
        if after.wrongPins >= limit {
            after.stopLockedUntil = now + lock
            after.wrongPins = 0
            after.wrongPinsSince = nil
        }
        return after
    }

    /// Contacts as the store keeps them: their ids joined by commas (an id is base64url: never a comma).
    public static func contactsText(_ contacts: [ContactID]) -> String { contacts.map(\.rawValue).joined(separator: ",") }
    public static func contacts(_ text: String) -> [ContactID] { text.split(separator: ",").compactMap { ContactID($0) } }
}
