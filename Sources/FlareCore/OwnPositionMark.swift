import FlareCrypto
import FlareSystem
import FlareCodec

/// Marks the positions flared publishes itself on a location topic (a fix that came over HTTP, a restored last
/// position) where the broker cannot carry `Topics.originProperty`: MQTT 3.1.1 has no user properties, and the NATS
/// cluster hands them back through the same stream as the phones' fixes. The mark is a last JSON member,
/// `"_flare":"<unix ms>.<tag>"`, the tag an HMAC of the topic, the time and the payload under a key derived from the
/// token key, so every instance can check it and no phone can make one: a phone that copies a mark onto another
/// payload or topic is not believed, and its message is taken as a fix like any other.
///
/// The time binds a mark to its moment: a device or a watcher that captured a marked payload and publishes it again
/// later (to have the broker retain an old position, or stop flared's repair of it) is told apart from flared's own
/// message coming back, which takes milliseconds (`replayAfterMillis` leaves room for a stream's redelivery and for
/// clocks apart between instances).
public struct OwnPositionMark: Sendable {
    private let key: [UInt8]
    private static let member = Array(#","_flare":""#.utf8)
    private static let tagLength = 22   // 128 bits of base64url
    /// A mark older (or newer) than this when it comes back is a replay.
    public static let replayAfterMillis: Int64 = 120_000

    public init(tokenKey: [UInt8]) {
        key = Crypto.hmacSHA256(key: tokenKey, message: Array("flare own positions v2".utf8))
    }

    /// What a message on a location topic is to flared.
    public enum Verdict: Equatable, Sendable {
        /// Flared's own, come back: the payload as it was before `marked`.
        case own([UInt8])
        /// A mark flared made, for this topic and payload, but long ago: published again by someone else.
        case replayed
        /// No mark flared made: a fix like any other.
        case unmarked
    }

    /// `payload` (a JSON object) with the mark, made `at`, as its last member; unchanged if it is not an object.
    public func marked(_ payload: [UInt8], topic: String, at: UnixMillis) -> [UInt8] {
        guard payload.last == UInt8(ascii: "}"), payload.count >= 2 else { return payload }
        var out = Array(payload.dropLast())
        out += Self.member
        out += Array("\(at).\(tag(payload, topic: topic, at: at))".utf8)
        out += Array(#""}"#.utf8)
        return out
    }

    /// Whether `payload`, come back on `topic` at `now`, is flared's own, a replay of it, or neither.
    public func verdict(on payload: [UInt8], topic: String, now: UnixMillis) -> Verdict {
        guard payload.count > Self.member.count + Self.tagLength + 4, payload.last == UInt8(ascii: "}"),
              payload[payload.count - 2] == UInt8(ascii: "\""),
              let start = Self.lastIndex(of: Self.member, in: payload) else { return .unmarked }
        let value = payload[(start + Self.member.count)..<(payload.count - 2)]
        guard let dot = value.firstIndex(of: UInt8(ascii: ".")), value.endIndex - dot - 1 == Self.tagLength,
              dot - value.startIndex <= 19, let at = Int64(String(decoding: value[value.startIndex..<dot], as: UTF8.self)) else { return .unmarked }
        let original = Array(payload[..<start]) + [UInt8(ascii: "}")]
        guard Crypto.constantTimeEquals(Array(value[(dot + 1)...]), Array(tag(original, topic: topic, at: at).utf8)) else { return .unmarked }
        return abs(now - at) <= Self.replayAfterMillis ? .own(original) : .replayed
    }

    private func tag(_ payload: [UInt8], topic: String, at: UnixMillis) -> String {
        String(Base64URL.encode(Crypto.hmacSHA256(key: key, message: Array(topic.utf8) + [0] + Array(String(at).utf8) + [0] + payload))
            .prefix(Self.tagLength))
    }

    private static func lastIndex(of needle: [UInt8], in bytes: [UInt8]) -> Int? {
        guard bytes.count >= needle.count else { return nil }
        var index = bytes.count - needle.count
        while index >= 0 {
            if bytes[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index -= 1
        }
        return nil
    }
}
