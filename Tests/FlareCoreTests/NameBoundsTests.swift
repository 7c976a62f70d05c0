import FlareCore
import Testing

/// Names are bounded in Unicode scalars and UTF-8 bytes, never in grapheme clusters.
@Suite struct NameBoundsTests {
    let bounds = NameBounds(maximumScalars: 4)

    @Test func scalarsAndBytesAreCountedNotCharacters() {
        #expect(bounds.maximumBytes == 12)
        #expect(bounds.admits("abcd") && bounds.admits("山山山山") && bounds.admits(""))
        #expect(!bounds.admits("abcde"))
        // One character to `count`, five scalars.
        let stacked = "e" + String(repeating: "\u{0301}", count: 4)
        #expect(stacked.count == 1 && !bounds.admits(stacked))
        // Four scalars, sixteen bytes.
        #expect(!bounds.admits("😀😀😀😀"))
        #expect(bounds.admits("😀😀😀"))
    }

    @Test func sharesAnswersAndKeysUseTheirBounds() throws {
        let marks = String(repeating: "\u{0301}", count: 3000)
        #expect(Answer.validName("Mom" + marks) == nil)
        #expect(Answer.validName(String(repeating: "x", count: 40)) != nil)
        let policy = SharePolicy(defaultDurationSeconds: 60, maximumDurationSeconds: 60, historyRetentionSeconds: 0)
        #expect(throws: SharePolicy.Violation.nameTooLong) { try policy.validName("Anna" + marks) }
        #expect(try policy.validName(String(repeating: "山", count: 80)).unicodeScalars.count == 80)
        #expect(!NameBounds.keyLabel.admits("ops" + marks))
        // Bidirectional overrides and other format characters are refused alike in every name and message people read.
        let overridden = "Account locked - call \u{202E}0999"
        #expect(Answer.validName(overridden) == nil)
        #expect(throws: SharePolicy.Violation.nameHasHiddenCharacters) { try policy.validName(overridden) }
        #expect(throws: SharePolicy.Violation.nameHasHiddenCharacters) { try policy.validName("Anna\u{7}") }
        #expect(throws: CheckinRules.Refusal.self) { try CheckinRules.validMessage("back by 6\u{2067}") }
        #expect(try CheckinRules.validMessage("back by 6\nvia the ridge") == "back by 6\nvia the ridge")
        #expect(NameBounds.hasHiddenScalars("Anna\u{200B}") && !NameBounds.hasHiddenScalars("👨\u{200D}👩"))
        #expect(NameBounds.answerName.description == "at most 40 characters (Unicode code points) and 120 bytes")
    }
}
