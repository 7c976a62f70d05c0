/// Whether the phone (or tracker) of a share is reporting.
public enum TrackerState: String, Sendable, CaseIterable {
    /// Fixes are arriving.
    case live
    /// No fix for longer than the stale limit (`FLARE_STALE_AFTER_S`); the phone may be lying still without a new
    /// position to send, out of coverage, or switched off: nothing says which.
    case stale
    /// The broker sent the tracker's last will: its connection was lost. Until the next fix.
    case offline
}

/// How a share's fixes arrive: over MQTT (a last will can say the connection was lost) or over HTTP (no will: only
/// `stale` can tell that reports stopped).
public enum TrackerTransport: String, Sendable {
    case mqtt, http
}

/// A tracker state as recorded in the store: every instance reads the same one, and whichever instance records a
/// change announces it.
public struct TrackerRecord: Sendable, Equatable {
    public var state: TrackerState
    /// When this state began.
    public var since: UnixMillis
    /// Why, for `offline`: `connection_lost`.
    public var reason: String?
    /// How the fixes that last made it `live` arrived.
    public var transport: TrackerTransport?

    public init(state: TrackerState, since: UnixMillis, reason: String? = nil, transport: TrackerTransport? = nil) {
        self.state = state
        self.since = since
        self.reason = reason
        self.transport = transport
    }

    public static let connectionLost = "connection_lost"
}

/// The OwnTracks `bs` values.
public enum BatteryStatus: Int, Sendable {
    case unknown = 0, unplugged = 1, charging = 2, full = 3

    public var name: String {
        switch self {
        case .unknown: "unknown"
        case .unplugged: "unplugged"
        case .charging: "charging"
        case .full: "full"
        }
    }
}

/// How a tracker's state follows from what was heard of it. Pure: the bridge, the sweep and the tests use the same
/// rules.
public struct TrackerRules: Sendable {
    /// No fix for longer than this: `stale`.
    public var staleAfterMillis: Int64
    /// At or below this percentage, while not charging, the battery is low.
    public static let batteryLowPercent = 15

    public init(staleAfterMillis: Int64) {
        self.staleAfterMillis = staleAfterMillis
    }

    /// The state now, given the last recorded one and when the share last heard from its tracker (a fix, or the
    /// share's creation when none came yet).
    ///
    /// - `offline` holds from the will until a fix heard after it;
    /// - otherwise `stale` once nothing was heard for `staleAfterMillis`, since that moment;
    /// - otherwise `live`: since the recorded start if it was live already, else since the fix that ended the
    ///   silence.
    public func current(recorded: TrackerRecord?, lastHeardAt: UnixMillis, transport: TrackerTransport?, now: UnixMillis) -> TrackerRecord {
        if let recorded, recorded.state == .offline, recorded.since >= lastHeardAt { return recorded }
        if now - lastHeardAt > staleAfterMillis {
            return TrackerRecord(state: .stale, since: lastHeardAt + staleAfterMillis, transport: recorded?.transport ?? transport)
        }
        if let recorded, recorded.state == .live, transport == nil || recorded.transport == transport { return recorded }
        return TrackerRecord(state: .live, since: recorded?.state == .live ? recorded!.since : lastHeardAt, transport: transport ?? recorded?.transport)
    }

    /// Whether a battery reading is worth saying: low and not being charged.
    public static func isBatteryLow(level: Int?, status: Int?) -> Bool {
        guard let level, level <= batteryLowPercent else { return false }
        return status != BatteryStatus.charging.rawValue && status != BatteryStatus.full.rawValue
    }
}
