/// Web Push message encryption (RFC 8291): what an application server does to a notification's bytes so that only the
/// subscribed browser can read them, not the push service that carries them. The browser's subscription hands over
/// its P-256 public key (`p256dh`) and a 16-byte auth secret (`auth`); each message gets a sender key pair and a salt of
/// its own, and travels as one record of the `aes128gcm` content coding (RFC 8188):
///
///     salt (16) ‖ rs (4, big-endian) ‖ idlen (1) = 65 ‖ keyid = sender public key (65) ‖ AES-128-GCM(plaintext ‖ 0x02) ‖ tag (16)
///
/// Stateless and built on calls that each own their OpenSSL objects, so any number of threads may encrypt at once.
public enum WebPushEncryption {
    /// The largest plaintext one push message carries. A push service need accept no body over 4096 bytes (RFC 8030
    /// §7.2), and the body is the 86-byte header, the plaintext, the 1-byte padding delimiter and the 16-byte tag:
    /// 86 + p + 1 + 16 ≤ 4096 gives p ≤ 3993 (RFC 8291 §4). `encrypt` itself bounds the plaintext by the record size
    /// only (4078 bytes at the default 4096); a sender checks this before encrypting, or the push service answers 413.
    public static let maximumPlaintext = 3993

    /// salt (16) + rs (4) + idlen (1) + the sender's uncompressed public key (65).
    static let headerLength = 86

    /// The push message body for `plaintext`, readable only with the private key of `userAgentPublicKey` and
    /// `authSecret`. The sender key pair and the 16-byte salt are fresh unless given (a test gives the RFC's); a fresh
    /// salt is what keeps the content key and nonce from ever repeating. Nil for a user agent key that is not a point
    /// on the curve, an auth secret that is not 16 bytes, a salt that is not 16, an invalid sender key, or a plaintext
    /// that does not fit one record: RFC 8291 §4 has the sender write a single record and set `rs` greater than the
    /// plaintext plus delimiter plus tag (which also keeps rs at RFC 8188's least, 18).
    public static func encrypt(_ plaintext: [UInt8], userAgentPublicKey: [UInt8], authSecret: [UInt8], senderPrivateKey: [UInt8]? = nil,
                               salt: [UInt8]? = nil, recordSize: UInt32 = 4096) -> [UInt8]? {
        guard authSecret.count == 16, plaintext.count + 1 + 16 < Int(recordSize) else { return nil }
        let salt = salt ?? Crypto.randomBytes(16)
        let senderPrivateKey = senderPrivateKey ?? P256.newPrivateKey()
        guard salt.count == 16, let senderPublicKey = P256.publicKey(privateKey: senderPrivateKey),
              let ecdhSecret = P256.sharedSecret(privateKey: senderPrivateKey, peerPublicKey: userAgentPublicKey) else { return nil }
        let keys = contentKeys(ecdhSecret: ecdhSecret, authSecret: authSecret, userAgentPublicKey: userAgentPublicKey,
                               senderPublicKey: senderPublicKey, salt: salt)
        guard let record = Crypto.aes128GCMSeal(key: keys.contentKey, nonce: keys.nonce, plaintext: plaintext + [0x02]) else { return nil }
        let recordSizeBytes = [UInt8(recordSize >> 24), UInt8(recordSize >> 16 & 0xFF), UInt8(recordSize >> 8 & 0xFF), UInt8(recordSize & 0xFF)]
        return salt + recordSizeBytes + [65] + senderPublicKey + record
    }

    /// The plaintext of a push message body `encrypt` made, read as the browser reads it; nil if the body is not one
    /// `aes128gcm` record with a 65-byte sender key, or was changed, or was meant for another key or auth secret.
    public static func decrypt(_ body: [UInt8], userAgentPrivateKey: [UInt8], authSecret: [UInt8]) -> [UInt8]? {
        guard authSecret.count == 16, body.count >= headerLength + 1 + 16, body[20] == 65 else { return nil }
        let salt = Array(body[0..<16])
        let recordSize = body[16..<20].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let senderPublicKey = Array(body[21..<headerLength])
        let record = Array(body[headerLength...])
        guard record.count <= Int(recordSize), let userAgentPublicKey = P256.publicKey(privateKey: userAgentPrivateKey),
              let ecdhSecret = P256.sharedSecret(privateKey: userAgentPrivateKey, peerPublicKey: senderPublicKey) else { return nil }
        let keys = contentKeys(ecdhSecret: ecdhSecret, authSecret: authSecret, userAgentPublicKey: userAgentPublicKey,
                               senderPublicKey: senderPublicKey, salt: salt)
        guard var padded = Crypto.aes128GCMOpen(key: keys.contentKey, nonce: keys.nonce, sealed: record) else { return nil }
        // RFC 8188 §2: the plaintext, then the delimiter (2 marks the last record, and this one is the only one), then
        // any zeros of padding.
        while padded.last == 0 { padded.removeLast() }
        guard padded.last == 0x02 else { return nil }
        padded.removeLast()
        return padded
    }

    /// Every value RFC 8291 derives on the way to the content key, kept apart so a test holds each against the RFC's
    /// example (Appendix A) and a wrong byte is found at the step that made it.
    struct ContentKeys {
        let keyInfo: [UInt8]
        let prkKey: [UInt8]
        let ikm: [UInt8]
        let prk: [UInt8]
        let contentKey: [UInt8]
        let nonce: [UInt8]
    }

    static func contentKeys(ecdhSecret: [UInt8], authSecret: [UInt8], userAgentPublicKey: [UInt8], senderPublicKey: [UInt8],
                            salt: [UInt8]) -> ContentKeys {
        // §3.3: the ECDH secret mixed with the auth secret and bound to both public keys, so that whoever learns the
        // browser's public key (the push service, say) but not `auth` cannot forge a message it accepts.
        let keyInfo = Array("WebPush: info".utf8) + [0] + userAgentPublicKey + senderPublicKey
        let prkKey = Crypto.hkdfExtractSHA256(salt: authSecret, inputKey: ecdhSecret)
        let ikm = Crypto.hkdfExpandSHA256(pseudorandomKey: prkKey, info: keyInfo, length: 32)
        // §3.4, from RFC 8188 §2.2–2.3: the content key and nonce, salted per message. A single record at sequence
        // number 0 leaves the nonce as derived (its XOR with the sequence number changes nothing).
        let prk = Crypto.hkdfExtractSHA256(salt: salt, inputKey: ikm)
        let contentKey = Crypto.hkdfExpandSHA256(pseudorandomKey: prk, info: Array("Content-Encoding: aes128gcm".utf8) + [0], length: 16)
        let nonce = Crypto.hkdfExpandSHA256(pseudorandomKey: prk, info: Array("Content-Encoding: nonce".utf8) + [0], length: 12)
        return ContentKeys(keyInfo: keyInfo, prkKey: prkKey, ikm: ikm, prk: prk, contentKey: contentKey, nonce: nonce)
    }
}
