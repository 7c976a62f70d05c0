import FlareCore
@testable import FlarePostgres
import FlareStore
import FlareTestSupport
import Foundation
import Synchronization
import Testing

/// End-to-end encrypted shares in both engines: the flag survives, ciphertexts are kept apart from the fixes in clear,
/// keyed by their digest (a redelivery is absorbed), read back newest last, counted, purged, and heard of by the other
/// instances as they are.
@Suite struct SealedFixStoreTests {
    let base: ShareStoreTests

    init() throws { base = try ShareStoreTests() }

    /// Something shaped like a secretbox: what the store is given is never opened.
    static func ciphertext(_ seed: UInt8, length: Int = 120) -> String {
        Data((0..<length).map { UInt8(truncatingIfNeeded: Int($0) &* 31 &+ Int(seed)) }).base64EncodedString()
    }

    func endToEndShare() -> Share {
        Share(id: .generate(), viewTokenHash: Secret.generate().hash, name: "Anna", createdAt: 1_000_000, expiresAt: 4_600_000, endToEnd: true)
    }

    @Test(arguments: Engine.allCases) func ciphertextsAreKeptByDigestReadNewestLastAndPurged(engine: Engine) throws {
        let store = try base.open(engine)
        let share = endToEndShare()
        let row = try store.insertShare(share)
        #expect(try store.share(id: share.id)?.share.endToEnd == true)
        #expect(try store.share(id: try { let plain = base.makeShare(); _ = try store.insertShare(plain); return plain.id }())?.share.endToEnd == false)
        let first = Fix.sealed(Self.ciphertext(1), receivedAt: 1_001_500), second = Fix.sealed(Self.ciphertext(2), receivedAt: 1_002_000)
        // Within one batch, with a fix in clear of another share between them: each is stored where it belongs.
        let plainShare = base.makeShare()
        let plainRow = try store.insertShare(plainShare)
        #expect(try store.insertFixes([PendingFix(shareRow: row, fix: first, receivedAt: 1_001_500),
                                       PendingFix(shareRow: plainRow, fix: Fix(latitude: 1, longitude: 2, timestamp: 1_001), receivedAt: 1_001_600),
                                       PendingFix(shareRow: row, fix: second, receivedAt: 1_002_000),
                                       PendingFix(shareRow: row, fix: first, receivedAt: 1_001_500)]) == [true, true, true, false])
        // A QoS 1 redelivery: the same bytes, later.
        #expect(try store.insertFixes([PendingFix(shareRow: row, fix: .sealed(Self.ciphertext(2), receivedAt: 1_009_000), receivedAt: 1_009_000)]) == [false])
        #expect(try store.recentSealedFixes(row: row, limit: 10) == [first, second])
        #expect(try store.recentSealedFixes(row: row, limit: 1) == [second])
        #expect(try store.recentFixes(row: row, limit: 10).isEmpty, "no fix in clear")
        #expect(try store.recentFixes(of: StoredShare(row: row, share: share), limit: 10) == [first, second])
        #expect(try store.recentSealedFixes(row: plainRow, limit: 10).isEmpty)
        #expect(try store.fixCount(row: row) == 2)
        try store.markEnded(row: row, at: 2_000_000, reason: .stopped)
        #expect(try store.purgeHistory(row: row))
        #expect(try store.recentSealedFixes(row: row, limit: 10).isEmpty && store.fixCount(row: row) == 0)
        #expect(try store.recentFixes(row: plainRow, limit: 10).count == 1)
    }

    /// Another instance learns of each new ciphertext as it is committed, not of a repeat.
    @Test func otherInstancesHearOfEachNewCiphertext() throws {
        let url = try TestPostgres.shared.get().makeDatabase()
        let writer = try PostgresShareStore(url: url, instance: "writer")
        let reader = try PostgresShareStore(url: url, instance: "reader")
        let heard = Mutex<[(Int64, Fix)]>([])
        reader.watchChanges { change in
            if case .fixes(let fixes) = change { heard.withLock { $0 += fixes.map { ($0.shareRow, $0.fix) } } }
        }
        defer { reader.stopWatching() }
        let share = endToEndShare()
        let row = try writer.insertShare(share)
        let longest = Fix.sealed(Self.ciphertext(3, length: SealedPayload.maximumDataLength / 4 * 3), receivedAt: 1_003_000)
        #expect(longest.sealed?.utf8.count == SealedPayload.maximumDataLength)
        let fixes = [Fix.sealed(Self.ciphertext(1), receivedAt: 1_001_000), longest]
        #expect(try writer.insertFixes(fixes.map { PendingFix(shareRow: row, fix: $0, receivedAt: $0.timestamp * 1000) }) == [true, true])
        #expect(try writer.insertFixes([PendingFix(shareRow: row, fix: fixes[0], receivedAt: 1_001_000)]) == [false])
        // A fix in clear after them: once it is heard, everything before it has been.
        let plainRow = try writer.insertShare(base.makeShare())
        #expect(try writer.insertFixes([PendingFix(shareRow: plainRow, fix: Fix(latitude: 1, longitude: 2, timestamp: 1_004), receivedAt: 1_004_000)]) == [true])
        #expect(eventually(timeout: .seconds(10)) { heard.withLock { $0.contains { $0.0 == plainRow } } })
        let got = heard.withLock { $0 }
        #expect(got.count == 3)
        #expect(got.prefix(2).map(\.0) == [row, row] && got.prefix(2).map(\.1.sealed) == fixes.map(\.sealed))
        #expect(got.prefix(2).map(\.1.timestamp) == [1_001, 1_003])
    }
}
