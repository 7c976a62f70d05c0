public import FlareCore
public import FlareSystem

/// The family's answers to the person who shared.
public protocol AnswerRecords: Sendable {
    /// Stores a family member's answer, if the share is active, and marks the share changed (its `lastAnswerID`), so
    /// that every instance's viewers hear of it. Nil when the share is not active.
    func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis, event: @Sendable (Answer) -> PendingEvent?) throws(StoreError) -> Answer?
    /// A share's answers with an id above `after`, oldest first, at most `limit`.
    func answers(row: Int64, after: Int64, limit: Int) throws(StoreError) -> [Answer]
}

extension AnswerRecords {
    // Without an event: as tests and tools that record none call it.
    public func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis) throws(StoreError) -> Answer? {
        try insertAnswer(row: row, kind: kind, name: name, at: at, event: { _ in nil })
    }
}
