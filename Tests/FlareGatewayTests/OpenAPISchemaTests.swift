@testable import FlareAPI
import Foundation
import Testing

/// The OpenAPI document's schemas and the `FlareAPI` types, which the server answers with and reads, and `flare` and
/// FlareClient send and decode: each schema is named after its type (`ShareAudience.Link` for a nested one), and
/// holds exactly the JSON keys the type writes. A field renamed in a type, or in the document, fails here.
@Suite struct OpenAPISchemaTests {
    static let at = Date(timeIntervalSince1970: 1_796_000_000)

    /// One value of each `FlareAPI` type with a schema, every optional member set, so that its encoding has every key.
    static let samples: [any Encodable & Sendable] = {
        let location = ReportedLocation(latitude: 48.1, longitude: 11.5, timestamp: at, accuracy: 12, altitude: 520, velocity: 4, course: 90,
                                        battery: 80, batteryStatus: 1, connection: "m")
        let link = PersonalLink(linkID: "l", contactID: "c", name: "Mum", url: "https://host/s/t", mailed: false, reason: "mail_budget")
        let audienceLink = ShareAudience.Link(linkID: "l", name: "Mum", firstOpenedAt: at, watchingNow: true, withdrawnAt: at)
        let audience = ShareAudience(firstOpenedAt: at, opened: 2, watching: 1, links: [audienceLink])
        let status = ShareStatus(shareID: "s", name: "Anna", state: .ended, createdAt: at, expiresAt: at, endedAt: at, reason: "stopped",
                                 historyDeleted: false, last: location, viewers: 1, e2e: true, audience: audience)
        var created = CreatedShare(shareID: "s", shareURL: URL(string: "https://host/s/t")!, expiresAt: at, durationSeconds: 3600, deviceToken: "d",
                                   mqttURL: "mqtts://host:8883", mqttUsername: "s", mqttTopic: "flare/v1/shares/s/location",
                                   statusTopic: "flare/v1/shares/s/status", ingestURL: URL(string: "https://host/i"),
                                   ownTracksConfigURL: URL(string: "https://host/o"))
        created.links = [link]
        created.e2e = "true"
        let tracker = TrackerReport(state: .offline, since: at, reason: "connection_lost", transport: "mqtt", battery: 12, batteryLow: true,
                                    batteryStatus: "unplugged", connection: "mobile", locateRequestedAt: at, locateAnsweredAt: at)
        let answer = ShareAnswer(id: "1", kind: .onMyWay, name: "Mum", at: at)
        let trail = ViewDocument.TrailPoint(lat: 48.1, lon: 11.5, tst: 1_796_000_000)
        let missed = ViewDocument.MissedCheckin(state: "missed", dueAt: at)
        let sealed = SealedLocation(tst: 1_796_000_000, data: "c2VhbGVk")
        let view = ViewDocument(state: .ended, reason: "stopped", endedAt: at, name: "Anna", expiresAt: at, last: location, trail: [trail],
                                tracker: tracker, answers: [answer], checkin: missed, e2e: true, sealed: [sealed], serverTime: at)
        let keyInfo = KeyInfo(id: "2", label: "phone", kind: .limited, maxLive: 1, maxDurationSeconds: 86_400, createRatePerHour: 6, createdAt: at,
                              lastUsedAt: at, revokedAt: at, liveShares: 0, webhookURL: "https://hooks.example.org/flare")
        let contact = ContactInfo(id: "c", name: "Mum", email: "mum@example.org", phone: "+4915123456789", language: "en", createdAt: at)
        let item = PersonalLinkList.Item(linkID: "l", contactID: "c", name: "Mum", url: "https://host/s/t", createdAt: at, firstOpenedAt: at,
                                         withdrawnAt: at)
        let zone = CheckinZone(lat: 48.1, lon: 11.5, radiusM: 200)
        var checkin = CheckinInfo(checkinID: "k", state: "armed", shareID: "s", dueAt: at, graceSeconds: 600, firesAt: at, message: "late",
                                  contacts: ["c"], arrive: zone, notifyOnArrival: true, durationSeconds: 3600, escalateAfterSeconds: 300, stateAt: at)
        checkin.deviceToken = "d"
        checkin.mqttURL = "mqtts://host:8883"
        checkin.mqttUsername = "s"
        checkin.mqttTopic = "flare/v1/shares/s/location"
        checkin.ingestURL = "https://host/i"
        checkin.ownTracksConfigURL = "https://host/o"
        let device = DeviceInfo(deviceID: "v", name: "Anna", contacts: ["c"], durationSeconds: 3600, message: "help", hasPin: true, hasDuressPin: true,
                                countdownSeconds: 5, escalateAfterSeconds: 300, createdAt: at, lastHeardAt: at, sos: "live", sosShareID: "s")
        let field = DeviceSetup.App.Field(label: "Server URL", value: "https://host/api/v1/osmand")
        let app = DeviceSetup.App(app: "traccar_client", name: "Traccar Client", fields: [field], sos: "Long-press", qr: "https://host/qr")
        let setup = DeviceSetup(deviceID: "v", includesSecret: true, apps: [app], lastHeardAt: at, lastHeardSecondsAgo: 3)
        let escalation = SOSEscalation(step: 1, nextAt: at)
        let card = DeviceCard.Contact(name: "Mum", phone: "+4915123456789")
        let keys = PushSubscriptionRequest.Keys(p256dh: "BPk", auth: "c2Vj")
        return [
            APIErrorBody(error: "not_found", message: "no such share"),
            QuotaErrorBody(message: "over", limit: "max_live", value: 1),
            HealthStatus(status: .ok, mqtt: "connected", store: "ok"),
            ShareRequest(durationSeconds: 3600, name: "Anna", contacts: ["c"], e2e: true),
            link, created, location, audienceLink, audience, status,
            ShareList(shares: [status], nextCursor: "n"),
            StoppedShare(shareID: "s", state: .ended, reason: "stopped", endedAt: at),
            ExtendedShare(shareID: "s", expiresAt: at, deviceToken: "d"),
            WatchToken(shareID: "s", watchToken: "w", mqttURL: "mqtts://host:8883", mqttUsername: "s", topicFilter: "flare/v1/shares/s/#",
                       mqttClientIDPrefix: "flare-s-watch-", expiresAt: at),
            OwnTracksLink(url: "owntracks:///config?inline=e30"),
            Location(latitude: 48.1, longitude: 11.5, timestamp: at, accuracy: 12, altitude: 520, speedKmh: 4, course: 90, battery: 80,
                     trackerID: "an", answersLocateRequest: true),
            DeviceCommand.reportLocation,
            IngestReceipt(tst: 1_796_000_000, commands: [.reportLocation]),
            tracker, trail, missed, sealed, answer, view,
            AnswerRequest(kind: .calledEmergency, name: "Dad"),
            ShareAnswerList(answers: [answer]),
            LocateReceipt(requestedAt: at),
            LiveStatus(expiresAt: at),
            LiveEnded(reason: "expired", endedAt: at),
            KeyRequest(label: "phone", admin: false, maxLive: 1, maxDurationSeconds: 86_400, createRatePerHour: 6),
            keyInfo,
            KeyList(keys: [keyInfo]),
            CreatedKey(key: "flare_owner_x", info: keyInfo, enrollmentURL: "flare://enroll?server=x&key=y"),
            WebhookRequest(url: "https://hooks.example.org/flare"),
            WebhookCreated(url: "https://hooks.example.org/flare", secret: "whsec_x", previousSecretValidSeconds: 86_400),
            ContactRequest(name: "Mum", email: "mum@example.org", phone: "+4915123456789", language: "en"),
            contact,
            ContactList(contacts: [contact], nextCursor: "n"),
            item,
            PersonalLinkList(links: [item]),
            LinkRequest(contacts: ["c"]),
            CreatedLinks(links: [link]),
            zone,
            CheckinRequest(dueAt: at, inSeconds: 60, graceSeconds: 600, contacts: ["c"], message: "late", arrive: zone, notifyOnArrival: true,
                           durationSeconds: 3600, name: "Anna", escalateAfterSeconds: 300),
            CheckinExtension(dueAt: at, inSeconds: 60),
            checkin,
            DeviceRequest(name: "Anna", contacts: ["c"], durationSeconds: 3600, message: "help", pin: "4711", duressPin: "9999", countdownSeconds: 5,
                          escalateAfterSeconds: 300),
            device,
            DeviceList(devices: [device], nextCursor: "n"),
            field, app, setup,
            CreatedDevice(deviceID: "v", name: "Anna", secret: "x", contacts: ["c"], setup: setup),
            SOSStarted(shareID: "s", shareURL: "https://host/s/t", expiresAt: at, deviceToken: "d", mqttURL: "mqtts://host:8883", mqttUsername: "s",
                       mqttTopic: "flare/v1/shares/s/location", links: [link], repeated: false),
            SOSStopRequest(pin: "4711"),
            SOSExtendRequest(durationSeconds: 3600),
            escalation,
            SOSState(status: "live", shareID: "s", expiresAt: at, stoppedAt: at, audience: audience, answers: [answer], escalation: escalation),
            card,
            DeviceCard(deviceID: "v", name: "Anna", countdownSeconds: 5, hasPin: true, contacts: [card]),
            DevicePositionDropped(),
            PushKey(publicKey: "BPk"),
            keys,
            PushSubscriptionRequest(endpoint: "https://push.example.org/x", keys: keys, lang: "en"),
            PushSubscribed(subscribed: true),
            AlertsLink(contactID: "c", url: "https://host/alerts#c=x"),
            AlertsCard(name: "Mum", language: "en"),
        ]
    }()

