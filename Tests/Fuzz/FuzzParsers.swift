import FlareCore
import FlareCrypto
import FlareCodec

// libFuzzer entry point for Flare's parsers of untrusted input: OwnTracks location payloads (MQTT and HTTP
// ingest), the JSON parser under them, share tokens (MQTT password, Bearer header), link tokens and the
// X-Forwarded-For header.
// Built and run by scripts/fuzz/fuzz.sh with `swiftc -sanitize=fuzzer,address`.

private let key = Array("fuzz-key-fuzz-key-fuzz-key-fuzz!".utf8)
private let proxies = try! TrustedProxies(parsing: "127.0.0.1,::1,10.0.0.0/8,2001:db8::/32")
private let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
/// The parser as flared configures it by default.
private let parser = LocationPayloadParser(maximumBytes: 4096)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzParsers(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = parser.parse(bytes, receivedAt: 1_800_000_000_000, shareCreatedAt: 1_799_999_000_000)
    let parsed = try? JSONValue.parse(bytes)
    // The member walk the ingest path uses must accept exactly what the parser does, with the same members.
    var members: [String: JSONValue] = [:]
    let walked = try? JSONValue.forEachMember(ofObject: bytes) { members[$0] = $1 }
    if case .object(let object)? = parsed {
        precondition(walked != nil && members == object, "member walk disagrees with parse")
    } else {
        precondition(walked == nil, "member walk accepted what parse refused, or a non-object")
    }
    // A number's shortcut past strtod must give the same double, bit for bit.
    if case .number(let value)? = parsed {
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }
        let text = String(decoding: bytes.drop(while: isSpace).reversed().drop(while: isSpace).reversed(), as: UTF8.self)
        precondition(Double(text)?.bitPattern == value.bitPattern, "number conversion differs from Double(String)")
    }
    let text = String(decoding: bytes, as: UTF8.self)
    _ = try? ShareToken.verify(text, key: key, nowSeconds: 1_800_000_000)
    // The same bytes as the claims of a correctly signed token, so the claim checks are reached too.
    let signingInput = header + "." + Base64URL.encode(bytes)
    let signed = signingInput + "." + Base64URL.encode(Crypto.hmacSHA256(key: key, message: Array(signingInput.utf8)))
    _ = try? ShareToken.verify(signed, key: key, nowSeconds: 1_800_000_000)
    _ = Base64URL.decode(text)
    _ = Secret.isWellFormed(text)
    _ = OwnerKey.isWellFormed(text)
    _ = Topics.shareID(fromLocationTopic: text)
    // X-Forwarded-For is whatever a client sent: the answer is the peer or one of the header's addresses.
    let client = proxies.clientAddress(peer: "127.0.0.1", forwardedFor: text)
    precondition(client == "127.0.0.1" || IPAddress(client) != nil, "client address that is not an address")
    _ = TrustedProxies.rateLimitKey(for: text)
    _ = try? TrustedProxies(parsing: text)
    return 0
}
