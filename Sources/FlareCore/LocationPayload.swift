import FlareCrypto
import FlareSystem
import FlareCodec

/// Why a message on a location topic did not become a stored fix. The raw value is the metrics label and the
/// log word; none of them carries the payload or a coordinate.
public enum RejectReason: String, Sendable, CaseIterable, Error {
    case tooLarge = "too_large"
    case malformed = "malformed"
    case ignoredType = "ignored_type"          // OwnTracks lwt, transition, status, waypoint, …: counted, not an error
    case missingCoordinates = "missing_coordinates"
    case invalidCoordinates = "invalid_coordinates"
    case futureTimestamp = "future_timestamp"
    case staleTimestamp = "stale_timestamp"
    case badTopic = "bad_topic"
    case unknownShare = "unknown_share"
    case shareEnded = "share_ended"
    /// The share holds as many fixes as a share may (`FLARE_MAX_FIXES_PER_SHARE`).
    case fixLimitReached = "fix_limit_reached"
    /// `_type: encrypted` whose `data` is not base64 of a secretbox (or is longer than a location can be).
    case malformedCiphertext = "malformed_ciphertext"
    /// A position in clear for an end-to-end encrypted share: never stored, since the server must not see it.
    case notEncrypted = "not_encrypted"
    /// An encrypted position for a share that is not end-to-end encrypted: nobody could read it.
    case unexpectedEncryption = "unexpected_encryption"

    public var message: String {
        switch self {
        case .tooLarge: "payload exceeds the size limit"
        case .malformed: "payload is not a JSON object"
        case .ignoredType: "message type is not a location"
        case .missingCoordinates: "lat and lon are required numbers"
        case .invalidCoordinates: "lat must be within ±90 and lon within ±180"
        case .futureTimestamp: "tst is too far in the future (check the device clock, tst is Unix seconds)"
        case .staleTimestamp: "tst is older than the share"
        case .badTopic: "topic is not flare/v1/shares/{share_id}/location"
        case .unknownShare: "no such share"
        case .shareEnded: "the share has ended"
        case .fixLimitReached: "the share holds as many positions as a share may; start a new share"
        case .malformedCiphertext: "data must be base64 of a NaCl secretbox (24-byte nonce, 16-byte tag, ciphertext), at most \(SealedPayload.maximumDataLength) characters"
        case .notEncrypted: "the share is end-to-end encrypted: positions must be sent encrypted (the app's encryptionKey)"
        case .unexpectedEncryption: "the share is not end-to-end encrypted: nobody can read this position (remove the app's encryptionKey)"
        }
    }
}

/// What a message on a location topic is.
public enum LocationMessage: Sendable, Equatable {
    case fix(Fix)
    /// The tracker's MQTT last will, `{"_type":"lwt"}` (Android: no `tst`; iOS: `tst` = when it connected), sent by
    /// the broker when the tracker's connection was lost.
    case lastWill
    /// An OwnTracks `encrypted` message, `{"_type":"encrypted","data":"…"}`: only for an end-to-end encrypted share.
    /// A confirming tracker (`flare track --e2e`) puts its `seq_stream` and `seq` beside `data`, in clear: they say
    /// only how many messages it sent, which the server sees anyway.
    case sealed(data: String, sequence: TrackerSequence?)
}

extension LocationMessage {
    /// What a share stores of this message: a fix in clear for a plain share, the ciphertext for an end-to-end
    /// encrypted one, and neither the other way round. Nil for a last will.
    public func fix(endToEnd: Bool, receivedAt: UnixMillis) -> Result<Fix, RejectReason>? {
        switch self {
        case .lastWill: nil
        case .fix where endToEnd: .failure(.notEncrypted)
        case .fix(let fix): .success(fix)
        case .sealed where !endToEnd: .failure(.unexpectedEncryption)
        case .sealed(let data, let sequence):
            .success({ var fix = Fix.sealed(data, receivedAt: receivedAt); fix.sequence = sequence; return fix }())
        }
    }
}