    /// Schemas of bodies that are no `FlareAPI` type: written by hand where they are made.
    static let notFlareAPITypes: Set<String> = [
        "OwnTracksConfiguration",  // FlareCore.OwnTracksConfiguration.json, the OwnTracks apps' own format
        "WebAppManifest",  // Gateway.viewerManifest, the W3C format
        "OpenAPIDocument",  // this document
    ]

    /// The type's name as the document names its schema: `ShareAudience.Link` for `FlareAPI.ShareAudience.Link`.
    static func schemaName(_ value: any Encodable & Sendable) -> String {
        let name = String(reflecting: type(of: value))
        return name.hasPrefix("FlareAPI.") ? String(name.dropFirst("FlareAPI.".count)) : name
    }

    static func schemas() throws -> [String: [String: Any]] {
        let fixture = try GatewayFixture()
        let document = try OpenAPIRouteTests.document(fixture)
        return try #require((document["components"] as? [String: Any])?["schemas"] as? [String: [String: Any]])
    }

    @Test func everySchemaIsAFlareAPITypeAndEveryTypeHasItsSchema() throws {
        let schemas = try Self.schemas()
        let names = Self.samples.map(Self.schemaName)
        #expect(Set(names).count == names.count, "a type is sampled twice")
        #expect(Set(names).isDisjoint(with: Self.notFlareAPITypes))
        let missing = Set(names).subtracting(schemas.keys).sorted()
        let unsampled = Set(schemas.keys).subtracting(names).subtracting(Self.notFlareAPITypes).sorted()
        #expect(missing.isEmpty, "FlareAPI types without a schema of their name: \(missing)")
        #expect(unsampled.isEmpty, "schemas named after no FlareAPI type sampled here: \(unsampled)")
    }

