public import FlareCore
public import FlareStore
import FlareSystem

/// The one door to contacts: the people a key's shares may tell. A contact belongs to the key that made it; a
/// limited key sees, and removes, only its own, and another's is to it as one that does not exist. Admin keys see
/// every contact.
public final class ContactService: Sendable {
    public enum Refusal: Error {
        case invalid(ContactRules.Refusal)
        /// The key owns `ContactRules.maximumPerKey` contacts already.
        case full
        case storage(StoreError)
    }

    private let store: any ContactRecords
    private let clock: any Clock
    private let logger: Logger

    init(store: any ContactRecords, clock: any Clock, logger: Logger) {
        self.store = store
        self.clock = clock
        self.logger = logger
    }

    /// Checks and stores a new contact of `owner`.
    public func create(name: String, email: String?, phone: String?, language: String?, owner: OwnerKeyRecord) throws(Refusal) -> Contact {
        let contact: Contact
        do throws(ContactRules.Refusal) {
            contact = Contact(id: .generate(), ownerKeyID: owner.id, name: try ContactRules.validName(name),
                              email: try email.map(ContactRules.validEmail), phone: try phone.map(ContactRules.validPhone),
                              language: try language.map(ContactRules.language) ?? .en, createdAt: clock.now())
        } catch {
            throw .invalid(error)
        }
        let stored: Bool
        do { stored = try store.insertContact(contact, limit: ContactRules.maximumPerKey) } catch { throw .storage(error) }
        guard stored else { throw .full }
        // The id only: a contact's name, address and number are personal, and logs are not the place for them.
        logger.info("contact \(contact.id) added by key \(owner.id)")
        return contact
    }

    /// The contact with this id, if `caller` may see it.
    public func contact(_ id: ContactID, for caller: OwnerKeyRecord) throws(StoreError) -> Contact? {
        try store.contact(id: id).flatMap { caller.isAdmin || $0.ownerKeyID == caller.id ? $0 : nil }
    }

    /// `caller`'s contacts (every contact for an admin key), newest first.
    public func list(for caller: OwnerKeyRecord, after position: ContactListPosition?, limit: Int) throws(StoreError) -> [StoredContact] {
        try store.listContacts(owner: caller.isAdmin ? nil : caller.id, after: position, limit: limit)
    }

    /// Removes the contact, if `caller` may see it, withdrawing its links on every active share (the store's
    /// `deleteContact`); nil when there is none it may see, else the links withdrawn. Memory hears of those from the
    /// caller, `ShareService.removeContact`.
    func remove(_ id: ContactID, by caller: OwnerKeyRecord) throws(StoreError) -> [WithdrawnLink]? {
        guard try contact(id, for: caller) != nil else { return nil }
        let withdrawn = try store.deleteContact(id: id, withdrawingLinksAt: clock.now())
        if let withdrawn { logger.info("contact \(id) removed by key \(caller.id); \(withdrawn.count) of its personal links withdrawn") }
        return withdrawn
    }
}
