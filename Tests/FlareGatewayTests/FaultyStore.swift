import FlareCore
import FlareStore
import Synchronization
import FlareSystem

/// A store that fails on demand: the real SQLite store, wrapped, throwing for the calls named in `failing` (by
/// method name; `share(id:)`, `share(viewTokenHash:)`, `ownerKey(hash:)` and `ownerKey(id:)` apart) as a database
/// blip would, and recording which calls a request made. What a request path answers while a call it needs fails
/// is the test (`StoreFailureTests`), so every call of the protocol goes through `fault`.
final class FaultyStore: ShareStore {
    let base: any ShareStore
    private struct State {
        var failing: Set<String> = []
        var failAll = false
        var calls: [String] = []
    }
    private let state = Mutex(State())

    init(_ base: any ShareStore) { self.base = base }

    /// Makes the named calls fail (all calls with `["*"]`), or none with `[]`.
    func fail(_ names: Set<String>) {
        state.withLock { $0.failing = names; $0.failAll = names.contains("*") }
    }

    /// The calls made since the last `takeCalls`, in order.
    func takeCalls() -> [String] {
        state.withLock { state in
            defer { state.calls = [] }
            return state.calls
        }
    }

    private func fault(_ name: String) throws(StoreError) {
        let fails = state.withLock { state -> Bool in
            state.calls.append(name)
            return state.failAll || state.failing.contains(name)
        }
        if fails { throw StoreError(operation: name, code: 10, message: "disk I/O error (injected)", engine: "test") }
    }

