internal import CMosquitto

/// A failed libmosquitto call. `message` comes from libmosquitto's own tables (strerror / connack / reason
/// strings) or from this module, never from user data, so it cannot carry a password, token or coordinate.
public struct MQTTError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let code: Int32
    public let message: String

    public init(operation: String, code: Int32, message: String) {
        self.operation = operation
        self.code = code
        self.message = message
    }

    /// `code` of the error thrown when `publishAndWait` gives up waiting for the acknowledgement.
    public static let timedOutCode = Int32(MOSQ_ERR_TIMEOUT.rawValue)

    public var isTimeout: Bool { code == Self.timedOutCode }

    /// `code` when publishing while the connection is down (MOSQ_ERR_NO_CONN).
    public static let notConnectedCode = Int32(MOSQ_ERR_NO_CONN.rawValue)

    public var description: String { "\(operation): \(message) (code \(code))" }

    /// Wraps a libmosquitto return code (MOSQ_ERR_*).
    init(_ operation: String, rc: Int32) {
        self.init(operation: operation, code: rc, message: String(cString: mosquitto_strerror(rc)))
    }

    /// Throws unless `rc` is MOSQ_ERR_SUCCESS.
    static func check(_ rc: Int32, _ operation: @autoclosure () -> String) throws {
        if rc != MOSQ_ERR_SUCCESS.rawValue { throw MQTTError(operation(), rc: rc) }
    }
}
