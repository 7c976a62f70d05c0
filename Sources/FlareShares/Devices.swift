public import FlareCore
public import FlareStore
import FlareCodec
import FlareCrypto
import FlareSystem

/// Devices: one person's phone or tracker, standing ready to start an SOS with a secret of its own (`Device`). The
/// owner side adds, lists, changes and removes them and issues new secrets; the device side starts its SOS (a share
/// of the device's key with a personal link per contact, mailed as contacts are), reports positions into it, reads
/// it, and stops it, with a PIN when it has one and a duress PIN that only seems to stop it. Every decision that
/// two instances could both make (the start, the repeat mail, the wrong PINs) is made in the store.
public final class Devices: Sendable {
    public enum Refusal: Error, Equatable {
        case invalid(code: String, message: String)
        /// The key has as many devices as a key may (`DeviceRules.maximumPerKey`).
        case full
        case notFound
        case storage(String)
    }

    /// What a device asks to be, or to change to (nil: unchanged, or the default at creation).
    public struct Settings: Sendable {
        public var name: String?
        public var contacts: [String]?
        public var durationSeconds: Double?
        public var message: String?
        /// A PIN to set; "" removes the PIN (and the duress PIN with it).
        public var pin: String?
        /// A duress PIN to set; "" removes it.
        public var duressPin: String?
        /// The SOS page's countdown after a press, 0 to 10 s.
        public var countdownSeconds: Double?
        /// The escalation ladder (`EscalationRules`).
        public var escalateAfterSeconds: Double?

        public init(name: String? = nil, contacts: [String]? = nil, durationSeconds: Double? = nil, message: String? = nil, pin: String? = nil,
                    duressPin: String? = nil, countdownSeconds: Double? = nil, escalateAfterSeconds: Double? = nil) {
            self.name = name
            self.contacts = contacts
            self.durationSeconds = durationSeconds
            self.message = message
            self.pin = pin
            self.duressPin = duressPin
            self.countdownSeconds = countdownSeconds
            self.escalateAfterSeconds = escalateAfterSeconds
        }
    }

    /// A device's SOS as started or found live.
    public struct SOS: Sendable {
        public let share: Share
        /// The share's own view token (derived, so a repeated press answers with the same link).
        public let viewToken: String
        public let deviceToken: String
        public let links: [(link: ShareLink, token: String)]
        /// Whether each new link's contact is mailed (empty for a repeated press).
        public let mailing: [LinkID: LinkMailing]
        /// The SOS was live already: no new share.
        public let repeated: Bool
    }

    public enum StartRefusal: Error, Equatable {
        /// The device started `FLARE_SOS_PER_DEVICE_PER_HOUR` SOS within the hour.
        case tooMany(retryAfterSeconds: Int)
        case storage(String)
        case refused(ShareError)
    }

    public enum StopRefusal: Error, Equatable {
        case wrongPIN
        /// Five wrong PINs: stopping is locked for a while (the contacts were told).
        case locked(retryAfterSeconds: Int)
        case storage(String)
    }

    /// What the device may read of its SOS: a duress share reads as stopped, at the moment of the duress PIN.
    public enum Status: Sendable {
        case none
        case live(ShareSnapshot)
        case stopped(share: Share, at: UnixMillis)
    }

    private let store: any DeviceRecords & ContactRecords & ShareRecords & EventRecords & KeyRecords & EscalationRecords
    private let lifecycle: ShareLifecycle
    private let links: PersonalLinks
    private let contacts: ContactService
    private let directory: ShareDirectory
    private let outbox: EventOutbox
    private let policy: SharePolicy
    private let tokenKey: [UInt8]
    private let sosPerHour: Int
    private let clock: any Clock
    private let metrics: Metrics
    private let logger: Logger

    init(store: any DeviceRecords & ContactRecords & ShareRecords & EventRecords & KeyRecords & EscalationRecords, lifecycle: ShareLifecycle, links: PersonalLinks,
         contacts: ContactService, directory: ShareDirectory, outbox: EventOutbox, policy: SharePolicy, tokenKey: [UInt8],
         sosPerHour: Int, clock: any Clock, metrics: Metrics, logger: Logger) {
        self.store = store
        self.lifecycle = lifecycle
        self.links = links
        self.contacts = contacts
        self.directory = directory
        self.outbox = outbox
        self.policy = policy
        self.tokenKey = tokenKey
        self.sosPerHour = sosPerHour
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        metrics.register(FlareMetrics.sosStarted, FlareMetrics.deviceFixesDropped)
    }

