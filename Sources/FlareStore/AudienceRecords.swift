public import FlareCore
public import FlareSystem

/// Who opened a share's link, and who is watching.
public protocol AudienceRecords: Sendable {
    /// Records that a viewer (the hash of share and viewer id) has the link open now, through the personal link `link`
    /// (nil: the share's own link; the last one it came through is kept). True when it is new to the share;
    /// `firstViewEvent` is recorded when it is the share's first viewer.
    func noteViewer(row: Int64, viewer: SecretHash, link: LinkID?, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool
    /// The share's audience: first opened, distinct viewers, and those seen since `watchingSince`; and per personal
    /// link (oldest first), its first opening and whether a viewer that came through it was seen since `watchingSince`.
    func audience(row: Int64, watchingSince: UnixMillis) throws(StoreError) -> Audience
}

extension AudienceRecords {
    // Without an event: as tests and tools that record none call it.
    @discardableResult
    public func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis) throws(StoreError) -> Bool {
        try noteViewer(row: row, viewer: viewer, link: nil, at: at, firstViewEvent: nil)
    }

    @discardableResult
    public func noteViewer(row: Int64, viewer: SecretHash, at: UnixMillis, firstViewEvent: PendingEvent?) throws(StoreError) -> Bool {
        try noteViewer(row: row, viewer: viewer, link: nil, at: at, firstViewEvent: firstViewEvent)
    }
}
