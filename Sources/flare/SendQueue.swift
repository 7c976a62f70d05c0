import FlareCore

/// Fixes not yet done with, oldest first: those waiting to be sent, and (confirming) those sent and waiting for Flare's
/// mark to pass them.
///
/// A fix gets its number in the stream when it is first sent, not when it is queued: a fix dropped before it was ever
/// sent leaves no gap in the numbers, so Flare's mark never waits for it. Only fixes without a number are dropped
/// (the oldest first, beyond `capacity`); at most `capacity` numbered fixes are out at once, and while that many wait
/// for the mark the next one waits to be sent. So the queue holds at most twice `capacity`, and the stream, once
/// started, never has to start again (a queue that renumbered everything on each drop sent the same fixes again and
/// again, and never caught up while fixes kept coming in).
struct SendQueue: Sendable {
    struct Entry: Sendable {
        var fix: Fix
        /// Its number in the stream, from its first sending on (nil: never sent).
        var number: Int64?
        var sent = false
        /// The broker acknowledged it once (`sent` goes back to false when it is to be sent again).
        var acknowledged = false
    }

    let capacity: Int
    /// The confirmation stream the fixes are numbered in (nil: not confirming).
    let stream: Int64?
    private(set) var entries: [Entry] = []
    private(set) var nextNumber: Int64 = 1
    private(set) var dropped = 0
    private(set) var confirmed = 0
    /// Fixes Flare confirmed that the broker never acknowledged to this tracker: the MQTT library sent one again by
    /// itself after a reconnection, after its publish had been given up for lost.
    private(set) var confirmedUnacknowledged = 0
    /// Their numbers, until the broker's late acknowledgement of one comes, if it does.
    private var confirmedUnacknowledgedNumbers: Set<Int64> = []
    /// How many entries have a number (they come first: numbers are given in order).
    private var numbered = 0
    var producerDone = false

    init(capacity: Int, stream: Int64?) {
        self.capacity = max(1, capacity)
        self.stream = stream
    }

    mutating func append(_ fix: Fix) {
        entries.append(Entry(fix: fix))
        if entries.count - numbered > capacity {
            entries.remove(at: numbered)
            dropped += 1
        }
    }

    /// The fix to send next, numbered if it had no number yet; nil when nothing waits, or when `capacity` numbered
    /// fixes already wait for the mark.
    mutating func takeNext() -> Entry? {
        guard let index = entries.firstIndex(where: { !$0.sent }) else { return nil }
        if entries[index].number == nil {
            guard numbered < capacity else { return nil }
            entries[index].number = nextNumber
            if let stream { entries[index].fix.sequence = TrackerSequence(stream: stream, number: nextNumber) }
            nextNumber += 1
            numbered += 1
        }
        return entries[index]
    }

    var unsent: Int { entries.count { !$0.sent } }
    var awaitingConfirmation: Int { entries.count { $0.sent } }

    /// The broker acknowledged it: done, or (confirming) kept until the mark passes it. By number: the entry may
    /// have been confirmed while it was being sent.
    mutating func sent(_ number: Int64, keep: Bool) {
        // Confirmed before its acknowledgement (Flare's mark overtook the PUBACK, on a loaded machine): acknowledged
        // now, so it counts as sent once, like any other, and no longer among the confirmed unacknowledged.
        if confirmedUnacknowledgedNumbers.remove(number) != nil {
            confirmedUnacknowledged -= 1
            return
        }
        guard let index = entries.firstIndex(where: { $0.number == number }) else { return }
        if keep {
            entries[index].sent = true
            entries[index].acknowledged = true
        } else {
            entries.remove(at: index)
            numbered -= 1
        }
    }

    /// Flare's mark: every fix of `markStream` numbered up to `through` is stored (or refused for good).
    mutating func confirm(stream markStream: Int64, through: Int64) {
        guard markStream == stream else { return }
        // The numbered fixes come first, in order: the mark passes a prefix of the queue.
        var passed = 0
        for entry in entries {
            guard let number = entry.number, number <= through else { break }
            if !entry.acknowledged {
                confirmedUnacknowledged += 1
                confirmedUnacknowledgedNumbers.insert(number)
            }
            passed += 1
        }
        entries.removeFirst(passed)
        numbered -= passed
        confirmed += passed
    }

    /// What was sent and is not confirmed goes back in line, in order, with the numbers it had. Returns how many.
    mutating func sendAgain() -> Int {
        var count = 0
        for index in entries.indices where entries[index].sent {
            entries[index].sent = false
            count += 1
        }
        return count
    }
}