/// What the server checks of an encrypted message: that `data` is base64 of something a secretbox can be. It cannot
/// check more, and does not try.
public enum SealedPayload {
    /// nonce (24) + tag (16): an empty plaintext.
    public static let minimumBoxBytes = 40
    /// An encrypted OwnTracks location is a few hundred characters; the bound keeps each one within what the store's
    /// change feed carries in one notification (PostgreSQL's NOTIFY takes 8,000 bytes).
    public static let maximumDataLength = 4096

    /// What the store keys a ciphertext by, in place of a fix's time and place: a QoS 1 redelivery is the same bytes.
    /// The first 16 bytes of its SHA-256.
    public static func digest(_ data: String) -> [UInt8] { Array(Crypto.sha256(data).prefix(16)) }

    public static func isValid(_ data: String) -> Bool {
        let count = data.utf8.count
        guard count <= maximumDataLength, count >= (minimumBoxBytes + 2) / 3 * 4, count % 4 == 0,
              data.utf8.allSatisfy({ $0 < 0x80 && base64Alphabet[Int($0)] }) else { return false }
        // Padding only at the end.
        let body = data.utf8.prefix { $0 != UInt8(ascii: "=") }
        return count - body.count <= 2 && data.utf8.dropFirst(body.count).allSatisfy { $0 == UInt8(ascii: "=") }
    }

    private static let base64Alphabet: [Bool] = (0..<128).map { byte in
        let c = UInt8(byte)
        return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c == 43 || c == 47 || c == 61
    }
}

/// Turns an OwnTracks `location` object or a bare `{"lat":…,"lon":…}` into a `Fix`.
public struct LocationPayloadParser: Sendable {
    public var maximumBytes: Int
    /// How far ahead of the server's clock a device timestamp may be.
    public var allowedFutureSkewSeconds: Int64
    /// How long before a share's creation a fix may be timestamped (a tracker's last fix before SOS).
    public var allowedPastSkewSeconds: Int64

    public init(maximumBytes: Int, allowedFutureSkewSeconds: Int64 = 300, allowedPastSkewSeconds: Int64 = 600) {
        self.maximumBytes = maximumBytes
        self.allowedFutureSkewSeconds = allowedFutureSkewSeconds
        self.allowedPastSkewSeconds = allowedPastSkewSeconds
    }

    /// - Parameters:
    ///   - receivedAt: the server's time of receipt; the fix time when the payload has no `tst`.
    ///   - shareCreatedAt: fixes timestamped long before the share began are refused.
    public func parse(_ payload: [UInt8], receivedAt: UnixMillis, shareCreatedAt: UnixMillis) -> Result<Fix, RejectReason> {
        switch parseMessage(payload, receivedAt: receivedAt, shareCreatedAt: shareCreatedAt) {
        case .success(.fix(let fix)): .success(fix)
        case .success(.lastWill): .failure(.ignoredType)
        case .success(.sealed): .failure(.unexpectedEncryption)
        case .failure(let reason): .failure(reason)
        }
    }

