import FlareAPI
import FlareSystem

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

    /// The state now, given the recorded one (none recorded: live since the share's creation) and when the share last
    /// heard from its tracker (a fix, or the share's creation when none came yet).
    ///
    /// - `offline` holds from the will until a fix heard after it (a fix heard in the same millisecond counts as sent
    ///   before the will: a phone that lost its connection right after a fix is offline, and none reconnects within
    ///   a millisecond);
    /// - otherwise `stale` once nothing was heard for `staleAfterMillis`, since that moment;
    /// - otherwise `live`: since the recorded start if it was live already, else since the last fix, which ended
    ///   the silence (another instance's record of that fix, a moment earlier, is taken when it arrives).
    public func current(recorded: TrackerRecord, lastHeardAt: UnixMillis, transport: TrackerTransport?, now: UnixMillis) -> TrackerRecord {
        if recorded.state == .offline, recorded.since >= lastHeardAt { return recorded }
        if now - lastHeardAt > staleAfterMillis {
            if recorded.state == .stale { return recorded }
            return TrackerRecord(state: .stale, since: lastHeardAt + staleAfterMillis, transport: transport ?? recorded.transport)
        }
        // Live stays live. Its transport is recorded when a tracker reports over HTTP (the page then says that only
        // `stale` can apply, as it sends no will), or back on MQTT after that; a new share's first MQTT fix (none
        // recorded counts as MQTT) costs no write.
        if recorded.state == .live {
            guard let transport, transport != (recorded.transport ?? .mqtt) else { return recorded }
            return TrackerRecord(state: .live, since: recorded.since, transport: transport)
        }
        return TrackerRecord(state: .live, since: lastHeardAt, transport: transport ?? recorded.transport)
    }

    /// The battery is recorded as low again only after it charged or reported over this: a level wavering around
    /// 15 % sends one `tracker.battery_low`, not one per fix.
    public static let batteryRecoveredPercent = 20

    /// Whether the recorded battery flag (`recordedLow`) is to change, given the newest reading: true to record it
    /// low, false to clear it, nil to leave it.
    public static func batteryFlagChange(level: Int?, status: Int?, recordedLow: Bool) -> Bool? {
        if !recordedLow { return isBatteryLow(level: level, status: status) ? true : nil }
        let charging = status == BatteryStatus.charging.rawValue || status == BatteryStatus.full.rawValue
        guard let level else { return nil }
        return charging || level > batteryRecoveredPercent ? false : nil
    }

    /// Whether a battery reading is worth saying: low and not being charged.
    public static func isBatteryLow(level: Int?, status: Int?) -> Bool {
        guard let level, level <= batteryLowPercent else { return false }
        return status != BatteryStatus.charging.rawValue && status != BatteryStatus.full.rawValue
    }
}

/// What a share's page, live stream and owner are told about its tracker: the recorded state, what the last fix says
/// of the phone's battery and connectivity, and the last "locate now" request. The JSON is the `tracker` object of
/// the view document and the `tracker` live event (`FlareAPI.TrackerReport`).
public struct TrackerSummary: Sendable, Equatable {
    public var record: TrackerRecord
    public var battery: Int?
    public var batteryStatus: Int?
    public var connection: String?
    public var locateRequestedAt: UnixMillis?
    public var locateAnsweredAt: UnixMillis?
    /// The share goes on under duress (`Share.underDuress`): the viewers warn.
    public var underDuress: Bool

    public init(share: Share, last: Fix?) {
        record = share.trackerRecord
        battery = last?.battery
        batteryStatus = last?.batteryStatus
        connection = last?.connection
        locateRequestedAt = share.locateRequestedAt
        locateAnsweredAt = share.locateAnsweredAt
        underDuress = share.underDuress
    }

    public var isBatteryLow: Bool { TrackerRules.isBatteryLow(level: battery, status: batteryStatus) }

    /// OwnTracks `conn` codes and the names the API gives them.
    public static let connectionNames = ["w": "wifi", "m": "mobile", "o": "offline"]
}
