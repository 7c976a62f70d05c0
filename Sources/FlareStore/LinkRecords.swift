public import FlareCore
public import FlareSystem

/// A share's personal links (`ShareLink`): one view link per contact, each withdrawn on its own.
public protocol LinkRecords: Sendable {
    /// Adds links to a share, if it is active, with `events` (recorded for the links' share in the same transaction);
    /// false (nothing added, nothing recorded) when it is not. Marks the share changed, so that every instance reads
    /// its links again.
    func insertLinks(_ links: [ShareLink], events: [PendingEvent]) throws(StoreError) -> Bool
    /// The share's links, oldest first, withdrawn ones included.
    func links(shareRow: Int64) throws(StoreError) -> [ShareLink]
    /// The link whose view token has this hash, withdrawn or not.
    func link(viewTokenHash: SecretHash) throws(StoreError) -> ShareLink?
    /// The links of every share whose history still exists (the active ones and those ended but not yet purged),
    /// withdrawn ones included: what memory loads at start.
    func openLinks() throws(StoreError) -> [ShareLink]
    /// Gives links new view-token hashes (after `flare token-key rotate`: a personal link's token is derived from the
    /// token key, and the old URLs must stop working). Marks their shares changed.
    func rekeyLinks(_ changes: [(shareRow: Int64, link: LinkID, viewTokenHash: SecretHash)]) throws(StoreError)
    /// Withdraws the link; true only for the call that withdrew it. Marks the share changed.
    func withdrawLink(shareRow: Int64, id: LinkID, at: UnixMillis) throws(StoreError) -> Bool
    /// Someone opened the link: its first opening is recorded, with `event`, once. True only for the call that
    /// recorded it.
    func noteLinkOpened(shareRow: Int64, id: LinkID, at: UnixMillis, event: PendingEvent?) throws(StoreError) -> Bool
}

extension LinkRecords {
    // Without events: as tests and tools that record none call it.
    public func insertLinks(_ links: [ShareLink]) throws(StoreError) -> Bool { try insertLinks(links, events: []) }
}
