import Foundation
import Testing
@testable import FlareCore
import FlareSystem

/// What the OwnTracks apps send and what Flare hands them.
@Suite struct OwnTracksTests {
    let parser = LocationPayloadParser(maximumBytes: 4096)
    let now: UnixMillis = 1_795_963_000_000
    var tst: Int { Int(now / 1000) - 5 }

    func parse(_ text: String) -> Result<Fix, RejectReason> {
        parser.parse(Array(text.utf8), receivedAt: now, shareCreatedAt: now - 60_000)
    }

    /// The Android app's location message (its MessageLocation with extended data; fields after its own fixtures).
    @Test func acceptsAnAndroidLocation() throws {
        let text = #"{"_type":"location","_id":"8e2c41f0","acc":12,"alt":521,"batt":81,"bs":2,"conn":"m","created_at":\#(tst + 1),"lat":48.1371,"lon":11.5754,"m":2,"t":"u","tid":"AN","tst":\#(tst),"vac":4,"vel":3,"inregions":["Home"],"inrids":["a1b2c3"]}"#
        let fix = try parse(text).get()
        #expect(fix.latitude == 48.1371 && fix.longitude == 11.5754)
        #expect(fix.timestamp == Int64(tst))
        #expect(fix.accuracy == 12 && fix.altitude == 521 && fix.velocity == 3 && fix.battery == 81)
        #expect(fix.trackerID == "AN")
    }

    /// The iOS app in move mode: a timer publish with pressure and motion activities in extended data.
    @Test func acceptsAnIOSMoveModeLocation() throws {
        let text = #"{"_type":"location","BSSID":"a4:2b:b0:11:22:33","SSID":"Home","acc":5,"alt":519,"batt":64,"bs":1,"conn":"w","created_at":\#(tst),"lat":48.137154,"lon":11.576124,"m":2,"motionactivities":["walking"],"p":95.81,"t":"t","tid":"AN","tst":\#(tst),"vac":3,"vel":5,"cog":87}"#
        let fix = try parse(text).get()
        #expect(fix.course == 87 && fix.velocity == 5)
    }

    /// Everything else the apps publish is counted and ignored, never an error, never a fix.
    @Test(arguments: [
        #"{"_type":"lwt","tst":1795962900}"#,
        #"{"_type":"transition","wtst":1795900000,"lat":48.1,"lon":11.5,"tst":1795962990,"acc":10,"tid":"AN","event":"leave","desc":"Home","t":"c","rid":"a1b2c3"}"#,
        #"{"_type":"status","android":{"wifi":1,"ps":0,"bo":1,"loc":0,"hib":0}}"#,
        #"{"_type":"status","iOS":{"version":"18.1","locale":"de_DE","localeUsesMetricSystem":1,"locationManagerAuthorizationStatus":"authorizedAlways","backgroundRefreshStatus":"available","deviceSystemName":"iOS","deviceModel":"iPhone"}}"#,
        #"{"_type":"waypoint","desc":"Home","lat":48.1,"lon":11.5,"rad":100,"tst":1795900000,"rid":"a1b2c3"}"#,
        #"{"_type":"waypoints","waypoints":[{"_type":"waypoint","desc":"Home","lat":48.1,"lon":11.5,"rad":100,"tst":1795900000}]}"#,
        #"{"_type":"card","name":"Anna","tid":"AN"}"#,
        #"{"_type":"steps","tst":1795962990,"steps":1200,"from":1795900000,"to":1795962990}"#,
        #"{"_type":"beacon","desc":"Car","uuid":"CA271EAE-5FA8-4E80-8F08-2A302A95A959","major":1,"minor":2,"tst":1795962990,"acc":1,"rssi":-60,"prox":1}"#,
    ])
    func ignoresTheAppsOtherMessages(_ text: String) {
        #expect(parse(text) == .failure(.ignoredType))
    }

