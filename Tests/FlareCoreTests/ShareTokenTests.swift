import FlareCrypto
import Testing
@testable import FlareCore
import FlareCodec

@Suite struct ShareTokenTests {
    let key = Crypto.randomBytes(32)
    let share = ShareID.generate()

    func token(role: ShareToken.Role = .device, expiresAt: Int64 = 2_000) -> String {
        ShareToken(shareID: share, role: role, issuedAt: 1_000, expiresAt: expiresAt).signed(with: key)
    }

    @Test func verifiesItsOwnTokenAndCarriesTheACL() throws {
        let verified = try ShareToken.verify(token(), key: key, nowSeconds: 1_500, expectedShare: share)
        #expect(verified.shareID == share)
        #expect(verified.role == .device)
        #expect(verified.expiresAt == 2_000)
        let claims = try JSONValue.parse(Base64URL.decode(token().split(separator: ".")[1])!)
        guard case .array(let acl) = claims["acl"] else { Issue.record("no acl claim"); return }
        // Exact topics only: one publish rule, the location topic itself, and no wildcard anywhere.
        let publishes = acl.filter { $0["action"] == .string("publish") }
        #expect(publishes == [.object(["permission": .string("allow"), "action": .string("publish"), "topic": .string(Topics.location(share))])])
        #expect(!acl.contains { $0["topic"]?.stringValue.map { $0.contains("#") || $0.contains("+") } ?? true })
        #expect(claims["sub"] == .string(share.rawValue))
        #expect(acl.count <= 8)   // what the broker plugin holds per token
    }

    @Test func watchTokensMaySubscribeOnly() {
        let rules = ShareToken(shareID: share, role: .watch, issuedAt: 0, expiresAt: 1).acl
        #expect(rules.allSatisfy { $0.action == "subscribe" })
        #expect(rules.map(\.topic) == [Topics.shareRoot(share) + "/#"])
    }

    @Test func refusesExpiredTamperedForeignAndMalformedTokens() {
        #expect(throws: ShareToken.VerificationError.expired) { try ShareToken.verify(token(), key: key, nowSeconds: 2_000) }
        #expect(throws: ShareToken.VerificationError.badSignature) { try ShareToken.verify(token(), key: Crypto.randomBytes(32), nowSeconds: 1_500) }
        #expect(throws: ShareToken.VerificationError.wrongShare) {
            try ShareToken.verify(token(), key: key, nowSeconds: 1_500, expectedShare: ShareID.generate())
        }
        var parts = token().split(separator: ".").map(String.init)
        let forged = try! JSONValue.parse(Base64URL.decode(parts[1])!)
        #expect(forged["exp"] == .number(2_000))
        parts[1] = Base64URL.encode(#"{"sub":"\#(share)","role":"device","iat":1000,"exp":9999999999,"acl":[]}"#)
        #expect(throws: ShareToken.VerificationError.badSignature) { try ShareToken.verify(parts.joined(separator: "."), key: key, nowSeconds: 1_500) }
        for malformed in ["", ".", "..", "a.b.c", String(token().dropLast(10)) + "!!!!!!!!!!", String(repeating: "a", count: 5000)] {
            #expect(throws: ShareToken.VerificationError.self) { try ShareToken.verify(malformed, key: key, nowSeconds: 1_500) }
        }
    }

    @Test func refusesAlgNone() {
        let parts = token().split(separator: ".").map(String.init)
        let none = Base64URL.encode(#"{"alg":"none","typ":"JWT"}"#) + "." + parts[1] + "."
        #expect(throws: ShareToken.VerificationError.unsupportedAlgorithm) { try ShareToken.verify(none, key: key, nowSeconds: 1_500) }
        let hs512 = Base64URL.encode(#"{"alg":"HS512"}"#) + "." + parts[1] + "." + parts[2]
        #expect(throws: ShareToken.VerificationError.unsupportedAlgorithm) { try ShareToken.verify(hs512, key: key, nowSeconds: 1_500) }
    }
}
