/// Flare's durable state: shares, their fixes and owner keys. Every conformance keeps the same guarantees, which
/// `FlareStoreTests` checks for each:
///
/// - a fix is stored once: the same (share, tst, lat, lon) written again, by a redelivery or by another
///   instance, is reported as not new and changes nothing;
/// - `insertFixes` commits the whole batch or nothing, and returns only after the commit is durable, so the bridge
///   may acknowledge the batch to the broker when it returns;
/// - a share's end is recorded once (`markEnded` on an ended share changes nothing), and an ended share is never
///   extended;
/// - errors never carry bound values (they may be positions or secrets' hashes).
///
/// Calls may block (disk, network); every method is safe to call from any thread.
///
/// The calls are grouped by concern, one protocol each (in the file of its name): shares (`ShareRecords`), trackers
/// and their commands (`TrackerRecords`), fixes (`FixRecords`), answers (`AnswerRecords`), the audience
/// (`AudienceRecords`), owner keys and their webhooks (`KeyRecords`), contacts (`ContactRecords`), devices (`DeviceRecords`), personal links (`LinkRecords`), check-ins (`CheckinRecords`), the events outbox (`EventRecords`), several
/// instances (`InstanceRecords`, `LeaseRecords`, `ChangeFeed`) and the store's own state (`StoreHealth`). Each engine
/// conforms to each in a file of the same name (`SQLiteShareStore+Fixes.swift`, `PostgresShareStore+Fixes.swift`).
public protocol ShareStore: ShareRecords, TrackerRecords, FixRecords, AnswerRecords, AudienceRecords, KeyRecords, ContactRecords, DeviceRecords, PushRecords, EscalationRecords,
                            LinkRecords, CheckinRecords, EventRecords, InstanceRecords, LeaseRecords, ChangeFeed, StoreHealth {}
