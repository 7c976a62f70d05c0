import FlareAPI
import FlareClient
import Foundation

/// `flare contacts …`: the people the key's shares and check-ins may tell, through flared's HTTP API.
enum ContactsCommands {
    static let email = OptionSpec.value("--email", "ADDRESS", "where mail reaches them")
    static let phone = OptionSpec.value("--phone", "+E164", "their phone number, in E.164 form (+4915123456789)")
    static let language = OptionSpec.value("--language", "en|zh-CN", "the language they are written to in (default en)")

    static let all: [CommandSpec] = [
        CommandSpec("contacts add", summary: "someone the key's shares may tell",
                    arguments: [ArgumentSpec(name: "NAME", help: "their name, as messages and links show it")],
                    options: [email, phone, language, SharedOptions.json] + SharedOptions.reachFlare, run: add),
        CommandSpec("contacts list", summary: "the key's contacts, newest first, a page at a time",
                    options: [SharedOptions.limit, SharedOptions.cursor, SharedOptions.json] + SharedOptions.reachFlare, run: list),
        CommandSpec("contacts alerts-link", summary: "the link a contact opens once to get push alerts in their browser (Web Push on the server)",
                    details: "Send it to them yourself, or let Flare's first mail carry it. It holds a secret in its fragment: anyone with it "
                        + "gets this contact's alerts. Removing the contact ends it.",
                    arguments: [ArgumentSpec(name: "ID", help: "the contact's id (flare contacts list)")],
                    options: [SharedOptions.json] + SharedOptions.reachFlare, run: alertsLink),
        CommandSpec("contacts remove", summary: "forget a contact", arguments: [ArgumentSpec(name: "ID", help: "the contact's id (flare contacts list)")],
                    options: SharedOptions.reachFlare, run: remove),
    ]

    static func add(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient()
        let request = ContactRequest(name: invocation.arguments[0], email: invocation.value(email), phone: invocation.value(phone),
                                     language: invocation.value(language))
        let contact = try await call("cannot add the contact") { try await client.createContact(request) }
        if invocation.isSet(SharedOptions.json) { try printJSON(contact) } else { print("contact \(contact.id): \(contact.name)") }
        return 0
    }

    static func list(_ invocation: Invocation) async throws -> Int32 {
        guard let page = try await invocation.page(maximum: ContactList.maximumLimit, of: "contacts", { try await $0.listContacts(limit: $1, cursor: $2) })
        else { return 0 }
        if page.contacts.isEmpty { print(invocation.value(SharedOptions.cursor) == nil ? "no contacts" : "no more contacts") }
        for contact in page.contacts {
            let reach = [contact.email, contact.phone].compactMap { $0 }.joined(separator: ", ")
            print("\(contact.id)  \(contact.language.padding(toLength: 5, withPad: " ", startingAt: 0))  \(contact.name)\(reach.isEmpty ? "" : "  <\(reach)>")")
        }
        if let next = page.nextCursor { print("more: flare contacts list --cursor \(next)") }
        return 0
    }

    static func alertsLink(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        let link = try await call("cannot make contact \(id)'s alerts link") { try await client.alertsLink(id) }
        if invocation.isSet(SharedOptions.json) { try printJSON(link) } else { print(link.url) }
        return 0
    }

    static func remove(_ invocation: Invocation) async throws -> Int32 {
        let client = try invocation.ownerClient(), id = invocation.arguments[0]
        try await call("cannot remove contact \(id)") { try await client.removeContact(id) }
        print("contact \(id) removed")
        return 0
    }
}
