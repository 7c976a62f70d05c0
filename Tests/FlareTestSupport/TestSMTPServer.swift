import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real SMTP server (Debian's python3-aiosmtpd) on a loopback port, keeping every mail it takes as a file. It
/// refuses any recipient whose local part is `refused` with 550, as a mail server does for a mailbox that does not
/// exist. Given a user name and password, it requires AUTH with them. `stop()` (or deinit) terminates it; `start()`
/// brings it back on the same port.
public final class TestSMTPServer: @unchecked Sendable {
    public let port: Int
    public let directory: URL
    private let username: String?
    private let password: String?
    private var process: Process?

    /// One mail as the server received it.
    public struct Received: Sendable {
        public let envelopeFrom: String
        public let envelopeTo: [String]
        /// The message as sent after DATA (CRLF line ends).
        public let raw: [UInt8]

        /// The header fields, unfolded, by lowercased name (the last of a repeated one).
        public var headers: [String: String] {
            let text = String(decoding: raw, as: UTF8.self)
            let head = text.components(separatedBy: "\r\n\r\n").first ?? ""
            var fields: [String: String] = [:]
            var current: (String, String)?
            for line in head.components(separatedBy: "\r\n") {
                if line.hasPrefix(" ") || line.hasPrefix("\t"), let (name, value) = current {
                    current = (name, value + line.drop(while: { $0 == " " || $0 == "\t" }))
                    continue
                }
                if let (name, value) = current { fields[name] = value }
                guard let colon = line.firstIndex(of: ":") else { current = nil; continue }
                current = (line[..<colon].lowercased(), String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
            }
            if let (name, value) = current { fields[name] = value }
            return fields
        }

        /// A header's text with RFC 2047 encoded-words (`=?UTF-8?B?…?=`) decoded.
        public func decodedHeader(_ name: String) -> String? {
            guard let value = headers[name.lowercased()] else { return nil }
            var out = ""
            var rest = Substring(value)
            var lastWasWord = false
            while !rest.isEmpty {
                if rest.hasPrefix("=?"), let end = rest.dropFirst(2).range(of: "?=") {
                    let word = rest[rest.index(rest.startIndex, offsetBy: 2)..<end.lowerBound]
                    let parts = word.split(separator: "?", maxSplits: 2)
                    if parts.count == 3, parts[0].uppercased() == "UTF-8", parts[1].uppercased() == "B",
                       let data = Data(base64Encoded: String(parts[2])) {
                        out += String(decoding: data, as: UTF8.self)
                        rest = rest[end.upperBound...]
                        lastWasWord = true
                        continue
                    }
                }
                // White space between two encoded-words is not part of the text (RFC 2047 §6.2).
                if lastWasWord, let next = rest.firstIndex(where: { $0 != " " }), rest[next...].hasPrefix("=?"), next != rest.startIndex {
                    rest = rest[next...]
                    continue
                }
                out.append(rest.removeFirst())
                lastWasWord = false
            }
            return out
        }

        /// The body: base64 decoded when the mail says so, as UTF-8.
        public var body: String {
            let text = String(decoding: raw, as: UTF8.self)
            guard let split = text.range(of: "\r\n\r\n") else { return "" }
            let content = String(text[split.upperBound...])
            if headers["content-transfer-encoding"]?.lowercased() == "base64" {
                let joined = content.components(separatedBy: "\r\n").joined()
                return Data(base64Encoded: joined).map { String(decoding: $0, as: UTF8.self) } ?? "<not base64>"
            }
            return content
        }
    }

    public init(port: Int? = nil, username: String? = nil, password: String? = nil) throws {
        self.port = try port ?? FreePort.next()
        self.username = username
        self.password = password
        directory = try TempDirectory.make(prefix: "flare-smtp")
        try Self.script.write(to: directory.appendingPathComponent("smtp_server.py"), atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("mail"), withIntermediateDirectories: true)
        try start()
    }

    public var url: String {
        guard let username else { return "smtp://127.0.0.1:\(port)" }
        return "smtp://\(username):\(password ?? "")@127.0.0.1:\(port)"
    }

    public func start() throws {
        precondition(process == nil, "SMTP server already running")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        var arguments = [directory.appendingPathComponent("smtp_server.py").path, "--port", String(port),
                         "--directory", directory.appendingPathComponent("mail").path]
        if let username { arguments += ["--user", username, "--password", password ?? ""] }
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.runUnmasked()
        self.process = process
        guard FreePort.waitUntilAccepting(port: port, timeout: .seconds(15)) else {
            stop()
            throw TestSupportError("the SMTP server (python3-aiosmtpd) did not start on port \(port)")
        }
    }

    public func stop() {
        guard let process else { return }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        self.process = nil
    }

    deinit { stop() }

    /// Every mail taken so far, in the order taken.
    public var received: [Received] {
        let mail = directory.appendingPathComponent("mail")
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: mail.path)) ?? []).filter { $0.hasSuffix(".json") }.sorted()
        return names.compactMap { name in
            let base = mail.appendingPathComponent(String(name.dropLast(5)))
            guard let envelope = try? JSONSerialization.jsonObject(with: Data(contentsOf: base.appendingPathExtension("json"))) as? [String: Any],
                  let raw = try? Data(contentsOf: base.appendingPathExtension("eml")) else { return nil }
            return Received(envelopeFrom: envelope["from"] as? String ?? "", envelopeTo: envelope["to"] as? [String] ?? [], raw: Array(raw))
        }
    }

    private static let script = #"""
        import argparse, asyncio, json, os, signal, threading
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult

        parser = argparse.ArgumentParser()
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--directory", required=True)
        parser.add_argument("--user")
        parser.add_argument("--password")
        args = parser.parse_args()

        class Handler:
            def __init__(self):
                self.count = len([n for n in os.listdir(args.directory) if n.endswith(".json")])
                self.answers_lost = set()

            async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
                if address.split("@")[0] == "refused":
                    return "550 5.1.1 No such mailbox"
                envelope.rcpt_tos.append(address)
                return "250 OK"

            async def handle_DATA(self, server, session, envelope):
                self.count += 1
                base = os.path.join(args.directory, "%05d" % self.count)
                with open(base + ".eml", "wb") as f:
                    f.write(envelope.original_content)
                with open(base + ".tmp", "w") as f:
                    json.dump({"from": envelope.mail_from, "to": envelope.rcpt_tos}, f)
                os.rename(base + ".tmp", base + ".json")
                # A server that took the mail and broke the connection before its answer (the first time for each
                # "lost-answer@" recipient): the sender cannot know whether it went out.
                lost = [a for a in envelope.rcpt_tos if a.split("@")[0] == "lost-answer" and a not in self.answers_lost]
                if lost:
                    self.answers_lost.update(lost)
                    server.transport.abort()
                    return "421 closing"
                return "250 Message accepted"

        def authenticate(server, session, envelope, mechanism, auth_data):
            ok = auth_data.login.decode() == args.user and auth_data.password.decode() == args.password
            return AuthResult(success=ok, handled=False)

        options = {}
        if args.user is not None:
            options = dict(authenticator=authenticate, auth_required=True, auth_require_tls=False)
        controller = Controller(Handler(), hostname="127.0.0.1", port=args.port, **options)
        controller.start()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        # Never outlives its test: at most ten minutes.
        stop.wait(600)
        controller.stop()
        """#
}