    // MARK: The owner's side

    /// Adds a device for `owner`; returns it with its secret, shown this once.
    public func add(_ settings: Settings, owner: OwnerKeyRecord) throws(Refusal) -> (device: StoredDevice, secret: String) {
        guard let name = settings.name else { throw .invalid(code: "invalid_name", message: "a device needs a name, e.g. \"Anna\"") }
        guard let contactIDs = settings.contacts else {
            throw .invalid(code: "no_contacts", message: "a device needs at least one contact to tell (flare contacts add)")
        }
        let secret = Secret.generate()
        var device = Device(id: .generate(), ownerKeyID: owner.id, name: "", secretHash: secret.hash, contacts: [], durationSeconds: nil, message: "",
                            pin: nil, duressPin: nil, createdAt: clock.now())
        try apply(Settings(name: name, contacts: contactIDs, durationSeconds: settings.durationSeconds, message: settings.message ?? "",
                           pin: settings.pin, duressPin: settings.duressPin, countdownSeconds: settings.countdownSeconds,
                           escalateAfterSeconds: settings.escalateAfterSeconds), to: &device, owner: owner)
        do {
            guard try store.insertDevice(device, limit: DeviceRules.maximumPerKey) else { throw Refusal.full }
            guard let stored = try store.device(id: device.id) else { throw Refusal.storage("the device was not found after it was stored") }
            logger.info("device \(device.id) added for key \(owner.id), \(device.contacts.count) contacts\(device.pin == nil ? "" : ", with a PIN")")
            return (stored, secret.text)
        } catch let refusal as Refusal { throw refusal } catch { throw .storage("\(error)") }
    }

    /// The device with this id, if `caller` may see it (its own, or any for an admin key).
    public func device(_ id: DeviceID, for caller: OwnerKeyRecord) throws(StoreError) -> StoredDevice? {
        try store.device(id: id).flatMap { caller.isAdmin || $0.device.ownerKeyID == caller.id ? $0 : nil }
    }

    public func list(for caller: OwnerKeyRecord, after position: DeviceListPosition?, limit: Int) throws(StoreError) -> [StoredDevice] {
        try store.listDevices(owner: caller.isAdmin ? nil : caller.id, after: position, limit: limit)
    }

    /// Changes what `settings` names; the rest stays.
    public func change(_ id: DeviceID, _ settings: Settings, by caller: OwnerKeyRecord) throws(Refusal) -> StoredDevice {
        let found: StoredDevice?
        do { found = try device(id, for: caller) } catch { throw .storage(error.description) }
        guard let found, let owner = try ownerOf(found.device) else { throw .notFound }
        var device = found.device
        try apply(settings, to: &device, owner: owner)
        do {
            guard try store.updateDevice(device), let stored = try store.device(id: id) else { throw Refusal.notFound }
            logger.info("device \(id) changed")
            return stored
        } catch let refusal as Refusal { throw refusal } catch { throw .storage("\(error)") }
    }

    /// False when `caller` sees no such device. A live SOS it started goes on; its key may stop it.
    public func remove(_ id: DeviceID, by caller: OwnerKeyRecord) throws(StoreError) -> Bool {
        guard try device(id, for: caller) != nil else { return false }
        let removed = try store.deleteDevice(id: id)
        if removed { logger.info("device \(id) removed") }
        return removed
    }

    /// A new secret for the device; the old one stops at once (every instance reads the secret from the store).
    public func newSecret(_ id: DeviceID, by caller: OwnerKeyRecord) throws(Refusal) -> (device: StoredDevice, secret: String) {
        let found: StoredDevice?
        do { found = try device(id, for: caller) } catch { throw .storage(error.description) }
        guard var device = found?.device else { throw .notFound }
        let secret = Secret.generate()
        device.secretHash = secret.hash
        do {
            guard try store.updateDevice(device), let stored = try store.device(id: id) else { throw Refusal.notFound }
            logger.info("device \(id): new secret issued; the old one no longer works")
            return (stored, secret.text)
        } catch let refusal as Refusal { throw refusal } catch { throw .storage("\(error)") }
    }

