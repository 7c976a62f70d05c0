import FlareCrypto

/// Marks the positions flared publishes itself on a location topic (a fix that came over HTTP, a restored last
/// position) where the broker cannot carry `Topics.originProperty`: MQTT 3.1.1 has no user properties, and the NATS
/// cluster hands them back through the same stream as the phones' fixes. The mark is a last JSON member,
/// `"_flare":"<tag>"`, the tag an HMAC of the topic and the payload under a key derived from the token key, so every
/// instance can check it and no phone can make one: a phone that copies a mark onto another payload or topic is not
/// believed, and its message is taken as a fix like any other.
public struct OwnPositionMark: Sendable {
    private let key: [UInt8]
    private static let member = Array(#","_flare":""#.utf8)
    private static let tagLength = 22   // 128 bits of base64url

    public init(tokenKey: [UInt8]) {
        key = Crypto.hmacSHA256(key: tokenKey, message: Array("flare own positions v1".utf8))
    }

    /// `payload` (a JSON object) with the mark as its last member; unchanged if it is not an object.
    public func marked(_ payload: [UInt8], topic: String) -> [UInt8] {
        guard payload.last == UInt8(ascii: "}"), payload.count >= 2 else { return payload }
        var out = Array(payload.dropLast())
        out += Self.member
        out += Array(tag(payload, topic: topic).utf8)
        out += Array(#""}"#.utf8)
        return out
    }

    /// Whether `payload` carries a mark made for it and for `topic`.
    public func isMarked(_ payload: [UInt8], topic: String) -> Bool {
        original(of: payload, topic: topic) != nil
    }

    /// The payload as it was before `marked`, if its mark is one flared made for it and for `topic`.
    public func original(of payload: [UInt8], topic: String) -> [UInt8]? {
        let suffix = Self.member.count + Self.tagLength + 2
        guard payload.count > suffix + 1 else { return nil }
        let start = payload.count - suffix
        guard Array(payload[start..<(start + Self.member.count)]) == Self.member,
              payload[payload.count - 2] == UInt8(ascii: "\""), payload[payload.count - 1] == UInt8(ascii: "}") else { return nil }
        let original = Array(payload[..<start]) + [UInt8(ascii: "}")]
        let claimed = Array(payload[(start + Self.member.count)..<(payload.count - 2)])
        return Crypto.constantTimeEquals(claimed, Array(tag(original, topic: topic).utf8)) ? original : nil
    }

    private func tag(_ payload: [UInt8], topic: String) -> String {
        String(Base64URL.encode(Crypto.hmacSHA256(key: key, message: Array(topic.utf8) + [0] + payload)).prefix(Self.tagLength))
    }
}
