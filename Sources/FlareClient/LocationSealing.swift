import Foundation

/// What an app supplies to report into an end-to-end encrypted share (`createShare(endToEnd: true)`): NaCl's
/// secretbox, as the OwnTracks apps use it. FlareClient has no cryptography of its own, so that it builds with
/// Foundation alone on Linux and on Apple platforms; an app wraps the library it already has. On iOS that is
/// libsodium (`crypto_secretbox_easy` with a fresh `randombytes_buf` nonce); the `flare` command line wraps Debian's
/// libsodium the same way (`FlareSodium.SecretBox`). CryptoKit has no XSalsa20, so it cannot stand in.
public protocol LocationSealer: Sendable {
    /// `nonce (24) | Poly1305 tag (16) | XSalsa20 ciphertext` of `plaintext`, under the key the passphrase makes
    /// (its UTF-8 bytes zero-padded to 32), with a fresh random nonce each call.
    func seal(_ plaintext: Data) throws -> Data
}

extension Location {
    /// The body an end-to-end encrypted share takes for this fix: `{"_type":"encrypted","data":"…"}`, the OwnTracks
    /// location sealed by `sealer`. Sealed once per fix: a retry sends the same bytes, which Flare recognises as a
    /// repeat (a second sealing would be a second, different message).
    public func sealed(by sealer: any LocationSealer) throws -> Data {
        let plaintext = try APIJSON.encode(self)
        let box = try sealer.seal(Data(plaintext))
        return Data(try APIJSON.encode(EncryptedLocation(data: box.base64EncodedString())))
    }
}

/// The OwnTracks apps' `encrypted` message.
struct EncryptedLocation: Encodable {
    let data: String
    enum CodingKeys: String, CodingKey { case type = "_type", data }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode("encrypted", forKey: .type)
        try c.encode(data, forKey: .data)
    }
}