    private func ownerOf(_ device: Device) throws(Refusal) -> OwnerKeyRecord? {
        do { return try store.ownerKey(id: device.ownerKeyID) } catch { throw .storage(error.description) }
    }

    /// Checks and applies `settings` to `device` (whose key is `owner`).
    private func apply(_ settings: Settings, to device: inout Device, owner: OwnerKeyRecord) throws(Refusal) {
        do throws(DeviceRules.Refusal) {
            if let name = settings.name { device.name = try DeviceRules.validName(name) }
            if let message = settings.message { device.message = try DeviceRules.validMessage(message) }
            if let pin = settings.pin {
                device.pin = pin.isEmpty ? nil : PINHash.make(try DeviceRules.validPIN(pin, field: "pin"))
                if pin.isEmpty { device.duressPin = nil }
            }
            if let duress = settings.duressPin {
                if duress.isEmpty {
                    device.duressPin = nil
                } else {
                    let valid = try DeviceRules.validPIN(duress, field: "duress_pin")
                    guard let pin = device.pin else {
                        throw DeviceRules.Refusal(code: "duress_needs_pin", message: "a duress PIN needs a PIN: without one, anyone could stop the SOS")
                    }
                    guard !pin.matches(valid) else {
                        throw DeviceRules.Refusal(code: "duress_pin_is_pin", message: "the duress PIN must differ from the PIN")
                    }
                    device.duressPin = PINHash.make(valid)
                }
            } else if let pin = settings.pin, !pin.isEmpty, let duress = device.duressPin, duress.matches(pin) {
                throw DeviceRules.Refusal(code: "duress_pin_is_pin", message: "the PIN must differ from the duress PIN")
            }
        } catch { throw .invalid(code: error.code, message: error.message) }
        if let seconds = settings.escalateAfterSeconds {
            guard let valid = EscalationRules.valid(seconds) else { throw .invalid(code: "invalid_escalation", message: EscalationRules.invalidMessage) }
            device.escalateAfterSeconds = valid
        }
        if let countdown = settings.countdownSeconds {
            guard countdown.rounded() == countdown, DeviceRules.countdownSeconds.contains(Int(exactly: countdown) ?? -1) else {
                throw .invalid(code: "invalid_countdown", message: "countdown_s must be a whole number of seconds from 0 to 10")
            }
            device.countdownSeconds = Int(countdown)
        }
        if let seconds = settings.durationSeconds {
            let duration: Int64
            do { duration = try policy.duration(requested: seconds) } catch { throw .invalid(code: "invalid_duration", message: error.description) }
            if let maximum = owner.limits.maxDurationSeconds, duration > maximum {
                throw .invalid(code: "invalid_duration", message: "duration_s must be at most \(maximum) s for this key")
            }
            device.durationSeconds = duration
        }
        if let texts = settings.contacts {
            guard !texts.isEmpty else { throw .invalid(code: "no_contacts", message: "a device needs at least one contact to tell (flare contacts add)") }
            var ids: [ContactID] = []
            for text in texts {
                guard let id = ContactID(text) else { throw .invalid(code: "unknown_contact", message: "no such contact: \(text.prefix(40))") }
                ids.append(id)
            }
            do throws(ShareError) { _ = try links.contactsForLinks(ids, owner: owner, existing: 0) } catch {
                switch error {
                case .refusedInput(let code, let message): throw .invalid(code: code, message: message)
                case .storage(let failure): throw .storage(failure)
                default: throw .invalid(code: "invalid_contacts", message: error.description)
                }
            }
            device.contacts = ids
        }
    }

    // MARK: The device's side

    /// The device with this secret, if it is well formed, known, and its key current; nil otherwise.
    public func authenticate(secret: some StringProtocol) throws(StoreError) -> (device: StoredDevice, owner: OwnerKeyRecord)? {
        guard Secret.isWellFormed(secret), let stored = try store.device(secretHash: SecretHash(of: String(secret))),
              let owner = try store.ownerKey(id: stored.device.ownerKeyID), !owner.isRevoked else { return nil }
        return (stored, owner)
    }

