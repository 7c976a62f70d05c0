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
        let header = #"{"typ":"JWT","alg":"ES256"}"#
        let claims = #"{"aud":\#(Self.jsonString(audience)),"exp":\#(unixSeconds),"sub":\#(Self.jsonString(subject))}"#
        let signingInput = Self.base64URL(Array(header.utf8)) + "." + Self.base64URL(Array(claims.utf8))
        guard let signature = P256.signES256(Array(signingInput.utf8), privateKey: privateKey) else { return nil }
        return signingInput + "." + Self.base64URL(signature)
    }

    /// The `Authorization` header value of a push request (RFC 8292 §3): `vapid t=<token>, k=<public key>`.
    public func authorization(audience: String, subject: String, expiresAt unixSeconds: Int64) -> String? {
        token(audience: audience, subject: subject, expiresAt: unixSeconds).map { "vapid t=\($0), k=\(Self.base64URL(publicKey))" }
    }

    /// The public key only: a key printed into a log must not give the private half away.
    public var description: String { "VAPIDKey(\(Self.base64URL(publicKey)))" }

    /// A JSON string literal: the quote, the backslash and the control characters escaped (RFC 8259 §7), the rest as is.
    static func jsonString(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16, uppercase: true)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// Unpadded base64url (RFC 4648 §5), as JWTs and the `k=` parameter are written. FlareCodec has the full codec;
    /// FlareCrypto stays a leaf (its one dependency is OpenSSL) for the few lines an encoder takes.
    static func base64URL(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let count = min(3, bytes.count - index)
            var chunk: UInt32 = 0
            for offset in 0..<3 { chunk = chunk << 8 | UInt32(offset < count ? bytes[index + offset] : 0) }
            for position in 0...count { out.append(alphabet[Int(chunk >> UInt32(18 - 6 * position) & 63)]) }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
