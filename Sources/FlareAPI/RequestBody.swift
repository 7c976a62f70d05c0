/// A body a client sends, and the error code a server answers when one of its members does not have the member's
/// shape (missing where required, a string for a number, an unknown `kind`, …). The codes are part of the contract,
/// so each type declares its own beside its members; the server decodes the body into the type and answers with them.
/// Checks of a value's meaning (a name's length, a duration's bounds, an id's form) are the server's, made after
/// decoding, and have codes of their own.
public protocol RequestBody: Codable, Sendable {
    /// The refusal for each member, by its JSON key.
    static var memberRefusals: [String: BodyRefusal] { get }
    /// The refusal for a body that is not a JSON object at all: `invalid_json` unless the type says otherwise.
    static var malformedRefusal: BodyRefusal { get }
    /// Whether an empty body is read as `{}`: for bodies whose members are all optional, so that `curl -X POST`
    /// without `-d` works. False: an empty body is malformed.
    static var emptyIsEmptyObject: Bool { get }
}

extension RequestBody {
    public static var malformedRefusal: BodyRefusal { BodyRefusal("invalid_json", "the body must be a JSON object") }
    public static var emptyIsEmptyObject: Bool { false }
}

/// An error code of the API with its message (`APIErrorBody`), answered with status 400.
public struct BodyRefusal: Sendable, Equatable {
    public let code: String
    public let message: String

    public init(_ code: String, _ message: String) {
        self.code = code
        self.message = message
    }
}
