import FlareAPI
import Testing
@testable import FlareCore
import FlareSystem
import FlareCodec

@Suite struct JSONTests {
    @Test func parsesAnOwnTracksLocation() throws {
        let value = try JSONValue.parse(#"{"_type":"location","lat":48.1,"lon":-11.5e0,"tst":1700000000,"inregions":["home"],"BSSID":"a\u00e9\n","ok":true,"x":null}"#)
        #expect(value["_type"] == .string("location"))
        #expect(value["lat"]?.doubleValue == 48.1)
        #expect(value["lon"]?.doubleValue == -11.5)
        #expect(value["inregions"] == .array([.string("home")]))
        #expect(value["BSSID"] == .string("aé\n"))
        #expect(value["ok"] == .bool(true))
        #expect(value["x"] == .null)
    }

    /// Strings that need no escape are copied whole; the others are escaped byte by byte: both give what the
    /// parser reads back, and `<` never appears raw (the writer's output is embedded in HTML).
    @Test(arguments: ["", "plain-token_123", "a\"b", "back\\slash", "line\nfeed\r\t", "bell\u{07}", "<script>", "Zoë 😀", "ends with \\"])
    func writesStringsThatParseBackTheSame(_ text: String) throws {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("s", text)
        writer.endObject()
        #expect(try JSONValue.parse(writer.bytes)["s"] == .string(text))
        #expect(!writer.bytes.contains(UInt8(ascii: "<")))
        #expect(!writer.bytes.contains { $0 < 0x20 })
    }

    @Test func writesAStringNeedingNoEscapeAsItIs() {
        #expect(JSONWriter.flatObject([("id", "Zoë-1/2"), ("b", "")]) == Array(#"{"id":"Zoë-1/2","b":""}"#.utf8))
    }

    @Test func decodesSurrogatePairs() throws {
        #expect(try JSONValue.parse(#""\ud83d\ude00""#) == .string("😀"))
    }

    @Test(arguments: [
        "", "{", "{\"a\":}", "[1,]", "{\"a\":1,}", "01", "1.", "-", "tru", "\"abc", "\"\\x\"", "\"\\ud800\"",
        "{\"a\" 1}", "1 2", "\"a\u{01}\"", "[" + String(repeating: "[", count: 40) + "]", "NaN", "1e", "{'a':1}",
    ])
    func rejectsMalformedInput(_ text: String) {
        #expect(throws: JSONError.self) { try JSONValue.parse(text) }
    }

    @Test func walksAnObjectsMembersInOrderAsParseReadsThem() throws {
        let text = #"{"_type":"location","lat":48.1,"inregions":["home",{"a":1}],"lat":-2.5e1,"x":null,"t":"é\n"}"#
        var members: [(String, JSONValue)] = []
        try JSONValue.forEachMember(ofObject: Array(text.utf8)) { members.append(($0, $1)) }
        #expect(members.map(\.0) == ["_type", "lat", "inregions", "lat", "x", "t"])
        var lastWins: [String: JSONValue] = [:]
        for (key, value) in members { lastWins[key] = value }
        #expect(JSONValue.object(lastWins) == (try JSONValue.parse(text)))
        #expect(lastWins["lat"] == .number(-25))
    }

    @Test(arguments: [
        "", "{", "{\"a\":}", "{\"a\":1,}", "{\"a\" 1}", "{'a':1}", "{\"a\":1} x", "{\"a\":[1,]}", "[1]", "\"a\"", "1", "null",
        "{\"a\":" + String(repeating: "[", count: 40) + String(repeating: "]", count: 40) + "}",
    ])
    func memberWalkRefusesWhatIsNotAWellFormedObject(_ text: String) {
        #expect(throws: JSONError.self) { try JSONValue.forEachMember(ofObject: Array(text.utf8)) { _, _ in } }
    }

    /// Short decimals take an exact shortcut past strtod; it must give the very same double, bit for bit.
    @Test func numbersMatchTheFullConversionBitForBit() throws {
        var samples = ["0", "-0", "0.1", "0.5", "-0.000001", "47.000001", "8.123456789012", "123456789012345", "1234567890123456",
                       "99999999999999999999", "0.1234567890123456789", "0.0000000000000000000001", "1e22", "1.5E-7", "-180",
                       "90.00000000000001", "3.141592653589793", "0.30000000000000004", "9007199254740993", "179.9999999999999"]
        var generator = SplitMix64(seed: 0x5EED)
        for _ in 0..<20_000 {
            let integerDigits = Int(generator.next() % 4)
            let fractionDigits = Int(generator.next() % 17)
            var text = generator.next() % 2 == 0 ? "-" : ""
            text += integerDigits == 0 ? "0" : String(generator.next() % 1000 + 1).prefix(integerDigits)
            if fractionDigits > 0 { text += "." + (0..<fractionDigits).map { _ in String(generator.next() % 10) }.joined() }
            samples.append(text)
        }
        for text in samples {
            let expected = try #require(Double(text))
            let parsed = try JSONValue.parse(text).doubleValue
            #expect(parsed?.bitPattern == expected.bitPattern, "\(text)")
        }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONError.self) { try JSONValue.parse([0x22, 0xFF, 0xFE, 0x22]) }
    }

