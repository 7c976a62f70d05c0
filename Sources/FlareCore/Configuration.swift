/// Settings read once at start-up with one precedence: built-in default < config file < environment < flags.
/// Every setting has one name, used as the environment variable, as the config-file key and (in kebab case)
/// as the flag, so an error can always name what to fix.
public struct Configuration: Sendable {
    public struct Setting: Sendable {
        public let name: String          // FLARE_HTTP_ADDR
        public let defaultValue: String? // nil: derived from other settings, or unset
        public let help: String

        public init(_ name: String, _ defaultValue: String?, _ help: String) {
            self.name = name
            self.defaultValue = defaultValue
            self.help = help
        }

        /// `--http-addr` for `FLARE_HTTP_ADDR`.
        public var flag: String {
            "--" + name.dropFirst("FLARE_".count).lowercased().replacingUnderscores
        }
    }

    public struct ConfigurationError: Error, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    public let settings: [Setting]
    private var values: [String: String]
    /// Where each value came from ("default", "file PATH", "environment", "flag"), for `--print-config`-style output.
    public private(set) var sources: [String: String]
    public let positional: [String]

    public static let fileSettingName = "FLARE_CONFIG"

    /// - Parameters:
    ///   - readFile: reads the config file named by `--config` or `FLARE_CONFIG`.
    public init(settings: [Setting], arguments: [String], environment: [String: String],
                readFile: (String) throws -> String) throws(ConfigurationError) {
        self.settings = settings
        var values: [String: String] = [:]
        var sources: [String: String] = [:]
        for setting in settings {
            if let value = setting.defaultValue {
                values[setting.name] = value
                sources[setting.name] = "default"
            }
        }
        let known = Dictionary(uniqueKeysWithValues: settings.map { ($0.name, $0) })
        let byFlag = Dictionary(uniqueKeysWithValues: settings.map { ($0.flag, $0) })

        // Flags are parsed first (but applied last) because --config chooses the file.
        var flagValues: [(String, String)] = []
        var positional: [String] = []
        var configPath = environment[Self.fileSettingName]
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else { positional.append(argument); continue }
            var flag = argument
            var value: String?
            if let equals = argument.firstIndex(of: "=") {
                flag = String(argument[..<equals])
                value = String(argument[argument.index(after: equals)...])
            }
            if flag == "--config" {
                if value == nil {
                    guard index < arguments.count else { throw ConfigurationError("--config needs a file path") }
                    value = arguments[index]
                    index += 1
                }
                configPath = value
                continue
            }
            guard let setting = byFlag[flag] else {
                throw ConfigurationError("unknown option \(flag) (see --help)")
            }
            if value == nil {
                guard index < arguments.count else { throw ConfigurationError("\(flag) needs a value (\(setting.help))") }
                value = arguments[index]
                index += 1
            }
            flagValues.append((setting.name, value!))
        }

        if let configPath, !configPath.isEmpty {
            let text: String
            do { text = try readFile(configPath) } catch {
                throw ConfigurationError("cannot read config file \(configPath) (\(Self.fileSettingName) / --config): \(error)")
            }
            for (lineNumber, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let line = String(rawLine).trimmingWhitespace
                if line.isEmpty || line.hasPrefix("#") { continue }
                guard let equals = line.firstIndex(of: "=") else {
                    throw ConfigurationError("\(configPath):\(lineNumber + 1): expected NAME=value")
                }
                let name = String(line[..<equals]).trimmingWhitespace
                var value = String(line[line.index(after: equals)...]).trimmingWhitespace
                if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
                guard known[name] != nil else {
                    throw ConfigurationError("\(configPath):\(lineNumber + 1): unknown setting \(name)")
                }
                values[name] = value
                sources[name] = "file \(configPath)"
            }
        }
        for setting in settings {
            if let value = environment[setting.name] {
                values[setting.name] = value
                sources[setting.name] = "environment"
            }
        }
        for (name, value) in flagValues {
            values[name] = value
            sources[name] = "flag"
        }
        self.values = values
        self.sources = sources
        self.positional = positional
    }

    public func string(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    public func string(_ name: String, default fallback: String) -> String { string(name) ?? fallback }

    public func integer(_ name: String, in range: ClosedRange<Int64>) throws(ConfigurationError) -> Int64 {
        guard let text = string(name) else { throw ConfigurationError("\(name) is not set") }
        guard let value = Int64(text), range.contains(value) else {
            throw ConfigurationError("\(name)=\(text) is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }


    /// The `--help` text: usage, then every setting with its default.
    public static func helpText(usage: String, settings: [Setting]) -> String {
        var text = usage + "\n\nEvery setting can be given in a config file (--config FILE or FLARE_CONFIG, lines NAME=value),\n"
        text += "as an environment variable, or as a flag; later ones win: file < environment < flag.\n\n"
        let width = settings.map { $0.flag.count + 7 }.max() ?? 20
        for setting in settings {
            let left = "  \(setting.flag) V"
            text += left + String(repeating: " ", count: max(1, width - left.count + 2)) + setting.help + "\n"
            var details = "env \(setting.name)"
            if let value = setting.defaultValue { details += ", default \(value.isEmpty ? "(empty)" : value)" }
            text += String(repeating: " ", count: width + 2) + "[\(details)]\n"
        }
        return text
    }
}

extension String {
    var replacingUnderscores: String { String(map { $0 == "_" ? "-" : $0 }) }
}

/// `host:port`, `[v6]:port` or `:port` as used by FLARE_HTTP_ADDR.
public struct HostPort: Sendable, Equatable {
    public let host: String
    public let port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public init?(_ text: String) {
        var host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if host.contains(":") { return nil }
        }
        if host.isEmpty { host = "0.0.0.0" }
        guard let port = Int(portText), (0...65535).contains(port) else { return nil }
        self.host = String(host)
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// `mqtt://host:port` (or `mqtts://`), as used by FLARE_MQTT_URL.
public struct MQTTURL: Sendable, Equatable {
    public let tls: Bool
    public let host: String
    public let port: Int

    public init?(_ text: String) {
        let tls: Bool
        let rest: Substring
        if text.hasPrefix("mqtt://") { tls = false; rest = text.dropFirst(7) }
        else if text.hasPrefix("mqtts://") { tls = true; rest = text.dropFirst(8) }
        else { return nil }
        let authority = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        if let hostPort = HostPort(String(authority)) {
            self.host = hostPort.host
            self.port = hostPort.port
        } else if !authority.isEmpty, !authority.contains(":") {
            self.host = String(authority)
            self.port = tls ? 8883 : 1883
        } else {
            return nil
        }
        self.tls = tls
    }
}
