import FlareCodec
@testable import FlareCrypto
import Testing

/// Web Push's cryptography against the published vectors: RFC 8291's example message byte for byte with every
/// intermediate value, RFC 5869's HKDF, RFC 6979's P-256 key and signature, the GCM paper's AES-128 cases. Then what a
/// vector cannot show: fresh keys round-trip, a changed byte or a wrong key reads nothing, bad input is refused, and
/// many threads at once get the same answers.
@Suite struct WebPushCryptoTests {
    static func b64(_ text: String) -> [UInt8] { Base64URL.decode(text)! }
    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    /// RFC 8291 §5 and Appendix A.
    enum RFC8291 {
        static let plaintext = Array("When I grow up, I want to be a watermelon".utf8)
        static let senderPrivate = b64("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")
        static let senderPublic = b64("BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8")
        static let userAgentPrivate = b64("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94")
        static let userAgentPublic = b64("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4")
        static let salt = b64("DGv6ra1nlYgDCS1FRnbzlw")
        static let authSecret = b64("BTBZMqHH6r4Tts7J_aSIgg")
        static let ecdhSecret = b64("kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs")
        static let prkKey = b64("Snr3JMxaHVDXHWJn5wdC52WjpCtd2EIEGBykDcZW32k")
        static let keyInfo = b64("V2ViUHVzaDogaW5mbwAEJXGyvs3942BVGq8e0PTNNmwRzr5VX4m8t7GGpTM5FzFo7OLr4BhZe9MEebhuPI-OztV3"
            + "ylkYfpJGmQ22ggCLDgT-M_SrDepxkU21WCP3O1SUj0EwbZIHMtu5pZpTKGSCIA5Zent7wmC6HCJ5mFgJkuk5cwAvMBKiiujwa7t45ewP")
        static let ikm = b64("S4lYMb_L0FxCeq0WhDx813KgSYqU26kOyzWUdsXYyrg")
        static let prk = b64("09_eUZGrsvxChDCGRCdkLiDXrReGOEVeSCdCcPBSJSc")
        static let contentKey = b64("oIhVW04MRdy2XN9CiKLxTg")
        static let nonce = b64("4h_95klXJ5E_qnoN")
        static let body = b64("DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_"
            + "yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN")
    }

    // MARK: RFC 8291

