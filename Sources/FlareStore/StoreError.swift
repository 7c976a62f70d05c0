/// A failed store call: the operation, the engine's result code and the engine's message. Bound values are
/// never included, because they may be positions.
public struct StoreError: Error, CustomStringConvertible {
    public let operation: String
    public let code: Int32
    public let message: String
    /// "sqlite", "postgresql": whose code `code` is.
    public let engine: String

    public init(operation: String, code: Int32, message: String, engine: String) {
        self.operation = operation
        self.code = code
        self.message = message
        self.engine = engine
    }

    public var description: String { "\(operation) failed: \(message) (\(engine)\(code != 0 ? " code \(code)" : ""))" }
}
