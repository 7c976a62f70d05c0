import FlareAPI
import FlareCore
import FlareHTTP
import Foundation
import Testing

/// OwnTracks provisioning (…/owntracks, …/owntracks.otrc, …/owntracks/link, …/owntracks/qr.png|svg) and
/// integrators' watch tokens (…/watch-tokens).
@Suite struct ProvisioningRouteTests {
    // MARK: OwnTracks

    @Test func theOwnTracksConfigurationCarriesTheBrokerTopicAndDeviceTokenForOwnerAndDevice() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare(name: "Anna")
        for bearer in [fixture.ownerKey, created.deviceToken] {
            let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks", bearer: bearer)
            #expect(reply.status == 200)
            #expect(reply.contentType == "application/json")
            #expect(reply.header("Content-Disposition") == nil)
            let configuration = try #require(reply.jsonObject)
            #expect(configuration["_type"] as? String == "configuration")
            #expect(configuration["host"] as? String == "sos.example.org")
            #expect(configuration["port"] as? Int == 8883)
            #expect(configuration["username"] as? String == created.shareID)
            #expect(configuration["password"] as? String == created.deviceToken)
            #expect(configuration["tls"] as? Bool == true)
            #expect(configuration["pubTopicBase"] as? String == created.mqttTopic)
        }
    }

    @Test func theOwnTracksFileIsADownloadNamedAfterTheShare() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let json = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks", bearer: fixture.ownerKey)
        let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks.otrc", bearer: fixture.ownerKey)
        #expect(reply.status == 200)
        #expect(reply.contentType == "application/octet-stream")
        #expect(reply.header("Content-Disposition") == "attachment; filename=\"flare-\(created.shareID).otrc\"")
        #expect(reply.header("Cache-Control") == "no-store")
        #expect(reply.bytes == json.bytes)
    }

    @Test func theOwnTracksLinkIsAnInlineConfigurationURL() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        for bearer in [fixture.ownerKey, created.deviceToken] {
            let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/link", bearer: bearer)
            #expect(reply.status == 200)
            let link = try reply.decode(OwnTracksLink.self)
            #expect(link.url.hasPrefix("owntracks:///config?inline="))
        }
    }

    @Test func theOwnTracksQRCodesAreAPNGAndAnSVGForTheOwnerOnly() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let png = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/qr.png", bearer: fixture.ownerKey)
        #expect(png.status == 200)
        #expect(png.contentType == "image/png")
        #expect(Array(png.bytes.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        let svg = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/qr.svg", bearer: fixture.ownerKey)
        #expect(svg.status == 200)
        #expect(svg.contentType == "image/svg+xml")
        #expect(svg.text.contains("<svg"))
        for name in ["qr.png", "qr.svg"] {
            let device = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/\(name)", bearer: created.deviceToken)
            #expect(device.status == 401, "\(name)")
            #expect(device.errorCode == "unauthorized", "\(name)")
        }
    }

    @Test func theOwnTracksEndpointsRefuseCallersWithoutACredential() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let other = try fixture.createShare(name: "Other")
        for suffix in ["owntracks", "owntracks.otrc", "owntracks/link", "owntracks/qr.png", "owntracks/qr.svg"] {
            for bearer in [nil, OwnerKey.generate(), other.deviceToken] {
                let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)/\(suffix)", bearer: bearer)
                #expect(reply.status == 401, "\(suffix)")
                #expect(reply.errorCode == "unauthorized", "\(suffix)")
            }
        }
    }

    @Test func anUnknownOwnTracksResourceIsNotFound() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks/x", bearer: fixture.ownerKey)
        #expect(reply.status == 404)
        #expect(reply.errorCode == "not_found")
        let unknownShare = fixture.send("GET", "/api/v1/shares/\(ShareID.generate().rawValue)/owntracks", bearer: fixture.ownerKey)
        #expect(unknownShare.status == 404)
        #expect(unknownShare.errorCode == "not_found")
    }

    @Test func theOwnTracksConfigurationOfAStoppedShareIsGone() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.stop(created)
        for bearer in [fixture.ownerKey, created.deviceToken] {
            let reply = fixture.send("GET", "/api/v1/shares/\(created.shareID)/owntracks", bearer: bearer)
            #expect(reply.status == 410)
            #expect(reply.errorCode == "share_ended")
        }
    }

    // MARK: Watch tokens

    @Test func creatingAWatchTokenAnswers201WithSubscribeRightsForTheShare() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/watch-tokens", bearer: fixture.ownerKey)
        #expect(reply.status == 201)
        let token = try reply.decode(WatchToken.self)
        #expect(token.shareID == created.shareID)
        #expect(token.mqttURL == "mqtts://sos.example.org:8883")
        #expect(token.mqttUsername == created.shareID)
        #expect(token.topicFilter == "flare/v1/shares/\(created.shareID)/#")
        #expect(token.expiresAt == created.expiresAt)
        #expect(!token.watchToken.isEmpty && token.watchToken != created.deviceToken)
        // A watch token publishes nothing: it is no device token for ingest.
        let ingest = fixture.send("POST", "/api/v1/shares/\(created.shareID)/locations", bearer: token.watchToken,
                                  json: IngestRouteTests.location())
        #expect(ingest.status == 401)
    }

    @Test func creatingAWatchTokenForAStoppedShareIsAConflict() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        try fixture.stop(created)
        let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/watch-tokens", bearer: fixture.ownerKey)
        #expect(reply.status == 409)
        #expect(reply.errorCode == "share_ended")
    }

    @Test func creatingAWatchTokenNeedsTheOwnerKeyAndAKnownShare() throws {
        let fixture = try GatewayFixture()
        let created = try fixture.createShare()
        for bearer in [nil, OwnerKey.generate(), created.deviceToken] {
            let reply = fixture.send("POST", "/api/v1/shares/\(created.shareID)/watch-tokens", bearer: bearer)
            #expect(reply.status == 401)
            #expect(reply.errorCode == "unauthorized")
        }
        let unknown = fixture.send("POST", "/api/v1/shares/\(ShareID.generate().rawValue)/watch-tokens", bearer: fixture.ownerKey)
        #expect(unknown.status == 404)
        #expect(unknown.errorCode == "not_found")
    }
}
