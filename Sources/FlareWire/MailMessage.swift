import FlareCore
import FlareAPI
public import FlareSystem
import FlareCodec

/// One plain-text mail as RFC 5322 and MIME write it: UTF-8 throughout, the body in base64 (any script, any line
/// length), non-ASCII header words as RFC 2047 encoded-words, CRLF line ends. What SMTP hands over after `DATA`.
public struct MailMessage: Sendable, Equatable {
    public var fromName: String
    public var fromAddress: String
    public var toName: String
    public var toAddress: String
    public var subject: String
    public var body: String
    /// Without the angle brackets: `local@domain`. The same on every attempt, so that a mail sent twice (an attempt
    /// whose outcome was unknown) is one mail to the receiving side.
    public var messageID: String
    public var date: UnixMillis
    public var language: String

    public init(fromName: String, fromAddress: String, toName: String, toAddress: String, subject: String, body: String,
                messageID: String, date: UnixMillis, language: String) {
        self.fromName = fromName
        self.fromAddress = fromAddress
        self.toName = toName
        self.toAddress = toAddress
        self.subject = subject
        self.body = body
        self.messageID = messageID
        self.date = date
        self.language = language
    }

    public var bytes: [UInt8] {
        var text = ""
        text += "From: \(Self.mailbox(fromName, fromAddress))\r\n"
        text += "To: \(Self.mailbox(toName, toAddress))\r\n"
        text += "Subject: \(Self.headerText(subject))\r\n"
        text += "Date: \(Self.rfc5322Date(date))\r\n"
        text += "Message-ID: <\(messageID)>\r\n"
        text += "MIME-Version: 1.0\r\n"
        text += "Content-Type: text/plain; charset=utf-8\r\n"
        text += "Content-Transfer-Encoding: base64\r\n"
        text += "Content-Language: \(language)\r\n"
        text += "Auto-Submitted: auto-generated\r\n"
        text += "\r\n"
        let normalized = body.replacingLineEnds()
        let encoded = Base64URL.encodeStandard(Array(normalized.utf8))
        var index = encoded.startIndex
        while index < encoded.endIndex {
            let end = encoded.index(index, offsetBy: 76, limitedBy: encoded.endIndex) ?? encoded.endIndex
            text += encoded[index..<end] + "\r\n"
            index = end
        }
        return Array(text.utf8)
    }

    /// `"Name" <address>`, or the name as encoded-words when it is not plain ASCII.
    static func mailbox(_ name: String, _ address: String) -> String {
        let clean = name.unicodeScalars.filter { $0.properties.generalCategory != .control }
        let plain = String(String.UnicodeScalarView(clean))
        guard !plain.isEmpty else { return "<\(address)>" }
        if plain.unicodeScalars.allSatisfy({ $0.isASCII }) {
            let quoted = plain.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            return "\"\(quoted)\" <\(address)>"
        }
        return "\(encodedWords(plain)) <\(address)>"
    }

    /// A header's text: as it is when plain printable ASCII, else RFC 2047 B encoded-words.
    static func headerText(_ text: String) -> String {
        let flat = text.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : String($0) }.joined()
        if flat.unicodeScalars.allSatisfy({ $0.isASCII }) && flat.utf8.count <= 900 { return flat }
        return encodedWords(flat)
    }

    /// `=?UTF-8?B?…?=` words of at most 45 bytes of text each (72 characters), never cutting a character, folded
    /// onto lines of their own (RFC 2047 keeps each word ≤ 75 characters).
    static func encodedWords(_ text: String) -> String {
        var words: [String] = []
        var chunk: [UInt8] = []
        for character in text {
            let bytes = Array(String(character).utf8)
            if chunk.count + bytes.count > 45 && !chunk.isEmpty {
                words.append("=?UTF-8?B?\(Base64URL.encodeStandard(chunk))?=")
                chunk = []
            }
            chunk += bytes
        }
        if !chunk.isEmpty { words.append("=?UTF-8?B?\(Base64URL.encodeStandard(chunk))?=") }
        return words.joined(separator: "\r\n ")
    }

    /// `Wed, 02 Dec 2026 17:04:05 +0000`.
    static func rfc5322Date(_ millis: UnixMillis) -> String {
        let seconds = millis >= 0 ? millis / 1000 : (millis - 999) / 1000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = RFC3339.civilDate(daysSinceEpoch: days)
        let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][Int(((days % 7) + 7) % 7)]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(weekday), \(two(day)) \(months[Int(month) - 1]) \(year) \(two(secondOfDay / 3600)):\(two(secondOfDay % 3600 / 60)):\(two(secondOfDay % 60)) +0000"
    }
}

extension String {
    /// Every line end as CRLF (a lone CR or LF included).
    fileprivate func replacingLineEnds() -> String {
        var out = ""
        var previousCR = false
        for scalar in unicodeScalars {
            if scalar == "\n" {
                if !previousCR { out += "\r\n" }
                previousCR = false
            } else if scalar == "\r" {
                out += "\r\n"
                previousCR = true
            } else {
                out.unicodeScalars.append(scalar)
                previousCR = false
            }
        }
        return out
    }

    fileprivate func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
