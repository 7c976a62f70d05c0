import FlareCore
import Foundation
import Testing
@testable import FlareWire

/// The mail as SMTP carries it: header words encoded without cutting a character, a base64 body, CRLF throughout.
@Suite struct MailMessageTests {
    func message(subject: String, body: String = "Hello\nthere\r\n", toName: String = "Ben") -> MailMessage {
        MailMessage(fromName: "Flare", fromAddress: "flare@example.org", toName: toName, toAddress: "ben@example.org", subject: subject,
                    body: body, messageID: "abc.def@example.org", date: 1_796_234_645_000, language: "en")
    }

    @Test func headersAndBodyAreWrittenAsRFC5322AndMIMEWant() throws {
        let text = String(decoding: message(subject: "Anna is sharing").bytes, as: UTF8.self)
        let (head, body) = try #require(text.range(of: "\r\n\r\n").map { (String(text[..<$0.lowerBound]), String(text[$0.upperBound...])) })
        let lines = head.components(separatedBy: "\r\n")
        #expect(lines.contains("Subject: Anna is sharing"))
        #expect(lines.contains(#"From: "Flare" <flare@example.org>"#))
        #expect(lines.contains("Message-ID: <abc.def@example.org>"))
        #expect(lines.contains("Date: Wed, 02 Dec 2026 18:04:05 +0000"))
        #expect(lines.contains("Content-Transfer-Encoding: base64"))
        #expect(!text.replacingOccurrences(of: "\r\n", with: "").contains("\n") && !text.replacingOccurrences(of: "\r\n", with: "").contains("\r"))
        let decoded = Data(base64Encoded: body.components(separatedBy: "\r\n").joined()).map { String(decoding: $0, as: UTF8.self) }
        #expect(decoded == "Hello\r\nthere\r\n")
        #expect(body.components(separatedBy: "\r\n").allSatisfy { $0.count <= 76 })
    }

    @Test func longNonASCIISubjectsAreEncodedWordsThatNeverCutACharacter() throws {
        let subject = String(repeating: "李娜正在与你共享实时位置🙂", count: 6)
        let words = MailMessage.encodedWords(subject).components(separatedBy: "\r\n ")
        #expect(words.count > 1)
        var joined = ""
        for word in words {
            #expect(word.count <= 75 && word.hasPrefix("=?UTF-8?B?") && word.hasSuffix("?="))
            let payload = word.dropFirst(10).dropLast(2)
            // Each word alone is whole UTF-8: no character is split across two.
            let bytes = try #require(Data(base64Encoded: String(payload)))
            let piece = try #require(String(validating: Array(bytes), as: UTF8.self))
            joined += piece
        }
        #expect(joined == subject)
    }

    @Test func namesAreQuotedOrEncodedAndControlCharactersNeverReachAHeader() {
        #expect(MailMessage.mailbox(#"Ben "B" Ng"#, "ben@example.org") == #""Ben \"B\" Ng" <ben@example.org>"#)
        #expect(MailMessage.mailbox("李娜", "l@example.org").hasPrefix("=?UTF-8?B?"))
        #expect(!MailMessage.headerText("a\r\nBcc: x@example.org").contains("\r\n"))
        #expect(!MailMessage.mailbox("a\r\nBcc: x", "ben@example.org").contains("\n"))
    }

    @Test func datesAreTheGregorianCalendars() {
        #expect(MailMessage.rfc5322Date(0) == "Thu, 01 Jan 1970 00:00:00 +0000")
        #expect(MailMessage.rfc5322Date(951_782_400_000) == "Tue, 29 Feb 2000 00:00:00 +0000")
        #expect(MailMessage.rfc5322Date(4_102_444_799_000) == "Thu, 31 Dec 2099 23:59:59 +0000")
    }
}