    /// The device's contacts as they are now, in its order: one deleted since the device was set up is left out (its
    /// SOS goes to the others; its page offers the others' numbers).
    public func contacts(of device: Device, owner: OwnerKeyRecord) throws(StoreError) -> [Contact] {
        var found: [Contact] = []
        for id in device.contacts {
            if let contact = try contacts.contact(id, for: owner) { found.append(contact) }
        }
        return found
    }

    /// Notes that the device was heard (for its setup's "last heard"), at most every few seconds a store write.
    public func heard(_ stored: StoredDevice) {
        let now = clock.now()
        guard (stored.sos.lastHeardAt ?? 0) < now - 10_000 else { return }
        do { try store.noteDeviceHeard(device: stored.device.id, at: now) } catch {
            directory.warnStore("device \(stored.device.id): cannot note that it was heard (\(error))")
        }
    }

    /// The share of the device's current (or last) SOS, from memory or the store; nil when it has none left.
    public func currentShare(of stored: StoredDevice) throws(StoreError) -> ShareSnapshot? {
        guard let row = stored.sos.shareRow else { return nil }
        let id: ShareID
        if let known = directory.shareID(ofRow: row) {
            id = known
        } else {
            guard let found = try store.share(row: row) else { return nil }
            id = found.share.id
        }
        guard case .live(let snapshot) = try directory.share(id) else { return nil }
        return snapshot
    }

    /// The share positions from the device go into now: its SOS while active (under duress too). Nil outside an SOS.
    public func shareTakingPositions(of stored: StoredDevice) throws(StoreError) -> ShareSnapshot? {
        guard let snapshot = try currentShare(of: stored), snapshot.share.isActive else { return nil }
        return snapshot
    }

    /// A position that came outside an SOS: dropped, and only counted.
    public func positionDropped() { metrics.increment(FlareMetrics.deviceFixesDropped) }

    /// What the device reads of its SOS.
    public func status(of stored: StoredDevice) throws(StoreError) -> Status {
        guard let snapshot = try currentShare(of: stored) else { return .none }
        let share = snapshot.share
        if share.underDuress { return .stopped(share: share, at: stored.sos.duressAt ?? share.createdAt) }
        if let ended = share.endedAt { return .stopped(share: share, at: ended) }
        return .live(snapshot)
    }

    /// Where the SOS's escalation ladder stands; nil once the ladder is off or over (someone answered "on my way" or
    /// "called emergency services", which the caller sees in the answers).
    public func escalation(of snapshot: ShareSnapshot) throws(StoreError) -> EscalationState? {
        try store.escalation(shareRow: snapshot.row)
    }

    /// The share's own view token for an SOS share: derived from the token key, so that every instance, and every
    /// repeated press, answers with the same link while the store keeps only its hash.
    public func viewToken(of share: ShareID) -> String {
        let derived = Crypto.hmacSHA256(key: tokenKey, message: Array("flare-sos-view-v1:\(share.rawValue)".utf8))
        return Base64URL.encode(Array(derived.prefix(Secret.byteCount)))
    }

