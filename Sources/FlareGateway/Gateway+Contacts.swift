import FlareAPI
import FlareCore
import FlareHTTP
import FlareShares
import FlareStore
import FlareSystem
import FoundationEssentials
import FlareCodec

/// Contacts over HTTP: `POST /api/v1/contacts`, `GET /api/v1/contacts` (paged as shares), `GET` and `DELETE
/// /api/v1/contacts/{id}`, with an owner key. A limited key sees only its own contacts: another key's id answers
/// 404 as an unknown one does. A key that is not current costs its address as an unknown link does. Contacts are
/// personal data: the log names their ids, never their names, addresses or numbers.
extension Gateway {
    func createContact(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        if let wait = contactLimiter.take(String(key.id), nowMillis: clock.monotonicMillis()) {
            metrics.increment(FlareMetrics.rateLimited, labels: [("scope", "contacts")])
            throw .rateLimited(retryAfter: wait)
        }
        // The values themselves: `ContactRules`, in the service.
        let body = try request.decode(as: ContactRequest.self)
        do throws(ContactService.Refusal) {
            let contact = try shares.contacts.create(name: body.name, email: body.email, phone: body.phone, language: body.language, owner: key)
            var response = HTTPResponse.api(201, Self.info(contact))
            response.headers.append(("Location", "/api/v1/contacts/\(contact.id)"))
            return response
        } catch {
            switch error {
            case .invalid(let refusal): throw .badRequest(refusal.code, refusal.message)
            case .full:
                throw APIError(status: 409, code: "contacts_full", message: "this key has as many contacts as a key may (\(ContactRules.maximumPerKey)); remove some first")
            case .storage(let failure): throw storeFailed(failure, "storing a contact")
            }
        }
    } }

    func listContacts(_ request: HTTPRequest) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        let (limit, position) = try Self.page(request, defaultLimit: ContactList.defaultLimit, maximumLimit: ContactList.maximumLimit)
        do throws(StoreError) {
            // One more than asked for says whether there is a next page.
            let found = try shares.contacts.list(for: key, after: position, limit: limit + 1)
            let page = found.prefix(limit)
            let next = found.count > limit ? page.last.map { ContactListCursor.encode(ContactListPosition(row: $0.row)) } : nil
            return .api(200, ContactList(contacts: page.map { Self.info($0.contact) }, nextCursor: next))
        } catch {
            throw storeFailed(error, "listing contacts")
        }
    } }

    func showContact(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        guard let id = ContactID(text) else { throw Self.contactNotFound }
        let found: Contact?
        do throws(StoreError) { found = try shares.contacts.contact(id, for: key) } catch { throw storeFailed(error, "reading a contact") }
        guard let found else { throw Self.contactNotFound }
        return .api(200, Self.info(found))
    } }

    func removeContact(_ request: HTTPRequest, id text: String) -> HTTPResponse { answering { () throws(APIError) in
        let key = try contactsCaller(request)
        guard let id = ContactID(text) else { throw Self.contactNotFound }
        let removed: Bool
        do throws(StoreError) { removed = try shares.removeContact(id, by: key) } catch { throw storeFailed(error, "removing a contact") }
        guard removed else { throw Self.contactNotFound }
        return HTTPResponse(status: 204, headers: [], body: .bytes([]))
    } }

    static let contactNotFound = APIError.notFound("no such contact")

    /// A listing's `limit` and `cursor` (contacts' and devices': pages by row, newest first).
    static func page(_ request: HTTPRequest, defaultLimit: Int, maximumLimit: Int) throws(APIError) -> (limit: Int, position: ContactListPosition?) {
        var limit = defaultLimit
        if let text = request.query["limit"] {
            guard let parsed = Int(text), (1...maximumLimit).contains(parsed) else {
                throw .badRequest("invalid_limit", "limit must be a whole number from 1 to \(maximumLimit)")
            }
            limit = parsed
        }
        var position: ContactListPosition?
        if let text = request.query["cursor"] {
            guard let parsed = ContactListCursor.decode(text) else {
                throw .badRequest("invalid_cursor", "cursor must be a next_cursor this server returned")
            }
            position = parsed
        }
        return (limit, position)
    }

    /// The request's owner key; one that is not current is charged to the caller's address.
    func contactsCaller(_ request: HTTPRequest) throws(APIError) -> OwnerKeyRecord {
        do { return try ownerKey(request) } catch {
            throw error.status == 401 ? unknownCredential(request) : error
        }
    }

    static func info(_ contact: Contact) -> ContactInfo {
        ContactInfo(id: contact.id.rawValue, name: contact.name, email: contact.email, phone: contact.phone,
                    language: contact.language.rawValue, createdAt: Date(unixMillis: contact.createdAt))
    }
}

/// The `cursor` of `GET /api/v1/contacts`: where the previous page ended, as base64url text; opaque to clients.
enum ContactListCursor {
    static func encode(_ position: ContactListPosition) -> String {
        Base64URL.encode(Array("1:\(position.row)".utf8))
    }

    static func decode(_ text: String) -> ContactListPosition? {
        guard text.utf8.count <= 64, let bytes = Base64URL.decode(text) else { return nil }
        let parts = String(decoding: bytes, as: UTF8.self).split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0] == "1", let row = Int64(parts[1]) else { return nil }
        return ContactListPosition(row: row)
    }
}
