import FlareCore
import FlareCrypto

// libFuzzer entry point for Flare's parsers of untrusted input: OwnTracks location payloads (MQTT and HTTP
// ingest), the JSON parser under them, share tokens (MQTT password, Bearer header) and link tokens.
// Built and run by scripts/fuzz/fuzz.sh with `swiftc -sanitize=fuzzer,address`.

private let key = Array("fuzz-key-fuzz-key-fuzz-key-fuzz!".utf8)
private let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzParsers(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = LocationPayloadParser().parse(bytes, receivedAt: 1_800_000_000_000, shareCreatedAt: 1_799_999_000_000)
    _ = try? JSONValue.parse(bytes)
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
    return 0
}
