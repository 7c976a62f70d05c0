public import FlareCore
public import FlareSystem

/// The people a key's shares may tell (`Contact`), owned by keys as shares are.
public protocol ContactRecords: Sendable {
    /// Stores a contact, unless its key owns `limit` contacts already (counted in the same transaction, so the limit
    /// holds across instances). False when refused for the limit.
    func insertContact(_ contact: Contact, limit: Int) throws(StoreError) -> Bool
    func contact(id: ContactID) throws(StoreError) -> Contact?
    /// Up to `limit` contacts, newest first (in the order the store took them), starting after `position` (nil: from
    /// the newest). `owner`: only that key's (nil: everyone's).
    func listContacts(owner: Int64?, after position: ContactListPosition?, limit: Int) throws(StoreError) -> [StoredContact]
    /// Deletes the contact and everything kept of it, and withdraws (at `at`) its personal links on every active
    /// share, in one transaction: a deleted contact keeps no way into anyone's SOS. Nil when there was no such
    /// contact (only the call that deleted it gets an answer); else the links it withdrew. Marks their shares changed,
    /// so that every instance reads their links again.
    func deleteContact(id: ContactID, withdrawingLinksAt at: UnixMillis) throws(StoreError) -> [WithdrawnLink]?
}

/// A contact and its place in the store's order (listings go newest first by it).
public struct StoredContact: Sendable, Equatable {
    public let row: Int64
    public let contact: Contact

    public init(row: Int64, contact: Contact) {
        self.row = row
        self.contact = contact
    }
}

/// Where a contact listing continues: the row of the last contact of the previous page.
public struct ContactListPosition: Sendable, Equatable {
    public let row: Int64

    public init(row: Int64) { self.row = row }
}

/// A personal link withdrawn by the store itself (its contact was deleted).
public struct WithdrawnLink: Sendable, Equatable {
    public let shareRow: Int64
    public let link: LinkID

    public init(shareRow: Int64, link: LinkID) {
        self.shareRow = shareRow
        self.link = link
    }
}