    /// What the apps send with `encryptionKey` set: taken as it is (for an end-to-end encrypted share), when it can be
    /// a secretbox at all; the parser never opens it.
    @Test func takesTheAppsEncryptedMessagesAsTheyAre() {
        let parser = LocationPayloadParser(maximumBytes: 8192)
        let box = Data(repeating: 7, count: 60).base64EncodedString()
        let parsed = parser.parseMessage(Array(#"{"_type":"encrypted","data":"\#(box)","seq_stream":9,"seq":3}"#.utf8), receivedAt: 1_795_962_990_000, shareCreatedAt: 0)
        #expect(parsed == .success(.sealed(data: box, sequence: TrackerSequence(stream: 9, number: 3))))
        // A plain share has nothing to do with it; an end-to-end one nothing with a position in clear.
        #expect(parse(#"{"_type":"encrypted","data":"\#(box)"}"#) == .failure(.unexpectedEncryption))
        if case .success(let message) = parsed {
            #expect(message.fix(endToEnd: false, receivedAt: 5_000) == .failure(.unexpectedEncryption))
            #expect(message.fix(endToEnd: true, receivedAt: 5_000) == .success({ var fix = Fix.sealed(box, receivedAt: 5_000); fix.sequence = TrackerSequence(stream: 9, number: 3); return fix }()))
        }
        #expect(LocationMessage.fix(Fix(latitude: 1, longitude: 2, timestamp: 3)).fix(endToEnd: true, receivedAt: 5_000) == .failure(.notEncrypted))
        // Not base64 of something a secretbox can be: too short, not base64, padding inside, too long, not a string.
        for data in ["\"c2VjcmV0\"", "\"\(String(box.dropLast(4)))!!!!\"", "\"AAAA=AAA\(box)\"",
                     "\"\(Data(repeating: 1, count: SealedPayload.maximumDataLength).base64EncodedString())\"", "42", "null"] {
            #expect(parser.parseMessage(Array(#"{"_type":"encrypted","data":\#(data)}"#.utf8), receivedAt: 0, shareCreatedAt: 0) == .failure(.malformedCiphertext), "\(data.prefix(20))")
        }
    }

    @Test func configurationHasTheBookletsKeys() throws {
        let id = ShareID("PdoiEIeX6ZqKu5Ww_5oNbg")!
        let configuration = OwnTracksConfiguration(shareID: id, deviceToken: "tok.en.value", connection: .mqtt(MQTTURL("mqtts://flare.example.org:8883")!), shareName: "anna's SOS")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(configuration.json)) as? [String: Any])
        #expect(object["_type"] as? String == "configuration")
        #expect(object["mode"] as? Int == 0)
        #expect(object["host"] as? String == "flare.example.org")
        #expect(object["port"] as? Int == 8883)
        #expect(object["tls"] as? Bool == true)
        #expect(object["auth"] as? Bool == true)
        #expect(object["username"] as? String == id.rawValue)
        #expect(object["password"] as? String == "tok.en.value")
        #expect(object["pubTopicBase"] as? String == "flare/v1/shares/\(id.rawValue)/location")
        #expect(object["tid"] as? String == "AN")
        #expect(object["monitoring"] as? Int == 2)
        #expect(object["pubRetain"] as? Bool == true)
        #expect(object["pubQos"] as? Int == 1)
        #expect(object["willRetain"] == nil)  // neither app reads it
        // The share's status and its command topic, space-separated (both apps split `subTopic` on spaces), and
        // commands on for "locate now".
        #expect(object["sub"] as? Bool == true)
        #expect(object["subTopic"] as? String == "flare/v1/shares/\(id.rawValue)/status flare/v1/shares/\(id.rawValue)/location/cmd")
        #expect(object["cmd"] as? Bool == true && object["allowRemoteLocation"] as? Bool == true)
        // On, so that an ended share can quiet the app (see `stopReporting`).
        #expect(object["remoteConfiguration"] as? Bool == true)
        #expect((object["locatorInterval"] as? Int ?? 0) > 0 && (object["locatorDisplacement"] as? Int ?? 0) > 0)
        #expect(object["moveModeLocatorInterval"] as? Int == object["locatorInterval"] as? Int)
    }

