import FlareCrypto
import Testing
@testable import FlareCore
import FlareCodec

@Suite struct IdentifierTests {
    @Test func shareIDsAre128RandomBits() {
        let ids = (0..<1000).map { _ in ShareID.generate() }
        #expect(Set(ids).count == 1000)
        #expect(ids.allSatisfy { $0.rawValue.count == 22 && Base64URL.decode($0.rawValue)?.count == 16 })
    }

    @Test func shareIDParsingIsStrict() {
        #expect(ShareID("AAAAAAAAAAAAAAAAAAAAAA") != nil)
        #expect(ShareID("AAAAAAAAAAAAAAAAAAAAA") == nil)
        #expect(ShareID("AAAAAAAAAAAAAAAAAAAA/A") == nil)
        #expect(ShareID("AAAAAAAAAAAAAAAAAAAAAé") == nil)
        #expect(ShareID("+/AAAAAAAAAAAAAAAAAAAA") == nil)
    }

    @Test func secretsAreAtLeast128BitsAndOnlyTheirHashIsKept() {
        let secret = Secret.generate()
        #expect(Base64URL.decode(secret.text)!.count * 8 >= 128)
        #expect(Secret.isWellFormed(secret.text))
        #expect(secret.hash.bytes == Crypto.sha256(secret.text))
        #expect(secret.hash.matches(SecretHash(of: secret.text)))
        #expect(!secret.hash.matches(Secret.generate().hash))
    }

    /// Held as four words now: its bytes come back as they went in, every byte counts in a comparison and a hash, and
    /// bytes of another length (a damaged row) match nothing, not even themselves.
    @Test func aSecretHashKeepsItsBytesAndComparesEveryOne() {
        let hash = Secret.generate().hash
        #expect(hash.bytes.count == 32 && SecretHash(bytes: hash.bytes) == hash && SecretHash(bytes: hash.bytes).matches(hash))
        #expect(SecretHash(of: "abc").bytes == Crypto.sha256("abc"))
        #expect(hash.base64URL == Base64URL.encode(hash.bytes) && hash.base64URL.count == 43)
        for index in [0, 7, 8, 15, 16, 31] {
            var changed = hash.bytes
            changed[index] ^= 0x01
            let other = SecretHash(bytes: changed)
            #expect(!other.matches(hash) && other != hash, "byte \(index)")
        }
        let set: Set<SecretHash> = [hash, SecretHash(bytes: hash.bytes), Secret.generate().hash]
        #expect(set.count == 2)
        let short = SecretHash(bytes: Array(hash.bytes.prefix(31))), long = SecretHash(bytes: hash.bytes + [0])
        #expect(!short.matches(short) && !long.matches(hash) && !hash.matches(long) && !short.matches(hash))
    }

    @Test func ownerKeysCarryTheirPrefix() {
        let key = OwnerKey.generate()
        #expect(key.hasPrefix("flare_owner_"))
        #expect(OwnerKey.isWellFormed(key))
        #expect(!OwnerKey.isWellFormed(String(key.dropLast())))
        #expect(!OwnerKey.isWellFormed("flare_owner_" + String(repeating: "!", count: 32)))
    }

    @Test func constantTimeComparison() {
        #expect(Crypto.constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!Crypto.constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!Crypto.constantTimeEquals([1, 2, 3], [1, 2]))
    }

    @Test func hmacMatchesRFC4231Vector() {
        // RFC 4231 test case 2.
        let mac = Crypto.hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(mac.map { String(format2: $0) }.joined() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func topicsRoundTrip() {
        let id = ShareID.generate()
        #expect(Topics.shareID(fromLocationTopic: Topics.location(id)) == id)
        #expect(Topics.shareID(fromLocationTopic: Topics.status(id)) == nil)
        #expect(Topics.shareID(fromLocationTopic: "flare/v1/shares/../location") == nil)
        #expect(Topics.shareID(fromLocationTopic: "flare/v1/shares/\(id)/location/extra") == nil)
    }
}

extension String {
    init(format2 byte: UInt8) {
        let hex = Array("0123456789abcdef")
        self = String([hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
    }
}