    /// Starts the device's SOS, or, when it is live already, answers with it and tells the contacts it was pressed
    /// again (at most once a minute a mail; every time an event).
    public func startSOS(_ stored: StoredDevice, owner: OwnerKeyRecord) throws(StartRefusal) -> SOS {
        let device = stored.device
        do throws(StoreError) {
            // After a duress PIN the device was told its SOS stopped: a press is a new SOS, as after a real stop (the
            // other goes on for its viewers), so that nothing the device sees tells the two apart.
            if let live = try currentShare(of: stored), live.share.isActive, !live.share.underDuress { return try repeated(live, device: device, owner: owner) }
        } catch { throw .storage(error.description) }
        let now = clock.now()
        var duration = device.durationSeconds ?? policy.defaultDurationSeconds
        duration = min(duration, policy.maximumDurationSeconds, owner.limits.maxDurationSeconds ?? .max)
        let linkContacts: [Contact]
        do throws(StoreError) { linkContacts = try contacts(of: device, owner: owner) } catch { throw .storage(error.description) }
        if linkContacts.count < device.contacts.count {
            logger.warning("device \(device.id): \(device.contacts.count - linkContacts.count) of its contacts no longer exist; the SOS goes to the others")
        }
        let shareID = ShareID.generate()
        let token = viewToken(of: shareID)
        let share = Share(id: shareID, viewTokenHash: SecretHash(of: token), name: device.name, createdAt: now, expiresAt: now + duration * 1000,
                          ownerKeyID: owner.id)
        var outcome: SOSStart?
        let created: ShareService.Created?
        do throws(ShareError) {
            // `sos.started` goes with the links: its push is for the contacts those links are for.
            created = try lifecycle.record(share, viewToken: Secret(text: token), linkContacts: linkContacts, owner: owner,
                                           withLinks: [.sos(.sosStarted, shareID, device: device.id, at: now)]) { started throws(ShareError) -> Int64? in
                do throws(StoreError) {
                    outcome = try store.startSOS(device: device.id, share: share, perHour: sosPerHour, now: now, events: [started])
                } catch { throw .storage(error.description) }
                if case .started(let row) = outcome { return row }
                return nil
            }
        } catch {
            if case .storage(let failure) = error { throw .storage(failure) }
            throw .refused(error)
        }
        if let created {
            metrics.increment(FlareMetrics.sosStarted)
            logger.info("device \(device.id): SOS started, share \(shareID), \(created.links.count) contacts")
            return SOS(share: created.share, viewToken: created.viewToken, deviceToken: created.deviceToken, links: created.links,
                       mailing: created.mailing, repeated: false)
        }
        switch outcome {
        case .tooMany(let wait):
            logger.warning("device \(device.id): SOS refused, \(sosPerHour) started within the hour")
            throw .tooMany(retryAfterSeconds: wait)
        case .live(let row):
            // Another instance started it a moment ago (the same press, seen twice).
            do throws(StoreError) {
                guard let found = try store.share(row: row), case .live(let live) = try directory.share(found.share.id) else {
                    throw StoreError(operation: "startSOS", code: 0, message: "the live SOS share was not found", engine: "flare")
                }
                return try repeated(live, device: device, owner: owner)
            } catch { throw .storage(error.description) }
        case .started, nil:
            throw .storage("the SOS was not started")
        }
    }

    private func repeated(_ snapshot: ShareSnapshot, device: Device, owner: OwnerKeyRecord) throws(StoreError) -> SOS {
        let now = clock.now()
        let event = ShareEvent.sos(.sosRepeated, snapshot.share.id, device: device.id, at: now)
        var mail = false
        if outbox.mailsContacts { mail = try store.takeRepeatMail(device: device.id, now: now, interval: DeviceRules.repeatMailIntervalMillis) }
        try store.recordEvent(outbox.pending(event, also: mail ? try links.alertMails(snapshot, owner: owner.id) : []), shareRow: snapshot.row)
        outbox.recorded()
        logger.info("device \(device.id): SOS pressed again, share \(snapshot.share.id)\(mail ? "; contacts told" : "")")
        return SOS(share: snapshot.share, viewToken: viewToken(of: snapshot.share.id), deviceToken: lifecycle.deviceToken(for: snapshot.share),
                   links: links.links(of: snapshot), mailing: [:], repeated: true)
    }