    func insertShare(_ share: Share, event: PendingEvent?) throws(StoreError) -> Int64 { try fault("insertShare"); return try base.insertShare(share, event: event) }
    func insertShare(_ share: Share, limits: KeyLimits, now: UnixMillis, event: PendingEvent?) throws(StoreError) -> Result<Int64, QuotaRefusal> { try fault("insertShare"); return try base.insertShare(share, limits: limits, now: now, event: event) }
    func updateExpiry(row: Int64, expiresAt: UnixMillis, event: PendingEvent?) throws(StoreError) { try fault("updateExpiry"); try base.updateExpiry(row: row, expiresAt: expiresAt, event: event) }
    func markDuress(row: Int64, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool { try fault("markDuress"); return try base.markDuress(row: row, at: at, event: event) }
    func markEnded(row: Int64, at endedAt: UnixMillis, reason: EndReason, event: PendingEvent?) throws(StoreError) -> Bool { try fault("markEnded"); return try base.markEnded(row: row, at: endedAt, reason: reason, event: event) }
    func purgeHistory(row: Int64) throws(StoreError) -> Bool { try fault("purgeHistory"); return try base.purgeHistory(row: row) }
    func loadOpenShares() throws(StoreError) -> [StoredShare] { try fault("loadOpenShares"); return try base.loadOpenShares() }
    func share(id: ShareID) throws(StoreError) -> StoredShare? { try fault("share(id:)"); return try base.share(id: id) }
    func share(row: Int64) throws(StoreError) -> StoredShare? { try fault("share(row:)"); return try base.share(row: row) }
    func share(viewTokenHash: SecretHash) throws(StoreError) -> StoredShare? { try fault("share(viewTokenHash:)"); return try base.share(viewTokenHash: viewTokenHash) }
    func listShares(state: ShareStateFilter?, after position: ShareListPosition?, limit: Int, owner: Int64?) throws(StoreError) -> [StoredShare] { try fault("listShares"); return try base.listShares(state: state, after: position, limit: limit, owner: owner) }
    func recordTracker(row: Int64, _ record: TrackerRecord, condition: TrackerCondition, event: PendingEvent?) throws(StoreError) -> Bool { try fault("recordTracker"); return try base.recordTracker(row: row, record, condition: condition, event: event) }
    func recordBatteryLow(row: Int64, lowSince: UnixMillis?, event: PendingEvent?) throws(StoreError) -> Bool { try fault("recordBatteryLow"); return try base.recordBatteryLow(row: row, lowSince: lowSince, event: event) }
    func requestLocate(row: Int64, at now: UnixMillis, minimumIntervalMillis: Int64, event: PendingEvent?) throws(StoreError) -> Bool { try fault("requestLocate"); return try base.requestLocate(row: row, at: now, minimumIntervalMillis: minimumIntervalMillis, event: event) }
    func recordLocateAnswer(row: Int64, at: UnixMillis) throws(StoreError) -> Bool { try fault("recordLocateAnswer"); return try base.recordLocateAnswer(row: row, at: at) }
    func takeLocateCommand(row: Int64, now: UnixMillis, validForMillis: Int64) throws(StoreError) -> Bool { try fault("takeLocateCommand"); return try base.takeLocateCommand(row: row, now: now, validForMillis: validForMillis) }
    func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis, event: @Sendable (Answer) -> PendingEvent?) throws(StoreError) -> Answer? { try fault("insertAnswer"); return try base.insertAnswer(row: row, kind: kind, name: name, at: at, event: event) }
    func answers(row: Int64, after: Int64, limit: Int) throws(StoreError) -> [Answer] { try fault("answers"); return try base.answers(row: row, after: after, limit: limit) }
    func insertDevice(_ device: Device, limit: Int) throws(StoreError) -> Bool { try fault("insertDevice"); return try base.insertDevice(device, limit: limit) }
    func device(id: DeviceID) throws(StoreError) -> StoredDevice? { try fault("device(id:)"); return try base.device(id: id) }
    func device(secretHash: SecretHash) throws(StoreError) -> StoredDevice? { try fault("device(secretHash:)"); return try base.device(secretHash: secretHash) }
    func device(sosShareRow: Int64) throws(StoreError) -> StoredDevice? { try fault("device(sosShareRow:)"); return try base.device(sosShareRow: sosShareRow) }
    func listDevices(owner: Int64?, after position: DeviceListPosition?, limit: Int) throws(StoreError) -> [StoredDevice] {
        try fault("listDevices")
        return try base.listDevices(owner: owner, after: position, limit: limit)
    }
    func updateDevice(_ device: Device) throws(StoreError) -> Bool { try fault("updateDevice"); return try base.updateDevice(device) }
    func deleteDevice(id: DeviceID) throws(StoreError) -> Bool { try fault("deleteDevice"); return try base.deleteDevice(id: id) }
    func startSOS(device: DeviceID, share: Share, perHour: Int, now: UnixMillis, events: [PendingEvent]) throws(StoreError) -> SOSStart {
        try fault("startSOS")
        return try base.startSOS(device: device, share: share, perHour: perHour, now: now, events: events)
    }
    func takeRepeatMail(device: DeviceID, now: UnixMillis, interval: Int64) throws(StoreError) -> Bool {
        try fault("takeRepeatMail")
        return try base.takeRepeatMail(device: device, now: now, interval: interval)
    }
    func noteWrongPIN(device: DeviceID, now: UnixMillis, window: Int64, limit: Int, lock: Int64, lockEvent: (shareRow: Int64, event: PendingEvent)?) throws(StoreError) -> DeviceSOSState {
        try fault("noteWrongPIN")
        return try base.noteWrongPIN(device: device, now: now, window: window, limit: limit, lock: lock, lockEvent: lockEvent)
    }
    func noteDeviceHeard(device: DeviceID, at: UnixMillis) throws(StoreError) { try fault("noteDeviceHeard"); try base.noteDeviceHeard(device: device, at: at) }
    func insertContact(_ contact: Contact, limit: Int) throws(StoreError) -> Bool { try fault("insertContact"); return try base.insertContact(contact, limit: limit) }
    func contact(id: ContactID) throws(StoreError) -> Contact? { try fault("contact(id:)"); return try base.contact(id: id) }
    func listContacts(owner: Int64?, after position: ContactListPosition?, limit: Int) throws(StoreError) -> [StoredContact] { try fault("listContacts"); return try base.listContacts(owner: owner, after: position, limit: limit) }
    func deleteContact(id: ContactID, withdrawingLinksAt at: UnixMillis) throws(StoreError) -> [WithdrawnLink]? {
        try fault("deleteContact")
        return try base.deleteContact(id: id, withdrawingLinksAt: at)
    }
    func insertCheckin(_ checkin: Checkin) throws(StoreError) { try fault("insertCheckin"); try base.insertCheckin(checkin) }
    func checkin(id: CheckinID) throws(StoreError) -> Checkin? { try fault("checkin"); return try base.checkin(id: id) }
    func checkin(shareRow: Int64) throws(StoreError) -> Checkin? { try fault("checkinOfShare"); return try base.checkin(shareRow: shareRow) }
    func dueCheckins(now: UnixMillis, limit: Int) throws(StoreError) -> [Checkin] { try fault("dueCheckins"); return try base.dueCheckins(now: now, limit: limit) }
    func armedArrivals(afterShareRow: Int64, limit: Int) throws(StoreError) -> [Checkin] {
        try fault("armedArrivals")
        return try base.armedArrivals(afterShareRow: afterShareRow, limit: limit)
    }
    func settleCheckin(_ id: CheckinID, as state: CheckinState, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool { try fault("settleCheckin"); return try base.settleCheckin(id, as: state, at: at, event: event) }
    func missCheckin(_ id: CheckinID, at: UnixMillis, links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool { try fault("missCheckin"); return try base.missCheckin(id, at: at, links: links, events: events) }
    func moveCheckin(_ id: CheckinID, dueAt: UnixMillis) throws(StoreError) -> Bool { try fault("moveCheckin"); return try base.moveCheckin(id, dueAt: dueAt) }
    func insertLinks(_ links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool { try fault("insertLinks"); return try base.insertLinks(links, events: events) }
    func links(shareRow: Int64) throws(StoreError) -> [ShareLink] { try fault("links"); return try base.links(shareRow: shareRow) }
    func link(viewTokenHash: SecretHash) throws(StoreError) -> ShareLink? { try fault("link(viewTokenHash:)"); return try base.link(viewTokenHash: viewTokenHash) }
    func openLinks() throws(StoreError) -> [ShareLink] { try fault("openLinks"); return try base.openLinks() }
    func rekeyLinks(_ changes: [(shareRow: Int64, link: LinkID, viewTokenHash: SecretHash)]) throws(StoreError) {
        try fault("rekeyLinks")
        try base.rekeyLinks(changes)
    }
    func withdrawLink(shareRow: Int64, id: LinkID, at: UnixMillis) throws(StoreError) -> Bool { try fault("withdrawLink"); return try base.withdrawLink(shareRow: shareRow, id: id, at: at) }
    func noteLinkOpened(shareRow: Int64, id: LinkID, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool { try fault("noteLinkOpened"); return try base.noteLinkOpened(shareRow: shareRow, id: id, at: at, event: event) }
    func noteViewer(row: Int64, viewer: SecretHash, link: LinkID?, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool { try fault("noteViewer"); return try base.noteViewer(row: row, viewer: viewer, link: link, at: at, firstViewEvent: firstViewEvent) }
    func audience(row: Int64, watchingSince: UnixMillis) throws(StoreError) -> Audience { try fault("audience"); return try base.audience(row: row, watchingSince: watchingSince) }
    func insertFixes(_ fixes: [PendingFix]) throws(StoreError) -> [Bool] { try fault("insertFixes"); return try base.insertFixes(fixes) }
    func recentFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] { try fault("recentFixes"); return try base.recentFixes(row: row, limit: limit) }
    func recentSealedFixes(row: Int64, limit: Int) throws(StoreError) -> [Fix] { try fault("recentSealedFixes"); return try base.recentSealedFixes(row: row, limit: limit) }
    func fixCount(row: Int64) throws(StoreError) -> Int { try fault("fixCount"); return try base.fixCount(row: row) }
    func recordHandledSequences(_ handled: [(shareRow: Int64, sequence: TrackerSequence)]) throws(StoreError) -> [(shareRow: Int64, mark: TrackerSequence)] { try fault("recordHandledSequences"); return try base.recordHandledSequences(handled) }
    func insertOwnerKey(hash: SecretHash, label: String, createdAt: UnixMillis, admin: Bool, limits: KeyLimits) throws(StoreError) -> Int64 { try fault("insertOwnerKey"); return try base.insertOwnerKey(hash: hash, label: label, createdAt: createdAt, admin: admin, limits: limits) }
    func ownerKey(hash: SecretHash) throws(StoreError) -> OwnerKeyRecord? { try fault("ownerKey(hash:)"); return try base.ownerKey(hash: hash) }
    func ownerKey(id: Int64) throws(StoreError) -> OwnerKeyRecord? { try fault("ownerKey(id:)"); return try base.ownerKey(id: id) }
    func ownerKeys() throws(StoreError) -> [OwnerKeyRecord] { try fault("ownerKeys"); return try base.ownerKeys() }
    func revokeOwnerKey(id: Int64, at: UnixMillis) throws(StoreError) -> Bool { try fault("revokeOwnerKey"); return try base.revokeOwnerKey(id: id, at: at) }
    func noteOwnerKeyUsed(id: Int64, at: UnixMillis) throws(StoreError) { try fault("noteOwnerKeyUsed"); try base.noteOwnerKeyUsed(id: id, at: at) }
    func ownerKeyCount() throws(StoreError) -> Int { try fault("ownerKeyCount"); return try base.ownerKeyCount() }
    /// None, so that every key check reaches the store and its faults.
    var ownerKeysMark: UInt64? { nil }
    func keysWithWorkToStop() throws(StoreError) -> [Int64] { try fault("keysWithWorkToStop"); return try base.keysWithWorkToStop() }
    func cancelQueuedWork(ofKey key: Int64, at: UnixMillis) throws(StoreError) -> (checkins: Int, mails: Int) {
        try fault("cancelQueuedWork")
        return try base.cancelQueuedWork(ofKey: key, at: at)
    }
    func noteKeyWorkStopped(_ key: Int64, at: UnixMillis) throws(StoreError) { try fault("noteKeyWorkStopped"); try base.noteKeyWorkStopped(key, at: at) }
    func takeMailBudget(key: Int64, count: Int, perHour: Int, now: UnixMillis) throws(StoreError) -> Int {
        try fault("takeMailBudget")
        return try base.takeMailBudget(key: key, count: count, perHour: perHour, now: now)
    }
    func dueEvents(now: UnixMillis, limit: Int) throws(StoreError) -> [OutboxDelivery] { try fault("dueEvents"); return try base.dueEvents(now: now, limit: limit) }
    func eventsDelivered(_ deliveries: [(row: Int64, destination: EventDestination)]) throws(StoreError) { try fault("eventsDelivered"); try base.eventsDelivered(deliveries) }
    func recordEvent(_ event: PendingEvent, shareRow: Int64) throws(StoreError) { try fault("recordEvent"); try base.recordEvent(event, shareRow: shareRow) }
    func eventDelivered(id: String, destination: EventDestination) throws(StoreError) { try fault("eventDelivered"); try base.eventDelivered(id: id, destination: destination) }
    func eventDelivered(row: Int64, destination: EventDestination, reporting report: PendingEvent) throws(StoreError) { try fault("eventDelivered"); try base.eventDelivered(row: row, destination: destination, reporting: report) }
    func eventFailed(row: Int64, destination: EventDestination, attempts: Int, retryAt: UnixMillis?) throws(StoreError) { try fault("eventFailed"); try base.eventFailed(row: row, destination: destination, attempts: attempts, retryAt: retryAt) }
    func outboxBacklog() throws(StoreError) -> [OutboxBacklog] { try fault("outboxBacklog"); return try base.outboxBacklog() }
    func setKeyWebhook(id: Int64, url: String?, sealedSecret: [UInt8]?, at: UnixMillis) throws(StoreError) -> Bool { try fault("setKeyWebhook"); return try base.setKeyWebhook(id: id, url: url, sealedSecret: sealedSecret, at: at) }
    func resealWebhookSecrets(_ reseal: @Sendable (_ keyID: Int64, _ sealed: [UInt8]) -> [UInt8]?) throws(StoreError) -> Int { try fault("resealWebhookSecrets"); return try base.resealWebhookSecrets(reseal) }
    func keyWebhook(id: Int64) throws(StoreError) -> KeyWebhook? { try fault("keyWebhook"); return try base.keyWebhook(id: id) }
    func registerInstance(_ clientID: String, process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> Bool { try fault("registerInstance"); return try base.registerInstance(clientID, process: process, now: now, staleAfter: staleAfter) }
    func instanceProcess(_ clientID: String) throws(StoreError) -> String? { try fault("instanceProcess"); return try base.instanceProcess(clientID) }
    func heartbeat(_ clientID: String, process: String, now: UnixMillis) throws(StoreError) -> Bool { try fault("heartbeat"); return try base.heartbeat(clientID, process: process, now: now) }
    func claimStaleInstance(process: String, now: UnixMillis, staleAfter: Int64) throws(StoreError) -> String? { try fault("claimStaleInstance"); return try base.claimStaleInstance(process: process, now: now, staleAfter: staleAfter) }
    func removeInstance(_ clientID: String, process: String) throws(StoreError) { try fault("removeInstance"); try base.removeInstance(clientID, process: process) }
    func holdLease(_ name: String, holder: String, now: UnixMillis, durationMillis: Int64) throws(StoreError) -> Int64? { try fault("holdLease"); return try base.holdLease(name, holder: holder, now: now, durationMillis: durationMillis) }
    func setLeaseValue(_ name: String, holder: String, value: Int64) throws(StoreError) -> Bool { try fault("setLeaseValue"); return try base.setLeaseValue(name, holder: holder, value: value) }
    func releaseLease(_ name: String, holder: String) throws(StoreError) { try fault("releaseLease"); try base.releaseLease(name, holder: holder) }
    func expiredActiveShares(now: UnixMillis, limit: Int) throws(StoreError) -> [StoredShare] { try fault("expiredActiveShares"); return try base.expiredActiveShares(now: now, limit: limit) }

    var upgradedFromSchema: Int? { base.upgradedFromSchema }
    var isShared: Bool { base.isShared }
    func watchChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) { base.watchChanges(handler) }
    func stopWatching() { base.stopWatching() }
    func writeProblem() -> String? { base.writeProblem() }
    func recoverAfterFailedWrite() { base.recoverAfterFailedWrite() }

    // PushRecords
    func addPushSubscription(_ subscriber: PushSubscriber, endpoint: String, p256dh: [UInt8], auth: [UInt8], language: ContactLanguage,
                             at: UnixMillis, limit: Int) throws(StoreError) -> PushSubscribing {
        try fault("addPushSubscription")
        return try base.addPushSubscription(subscriber, endpoint: endpoint, p256dh: p256dh, auth: auth, language: language, at: at, limit: limit)
    }
    func removePushSubscription(_ subscriber: PushSubscriber, endpoint: String) throws(StoreError) -> Bool {
        try fault("removePushSubscription")
        return try base.removePushSubscription(subscriber, endpoint: endpoint)
    }
    func pushSubscription(row: Int64) throws(StoreError) -> PushSubscription? { try fault("pushSubscription"); return try base.pushSubscription(row: row) }
    func deletePushSubscription(row: Int64) throws(StoreError) { try fault("deletePushSubscription"); try base.deletePushSubscription(row: row) }
    func fanOutPush(eventRow: Int64, alerts: Bool) throws(StoreError) -> Int { try fault("fanOutPush"); return try base.fanOutPush(eventRow: eventRow, alerts: alerts) }
    func pushSubscriptionCount() throws(StoreError) -> Int { try fault("pushSubscriptionCount"); return try base.pushSubscriptionCount() }
    func serverSecret(_ name: String, storingIfAbsent candidate: [UInt8]) throws(StoreError) -> [UInt8] {
        try fault("serverSecret")
        return try base.serverSecret(name, storingIfAbsent: candidate)
    }
    func setAlertsHash(contact: ContactID, hash: SecretHash) throws(StoreError) { try fault("setAlertsHash"); try base.setAlertsHash(contact: contact, hash: hash) }
    func contact(alertsHash: SecretHash) throws(StoreError) -> Contact? { try fault("contact(alertsHash:)"); return try base.contact(alertsHash: alertsHash) }

    // EscalationRecords
    func dueEscalations(now: UnixMillis, limit: Int) throws(StoreError) -> [EscalationDue] { try fault("dueEscalations"); return try base.dueEscalations(now: now, limit: limit) }
    func escalate(shareRow: Int64, step: Int, event: PendingEvent) throws(StoreError) -> Bool {
        try fault("escalate")
        return try base.escalate(shareRow: shareRow, step: step, event: event)
    }
    func endEscalation(shareRow: Int64) throws(StoreError) { try fault("endEscalation"); try base.endEscalation(shareRow: shareRow) }
    func escalation(shareRow: Int64) throws(StoreError) -> EscalationState? { try fault("escalation"); return try base.escalation(shareRow: shareRow) }

    func fixes(row: Int64, after position: FixPosition?, limit: Int) throws(StoreError) -> [Fix] {
        try fault("fixes(row:after:limit:)")
        return try base.fixes(row: row, after: position, limit: limit)
    }
}
