import Synchronization

/// Token buckets keyed by a string (a client address, a token hash). Memory is bounded: when the table is full,
/// buckets that have refilled completely carry no information and are dropped first.
public final class RateLimiter: Sendable {
    public struct Rule: Sendable {
        public var ratePerSecond: Double
        public var burst: Double
        public init(ratePerSecond: Double, burst: Double) {
            self.ratePerSecond = ratePerSecond
            self.burst = burst
        }
    }

    private struct Bucket { var tokens: Double; var updatedAt: Int64 }

    public let rule: Rule
    private let maximumKeys: Int
    private let buckets = Mutex([String: Bucket]())

    public init(rule: Rule, maximumKeys: Int = 100_000) {
        self.rule = rule
        self.maximumKeys = maximumKeys
    }

    /// Takes `cost` tokens from `key`'s bucket. Returns nil when allowed, or the whole seconds to wait.
    /// `nowMillis` is a monotonic time in milliseconds.
    public func take(_ key: String, cost: Double = 1, nowMillis: Int64) -> Int? {
        buckets.withLock { buckets in
            if buckets.count >= maximumKeys, buckets[key] == nil { evict(&buckets, nowMillis: nowMillis) }
            // One hash of the key, and the bucket changed where it is stored: every link request takes two buckets
            // under contended locks.
            return Self.take(&buckets[key, default: Bucket(tokens: rule.burst, updatedAt: nowMillis)], cost: cost, nowMillis: nowMillis, rule: rule)
        }
    }

    private static func take(_ bucket: inout Bucket, cost: Double, nowMillis: Int64, rule: Rule) -> Int? {
        let elapsed = Double(max(0, nowMillis - bucket.updatedAt)) / 1000
        bucket.tokens = min(rule.burst, bucket.tokens + elapsed * rule.ratePerSecond)
        bucket.updatedAt = nowMillis
        if bucket.tokens >= cost {
            bucket.tokens -= cost
            return nil
        }
        let missing = cost - bucket.tokens
        return max(1, Int((missing / rule.ratePerSecond).rounded(.up)))
    }

    public var trackedKeys: Int { buckets.withLock { $0.count } }

    private func evict(_ buckets: inout [String: Bucket], nowMillis: Int64) {
        buckets = buckets.filter { Double(nowMillis - $0.value.updatedAt) / 1000 * rule.ratePerSecond + $0.value.tokens < rule.burst }
        // Everyone is mid-burst: forget the least recently seen half rather than grow without bound.
        if buckets.count >= maximumKeys {
            for (key, _) in buckets.sorted(by: { $0.value.updatedAt < $1.value.updatedAt }).prefix(buckets.count / 2) {
                buckets[key] = nil
            }
        }
    }
}