    @Test func writerProducesParseableEscapedJSON() throws {
        var writer = JSONWriter()
        writer.beginObject()
        writer.field("name", "A \"quoted\" \\ name\n<script>\u{01}")
        writer.field("n", 3.0)
        writer.field("f", 48.137)
        writer.key("list")
        writer.beginArray()
        writer.number(1)
        writer.null()
        writer.bool(false)
        writer.endArray()
        writer.field("after", "x")
        writer.endObject()
        #expect(!writer.string.contains("<"))
        let parsed = try JSONValue.parse(writer.bytes)
        #expect(parsed["name"] == .string("A \"quoted\" \\ name\n<script>\u{01}"))
        #expect(parsed["n"] == .number(3))
        #expect(parsed["f"] == .number(48.137))
        #expect(parsed["list"] == .array([.number(1), .null, .bool(false)]))
        #expect(parsed["after"] == .string("x"))
    }

    @Test func flatObjectIsAllStrings() throws {
        let parsed = try JSONValue.parse(JSONWriter.flatObject([("a", "1"), ("b", "two")]))
        #expect(parsed == .object(["a": .string("1"), "b": .string("two")]))
    }
}

@Suite struct Base64URLTests {
    @Test func roundTripsEveryLength() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let encoded = Base64URL.encode(bytes)
            #expect(!encoded.contains("="))
            #expect(Base64URL.decode(encoded) == bytes)
        }
    }

    @Test func knownVector() {
        #expect(Base64URL.encode(Array("any carnal pleas".utf8)) == "YW55IGNhcm5hbCBwbGVhcw")
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
    }

    @Test func rejectsForeignCharactersAndImpossibleLengths() {
        #expect(Base64URL.decode("ab+c") == nil)
        #expect(Base64URL.decode("abc=") == nil)
        #expect(Base64URL.decode("a") == nil)
        #expect(Base64URL.decode("-_9") == nil)  // non-zero trailing bits: not canonical
    }
}

@Suite struct RFC3339Tests {
    @Test func formatsUTC() {
        #expect(RFC3339.format(seconds: 0) == "1970-01-01T00:00:00Z")
        #expect(RFC3339.format(seconds: 951_782_400) == "2000-02-29T00:00:00Z")
        #expect(RFC3339.format(millis: 1_795_963_001_877) == "2026-11-29T14:36:41Z")
        #expect(RFC3339.format(seconds: -1) == "1969-12-31T23:59:59Z")
        #expect(RFC3339.format(seconds: 253_402_300_799) == "9999-12-31T23:59:59Z")
        #expect(RFC3339.format(seconds: 253_402_300_800) == "10000-01-01T00:00:00Z")
        #expect(RFC3339.format(seconds: -62_167_219_201) == "00-1-12-31T23:59:59Z", "a year before 0 as it always was written")
    }

    /// Every second of a sample of instants over four centuries reads back as itself, and appending writes what
    /// `format` does.
    @Test func appendsWhatItFormatsAndParsesItBack() throws {
        var random = SplitMix64(seed: 3339)
        for _ in 0..<20_000 {
            let seconds = Int64.random(in: -2_208_988_800...7_258_118_400, using: &random)  // 1900 to 2200
            var bytes = Array("x".utf8)
            RFC3339.append(millis: seconds * 1000 + 999, to: &bytes)
            let text = RFC3339.format(seconds: seconds)
            #expect(bytes == Array("x\(text)".utf8))
            #expect(try #require(RFC3339.parse(text)).timeIntervalSince1970 == Double(seconds))
        }
    }
}

@Suite struct RedactionTests {
    @Test func tokensInForeignMessagesAreRedacted() {
        let message = "Error processing request for `/s/JV_bngTNufAnASGf1yp-Bmw3DJOsCP8S' from 127.0.0.1: eyJhbGciOi.eyJzdWIi.QzejnYzz"
        let redacted = Logger.redactingSecrets(message)
        #expect(!redacted.contains("JV_bngTNufAnASGf1yp"))
        #expect(!redacted.contains("eyJhbGciOi"))
        #expect(redacted.contains("127.0.0.1"))
        #expect(redacted.hasPrefix("Error processing request for `/s/[redacted]'"))
    }
}

/// A small deterministic generator, so a failing sample is the same on every run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
