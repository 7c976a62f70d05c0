public import FlareCore
public import FlareStore
public import FlareSystem

extension PostgresShareStore: AnswerRecords {
    public func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis, event: @Sendable (Answer) -> PendingEvent?) throws(StoreError) -> Answer? {
        let operation = "insert answer"
        return try pool.with(operation: operation) { connection throws(StoreError) in
            try connection.transaction(operation: operation) { () throws(StoreError) -> Answer? in
                let inserted = try connection.execute("""
                    INSERT INTO answers (share, kind, name, at) SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM shares WHERE id = $1 AND ended_at IS NULL)
                    RETURNING id
                    """, [String(row), kind.rawValue, name, String(at)], operation: operation)
                guard inserted.count == 1 else { return nil }
                let id = inserted.int64(0, 0)
                try connection.execute("UPDATE shares SET last_answer_id = $1 WHERE id = $2", [String(id), String(row)], operation: operation)
                let answer = Answer(id: id, kind: kind, name: name, at: at)
                if let pending = event(answer) { try Self.record(pending, shareRow: row, on: connection) }
                return answer
            }
        }
    }

    public func answers(row: Int64, after: Int64, limit: Int) throws(StoreError) -> [Answer] {
        try pool.with(operation: "read answers") { connection throws(StoreError) in
            let rows = try connection.execute("SELECT id, kind, name, at FROM answers WHERE share = $1 AND id > $2 ORDER BY id LIMIT $3",
                                              [String(row), String(after), String(max(0, limit))], operation: "read answers")
            return (0..<rows.count).compactMap { index in
                AnswerKind(rawValue: rows.text(index, 1) ?? "").map {
                    Answer(id: rows.int64(index, 0), kind: $0, name: rows.text(index, 2) ?? "", at: rows.int64(index, 3))
                }
            }
        }
    }
}
