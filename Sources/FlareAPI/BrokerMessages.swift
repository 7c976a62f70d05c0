#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// The retained message on `flare/v1/shares/{id}/status`: `{"state":"active","expires_at":…,"tracker":{"state":…,
/// "since":…}}` while the share runs, `{"state":"ended","reason":…,"ended_at":…}` once it has ended. A watch token
/// reads it; the phone's device token too.
public struct ShareStatusMessage: Codable, Sendable, Equatable {
    /// The tracker's state fields only (`TrackerReport`'s first four): the status is republished on a change of state,
    /// not on every battery reading.
    public struct Tracker: Codable, Sendable, Equatable {
        public let state: TrackerReport.State
        @RFC3339Time public var since: Date
        public let reason: String?
        public let transport: String?

        public init(state: TrackerReport.State, since: Date, reason: String?, transport: String?) {
            self.state = state
            self.since = since
            self.reason = reason
            self.transport = transport
        }
    }

    public let state: ShareState
    @OptionalRFC3339Time public var expiresAt: Date?
    public let tracker: Tracker?
    /// `expired` or `stopped`, once ended.
    public let reason: String?
    @OptionalRFC3339Time public var endedAt: Date?

    enum CodingKeys: String, CodingKey { case state, expiresAt = "expires_at", tracker, reason, endedAt = "ended_at" }

    public init(state: ShareState, expiresAt: Date?, tracker: Tracker?, reason: String?, endedAt: Date?) {
        self.state = state
        self.expiresAt = expiresAt
        self.tracker = tracker
        self.reason = reason
        self.endedAt = endedAt
    }
}
