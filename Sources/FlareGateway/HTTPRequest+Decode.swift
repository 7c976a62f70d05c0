import FlareAPI
import FlareCodec
import FlareHTTP

extension HTTPRequest {
    /// The body as the `FlareAPI` type clients encode: every JSON body of the API is read here, so the server reads
    /// the shape the client writes. A member without its shape is refused with that member's code
    /// (`Body.memberRefusals`), a body that is no JSON object with `Body.malformedRefusal`. The content type is not
    /// checked: `curl -d` labels JSON as a form, and the body's own shape is what matters.
    ///
    /// Not for positions: HTTP ingest and the OwnTracks apps' bodies go through `LocationPayloadParser`, which reads
    /// the few members it needs without building a value per member.
    func decode<Body: RequestBody>(as type: Body.Type) throws(APIError) -> Body {
        let parsed: JSONValue
        if body.isEmpty && Body.emptyIsEmptyObject {
            parsed = .object([:])
        } else {
            do { parsed = try JSONValue.parse(body) } catch { throw Self.refusal(Body.malformedRefusal) }
        }
        do {
            return try JSONValueDecoder.decode(Body.self, from: parsed)
        } catch let error as DecodingError {
            throw Self.refusal(error, of: Body.self)
        } catch {
            throw Self.refusal(Body.malformedRefusal)
        }
    }

    /// The member a decoding error is about (the first key of its path: a list's or an object's own member is its
    /// member's problem), and that member's refusal; the whole body's for an error above the members.
    private static func refusal<Body: RequestBody>(_ error: DecodingError, of type: Body.Type) -> APIError {
        let member: (any CodingKey)?
        switch error {
        case .keyNotFound(let key, let context): member = context.codingPath.first ?? key
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context): member = context.codingPath.first
        @unknown default: member = nil
        }
        return refusal(member.flatMap { Body.memberRefusals[$0.stringValue] } ?? Body.malformedRefusal)
    }

    private static func refusal(_ refusal: BodyRefusal) -> APIError { .badRequest(refusal.code, refusal.message) }
}
