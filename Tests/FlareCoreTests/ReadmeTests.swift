import Foundation
import Testing

/// The README stays what a newcomer reads first: at most 15 KB, every link to a file of the tree resolving.
@Suite struct ReadmeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func theReadmeIsShortAndItsLinksResolve() throws {
        let readme = try Data(contentsOf: Self.root.appendingPathComponent("README.md"))
        #expect(readme.count <= 15_000, "README.md is \(readme.count) bytes: history and caveats belong in docs/")
        let text = String(decoding: readme, as: UTF8.self)
        let pattern = try NSRegularExpression(pattern: #"\]\(([^)#:]+)(#[^)]*)?\)"#)
        let targets = pattern.matches(in: text, range: NSRange(text.startIndex..., in: text))
            .compactMap { Range($0.range(at: 1), in: text).map { String(text[$0]) } }
        #expect(!targets.isEmpty)
        for target in targets {
            #expect(FileManager.default.fileExists(atPath: Self.root.appendingPathComponent(target).path), "README links to \(target), which is not there")
        }
    }
}
