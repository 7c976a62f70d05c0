import FlareCore
import FlareSQLite
import FlareStore
import FlareSystem
import FlareTestSupport
import Foundation
import Testing

/// SQLite's `ownerKeysMark`: the number a daemon compares to know that the keys it remembers are still current,
/// without a read transaction per request. It must move with every change of a key made by any process, and
/// with nothing else.
@Suite struct OwnerKeysMarkTests {
    let directory: URL
    let path: String

    init() throws {
        directory = try TempDirectory.make(prefix: "flare-keys-mark")
        path = directory.appendingPathComponent("flare.db").path
    }

    @Test func itMovesWithEveryKeyChangeFromAnotherConnectionAndWithNothingElse() throws {
        let daemon = try SQLiteShareStore(path: path)
        let first = try #require(daemon.ownerKeysMark)
        let id = try daemon.insertOwnerKey(hash: SecretHash(of: OwnerKey.generate()), label: "app", createdAt: 1, admin: false, limits: .none)
        let afterOwnInsert = try #require(daemon.ownerKeysMark)
        #expect(afterOwnInsert != first, "the daemon's own change moves it too")
        // Shares, fixes and a key's last use are not key changes.
        let share = Share(id: ShareID.generate(), viewTokenHash: SecretHash(of: Secret.generate().text), name: "", createdAt: 1, expiresAt: 2_000_000_000_000)
        let row = try daemon.insertShare(share)
        _ = try daemon.insertFixes([PendingFix(shareRow: row, fix: Fix(latitude: 1, longitude: 2, timestamp: 3), receivedAt: 4)])
        try daemon.noteOwnerKeyUsed(id: id, at: 5)
        #expect(daemon.ownerKeysMark == afterOwnInsert)
        // What `flare keys revoke` does: its own connection to the file, in its own store object.
        let commandLine = try SQLiteShareStore(path: path)
        #expect(try commandLine.revokeOwnerKey(id: id, at: 10))
        let afterRevoke = try #require(daemon.ownerKeysMark)
        #expect(afterRevoke != afterOwnInsert)
        #expect(daemon.ownerKeysMark == afterRevoke, "read again with nothing changed, it stays")
        #expect(try !commandLine.revokeOwnerKey(id: id, at: 11))
        #expect(daemon.ownerKeysMark == afterRevoke, "a revocation that changed nothing does not move it")
        _ = try commandLine.insertOwnerKey(hash: SecretHash(of: OwnerKey.generate()), label: "new", createdAt: 12, admin: true, limits: .none)
        let afterCreate = try #require(daemon.ownerKeysMark)
        #expect(afterCreate != afterRevoke)
        _ = try commandLine.setKeyWebhook(id: id, url: nil, sealedSecret: nil, at: 13)
        #expect(daemon.ownerKeysMark != afterCreate)
    }

    @Test func anotherProcessTouchingItMovesItAndARemovedFileIsWatchedAgain() throws {
        let daemon = try SQLiteShareStore(path: path)
        let first = try #require(daemon.ownerKeysMark)
        let marker = path + "-keys-changed"
        #expect(FileManager.default.fileExists(atPath: marker))
        try run("/usr/bin/touch", marker)
        let touched = try #require(daemon.ownerKeysMark)
        #expect(touched != first)
        // Removed (a restore from a backup, an operator's clean-up): it moves, and the next change still moves it.
        try FileManager.default.removeItem(atPath: marker)
        let removed = try #require(daemon.ownerKeysMark)
        #expect(removed != touched && FileManager.default.fileExists(atPath: marker))
        try run("/usr/bin/touch", marker)
        #expect(try #require(daemon.ownerKeysMark) != removed)
    }

    @Test func aMarkThatCannotBeWatchedIsUnknownNeverStale() throws {
        let marker = ChangeMarkerFile(path: directory.appendingPathComponent("no-such-directory/flare.db-keys-changed").path)
        #expect(marker.mark == nil)
        #expect(!marker.touch())
    }

    private func run(_ program: String, _ arguments: String...) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0)
    }
}
