import FlareCore
import FlareEvents
import Testing

/// The webhook URL rules: what an owner key may set as its webhook, and which addresses it may reach.
@Suite struct WebhookURLTests {
    @Test func webhookURLsAreHTTPWithAHostAndNoCredentials() throws {
        let url = try WebhookURL("https://hooks.example.org:8443/flare?x=1")
        #expect(url.isTLS && url.host == "hooks.example.org" && url.port == 8443)
        #expect(try WebhookURL("http://[::1]/h").host == "::1")
        #expect(try WebhookURL("http://127.0.0.1/").port == 80)
        for bad in ["ftp://example.org/", "https://user:pw@example.org/", "https://", "https://exa mple.org/", "https://example.org:0/",
                    "https://example.org:99999/", "https://example.org/#frag", "example.org", "https://[zz::1]/",
                    "https://example.org/" + String(repeating: "a", count: 2048), "https://exämple.org/"] {
            #expect(throws: WebhookURL.Problem.malformed) { try WebhookURL(bad) }
        }
    }

    @Test func onlyPublicAddressesArePublic() throws {
        for inside in ["127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
                       "224.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1", "::1", "::", "fe80::1", "fc00::1", "fd12::1", "ff02::1",
                       "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1", "2001:db8::1"] {
            #expect(IPAddress(inside)?.isPublic == false, "\(inside)")
        }
        for outside in ["8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700:4700::1111", "2a00:1450:4001::1", "::ffff:8.8.8.8"] {
            #expect(IPAddress(outside)?.isPublic == true, "\(outside)")
        }
    }
}