    @Test func rfc8291ExampleByteForByte() {
        let body = WebPushEncryption.encrypt(RFC8291.plaintext, userAgentPublicKey: RFC8291.userAgentPublic, authSecret: RFC8291.authSecret,
                                             senderPrivateKey: RFC8291.senderPrivate, salt: RFC8291.salt)
        #expect(body == RFC8291.body)
        #expect(body?.count == WebPushEncryption.headerLength + RFC8291.plaintext.count + 1 + 16)
        #expect(WebPushEncryption.decrypt(RFC8291.body, userAgentPrivateKey: RFC8291.userAgentPrivate, authSecret: RFC8291.authSecret)
                == RFC8291.plaintext)
    }

    @Test func rfc8291IntermediateValues() {
        #expect(P256.publicKey(privateKey: RFC8291.senderPrivate) == RFC8291.senderPublic)
        #expect(P256.publicKey(privateKey: RFC8291.userAgentPrivate) == RFC8291.userAgentPublic)
        #expect(P256.sharedSecret(privateKey: RFC8291.senderPrivate, peerPublicKey: RFC8291.userAgentPublic) == RFC8291.ecdhSecret)
        #expect(P256.sharedSecret(privateKey: RFC8291.userAgentPrivate, peerPublicKey: RFC8291.senderPublic) == RFC8291.ecdhSecret)
        let keys = WebPushEncryption.contentKeys(ecdhSecret: RFC8291.ecdhSecret, authSecret: RFC8291.authSecret,
                                                 userAgentPublicKey: RFC8291.userAgentPublic, senderPublicKey: RFC8291.senderPublic,
                                                 salt: RFC8291.salt)
        #expect(keys.keyInfo == RFC8291.keyInfo)
        #expect(keys.prkKey == RFC8291.prkKey)
        #expect(keys.ikm == RFC8291.ikm)
        #expect(keys.prk == RFC8291.prk)
        #expect(keys.contentKey == RFC8291.contentKey)
        #expect(keys.nonce == RFC8291.nonce)
    }

    @Test func freshKeysRoundTripAndTheHeaderIsRFC8188s() throws {
        let userAgentPrivate = P256.newPrivateKey()
        let userAgentPublic = try #require(P256.publicKey(privateKey: userAgentPrivate))
        let auth = Crypto.randomBytes(16)
        for size in [0, 1, 41, 1000, WebPushEncryption.maximumPlaintext] {
            let plaintext = Crypto.randomBytes(size)
            let body = try #require(WebPushEncryption.encrypt(plaintext, userAgentPublicKey: userAgentPublic, authSecret: auth))
            #expect(body.count == WebPushEncryption.headerLength + size + 1 + 16)
            #expect(Array(body[16..<21]) == [0, 0, 0x10, 0, 65])   // rs 4096, idlen 65
            #expect(P256.isValidPublicKey(Array(body[21..<86])))
            #expect(WebPushEncryption.decrypt(body, userAgentPrivateKey: userAgentPrivate, authSecret: auth) == plaintext)
        }
        // The largest plaintext makes exactly the 4096-byte body every push service must take.
        let largest = try #require(WebPushEncryption.encrypt([UInt8](repeating: 7, count: WebPushEncryption.maximumPlaintext),
                                                             userAgentPublicKey: userAgentPublic, authSecret: auth))
        #expect(largest.count == 4096)
        // A fresh salt and sender key per message: the same plaintext twice shares no header and no ciphertext.
        let first = try #require(WebPushEncryption.encrypt([1, 2, 3], userAgentPublicKey: userAgentPublic, authSecret: auth))
        let second = try #require(WebPushEncryption.encrypt([1, 2, 3], userAgentPublicKey: userAgentPublic, authSecret: auth))
        #expect(first[0..<16] != second[0..<16])
        #expect(first[21..<86] != second[21..<86])
        #expect(first[86...] != second[86...])
    }

    @Test func aChangedByteOrAnotherKeyReadsNothing() throws {
        let userAgentPrivate = P256.newPrivateKey()
        let userAgentPublic = try #require(P256.publicKey(privateKey: userAgentPrivate))
        let auth = Crypto.randomBytes(16)
        let body = try #require(WebPushEncryption.encrypt(Array("meet at the station".utf8), userAgentPublicKey: userAgentPublic,
                                                          authSecret: auth))
        // The salt, the sender key, the ciphertext, the tag (rs is not authenticated: it only bounds the record).
        for index in [0, 15, 20, 21, 40, 85, 86, 100, body.count - 17, body.count - 1] {
            var changed = body
            changed[index] ^= 0x01
            #expect(WebPushEncryption.decrypt(changed, userAgentPrivateKey: userAgentPrivate, authSecret: auth) == nil, "byte \(index)")
        }
        #expect(WebPushEncryption.decrypt(body, userAgentPrivateKey: P256.newPrivateKey(), authSecret: auth) == nil)
        #expect(WebPushEncryption.decrypt(body, userAgentPrivateKey: userAgentPrivate, authSecret: Crypto.randomBytes(16)) == nil)
        #expect(WebPushEncryption.decrypt(Array(body.dropLast()), userAgentPrivateKey: userAgentPrivate, authSecret: auth) == nil)
        #expect(WebPushEncryption.decrypt(Array(body.prefix(86 + 16)), userAgentPrivateKey: userAgentPrivate, authSecret: auth) == nil)
        #expect(WebPushEncryption.decrypt([], userAgentPrivateKey: userAgentPrivate, authSecret: auth) == nil)
    }

    @Test func badInputIsRefused() throws {
        let key = RFC8291.userAgentPublic, auth = RFC8291.authSecret
        func encrypt(_ plaintext: [UInt8] = [1], key: [UInt8] = key, auth: [UInt8] = auth, sender: [UInt8]? = nil, salt: [UInt8]? = nil,
                     recordSize: UInt32 = 4096) -> [UInt8]? {
            WebPushEncryption.encrypt(plaintext, userAgentPublicKey: key, authSecret: auth, senderPrivateKey: sender, salt: salt,
                                      recordSize: recordSize)
        }
        #expect(encrypt() != nil)
        var offCurve = key
        offCurve[64] ^= 0x01
        #expect(encrypt(key: offCurve) == nil)
        #expect(encrypt(key: Array(key.prefix(33))) == nil)
        #expect(encrypt(key: [0x02] + key[1...]) == nil)
        #expect(encrypt(key: [UInt8](repeating: 0, count: 65)) == nil)
        #expect(encrypt(auth: Array(auth.prefix(15))) == nil)
        #expect(encrypt(auth: auth + [0]) == nil)
        #expect(encrypt(salt: Crypto.randomBytes(15)) == nil)
        #expect(encrypt(sender: [UInt8](repeating: 0, count: 32)) == nil)
        #expect(encrypt(sender: [UInt8](repeating: 0xFF, count: 32)) == nil)
        // RFC 8291 §4: rs greater than plaintext + delimiter + tag.
        #expect(encrypt([UInt8](repeating: 0, count: 4096 - 18)) != nil)
        #expect(encrypt([UInt8](repeating: 0, count: 4096 - 17)) == nil)
        #expect(encrypt([], recordSize: 18) != nil)
        #expect(encrypt([], recordSize: 17) == nil)
        #expect(encrypt([1], recordSize: 18) == nil)
    }

    // MARK: P-256

    @Test func keysAndECDH() throws {
        let a = P256.newPrivateKey(), b = P256.newPrivateKey()
        #expect(a.count == 32 && a != b)
        let aPublic = try #require(P256.publicKey(privateKey: a)), bPublic = try #require(P256.publicKey(privateKey: b))
        #expect(aPublic.count == 65 && aPublic[0] == 0x04)
        #expect(P256.isValidPublicKey(aPublic))
        let secret = try #require(P256.sharedSecret(privateKey: a, peerPublicKey: bPublic))
        #expect(secret.count == 32)
        #expect(P256.sharedSecret(privateKey: b, peerPublicKey: aPublic) == secret)
        var offCurve = bPublic
        offCurve[40] ^= 0x80
        #expect(!P256.isValidPublicKey(offCurve))
        #expect(P256.sharedSecret(privateKey: a, peerPublicKey: offCurve) == nil)
        #expect(P256.sharedSecret(privateKey: [UInt8](repeating: 0, count: 32), peerPublicKey: bPublic) == nil)
    }

    /// A private key is a scalar in [1, n-1]: n - 1 is the last one, n and above are no key.
    @Test func privateKeysOutOfRangeAreRefused() {
        let order = Self.hex("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551")
        var last = order
        last[31] -= 1
        #expect(P256.publicKey(privateKey: last) != nil)
        #expect(P256.publicKey(privateKey: [UInt8](repeating: 0, count: 31) + [1]) != nil)
        #expect(P256.publicKey(privateKey: order) == nil)
        #expect(P256.publicKey(privateKey: [UInt8](repeating: 0xFF, count: 32)) == nil)
        #expect(P256.publicKey(privateKey: [UInt8](repeating: 0, count: 32)) == nil)
        #expect(P256.publicKey(privateKey: Array(RFC8291.senderPrivate.prefix(31))) == nil)
        #expect(P256.signES256([1], privateKey: order) == nil)
    }

    /// RFC 6979 §A.2.5: the P-256 key, and its SHA-256 signature of "sample" (deterministic there, so this checks
    /// verification and the r ‖ s form against a signature OpenSSL did not make).
    @Test func rfc6979KeyAndSignature() {
        let privateKey = Self.hex("C9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721")
        let publicKey = [0x04] + Self.hex("60FED4BA255A9D31C961EB74C6356D68C049B8923B61FA6CE669622E60F29FB6")
            + Self.hex("7903FE1008B8BC99A41AE9E95628BC64F2F1B20C2D7E9F5177A3C294D4462299")
        let signature = Self.hex("EFD48B2AACB6A8FD1140DD9CD45E81D69D2C877B56AAF991C34D0EA84EAF3716")
            + Self.hex("F7CB1C942D657C41D436C7A1B6E29F65F3E900DBB9AFF4064DC4AB2F843ACDA8")
        #expect(P256.publicKey(privateKey: privateKey) == publicKey)
        #expect(P256.verifyES256(signature, of: Array("sample".utf8), publicKey: publicKey))
        #expect(!P256.verifyES256(signature, of: Array("samples".utf8), publicKey: publicKey))
    }

    @Test func es256SignsAndVerifies() throws {
        let key = P256.newPrivateKey(), other = P256.newPrivateKey()
        let publicKey = try #require(P256.publicKey(privateKey: key)), otherPublic = try #require(P256.publicKey(privateKey: other))
        let message = Array("header.claims".utf8)
        let signature = try #require(P256.signES256(message, privateKey: key))
        #expect(signature.count == 64)
        #expect(P256.verifyES256(signature, of: message, publicKey: publicKey))
        #expect(!P256.verifyES256(signature, of: Array("header.claimz".utf8), publicKey: publicKey))
        #expect(!P256.verifyES256(signature, of: message, publicKey: otherPublic))
        var changed = signature
        changed[63] ^= 0x01
        #expect(!P256.verifyES256(changed, of: message, publicKey: publicKey))
        #expect(!P256.verifyES256(Array(signature.prefix(63)), of: message, publicKey: publicKey))
        #expect(!P256.verifyES256([UInt8](repeating: 0, count: 64), of: message, publicKey: publicKey))
        #expect(P256.signES256([], privateKey: key).map { P256.verifyES256($0, of: [], publicKey: publicKey) } == true)
        // An r or s below 2^248 (one signature in 128) is padded to 32 bytes: over 256 signatures that case comes up.
        for index in 0..<256 {
            let text = Array("message \(index)".utf8)
            let signed = try #require(P256.signES256(text, privateKey: key))
            #expect(signed.count == 64 && P256.verifyES256(signed, of: text, publicKey: publicKey))
        }
    }

    // MARK: VAPID

    @Test func vapidTokenIsAJWTThePublicKeyVerifies() throws {
        let key = VAPIDKey.generate()
        #expect(VAPIDKey(privateKey: key.privateKey)?.publicKey == key.publicKey)
        let token = try #require(key.token(audience: "https://push.example.net", subject: "mailto:ops@example.org", expiresAt: 1_700_000_000))
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(parts.count == 3)
        #expect(String(decoding: Self.b64(parts[0]), as: UTF8.self) == #"{"typ":"JWT","alg":"ES256"}"#)
        #expect(String(decoding: Self.b64(parts[1]), as: UTF8.self)
                == #"{"aud":"https://push.example.net","exp":1700000000,"sub":"mailto:ops@example.org"}"#)
        let signature = Self.b64(parts[2])
        #expect(signature.count == 64)
        #expect(P256.verifyES256(signature, of: Array((parts[0] + "." + parts[1]).utf8), publicKey: key.publicKey))
        #expect(!P256.verifyES256(signature, of: Array((parts[0] + "." + parts[1]).utf8), publicKey: VAPIDKey.generate().publicKey))

        let authorization = try #require(key.authorization(audience: "https://push.example.net", subject: "mailto:ops@example.org",
                                                          expiresAt: 1_700_000_000))
        #expect(authorization.hasPrefix("vapid t=" + parts[0] + "." + parts[1] + "."))
        let k = try #require(authorization.split(separator: " ").last)
        #expect(k.hasPrefix("k=") && Self.b64(String(k.dropFirst(2))) == key.publicKey)
    }

    @Test func vapidClaimsAreEscapedJSON() throws {
        let key = VAPIDKey.generate()
        let subject = "mailto:\"ops\"\\team@example.org\n\t\u{01}\u{1F} é"
        let token = try #require(key.token(audience: "https://push.example.net", subject: subject, expiresAt: -5))
        let claims = try JSONValue.parse(Self.b64(String(token.split(separator: ".")[1])))
        #expect(claims["sub"] == .string(subject))
        #expect(claims["aud"] == .string("https://push.example.net"))
        #expect(claims["exp"]?.doubleValue == -5)
    }

    @Test func vapidKeysRefuseBadScalarsAndNeverPrintThePrivateHalf() {
        #expect(VAPIDKey(privateKey: [UInt8](repeating: 0, count: 32)) == nil)
        #expect(VAPIDKey(privateKey: [1, 2, 3]) == nil)
        let key = VAPIDKey.generate()
        #expect(key.description.contains(Base64URL.encode(key.publicKey)))
        #expect(!key.description.contains(Base64URL.encode(key.privateKey)))
    }

    // MARK: HKDF and AES-128-GCM

    /// RFC 5869 §A.1 (test case 1) and §A.3 (no salt, no info).
    @Test func hkdfRFC5869() {
        let ikm = [UInt8](repeating: 0x0b, count: 22)
        let salt = Self.hex("000102030405060708090a0b0c"), info = Self.hex("f0f1f2f3f4f5f6f7f8f9")
        #expect(Crypto.hkdfExtractSHA256(salt: salt, inputKey: ikm) == Self.hex("077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"))
        #expect(Crypto.hkdfSHA256(salt: salt, inputKey: ikm, info: info, length: 42)
                == Self.hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"))
        #expect(Crypto.hkdfSHA256(salt: [], inputKey: ikm, info: [], length: 42)
                == Self.hex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"))
        #expect(Crypto.hkdfSHA256(salt: salt, inputKey: ikm, info: info, length: 0) == [])
    }

    /// McGrew and Viega's GCM test cases 1 and 2 (AES-128, zero key and nonce), then a changed byte and bad sizes.
    @Test func aes128GCM() throws {
        let key = [UInt8](repeating: 0, count: 16), nonce = [UInt8](repeating: 0, count: 12)
        #expect(Crypto.aes128GCMSeal(key: key, nonce: nonce, plaintext: []) == Self.hex("58e2fccefa7e3061367f1d57a4e7455a"))
        let sealed = try #require(Crypto.aes128GCMSeal(key: key, nonce: nonce, plaintext: [UInt8](repeating: 0, count: 16)))
        #expect(sealed == Self.hex("0388dace60b6a392f328c2b971b2fe78ab6e47d42cec13bdf53a67b21257bddf"))
        #expect(Crypto.aes128GCMOpen(key: key, nonce: nonce, sealed: sealed) == [UInt8](repeating: 0, count: 16))
        #expect(Crypto.aes128GCMOpen(key: key, nonce: nonce, sealed: Self.hex("58e2fccefa7e3061367f1d57a4e7455a")) == [])
        var changed = sealed
        changed[3] ^= 0x01
        #expect(Crypto.aes128GCMOpen(key: key, nonce: nonce, sealed: changed) == nil)
        #expect(Crypto.aes128GCMOpen(key: key, nonce: [1] + nonce.dropFirst(), sealed: sealed) == nil)
        #expect(Crypto.aes128GCMOpen(key: key, nonce: nonce, sealed: Array(sealed.prefix(15))) == nil)
        #expect(Crypto.aes128GCMSeal(key: key + [0], nonce: nonce, plaintext: [1]) == nil)
        #expect(Crypto.aes128GCMSeal(key: key, nonce: nonce + [0], plaintext: [1]) == nil)
    }

    // MARK: threads

    /// Every call owns its OpenSSL objects: eight tasks at once get the RFC's answers and round-trip their own messages.
    @Test func manyThreadsAtOnce() async {
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    (0..<40).allSatisfy { index in
                        let rfc = WebPushEncryption.encrypt(RFC8291.plaintext, userAgentPublicKey: RFC8291.userAgentPublic,
                                                            authSecret: RFC8291.authSecret, senderPrivateKey: RFC8291.senderPrivate,
                                                            salt: RFC8291.salt)
                        let key = VAPIDKey.generate()
                        let message = Array("message \(index)".utf8)
                        let signature = P256.signES256(message, privateKey: key.privateKey) ?? []
                        let body = WebPushEncryption.encrypt(message, userAgentPublicKey: key.publicKey, authSecret: RFC8291.authSecret) ?? []
                        return rfc == RFC8291.body && P256.verifyES256(signature, of: message, publicKey: key.publicKey)
                            && WebPushEncryption.decrypt(body, userAgentPrivateKey: key.privateKey, authSecret: RFC8291.authSecret) == message
                    }
                }
            }
            for await ok in group { #expect(ok) }
        }
    }
}
