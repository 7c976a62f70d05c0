import FlareCore
import Testing

/// FLARE_SMTP_URL as MailServer reads it: the two schemes, their ports, when STARTTLS is required, credentials.
@Suite struct MailServerTests {
    @Test func theSchemesTheirPortsAndWhenTLSIsRequired() throws {
        let relay = try MailServer(url: "smtp://mail.example.org", from: "flare@example.org")
        #expect(relay.url == "smtp://mail.example.org:587" && relay.requiresTLS && relay.username == nil)
        let tls = try MailServer(url: "smtps://mail.example.org", from: "flare@example.org")
        #expect(tls.url == "smtps://mail.example.org:465" && !tls.requiresTLS)  // TLS from the first byte, no STARTTLS
        // A relay on the same machine may have no certificate: STARTTLS is tried there, not required.
        for local in ["smtp://127.0.0.1:25", "smtp://127.8.9.10:25", "smtp://localhost:25", "smtp://[::1]:25"] {
            #expect(try !MailServer(url: local, from: "flare@example.org").requiresTLS, "\(local)")
        }
        // A host name that only starts like a loopback address is any host: TLS is required (trust, second round, 5).
        for remote in ["smtp://127.0.0.1.example.net:25", "smtp://127.attacker.example:25", "smtp://[::2]:25", "smtp://10.0.0.1:25"] {
            #expect(try MailServer(url: remote, from: "flare@example.org").requiresTLS, "\(remote)")
        }
        #expect(try MailServer(url: "smtp://[::1]:2525", from: "a@b.org").url == "smtp://[::1]:2525")
        #expect(relay.messageIDDomain == "example.org")
    }

    @Test func credentialsArePercentDecodedAndKeptOutOfTheURL() throws {
        let server = try MailServer(url: "smtp://flare%40example.org:p%3As%40ss@mail.example.org:2525", from: "flare@example.org")
        #expect(server.username == "flare@example.org" && server.password == "p:s@ss")
        #expect(server.url == "smtp://mail.example.org:2525" && server.description == server.url)
    }

    @Test func badURLsAndSendersAreRefused() {
        for bad in ["", "mail.example.org", "http://mail.example.org", "smtp://", "smtp://host:0", "smtp://host:70000", "smtp://host/path",
                    "smtp://host?x=1", "smtp://:pw@host", "smtp://us%zzer@host", "smtp://ho st", "smtp://[::1", "smtp://host:25x"] {
            #expect(throws: MailServer.Problem.self, "\(bad)") { try MailServer(url: bad, from: "flare@example.org") }
        }
        for bad in ["", "flare", "Flare <flare@example.org>", "flare@localhost"] {
            #expect(throws: MailServer.Problem.self, "\(bad)") { try MailServer(url: "smtp://mail.example.org", from: bad) }
        }
    }
}
