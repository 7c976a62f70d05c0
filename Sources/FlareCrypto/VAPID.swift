import FlareCodec

/// An application server's identity for Web Push (VAPID, RFC 8292): a P-256 key pair whose public half the browser is
/// given when it subscribes (`applicationServerKey`), and whose private half signs a short-lived JWT on each push
/// request, so the push service accepts messages for that subscription from this server only.
public struct VAPIDKey: Sendable, CustomStringConvertible {
    public let privateKey: [UInt8]
    /// The 65-byte uncompressed point, as `applicationServerKey` and the `k=` parameter carry it.
    public let publicKey: [UInt8]

    /// The key pair of a stored private key; nil unless it is a valid 32-byte P-256 scalar.
    public init?(privateKey: [UInt8]) {
        guard let publicKey = P256.publicKey(privateKey: privateKey) else { return nil }
        self.privateKey = privateKey
        self.publicKey = publicKey
    }

    public static func generate() -> VAPIDKey {
        guard let key = VAPIDKey(privateKey: P256.newPrivateKey()) else { preconditionFailure("OpenSSL made a P-256 key it cannot use") }
        return key
    }

    /// The signed JWT (RFC 8292 §2): `audience` is the push service's origin (the endpoint's scheme, host and port, no
    /// path), `subject` a `mailto:` or `https:` address where its operator can reach the sender, `expiresAt` Unix
    /// seconds no more than 24 hours ahead (push services refuse a token that lives longer). Nil only if OpenSSL fails.
    public func token(audience: String, subject: String, expiresAt unixSeconds: Int64) -> String? {
        var header = JSONWriter(capacity: 32)
        header.beginObject()
        header.field("typ", "JWT")
        header.field("alg", "ES256")
        header.endObject()
        var claims = JSONWriter(capacity: 128)
        claims.beginObject()
        claims.field("aud", audience)
        claims.field("exp", unixSeconds)
        claims.field("sub", subject)
        claims.endObject()
        let signingInput = Base64URL.encode(header.bytes) + "." + Base64URL.encode(claims.bytes)
        guard let signature = P256.signES256(Array(signingInput.utf8), privateKey: privateKey) else { return nil }
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// The `Authorization` header value of a push request (RFC 8292 §3): `vapid t=<token>, k=<public key>`.
    public func authorization(audience: String, subject: String, expiresAt unixSeconds: Int64) -> String? {
        token(audience: audience, subject: subject, expiresAt: unixSeconds).map { "vapid t=\($0), k=\(Base64URL.encode(publicKey))" }
    }

    /// The public key only: a key printed into a log must not give the private half away.
    public var description: String { "VAPIDKey(\(Base64URL.encode(publicKey)))" }
}
