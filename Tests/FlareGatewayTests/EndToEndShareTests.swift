import FlareAPI
import FlareCore
import FlareShares
import FlareTestSupport
import Foundation
import Testing
@testable import FlareGateway
import FlareCodec

/// An end-to-end encrypted share through the gateway: made with `e2e`, it relays the phone's ciphertexts as they came,
/// in the view document and the live stream, over MQTT and HTTP, and never takes or shows a position in clear.
@Suite struct EndToEndShareTests {
    let fixture: GatewayFixture

    init() throws { fixture = try GatewayFixture() }

    /// Shaped like a secretbox; the server never opens one, so it need not be real here (the browser tests open real ones).
    static func ciphertext(_ seed: UInt8) -> String {
        Data((0..<90).map { UInt8(truncatingIfNeeded: Int($0) &* 7 &+ Int(seed)) }).base64EncodedString()
    }

    func createEndToEnd(_ json: String = #"{"name":"Anna","e2e":true}"#) throws -> CreatedShare {
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: json)
        try #require(reply.status == 201, "\(reply.text)")
        return try reply.decode(CreatedShare.self)
    }

    @Test func theCreateAnswerStaysFlatStringsAndCarriesNoKey() throws {
        let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"e2e":"true"}"#)
        #expect(reply.status == 201)
        let object = try #require(reply.jsonObject)
        #expect(object.values.allSatisfy { $0 is String }, "the seed's client decodes [String: String]")
        #expect(object["e2e"] as? String == "true")
        #expect((object["share_url"] as? String)?.contains("#") == false)
        // A plain share's answer is exactly what it was.
        let plain = try #require(fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: "{}").jsonObject)
        #expect(plain["e2e"] == nil)
        let shown = try fixture.send("GET", "/api/v1/shares/\(try reply.decode(CreatedShare.self).shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self)
        #expect(shown.e2e == true)
    }

    @Test func badInputIsRefusedWithANamedCode() throws {
        for (json, code) in [(#"{"e2e":"yes"}"#, "invalid_e2e"), (#"{"e2e":1}"#, "invalid_e2e")] {
            let reply = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: json)
            #expect(reply.status == 400 && reply.errorCode == code, "\(json): \(reply.text)")
        }
        // Contacts would be mailed a link the server cannot give the key of.
        let contact = fixture.send("POST", "/api/v1/contacts", bearer: fixture.ownerKey, json: #"{"name":"Ben","email":"ben@example.org"}"#)
        let id = try #require(contact.jsonObject?["id"] as? String)
        let refused = fixture.send("POST", "/api/v1/shares", bearer: fixture.ownerKey, json: #"{"e2e":true,"contacts":["\#(id)"]}"#)
        #expect(refused.status == 400 && refused.errorCode == "e2e_contacts", "\(refused.text)")
        let share = try createEndToEnd()
        let added = fixture.send("POST", "/api/v1/shares/\(share.shareID)/links", bearer: fixture.ownerKey, json: #"{"contacts":["\#(id)"]}"#)
        #expect(added.status == 400 && added.errorCode == "e2e_contacts", "\(added.text)")
    }

    @Test func ciphertextsAreRelayedAsTheyCameAndPositionsInClearAreRefused() throws {
        let share = try createEndToEnd()
        let id = try #require(ShareID(share.shareID))
        let stream = fixture.send("GET", "/api/v1/view/\(share.viewToken)/events")
        let reader = EventStreamReader(try #require(stream.stream))
        for _ in 0..<3 { _ = reader.next() }  // retry, status, tracker
        // In clear: refused, never stored.
        let clear = #"{"_type":"location","lat":47.42116,"lon":10.98533,"tst":\#(GatewayFixture.now)}"#
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(clear.utf8), retained: false) == .notEncrypted)
        #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(#"{"_type":"encrypted","data":"not base64!"}"#.utf8), retained: false) == .malformedCiphertext)
        let first = Self.ciphertext(1), second = Self.ciphertext(2)
        for data in [first, second, first] {
            #expect(fixture.ingestor.handle(topic: Topics.location(id), payload: Array(#"{"_type":"encrypted","data":"\#(data)"}"#.utf8), retained: false) == nil)
        }
        #expect(fixture.ingestor.waitUntilStored())
        #expect(eventually { (try? fixture.store.fixCount(row: 1)) == 2 }, "the repeat is absorbed")
        // Live: each new one, as it came.
        var live: [SealedLocation] = []
        while live.count < 2, let event = reader.next() {
            #expect(event.name == "sealed", "\(event)")
            live.append(try APIJSON.decode(SealedLocation.self, from: Array(try #require(event.data).utf8)))
        }
        #expect(live.map(\.data) == [first, second])
        // The document: no position, the ciphertexts oldest first.
        let reply = fixture.send("GET", "/api/v1/view/\(share.viewToken)")
        let view = try reply.decode(ViewDocument.self)
        #expect(view.e2e == true && view.last == nil && view.trail.isEmpty)
        #expect(view.sealed?.map(\.data) == [first, second])
        #expect(!reply.text.contains("47.42"))
        // The owner sees no position either.
        #expect(try fixture.send("GET", "/api/v1/shares/\(share.shareID)", bearer: fixture.ownerKey).decode(ShareStatus.self).last == nil)
        // A plain share refuses ciphertext: nobody could read it.
        let plain = try fixture.createShare()
        let plainID = try #require(ShareID(plain.shareID))
        #expect(fixture.ingestor.handle(topic: Topics.location(plainID), payload: Array(#"{"_type":"encrypted","data":"\#(first)"}"#.utf8), retained: false) == .unexpectedEncryption)
    }

    @Test func theHTTPIngestTakesCiphertextAndPublishesItAsItCame() throws {
        let share = try createEndToEnd()
        let data = Self.ciphertext(3)
        let refused = fixture.send("POST", "/api/v1/shares/\(share.shareID)/locations", bearer: share.deviceToken, json: #"{"lat":1,"lon":2}"#)
        #expect(refused.status == 400 && refused.errorCode == "not_encrypted", "\(refused.text)")
        let taken = fixture.send("POST", "/api/v1/shares/\(share.shareID)/locations", bearer: share.deviceToken,
                                 json: #"{"_type":"encrypted","data":"\#(data)","seq_stream":5,"seq":1}"#)
        #expect(taken.status == 202, "\(taken.text)")
        #expect(try fixture.send("GET", "/api/v1/view/\(share.viewToken)").decode(ViewDocument.self).sealed?.map(\.data) == [data])
        // For integrators, on the location topic: the same ciphertext, and nothing in clear.
        #expect(eventually {
            fixture.brokerPublisher.messages.contains { $0.topic == Topics.location(ShareID(share.shareID)!) && String(decoding: $0.payload, as: UTF8.self).contains(data) }
        })
        for message in fixture.brokerPublisher.messages where message.topic == Topics.location(ShareID(share.shareID)!) {
            let object = try #require(JSONValue.parse(message.payload).objectValue)
            #expect(object["_type"]?.stringValue == "encrypted" && object["lat"] == nil)
        }
    }
}
