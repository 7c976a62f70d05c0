import FlareCurl
import FlareTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// SMTP with libcurl, against a real server the test starts: what it takes, what it refuses, and how.
@Suite struct SMTPClientTests {
    let message = Array("From: <flare@example.org>\r\nTo: <ben@example.org>\r\nSubject: test\r\n\r\nhello\r\n".utf8)

    @Test func aMailIsTakenWithTheRightPasswordAndRefusedWithAWrongOne() throws {
        let server = try TestSMTPServer(username: "flare", password: "right")
        defer { server.stop() }
        let url = "smtp://127.0.0.1:\(server.port)"
        try SMTPClient(url: url, username: "flare", password: "right", requireTLS: false)
            .send(from: "flare@example.org", to: ["ben@example.org"], message: message, timeout: .seconds(5))
        #expect(server.received.count == 1)
        #expect(server.received.first?.body == "hello\r\n")
        do {
            try SMTPClient(url: url, username: "flare", password: "wrong", requireTLS: false)
                .send(from: "flare@example.org", to: ["ben@example.org"], message: message, timeout: .seconds(5))
            Issue.record("a wrong password was taken")
        } catch {
            #expect(error.reason == "the server refused the user name or password")
            #expect(!error.isPermanent)  // an operator fixes it, and the mail goes then
        }
        // No STARTTLS offered: a server that must use it is refused before anything is sent.
        #expect(throws: SMTPError.self) {
            try SMTPClient(url: url, username: "flare", password: "right", requireTLS: true)
                .send(from: "flare@example.org", to: ["ben@example.org"], message: message, timeout: .seconds(5))
        }
        #expect(server.received.count == 1)
    }

    @Test func aMailboxThatDoesNotExistIsAPermanentRefusalAndNoServerIsUnanswered() throws {
        let server = try TestSMTPServer()
        defer { server.stop() }
        do {
            try SMTPClient(url: "smtp://127.0.0.1:\(server.port)", username: nil, password: nil, requireTLS: false)
                .send(from: "flare@example.org", to: ["refused@example.org"], message: message, timeout: .seconds(5))
            Issue.record("a refused mailbox was taken")
        } catch {
            #expect(error.reply == 550 && error.isPermanent)
        }
        let (held, port) = try FreePort.refusing()
        defer { close(held) }
        do {
            try SMTPClient(url: "smtp://127.0.0.1:\(port)", username: nil, password: nil, requireTLS: false)
                .send(from: "flare@example.org", to: ["ben@example.org"], message: message, timeout: .seconds(5))
            Issue.record("a closed port took a mail")
        } catch {
            #expect(error.isUnanswered && !error.isPermanent)
        }
        // Line breaks in an address would be commands of their own.
        #expect(throws: SMTPError.self) {
            try SMTPClient(url: "smtp://127.0.0.1:\(server.port)", username: nil, password: nil, requireTLS: false)
                .send(from: "flare@example.org", to: ["ben@example.org>\r\nRCPT TO:<x@example.org"], message: message, timeout: .seconds(5))
        }
    }
}