    /// Stops the device's SOS. With a PIN set, only the right PIN stops it; five wrong ones within 15 minutes lock
    /// stopping for 15 minutes and alert the contacts. The duress PIN answers as a stop does (the same `Status`), and
    /// everything the device reads says stopped, while the share goes on for its viewers with a warning.
    /// Returns what the device reads after.
    public func stopSOS(_ stored: StoredDevice, owner: OwnerKeyRecord, pin: String?) throws(StopRefusal) -> Status {
        let device = stored.device
        let now = clock.now()
        let snapshot: ShareSnapshot?
        do { snapshot = try currentShare(of: stored) } catch { throw .storage(error.description) }
        // Both slow hashes every time, not the second only when the first fails: a duress PIN must take as long to
        // answer as the real one.
        let duress = pin.map { entered in device.duressPin?.matches(entered) ?? false } ?? false
        let rightPIN = device.pin.map { expected in pin.map { expected.matches($0) } ?? false } ?? true
        if let snapshot, snapshot.share.isActive, duress {
            try underDuress(snapshot, device: device, owner: owner, at: now)
        }
        if let locked = stored.sos.stopLockedUntil, locked > now {
            throw .locked(retryAfterSeconds: Int((locked - now + 999) / 1000))
        }
        if duress {
            // What the right PIN would have answered: stopped now, or the state of an SOS that was over already.
            guard let snapshot else { return .none }
            if snapshot.share.isActive { return .stopped(share: snapshot.share, at: now) }
            return .stopped(share: snapshot.share, at: snapshot.share.endedAt ?? stored.sos.duressAt ?? now)
        }
        guard rightPIN else {
            do {
                let lockEvent = try snapshot.flatMap { live throws(StoreError) -> (shareRow: Int64, event: PendingEvent)? in
                    guard live.share.isActive else { return nil }
                    let event = ShareEvent.sos(.sosStopRefused, live.share.id, device: device.id, at: now)
                    return (live.row, outbox.pending(event, also: try links.alertMails(live, owner: owner.id)))
                }
                let after = try store.noteWrongPIN(device: device.id, now: now, window: DeviceRules.wrongPinWindowMillis, limit: DeviceRules.wrongPinsBeforeLock,
                                                   lock: DeviceRules.stopLockMillis, lockEvent: lockEvent)
                if let locked = after.stopLockedUntil, locked > now {
                    if lockEvent != nil { outbox.recorded() }
                    logger.warning("device \(device.id): \(DeviceRules.wrongPinsBeforeLock) wrong PINs; stopping its SOS is locked for \(DeviceRules.stopLockMillis / 60_000) min, contacts told")
                }
            } catch { throw .storage(error.description) }
            logger.info("device \(device.id): stop refused, wrong PIN")
            throw .wrongPIN
        }
        guard let snapshot, snapshot.share.isActive else {
            let share = snapshot?.share
            return share.map { .stopped(share: $0, at: $0.endedAt ?? stored.sos.duressAt ?? now) } ?? .none
        }
        let ended: Share
        do { ended = try lifecycle.stop(snapshot.share.id) } catch {
            if case .storage(let failure) = error { throw .storage(failure) }
            throw .storage(error.description)
        }
        logger.info("device \(device.id): SOS stopped, share \(snapshot.share.id)")
        return .stopped(share: ended, at: ended.endedAt ?? now)
    }

    public enum ExtendRefusal: Error, Equatable {
        /// No live SOS (or one under duress: the device was told it stopped).
        case notSharing
        case refused(ShareError)
        case storage(String)
    }

    /// Moves the end of the device's live SOS (`durationSeconds` from now; nil: the device's own duration, else the
    /// server's default), within the key's bound. Returns the share as it is after.
    public func extendSOS(_ stored: StoredDevice, durationSeconds: Double?) throws(ExtendRefusal) -> ShareSnapshot {
        let live: ShareSnapshot?
        do { live = try shareTakingPositions(of: stored) } catch { throw .storage(error.description) }
        guard let live, !live.share.underDuress else { throw .notSharing }
        let seconds = durationSeconds ?? stored.device.durationSeconds.map(Double.init)
        do throws(ShareError) { _ = try lifecycle.extend(live.share.id, durationSeconds: seconds) } catch {
            switch error {
            case .ended, .notFound: throw .notSharing
            case .storage(let failure): throw .storage(failure)
            default: throw .refused(error)
            }
        }
        guard let after = directory.snapshot(live.share.id) else { throw .notSharing }
        logger.info("device \(stored.device.id): SOS extended, share \(live.share.id)")
        return after
    }

    /// The duress PIN: recorded once (with `sos.duress`, mailed to the contacts), memory and viewers told.
    private func underDuress(_ snapshot: ShareSnapshot, device: Device, owner: OwnerKeyRecord, at now: UnixMillis) throws(StopRefusal) {
        guard !snapshot.share.underDuress else { return }
        do {
            let event = ShareEvent.sos(.sosDuress, snapshot.share.id, device: device.id, at: now)
            if try store.markDuress(row: snapshot.row, at: now, event: outbox.pending(event, also: try links.alertMails(snapshot, owner: owner.id))) {
                outbox.recorded()
                logger.warning("device \(device.id): duress PIN entered; share \(snapshot.share.id) goes on for its viewers, contacts told")
            }
            directory.updateTracker(snapshot.share.id) { $0.underDuress = true }
        } catch { throw .storage(error.description) }
    }
}
