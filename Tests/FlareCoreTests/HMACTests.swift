import FlareCrypto
import Foundation
import Testing

/// HMAC-SHA256 against RFC 4231's test vectors: a short key, a text key, and a key longer than the block (hashed
/// first), from several threads at once (each call works on its own copy of the one context).
@Suite struct HMACTests {
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

    static let vectors: [(key: [UInt8], message: [UInt8], mac: String)] = [
        ([UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (Array("Jefe".utf8), Array("what do ya want for nothing?".utf8), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        ([UInt8](repeating: 0xaa, count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
    ]

    @Test func rfc4231VectorsFromManyThreadsAtOnce() async {
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    (0..<200).allSatisfy { _ in Self.vectors.allSatisfy { Crypto.hmacSHA256(key: $0.key, message: $0.message) == Self.hex($0.mac) } }
                }
            }
            for await ok in group { #expect(ok) }
        }
    }
}
