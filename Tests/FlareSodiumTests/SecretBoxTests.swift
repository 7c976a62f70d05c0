import FlareCore
import FlareSodium
import FlareTestSupport
import Foundation
import Testing

/// The OwnTracks apps' secretbox, checked against an independent implementation: PyNaCl (Debian's python3-nacl)
/// opens what Flare seals, and Flare opens what PyNaCl seals, with the key the apps make of a passphrase.
@Suite struct SecretBoxTests {
    let passphrase = "Zk9Qw2mV4xT7bN1cR6yH3uJ8eL5aS0dF"

    /// Runs PyNaCl: `mode` seal or open, the key from the passphrase as the apps make it (UTF-8, padded to 32).
    func pynacl(_ mode: String, _ input: String, passphrase: String) throws -> CommandResult {
        let script = """
            import base64, sys, nacl.secret
            mode, data, passphrase = sys.argv[1], sys.argv[2], sys.argv[3]
            key = passphrase.encode()[:32].ljust(32, b"\\0")
            box = nacl.secret.SecretBox(key)
            if mode == "seal":
                print(base64.b64encode(bytes(box.encrypt(data.encode()))).decode())
            else:
                print(box.decrypt(base64.b64decode(data)).decode())
            """
        return try runCommand("/usr/bin/python3", ["-c", script, mode, input, passphrase])
    }

    @Test func whatFlareSealsPyNaClOpensAndTheOtherWayRound() throws {
        let plaintext = #"{"_type":"location","lat":47.42116,"lon":10.98533,"tst":1796234645,"acc":12}"#
        let key = E2EPassphrase.key(passphrase)
        let sealed = SecretBox.seal(Array(plaintext.utf8), key: key)
        #expect(sealed.count == 24 + 16 + plaintext.utf8.count)
        let opened = try pynacl("open", Data(sealed).base64EncodedString(), passphrase: passphrase)
        #expect(opened.status == 0, "\(opened.stderr)")
        #expect(opened.stdout.trimmingCharacters(in: .newlines) == plaintext)

        let theirs = try pynacl("seal", plaintext, passphrase: passphrase)
        #expect(theirs.status == 0, "\(theirs.stderr)")
        let box = try #require(Data(base64Encoded: theirs.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(SecretBox.open(Array(box), key: key).map { String(decoding: $0, as: UTF8.self) } == plaintext)
    }

    @Test func aWrongKeyAChangedByteOrAShortBoxOpensNothing() {
        let key = E2EPassphrase.key(passphrase)
        let sealed = SecretBox.seal(Array("hello".utf8), key: key)
        #expect(SecretBox.open(sealed, key: key) == Array("hello".utf8))
        #expect(SecretBox.open(sealed, key: E2EPassphrase.key("another passphrase")) == nil)
        for index in [0, 24, 40, sealed.count - 1] {
            var changed = sealed
            changed[index] ^= 1
            #expect(SecretBox.open(changed, key: key) == nil, "byte \(index)")
        }
        #expect(SecretBox.open(Array(sealed.prefix(39)), key: key) == nil)
        // Two seals of the same text differ: a fresh nonce each time.
        #expect(SecretBox.seal(Array("hello".utf8), key: key) != sealed)
    }

    @Test func thePassphraseIsKeyedAsTheAppsDo() {
        let generated = E2EPassphrase.generate()
        #expect(generated.utf8.count == 32 && E2EPassphrase.isGenerated(generated) && generated != E2EPassphrase.generate())
        #expect(E2EPassphrase.key(generated) == Array(generated.utf8))
        #expect(E2EPassphrase.key("abc") == Array("abc".utf8) + [UInt8](repeating: 0, count: 29))
        // Never a character cut in half (iOS): 11 three-byte characters are 33 bytes; the key keeps 10 of them.
        let chinese = String(repeating: "密", count: 11)
        #expect(E2EPassphrase.key(chinese) == Array(String(repeating: "密", count: 10).utf8) + [0, 0])
    }
}