    /// A location, a last will or an encrypted message; every other OwnTracks type (transition, status, waypoint, …)
    /// is `ignoredType`.
    public func parseMessage(_ payload: [UInt8], receivedAt: UnixMillis, shareCreatedAt: UnixMillis) -> Result<LocationMessage, RejectReason> {
        guard payload.count <= maximumBytes else { return .failure(.tooLarge) }
        var fields = Fields()
        do {
            try JSONValue.forEachMember(ofObject: payload) { key, value in fields.take(key, value) }
        } catch {
            return .failure(.malformed)
        }
        if let type = fields.type {
            if type.stringValue == "lwt" { return .success(.lastWill) }
            if type.stringValue == "encrypted" {
                guard let data = fields.data?.stringValue, SealedPayload.isValid(data) else { return .failure(.malformedCiphertext) }
                return .success(.sealed(data: data, sequence: TrackerSequence(stream: fields.seqStream, number: fields.seq)))
            }
            guard type.stringValue == "location" else { return .failure(.ignoredType) }
        }
        guard let latitude = fields.lat?.doubleValue ?? Self.numericString(fields.lat),
              let longitude = fields.lon?.doubleValue ?? Self.numericString(fields.lon)
        else { return .failure(.missingCoordinates) }
        guard latitude.isFinite, longitude.isFinite, abs(latitude) <= 90, abs(longitude) <= 180 else {
            return .failure(.invalidCoordinates)
        }
        let nowSeconds = receivedAt / 1000
        var timestamp = nowSeconds
        if let tst = fields.tst {
            guard let seconds = tst.doubleValue, seconds.isFinite, seconds >= 0, seconds < 1e11 else { return .failure(.malformed) }
            timestamp = Int64(seconds)
        }
        guard timestamp <= nowSeconds + allowedFutureSkewSeconds else { return .failure(.futureTimestamp) }
        guard timestamp >= shareCreatedAt / 1000 - allowedPastSkewSeconds else { return .failure(.staleTimestamp) }

        // Optional fields that are out of range are dropped, not fatal: a bad battery reading must never cost a position.
        var fix = Fix(latitude: latitude, longitude: longitude, timestamp: timestamp)
        fix.accuracy = Self.number(fields.acc, in: 0...1_000_000)
        fix.altitude = Self.number(fields.alt, in: -20_000...100_000)
        fix.velocity = Self.number(fields.vel, in: 0...5_000)
        fix.course = Self.number(fields.cog, in: 0...360)
        fix.battery = Self.number(fields.batt, in: 0...100).map { Int($0) }
        fix.batteryStatus = Self.number(fields.bs, in: 0...3).map { Int($0) }
        if let conn = fields.conn?.stringValue, ["w", "m", "o"].contains(conn) { fix.connection = conn }
        if let tid = fields.tid?.stringValue, tid.utf8.count <= 8 { fix.trackerID = tid }
        if let trigger = fields.t?.stringValue, trigger.utf8.count == 1 { fix.trigger = trigger }
        fix.sequence = TrackerSequence(stream: fields.seqStream, number: fields.seq)
        return .success(.fix(fix))
    }

    /// The stream place of a message that was refused, so that a confirming tracker's mark moves past it (a refusal
    /// is final: sending it again changes nothing). Nil when the payload has none, or is not a JSON object.
    public func sequence(in payload: [UInt8]) -> TrackerSequence? {
        guard payload.count <= maximumBytes else { return nil }
        var fields = Fields()
        guard (try? JSONValue.forEachMember(ofObject: payload) { key, value in fields.take(key, value) }) != nil else { return nil }
        return TrackerSequence(stream: fields.seqStream, number: fields.seq)
    }

    /// The members a location is made of; everything else in the payload is read (it must be valid JSON) and
    /// dropped, the Wi-Fi names among them (`SSID`/`BSSID` on Android and older iOS, `ssid`/`bssid` on iOS since
    /// 2025): a network's name can tell where someone lives, and the family needs only the position. A repeated key keeps its last value, as a JSON object would.
    private struct Fields {
        var type, lat, lon, tst, acc, alt, vel, cog, batt, bs, conn, tid, t, seq, seqStream, data: JSONValue?

        mutating func take(_ key: String, _ value: JSONValue) {
            switch key {
            case "_type": type = value
            case "lat": lat = value
            case "lon": lon = value
            case "tst": tst = value
            case "acc": acc = value
            case "alt": alt = value
            case "vel": vel = value
            case "cog": cog = value
            case "batt": batt = value
            case "bs": bs = value
            case "conn": conn = value
            case "tid": tid = value
            case "t": t = value
            case "seq": seq = value
            case "seq_stream": seqStream = value
            case "data": data = value
            default: break
            }
        }
    }

    private static func number(_ value: JSONValue?, in range: ClosedRange<Double>) -> Double? {
        guard let number = value?.doubleValue, number.isFinite, range.contains(number) else { return nil }
        return number
    }

    /// Some HTTP clients send coordinates as strings ("48.13"); accept those, nothing looser.
    private static func numericString(_ value: JSONValue?) -> Double? {
        guard let text = value?.stringValue, text.utf8.count <= 32 else { return nil }
        return Double(text)
    }
}
