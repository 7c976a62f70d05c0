import FlareAPI
import FlareCore
import Foundation
import Testing
@testable import FlareGateway

/// Every endpoint that reads a JSON body, sent the bodies a client gets wrong: each answer's status and error code is
/// part of the contract, whoever reads the body. Bodies with `null` where a member is optional, and the leniencies
/// clients rely on (an empty body, `e2e` as a string), are answered as if the member were absent.
@Suite struct RequestBodyCodesTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    /// A body, and what it is answered: the status and, for a refusal, the `error` code.
    struct Case: CustomStringConvertible {
        let body: String
        let status: Int
        let code: String?
        init(_ body: String, _ status: Int, _ code: String? = nil) {
            self.body = body
            self.status = status
            self.code = code
        }
        var description: String { body.isEmpty ? "(empty body)" : body }
    }

    /// Not a JSON object at all: what every endpoint refuses before reading a member.
    static let notObjects = ["{", "[1]", "\"text\"", "null", "42", "{} x", #"{"name":"Anna",}"#]

    func expect(_ cases: [Case], _ send: (String) -> Reply, sourceLocation: SourceLocation = #_sourceLocation) {
        for item in cases {
            let reply = send(item.body)
            #expect(reply.status == item.status, "\(item): \(reply.status) \(reply.text)", sourceLocation: sourceLocation)
            if let code = item.code {
                #expect(reply.errorCode == code, "\(item): \(reply.text)", sourceLocation: sourceLocation)
            }
        }
    }

    func contact(_ name: String) throws -> String {
        let reply = fixture.send("POST", "/api/v1/contacts", bearer: fixture.ownerKey, json: #"{"name":"\#(name)"}"#)
        try #require(reply.status == 201, "\(reply.text)")
        return try reply.decode(ContactInfo.self).id
    }

    static let longName = String(repeating: "x", count: 300)
    /// The form of a contact id, of no contact.
    static let unknownContact = "AAAAAAAAAAAAAAAAAAAAAA"

    @Test func createShare() throws {
        let mum = try contact("Mum")
        expect(Self.notObjects.map { Case($0, 400, "invalid_json") } + [
            Case("", 201), Case("{}", 201), Case(#"{"other":1}"#, 201),
            Case(#"{"duration_s":"600"}"#, 400, "invalid_duration"), Case(#"{"duration_s":true}"#, 400, "invalid_duration"),
            Case(#"{"duration_s":[600]}"#, 400, "invalid_duration"), Case(#"{"duration_s":{}}"#, 400, "invalid_duration"),
            Case(#"{"duration_s":null}"#, 201),
            // A number, but not one the policy takes: the share service's refusal.
            Case(#"{"duration_s":600.5}"#, 400, "invalid_request"), Case(#"{"duration_s":0}"#, 400, "invalid_request"),
            Case(#"{"duration_s":-5}"#, 400, "invalid_request"), Case(#"{"duration_s":1e12}"#, 400, "invalid_request"),
            Case(#"{"duration_s":1e400}"#, 400, "invalid_request"),
            Case(#"{"name":5}"#, 400, "invalid_name"), Case(#"{"name":true}"#, 400, "invalid_name"), Case(#"{"name":["Anna"]}"#, 400, "invalid_name"),
            Case(#"{"name":"\#(Self.longName)"}"#, 400, "invalid_name"), Case(#"{"name":"a\u0007b"}"#, 400, "invalid_name"),
            Case(#"{"name":null}"#, 201), Case(#"{"name":""}"#, 201),
            Case(#"{"contacts":"\#(mum)"}"#, 400, "invalid_contacts"), Case(#"{"contacts":[5]}"#, 400, "invalid_contacts"),
            Case(#"{"contacts":["nope"]}"#, 400, "invalid_contacts"), Case(#"{"contacts":{}}"#, 400, "invalid_contacts"),
            Case(#"{"contacts":["\#(mum)",null]}"#, 400, "invalid_contacts"),
            Case(#"{"contacts":null}"#, 201), Case(#"{"contacts":[]}"#, 201), Case(#"{"contacts":["\#(mum)"]}"#, 201),
            Case(#"{"e2e":"yes"}"#, 400, "invalid_e2e"), Case(#"{"e2e":1}"#, 400, "invalid_e2e"), Case(#"{"e2e":["true"]}"#, 400, "invalid_e2e"),
            Case(#"{"e2e":true}"#, 201), Case(#"{"e2e":false}"#, 201), Case(#"{"e2e":"true"}"#, 201), Case(#"{"e2e":"false"}"#, 201),
            Case(#"{"e2e":null}"#, 201),
            Case(#"{"duration_s":null,"name":null,"contacts":null,"e2e":null}"#, 201),
        ]) { fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: $0) }
        // `e2e` as a string is the flag itself.
        let sealed = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"e2e":"true"}"#)
        #expect(try sealed.decode(CreatedShare.self).e2e == "true")
        let clear = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"e2e":"false"}"#)
        #expect(try clear.decode(CreatedShare.self).e2e == nil)
    }

    @Test func extendShare() throws {
        let share = try fixture.createShare()
        expect(Self.notObjects.map { Case($0, 400, "invalid_json") } + [
            Case(#"{"duration_s":"600"}"#, 400, "invalid_duration"), Case(#"{"duration_s":false}"#, 400, "invalid_duration"),
            Case(#"{"duration_s":0}"#, 400, "invalid_request"),
            Case(#"{"name":5}"#, 400, "invalid_name"), Case(#"{"name":"\#(Self.longName)"}"#, 400, "invalid_name"),
            Case(#"{"contacts":5}"#, 400, "invalid_contacts"), Case(#"{"e2e":"yes"}"#, 400, "invalid_e2e"),
            Case("", 200), Case("{}", 200), Case(#"{"duration_s":null}"#, 200), Case(#"{"duration_s":600}"#, 200),
        ]) { fixture.send("POST", "/api/v1/shares/\(share.shareID)/extend", bearer: fixture.ownerKey, json: $0) }
    }

    @Test func devicesAndTheirStop() throws {
        let mum = try contact("Mum")
        expect(Self.notObjects.map { Case($0, 400, "invalid_json") } + [
            Case("", 400, "invalid_json"), Case("{}", 400, "invalid_name"), Case(#"{"name":5}"#, 400, "invalid_name"),
            Case(#"{"name":"Anna","contacts":[5]}"#, 400, "invalid_contacts"), Case(#"{"name":"Anna","contacts":["\#(mum)"],"pin":4711}"#, 400, "invalid_pin"),
            Case(#"{"name":"Anna","contacts":["\#(mum)"],"duress_pin":[]}"#, 400, "invalid_duress_pin"),
            Case(#"{"name":"Anna","contacts":["\#(mum)"],"message":{}}"#, 400, "invalid_message"),
            Case(#"{"name":"Anna","contacts":["\#(mum)"],"duration_s":"1h"}"#, 400, "invalid_duration"),
            Case(#"{"name":"Anna","contacts":["\#(mum)"],"pin":null}"#, 201),
        ]) { fixture.send("POST", "/api/v1/devices", bearer: fixture.ownerKey, json: $0) }
        let device = try fixture.send("POST", "/api/v1/devices", bearer: fixture.ownerKey, json: #"{"name":"Anna","contacts":["\#(mum)"],"pin":"4711"}"#)
            .decode(CreatedDevice.self)
        expect(Self.notObjects.map { Case($0, 400, "invalid_json") } + [
            Case(#"{"pin":4711}"#, 400, "invalid_pin"), Case("", 403, "wrong_pin"), Case("{}", 403, "wrong_pin"), Case(#"{"pin":"4711"}"#, 200),
        ]) { fixture.send("POST", "/api/v1/devices/sos/stop", bearer: device.secret, json: $0) }
    }

    @Test func addLinks() throws {
        let share = try fixture.createShare(), mum = try contact("Mum")
        // Every wrong body is `invalid_contacts`, a body that is not JSON too.
        expect((Self.notObjects + ["", "{}"]).map { Case($0, 400, "invalid_contacts") } + [
            Case(#"{"contacts":[]}"#, 400, "invalid_contacts"), Case(#"{"contacts":"\#(mum)"}"#, 400, "invalid_contacts"),
            Case(#"{"contacts":[5]}"#, 400, "invalid_contacts"), Case(#"{"contacts":["nope"]}"#, 400, "invalid_contacts"),
            Case(#"{"contacts":null}"#, 400, "invalid_contacts"), Case(#"{"contacts":[null]}"#, 400, "invalid_contacts"),
            Case(#"{"contacts":["\#(Self.unknownContact)"]}"#, 400, "unknown_contact"),
            Case(#"{"contacts":["\#(mum)"],"other":1}"#, 201),
        ]) { fixture.send("POST", "/api/v1/shares/\(share.shareID)/links", bearer: fixture.ownerKey, json: $0) }
    }

    @Test func createContact() throws {
        expect((Self.notObjects + [""]).map { Case($0, 400, "invalid_json") } + [
            Case("{}", 400, "invalid_name"), Case(#"{"name":null}"#, 400, "invalid_name"), Case(#"{"name":5}"#, 400, "invalid_name"),
            Case(#"{"name":""}"#, 400, "invalid_name"), Case(#"{"name":"\#(Self.longName)"}"#, 400, "invalid_name"),
            Case(#"{"name":"Anna","email":5}"#, 400, "invalid_email"), Case(#"{"name":"Anna","email":"nope"}"#, 400, "invalid_email"),
            Case(#"{"name":"Anna","phone":4915123456789}"#, 400, "invalid_phone"), Case(#"{"name":"Anna","phone":"123"}"#, 400, "invalid_phone"),
            Case(#"{"name":"Anna","language":true}"#, 400, "invalid_language"), Case(#"{"name":"Anna","language":"xx"}"#, 400, "invalid_language"),
            Case(#"{"name":"Anna","email":null,"phone":null,"language":null,"other":1}"#, 201),
        ]) { body in
            // Contacts are paced per key: the clock moves on between requests so that the pace is not what is tested.
            fixture.clock.advance(seconds: 10)
            return fixture.send("POST", "/api/v1/contacts", bearer: fixture.ownerKey, json: body)
        }
    }

    @Test func armCheckin() throws {
        let mum = try contact("Mum")
        let contacts = #""contacts":["\#(mum)"]"#
        expect(Self.notObjects.map { Case($0, 400, "invalid_json") } + [
            Case("", 400, "invalid_contacts"), Case("{}", 400, "invalid_contacts"),
            Case(#"{"in_s":3600}"#, 400, "invalid_contacts"), Case(#"{"in_s":3600,"contacts":null}"#, 400, "invalid_contacts"),
            Case(#"{"in_s":3600,"contacts":"\#(mum)"}"#, 400, "invalid_contacts"), Case(#"{"in_s":3600,"contacts":[5]}"#, 400, "invalid_contacts"),
            Case(#"{"in_s":3600,"contacts":["nope"]}"#, 400, "invalid_contacts"),
            Case(#"{"in_s":3600,"contacts":[]}"#, 400, "no_contacts"),
            Case(#"{"in_s":"3600",\#(contacts)}"#, 400, "invalid_deadline"), Case(#"{"in_s":true,\#(contacts)}"#, 400, "invalid_deadline"),
            Case(#"{"due_at":5,\#(contacts)}"#, 400, "invalid_deadline"), Case(#"{"due_at":"tomorrow",\#(contacts)}"#, 400, "invalid_deadline"),
            Case(#"{\#(contacts)}"#, 400, "invalid_deadline"), Case(#"{"in_s":null,"due_at":null,\#(contacts)}"#, 400, "invalid_deadline"),
            Case(#"{"in_s":-5,\#(contacts)}"#, 400, "invalid_deadline"),
            Case(#"{"in_s":3600,"message":5,\#(contacts)}"#, 400, "invalid_message"),
            Case(#"{"in_s":3600,"message":"\#(String(repeating: "x", count: 400))",\#(contacts)}"#, 400, "invalid_message"),
            Case(#"{"in_s":3600,"name":5,\#(contacts)}"#, 400, "invalid_name"),
            Case(#"{"in_s":3600,"name":"\#(Self.longName)",\#(contacts)}"#, 400, "invalid_name"),
            Case(#"{"in_s":3600,"arrive":5,\#(contacts)}"#, 400, "invalid_arrive"),
            Case(#"{"in_s":3600,"arrive":{"lat":"48","lon":11,"radius_m":100},\#(contacts)}"#, 400, "invalid_arrive"),
            Case(#"{"in_s":3600,"arrive":{"lat":48,"lon":11},\#(contacts)}"#, 400, "invalid_arrive"),
            Case(#"{"in_s":3600,"arrive":{"lat":null,"lon":11,"radius_m":100},\#(contacts)}"#, 400, "invalid_arrive"),
            Case(#"{"in_s":3600,"arrive":{"lat":200,"lon":11,"radius_m":100},\#(contacts)}"#, 400, "invalid_arrive"),
            Case(#"{"in_s":3600,"arrive":{"lat":48,"lon":11,"radius_m":1e9},\#(contacts)}"#, 400, "invalid_radius"),
            Case(#"{"in_s":3600,"notify_on_arrival":"true",\#(contacts)}"#, 400, "invalid_notify_on_arrival"),
            Case(#"{"in_s":3600,"notify_on_arrival":true,\#(contacts)}"#, 400, "invalid_notify_on_arrival"),
            Case(#"{"in_s":3600,"grace_s":1.5,\#(contacts)}"#, 400, "invalid_grace"), Case(#"{"in_s":3600,"grace_s":"60",\#(contacts)}"#, 400, "invalid_grace"),
            Case(#"{"in_s":3600,"grace_s":1e12,\#(contacts)}"#, 400, "invalid_grace"), Case(#"{"in_s":3600,"grace_s":-5,\#(contacts)}"#, 400, "invalid_grace"),
            Case(#"{"in_s":3600,"duration_s":1.5,\#(contacts)}"#, 400, "invalid_duration"),
            Case(#"{"in_s":3600,"duration_s":"60",\#(contacts)}"#, 400, "invalid_duration"),
            Case(#"{"in_s":3600,"duration_s":0,\#(contacts)}"#, 400, "invalid_duration"),
            Case(#"{"in_s":3600,"grace_s":60.0,"duration_s":1800.0,\#(contacts)}"#, 201),
            Case(#"{"in_s":3600,"due_at":null,"grace_s":null,"message":null,"arrive":null,"notify_on_arrival":null,"duration_s":null,"name":null,"other":1,\#(contacts)}"#, 201),
            Case(#"{"in_s":3600,"arrive":{"lat":48,"lon":11,"radius_m":100},"notify_on_arrival":true,\#(contacts)}"#, 201),
        ]) { body in
            // Check-ins are paced per key: the clock moves on between requests so that the pace is not what is tested.
            fixture.clock.advance(seconds: 10)
            return fixture.send("POST", "/api/v1/checkins", bearer: fixture.ownerKey, json: body)
        }
    }

    @Test func extendCheckin() throws {
        let mum = try contact("Mum")
        let armed = fixture.send("POST", "/api/v1/checkins", bearer: fixture.ownerKey, json: #"{"in_s":7200,"contacts":["\#(mum)"]}"#)
        let checkin = try armed.decode(CheckinInfo.self)
        expect(Self.notObjects.map { Case($0, 400, "invalid_json") } + [
            Case("", 400, "invalid_deadline"), Case("{}", 400, "invalid_deadline"), Case(#"{"in_s":null,"due_at":null}"#, 400, "invalid_deadline"),
            Case(#"{"in_s":"600"}"#, 400, "invalid_deadline"), Case(#"{"in_s":[600]}"#, 400, "invalid_deadline"),
            Case(#"{"due_at":5}"#, 400, "invalid_deadline"), Case(#"{"due_at":"tomorrow"}"#, 400, "invalid_deadline"),
            Case(#"{"in_s":-5}"#, 400, "invalid_deadline"),
            Case(#"{"in_s":600,"other":1}"#, 200),
        ]) { fixture.send("POST", "/api/v1/checkins/\(checkin.checkinID)/extend", bearer: fixture.ownerKey, json: $0) }
    }

    @Test func createKey() throws {
        expect(Self.notObjects.map { Case($0, 400, "invalid_json") } + [
            Case(#"{"label":5}"#, 400, "invalid_label"), Case(#"{"label":"\#(Self.longName)"}"#, 400, "invalid_label"),
            Case(#"{"label":"a\u0007b"}"#, 400, "invalid_label"),
            Case(#"{"admin":"yes"}"#, 400, "invalid_admin"), Case(#"{"admin":"true"}"#, 400, "invalid_admin"), Case(#"{"admin":1}"#, 400, "invalid_admin"),
            Case(#"{"max_live":0}"#, 400, "invalid_max_live"), Case(#"{"max_live":1.5}"#, 400, "invalid_max_live"),
            Case(#"{"max_live":"3"}"#, 400, "invalid_max_live"), Case(#"{"max_live":-1}"#, 400, "invalid_max_live"),
            Case(#"{"max_live":2000000}"#, 400, "invalid_max_live"), Case(#"{"max_live":1e30}"#, 400, "invalid_max_live"),
            Case(#"{"max_duration_s":99999999}"#, 400, "invalid_max_duration_s"), Case(#"{"max_duration_s":true}"#, 400, "invalid_max_duration_s"),
            Case(#"{"create_rate_per_hour":"3"}"#, 400, "invalid_create_rate_per_hour"),
            Case(#"{"create_rate_per_hour":0}"#, 400, "invalid_create_rate_per_hour"),
            Case("", 201), Case("{}", 201), Case(#"{"max_live":2.0,"other":1}"#, 201),
            Case(#"{"label":null,"admin":null,"max_live":null,"max_duration_s":null,"create_rate_per_hour":null}"#, 201),
        ]) { fixture.send("POST", "/api/v1/keys", bearer: fixture.ownerKey, json: $0) }
    }

    @Test func setWebhook() throws {
        let keys = try fixture.send("GET", "/api/v1/keys", bearer: fixture.ownerKey).decode(KeyList.self)
        let id = try #require(keys.keys.first?.id)
        // Every wrong body is `invalid_webhook`: the body is `{"url": …}` and nothing else.
        expect((Self.notObjects + ["", "{}"]).map { Case($0, 400, "invalid_webhook") } + [
            Case(#"{"url":5}"#, 400, "invalid_webhook"), Case(#"{"url":null}"#, 400, "invalid_webhook"),
            Case(#"{"url":["https://hooks.example.org/flare"]}"#, 400, "invalid_webhook"),
            Case(#"{"url":"https://hooks.example.org/flare","other":1}"#, 400, "invalid_webhook"),
            Case(#"{"url":"not a url"}"#, 400, "invalid_webhook"),
        ]) { fixture.send("PUT", "/api/v1/keys/\(id)/webhook", bearer: fixture.ownerKey, json: $0) }
    }

    @Test func postAnswer() throws {
        let share = try fixture.createShare()
        expect((Self.notObjects + [""]).map { Case($0, 400, "invalid_json") } + [
            Case("{}", 400, "invalid_kind"), Case(#"{"kind":5}"#, 400, "invalid_kind"), Case(#"{"kind":"dance"}"#, 400, "invalid_kind"),
            Case(#"{"kind":null}"#, 400, "invalid_kind"), Case(#"{"name":"Mum"}"#, 400, "invalid_kind"),
            Case(#"{"kind":"on_my_way","name":5}"#, 400, "invalid_name"), Case(#"{"kind":"on_my_way","name":"\#(Self.longName)"}"#, 400, "invalid_name"),
            Case(#"{"kind":"on_my_way","name":"a\u0007b"}"#, 400, "invalid_name"),
            Case(#"{"kind":"on_my_way","name":null,"other":1}"#, 201), Case(#"{"kind":"cannot_help"}"#, 201),
        ]) { fixture.send("POST", "/api/v1/view/\(share.viewToken)/answers", body: Array($0.utf8)) }
    }
}
