import Testing
@testable import FlareCore

@Suite struct ClientAddressTests {
    @Test func parsesAddressesStrictly() {
        #expect(IPAddress("203.0.113.7")?.bytes == [203, 0, 113, 7])
        #expect(IPAddress("::ffff:203.0.113.7")?.bytes == [203, 0, 113, 7])  // a v4 client on a dual-stack socket
        #expect(IPAddress("2001:db8::1")?.isV6 == true)
        for bad in ["", "203.0.113", "203.0.113.256", "1.2.3.4 ", "example.org", "2001:db8::g", "unknown", String(repeating: "1", count: 60)] {
            #expect(IPAddress(bad) == nil, "\(bad)")
        }
    }

    @Test func matchesNetworks() throws {
        let proxies = try TrustedProxies(parsing: " 127.0.0.1, ::1 ,172.16.0.0/12, 2001:db8:aa::/48 ")
        for trusted in ["127.0.0.1", "::1", "172.16.0.1", "172.31.255.254", "2001:db8:aa:ffff::9"] {
            #expect(proxies.trusts(IPAddress(trusted)!), "\(trusted)")
        }
        for untrusted in ["127.0.0.2", "172.32.0.1", "172.15.255.255", "2001:db8:ab::1", "::2", "10.0.0.1"] {
            #expect(!proxies.trusts(IPAddress(untrusted)!), "\(untrusted)")
        }
        #expect(try TrustedProxies(parsing: "").isEmpty)
        #expect(throws: TrustedProxies.Malformed.self) { try TrustedProxies(parsing: "127.0.0.1,proxy.local") }
        #expect(throws: TrustedProxies.Malformed.self) { try TrustedProxies(parsing: "10.0.0.0/33") }
        #expect(throws: TrustedProxies.Malformed.self) { try TrustedProxies(parsing: "::/129") }
        for malformed in ["/", "  /", "/8", "10.0.0.0/", "10.0.0.0//8", "10.0.0.0/8/8"] {  // "/" once trapped (found by make fuzz)
            #expect(throws: TrustedProxies.Malformed.self, "\(malformed)") { try TrustedProxies(parsing: malformed) }
        }
    }

    @Test func believesForwardedForOnlyFromATrustedPeerAndOnlyUpToTheFirstUntrustedHop() throws {
        let proxies = try TrustedProxies(parsing: "127.0.0.1,10.0.0.0/8")
        // Straight from the client: the header is the client's own words and is ignored.
        #expect(proxies.clientAddress(peer: "198.51.100.9", forwardedFor: "203.0.113.7") == "198.51.100.9")
        #expect(TrustedProxies.none.clientAddress(peer: "127.0.0.1", forwardedFor: "203.0.113.7") == "127.0.0.1")
        // Through the proxy: the address it appended.
        #expect(proxies.clientAddress(peer: "127.0.0.1", forwardedFor: "203.0.113.7") == "203.0.113.7")
        // Whatever the client wrote at the left is not believed: the walk stops at the first untrusted hop.
        #expect(proxies.clientAddress(peer: "127.0.0.1", forwardedFor: "1.1.1.1, 203.0.113.7, 10.1.2.3") == "203.0.113.7")
        // A malformed hop ends the walk at the last address believed.
        #expect(proxies.clientAddress(peer: "127.0.0.1", forwardedFor: "203.0.113.7, garbage") == "127.0.0.1")
        #expect(proxies.clientAddress(peer: "127.0.0.1", forwardedFor: "garbage, 10.9.9.9") == "10.9.9.9")
        #expect(proxies.clientAddress(peer: "127.0.0.1", forwardedFor: nil) == "127.0.0.1")
    }

    @Test func ipv6ClientsAreCountedPerSlash64() {
        #expect(TrustedProxies.rateLimitKey(for: "2001:db8:1:2:aaaa::1") == "2001:0db8:0001:0002::/64")
        #expect(TrustedProxies.rateLimitKey(for: "2001:db8:1:2:ffff:ffff:ffff:ffff") == "2001:0db8:0001:0002::/64")
        #expect(TrustedProxies.rateLimitKey(for: "2001:db8:1:3::1") == "2001:0db8:0001:0003::/64")
        #expect(TrustedProxies.rateLimitKey(for: "203.0.113.7") == "203.0.113.7")
    }
}
