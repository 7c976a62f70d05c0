import FlareCore
import FlareSystem
/// Settings read once at start-up with one precedence: built-in default < config file < environment < flags.
/// Every setting has one name, used as the environment variable, as the config-file key and (in kebab case)
/// as the flag, so an error can always name what to fix.
public struct Configuration: Sendable {
    /// One setting, declared once: its name, what values it takes, its default, what it means, and whether it is a
    /// secret. `--help`, `--print-config`, validation and the typed accessors all come from this declaration.
    public struct Setting: Sendable {
        public enum Kind: Sendable {
            case text
            /// A whole number in the range.
            case integer(ClosedRange<Int64>)
            /// One of these words.
            case choice([String])
            /// `host:port`, `[v6]:port` or `:port`.
            case address
            /// A URL with one of these schemes.
            case url(schemes: [String])
            /// `RATE/BURST`: RATE requests per second on average, BURST at once.
            case rate
        }

        public let name: String          // FLARE_HTTP_ADDR
        public let kind: Kind
        /// nil: unset unless given, or derived from other settings (`derived`).
        public let defaultValue: String?
        public let help: String
        /// Shown as `(set)` by `--print-config`, never as its value.
        public let isSecret: Bool
        /// The value when none is given, computed from other settings (after they are known); its description
        /// for `--help`, e.g. "http://FLARE_HTTP_ADDR".
        public let derived: (@Sendable (Configuration) -> String?)?
        public let derivedDescription: String?

        public init(_ name: String, _ kind: Kind = .text, _ defaultValue: String?, _ help: String, secret: Bool = false,
                    derived: (description: String, value: @Sendable (Configuration) -> String?)? = nil) {
            self.name = name
            self.kind = kind
            self.defaultValue = defaultValue
            self.help = help
            self.isSecret = secret
            self.derived = derived?.value
            self.derivedDescription = derived?.description
        }

        /// `--http-addr` for `FLARE_HTTP_ADDR`.
        public var flag: String {
            "--" + name.dropFirst("FLARE_".count).lowercased().replacingUnderscores
        }

        /// Nil when `value` is acceptable; otherwise the error to show, naming the setting.
        func problem(with value: String) -> String? {
            switch kind {
            case .text:
                return nil
            case .integer(let range):
                guard let number = Int64(value), range.contains(number) else {
                    return "\(name)=\(value) is not a whole number in \(range.lowerBound)...\(range.upperBound)"
                }
                return nil
            case .choice(let words):
                return words.contains(value) ? nil : "\(name) must be \(words.joined(separator: ", ")) (got \(value))"
            case .address:
                return HostPort(value) == nil ? "\(name) must be host:port, e.g. 127.0.0.1:8080 or [::1]:8080 (got \(value))" : nil
            case .url(let schemes):
                let ok = schemes.contains { scheme in
                    value.hasPrefix(scheme + "://") && value.count > scheme.count + 3
                } && !value.contains(" ")
                return ok ? nil : "\(name) must be a \(schemes.map { $0 + "://" }.joined(separator: " or ")) URL (got \(value))"
            case .rate:
                return Configuration.rateRule(value) == nil
                    ? "\(name) must be RATE/BURST with RATE > 0 and BURST >= 1, e.g. 5/60 (got \(value))" : nil
            }
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
        for setting in settings {
            if let value = values[setting.name], !value.isEmpty, let problem = setting.problem(with: value) {
                throw ConfigurationError(problem)
            }
        }
        self.values = values
        self.sources = sources
        self.positional = positional
        // Derived values last, from the settings as given, in declaration order (a derived value may use an
        // earlier derived one).
        for setting in settings where self.string(setting.name) == nil {
            guard let derive = setting.derived, let value = derive(self) else { continue }
            if let problem = setting.problem(with: value) { throw ConfigurationError(problem) }
            self.values[setting.name] = value
            self.sources[setting.name] = "derived"
        }
    }

    /// The built-in defaults alone (no file, environment or flags): what a test starts from.
    public static func defaults(_ settings: [Setting], overriding: [String: String] = [:]) throws(ConfigurationError) -> Configuration {
        try Configuration(settings: settings, arguments: [], environment: overriding, readFile: { _ in "" })
    }

    public func string(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    public func string(_ name: String, default fallback: String) -> String { string(name) ?? fallback }

    /// A setting declared as `.integer`, already checked against its range when the configuration was read.
    public func integer(_ name: String) throws(ConfigurationError) -> Int64 {
        guard let setting = settings.first(where: { $0.name == name }), case .integer(let range) = setting.kind else {
            throw ConfigurationError("\(name) is not an integer setting")
        }
        return try integer(name, in: range)
    }

    public func hostPort(_ name: String) throws(ConfigurationError) -> HostPort {
        guard let text = string(name), let value = HostPort(text) else { throw ConfigurationError("\(name) is not set to host:port") }
        return value
    }

    public func rateRule(_ name: String) throws(ConfigurationError) -> RateLimiter.Rule {
        guard let text = string(name), let rule = Self.rateRule(text) else { throw ConfigurationError("\(name) is not set to RATE/BURST") }
        return rule
    }

    /// "RATE/BURST", e.g. "5/60".
    static func rateRule(_ text: String) -> RateLimiter.Rule? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let rate = Double(parts[0]), let burst = Double(parts[1]),
              rate > 0, rate.isFinite, burst >= 1, burst.isFinite else { return nil }
        return RateLimiter.Rule(ratePerSecond: rate, burst: burst)
    }

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
            if let derived = setting.derivedDescription { details += ", default \(derived)" }
            if setting.isSecret { details += ", secret" }
            text += String(repeating: " ", count: width + 2) + "[\(details)]\n"
        }
        return text
    }
}

extension Configuration {
    /// `--print-config`: every setting's effective value and where it came from (default, file, environment, flag,
    /// derived), one `NAME=value  # source` line each, in a form a config file accepts. Secrets show as `(set)`.
    public var printed: String {
        var text = ""
        let width = settings.map(\.name.count).max() ?? 0
        for setting in settings {
            let value = string(setting.name)
            let shown: String
            if setting.isSecret { shown = value == nil ? "" : "(set)" } else { shown = value ?? "" }
            let left = "\(setting.name)=\(Self.quotedIfNeeded(shown))"
            let source = value == nil ? "unset" : (sources[setting.name] ?? "default")
            text += left + String(repeating: " ", count: max(1, width + 2 + 40 - left.count)) + "# \(source)\n"
        }
        return text
    }

    private static func quotedIfNeeded(_ value: String) -> String {
        value.contains(where: { $0 == " " || $0 == "#" || $0 == "\"" }) ? "\"\(value)\"" : value
    }
}

extension String {
    var replacingUnderscores: String { String(map { $0 == "_" ? "-" : $0 }) }
}