    /// HTTP mode (`mode: 3`, owntracks/android `ConnectionMode.kt`; iOS takes 3 only as a number, `Settings.m`):
    /// the URL, Basic auth from username and password (iOS only with `auth` and `usePassword`), none of the MQTT keys.
    @Test func httpModeConfigurationPostsToTheSharesURLWithBasicAuth() throws {
        let id = ShareID("PdoiEIeX6ZqKu5Ww_5oNbg")!
        let url = "https://sos.example.org" + OwnTracksConfiguration.httpPath(id)
        let configuration = OwnTracksConfiguration(shareID: id, deviceToken: "tok.en.value", connection: .http(url: url), shareName: "Anna")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(configuration.json)) as? [String: Any])
        #expect(object["mode"] as? Int == 3)
        #expect(object["url"] as? String == "https://sos.example.org/api/v1/shares/PdoiEIeX6ZqKu5Ww_5oNbg/owntracks/http")
        #expect(object["auth"] as? Bool == true && object["usePassword"] as? Bool == true)
        #expect(object["username"] as? String == id.rawValue && object["password"] as? String == "tok.en.value")
        #expect(object["cmd"] as? Bool == true && object["allowRemoteLocation"] as? Bool == true && object["remoteConfiguration"] as? Bool == true)
        #expect(object["monitoring"] as? Int == 2 && object["locatorPriority"] as? String == "HighAccuracy")
        for key in ["host", "port", "tls", "clientId", "pubTopicBase", "pubQos", "pubRetain", "sub", "subTopic", "cleanSession", "keepalive"] {
            #expect(object[key] == nil, "\(key) is an MQTT setting")
        }
    }

    /// What an ended share answers the app: `setConfiguration` to quiet mode (`monitoring: -1`).
    @Test func theStopReportingCommandIsASetConfigurationToQuietMode() throws {
        let object = try #require(try JSONSerialization.jsonObject(with: Data(OwnTracksConfiguration.stopReporting)) as? [String: Any])
        #expect(object["_type"] as? String == "cmd" && object["action"] as? String == "setConfiguration")
        let configuration = try #require(object["configuration"] as? [String: Any])
        #expect(configuration["_type"] as? String == "configuration" && configuration["monitoring"] as? Int == -1)
        #expect(configuration.count == 2)
    }

    /// Android v2.5.7, v2.5.8, v2.5.9 and master read a numeric `locatorPriority` by its position in
    /// `HighAccuracy(3), BalancedPowerAccuracy(2), LowPower(1), NoPower(0)` (`entries.getOrElse(value)` in
    /// owntracks/android project/app/src/main/java/org/owntracks/android/location/LocatorPriority.kt, v2.5.9), so
    /// the number 3 means NoPower there and the phone sends no GPS fixes; v2.4 and v2.5.4–v2.5.6 read 3 as high
    /// accuracy. The name `HighAccuracy` is matched by name on every 2.5 release and on master. Never a number.
    @Test func androidLocatorPriorityIsHighAccuracyByName() throws {
        let configuration = OwnTracksConfiguration(shareID: ShareID("PdoiEIeX6ZqKu5Ww_5oNbg")!, deviceToken: "t", connection: .mqtt(MQTTURL("mqtt://h")!), shareName: nil)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(configuration.json)) as? [String: Any])
        #expect(object["locatorPriority"] as? String == "HighAccuracy")
        #expect(!(object["locatorPriority"] is NSNumber))
    }

    /// The inline link carries the same JSON in standard base64 with `+`, `/` and `=` percent-encoded.
    @Test(arguments: ["A", "Ab", "Abc", nil])
    func inlineLinkDecodesToTheConfiguration(name: String?) throws {
        let configuration = OwnTracksConfiguration(shareID: ShareID("PdoiEIeX6ZqKu5Ww_5oNbg")!, deviceToken: "t~?>>", connection: .mqtt(MQTTURL("mqtt://10.0.0.2:1883")!), shareName: name)
        let link = configuration.inlineURL
        #expect(link.hasPrefix("owntracks:///config?inline="))
        let value = String(link.dropFirst("owntracks:///config?inline=".count))
        #expect(!value.contains("-") && !value.contains("_") && !value.contains("+") && !value.contains("/") && !value.contains("="))
        let base64 = try #require(value.removingPercentEncoding)
        #expect(try #require(Data(base64Encoded: base64)) == Data(configuration.json))
        #expect(configuration.trackerID.count == 2)
    }
}
