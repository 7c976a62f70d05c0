public import FlareCore
public import FlareStore
public import FlareSystem

extension SQLiteShareStore: AnswerRecords {
    public func insertAnswer(row: Int64, kind: AnswerKind, name: String, at: UnixMillis, event: @Sendable (Answer) -> PendingEvent?) throws(StoreError) -> Answer? {
        try database.withLock { db throws(StoreError) in
            try db.transaction { () throws(StoreError) -> Answer? in
                let insert = try db.statement("""
                    INSERT INTO answers (share, kind, name, at) SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM shares WHERE id = ?1 AND ended_at IS NULL)
                    """)
                defer { insert.reset() }
                insert.bind(1, row)
                insert.bind(2, kind.rawValue)
                insert.bind(3, name)
                insert.bind(4, at)
                try insert.run()
                guard db.changes == 1 else { return nil }
                let id = db.lastInsertRowID
                let mark = try db.statement("UPDATE shares SET last_answer_id = ?1 WHERE id = ?2")
                defer { mark.reset() }
                mark.bind(1, id)
                mark.bind(2, row)
                try mark.run()
                let answer = Answer(id: id, kind: kind, name: name, at: at)
                if let pending = event(answer) { try Self.record(pending, shareRow: row, in: db) }
                return answer
            }
        }
    }

    public func answers(row: Int64, after: Int64, limit: Int) throws(StoreError) -> [Answer] {
        try database.withLock { db throws(StoreError) in
            let statement = try db.statement("SELECT id, kind, name, at FROM answers WHERE share = ?1 AND id > ?2 ORDER BY id LIMIT ?3")
            defer { statement.reset() }
            statement.bind(1, row)
            statement.bind(2, after)
            statement.bind(3, Int64(max(0, limit)))
            var found: [Answer] = []
            while try statement.step() {
                guard let kind = AnswerKind(rawValue: statement.string(1)) else { continue }
                found.append(Answer(id: statement.int64(0), kind: kind, name: statement.string(2), at: statement.int64(3)))
            }
            return found
        }
    }
}