    @Test func eachSchemaHoldsExactlyTheKeysItsTypeWrites() throws {
        let schemas = try Self.schemas()
        for sample in Self.samples {
            let name = Self.schemaName(sample)
            guard let schema = schemas[name] else { continue }  // reported by the test above
            let encoded = try APIJSON.encode(sample)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(encoded)) as? [String: Any], "\(name) is not an object")
            let written = Set(object.keys)
            let documented = Set((schema["properties"] as? [String: Any] ?? [:]).keys)
            #expect(written.subtracting(documented).isEmpty, "\(name) writes keys its schema lacks: \(written.subtracting(documented).sorted())")
            #expect(documented.subtracting(written).isEmpty, "\(name)'s schema has keys the type does not write: \(documented.subtracting(written).sorted())")
            let required = Set(schema["required"] as? [String] ?? [])
            #expect(required.isSubset(of: written), "\(name) requires keys the type does not write: \(required.subtracting(written).sorted())")
        }
    }

    /// The other side of the wire: what a type writes (the document's names, above), it reads back, member for member;
    /// a type whose own decoding looks for another name (`CreatedShare`, `Location`) fails here.
    @Test func eachTypeReadsTheKeysItWrites() throws {
        for sample in Self.samples {
            let name = Self.schemaName(sample)
            let encoded = try APIJSON.encode(sample)
            let decodable = try #require(type(of: sample) as? any Decodable.Type, "\(name) is not Decodable")
            let decoded = try #require(try APIJSON.decode(decodable, from: encoded) as? any Encodable)
            // Compared as JSON values: the encoder's member order is its own.
            let again = try JSONSerialization.jsonObject(with: Data(try APIJSON.encode(decoded))) as? NSDictionary
            let first = try JSONSerialization.jsonObject(with: Data(encoded)) as? NSDictionary
            #expect(again != nil && again == first, "\(name) does not read back what it writes")
        }
    }
}
