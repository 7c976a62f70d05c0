import FlareCore
import FlareStore
import FlareTestSupport
import Foundation
import FlareServiceTestSupport
import FlareShares
import Testing
@testable import FlareEvents

import FlareSystem

/// A device's SOS told to its contacts by mail, through a real SMTP server: the start (each contact's own link and
/// the device's message), a press again (once a minute at most), the duress PIN, and the stop locked by wrong PINs.
@Suite struct SOSMailTests {
    let mails = ContactMailTests()

    @Test func theContactsHearOfTheSOSItsRepeatTheDuressAndTheLockedStop() throws {
        let server = try TestSMTPServer()
        defer { server.stop() }
        let fixture = try ServiceFixture(mailsContacts: true)
        let owner = try mails.key(fixture, "anna")
        let lina = try mails.contact(fixture, "李娜", email: "lina@example.org", language: .zhCN, owner: owner.id)
        let ben = try mails.contact(fixture, "Ben", email: "ben@example.org", owner: owner.id)
        let devices = fixture.service.devices
        let (device, _) = try devices.add(.init(name: "Anna", contacts: [lina.id.rawValue, ben.id.rawValue], message: "Near the hut", pin: "4711",
                                                duressPin: "9999"), owner: owner)
        let deliverer = mails.deliverer(fixture, mailing: try mails.mailing(fixture, url: server.url))

        let sos = try devices.startSOS(device, owner: owner)
        mails.round(deliverer)
        #expect(server.received.count == 2)
        let english = try #require(server.received.first { $0.envelopeTo == ["ben@example.org"] })
        #expect(english.headers["subject"] == "SOS: Anna needs help")
        #expect(english.body.contains("Anna pressed SOS at ") && english.body.contains("Near the hut"))
        let benLink = try #require(sos.links.first { $0.link.contactID == ben.id })
        #expect(english.body.contains("https://flare.example.org/s/\(benLink.token)"))
        let chinese = try #require(server.received.first { $0.envelopeTo == ["lina@example.org"] })
        #expect(chinese.decodedHeader("subject") == "紧急求助：Anna 需要帮助")

        let stored = { () throws -> StoredDevice in try #require(try fixture.store.device(id: device.device.id)) }
        _ = try devices.startSOS(try stored(), owner: owner)
        mails.round(deliverer)
        #expect(server.received.filter { $0.headers["subject"] == "SOS: Anna pressed SOS again" }.isEmpty, "the start's mail was a moment ago")
        fixture.clock.advance(seconds: 61)
        _ = try devices.startSOS(try stored(), owner: owner)
        _ = try devices.startSOS(try stored(), owner: owner)
        mails.round(deliverer)
        #expect(server.received.filter { $0.headers["subject"] == "SOS: Anna pressed SOS again" }.count == 1, "once a minute at most")

        for _ in 0..<DeviceRules.wrongPinsBeforeLock {
            #expect(throws: Devices.StopRefusal.wrongPIN) { _ = try devices.stopSOS(try stored(), owner: owner, pin: "0000") }
        }
        mails.round(deliverer)
        #expect(server.received.filter { $0.headers["subject"] == "Someone is trying to stop Anna's SOS" }.count == 1)

        fixture.clock.advance(seconds: 15 * 60 + 1)
        guard case .stopped = try devices.stopSOS(try stored(), owner: owner, pin: "9999") else { Issue.record("the duress PIN answers as a stop"); return }
        mails.round(deliverer)
        let duress = try #require(server.received.first { $0.headers["subject"] == "Anna may be under duress" })
        #expect(duress.body.contains("Do not call or message Anna's phone") && duress.body.contains("https://flare.example.org/s/\(benLink.token)"))
        #expect(fixture.service.registry.snapshot(sos.share.id)?.share.isActive == true)
        // No mail, no event names a secret, a PIN or where she is.
        for message in fixture.publisher.messages {
            let body = String(decoding: message.payload, as: UTF8.self)
            #expect(!body.contains("4711") && !body.contains("9999") && !body.contains("Near the hut"))
        }
    }
}
