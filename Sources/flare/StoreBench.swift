import FlareCore
import FlareStore
import FlareStoreOpener
import Foundation

/// `flare bench store-create`: the store alone doing what a share creation asks of it, in this process, on a new
/// SQLite file with flared's own settings (the same `SQLiteShareStore`): the share and its `share.started` event with
/// its delivery, in one transaction, one creation after the other (flared's creations take the store's one writer
/// in turn too). `scripts/bench/bench.py` runs it beside each scale row as that row's same-run reference, as pgbench
/// is for PostgreSQL.
///
/// Writes only into `--store-dir`, which must not exist yet (it never opens a store someone uses); removes nothing.
enum StoreBench {
    static let storeDirectory = OptionSpec.value("--store-dir", "DIR", "where the new store goes: a directory that does not exist yet")
    static let live = OptionSpec.value("--live", "N", "shares made first, not timed: the level the timed ones are made at (default 0)")
    static let count = OptionSpec.value("--count", "N", "shares made, each timed (default 5000)")

    static func create(_ invocation: Invocation) throws -> Int32 {
        guard let directory = invocation.value(storeDirectory) else {
            throw CLIError("bench store-create needs --store-dir DIR (a directory that does not exist yet)")
        }
        guard !FileManager.default.fileExists(atPath: directory) else {
            throw CLIError("\(directory) exists: bench store-create writes only into a new directory")
        }
        let live = try Bench.integer(invocation, Self.live, default: 0)
        let count = try Bench.integer(invocation, Self.count, default: 5_000)
        guard count > 0 else { throw CLIError("--count must be at least 1") }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let store = try StoreOpener.open(.sqlite(path: directory + "/flare.db"), instance: "bench")
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        func share() -> Share {
            Share(id: ShareID.generate(), viewTokenHash: Secret.generate().hash, name: "", createdAt: now, expiresAt: now + 86_400_000)
        }
        // The level: shares already there, as flared has them when its row creates more (not timed).
        for _ in 0..<live { _ = try store.insertShare(share(), event: nil) }
        var latencies: [Int64] = []
        latencies.reserveCapacity(count)
        let started = Bench.nowNanos()
        for _ in 0..<count {
            let made = share()
            let before = Bench.nowNanos()
            _ = try store.insertShare(made, event: PendingEvent(.started(made), destinations: [.mqtt]))
            latencies.append(Bench.nowNanos() - before)
        }
        let seconds = Double(Bench.nowNanos() - started) / 1e9
        latencies.sort()
        func percentile(_ p: Double) -> Double { Double(latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]) / 1e6 }
        print(#"{"created":\#(count),"live":\#(live),"creations_per_s":\#(Int((Double(count) / seconds).rounded())),"p50_ms":\#(percentile(0.5)),"p99_ms":\#(percentile(0.99))}"#)
        return 0
    }
}
