import FlareQR
import FlareTestSupport
import Foundation
import Testing

/// The QR codes are read back with a real decoder (Debian's zbarimg), so a wrong bit, CRC or checksum fails here.
@Suite struct QRCodeTests {
    func decode(_ png: [UInt8]) throws -> String {
        let directory = try TempDirectory.make(prefix: "qr")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("code.png")
        try Data(png).write(to: file)
        let result = try runCommand("/usr/bin/zbarimg", ["--raw", "-q", "-Sdisable", "-Sqrcode.enable", file.path])
        #expect(result.status == 0, "zbarimg: \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .newlines)
    }

    @Test func pngDecodesToTheText() throws {
        let text = "owntracks:///config?inline=" + String(repeating: "eyJfdHlwZSI6ImNvbmZpZ3VyYXRpb24ifQ%3D%3D", count: 20)
        let code = try QRCode(text)
        let png = code.png(scale: 4)
        #expect(Array(png.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        #expect(try decode(png) == text)
    }

    /// Large enough that the image needs several stored deflate blocks (each at most 65,535 bytes).
    @Test func largeImageSpansSeveralDeflateBlocks() throws {
        let text = "flare " + String(repeating: "0123456789", count: 30)
        let png = try QRCode(text).png(scale: 16)
        #expect(png.count > 70_000)
        #expect(try decode(png) == text)
    }

    @Test func svgHasOneSquarePerDarkModuleRun() throws {
        let code = try QRCode("hello")
        let svg = code.svg()
        #expect(svg.hasPrefix("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 \(code.size + 8) \(code.size + 8)\""))
        let darkModules = code.modules.filter { $0 }.count
        let path = try #require(svg.components(separatedBy: " d=\"").last?.split(separator: "\"").first)
        let drawn = path.split(separator: "h").dropFirst().map { Int($0.prefix { $0.isNumber }) ?? 0 }.reduce(0, +)
        #expect(drawn == darkModules)
    }

    @Test func refusesWhatDoesNotFit() {
        #expect(throws: QRCode.EncodeError.self) { try QRCode(String(repeating: "x", count: 5000)) }
        #expect(throws: QRCode.EncodeError.self) { try QRCode("") }
    }
}
