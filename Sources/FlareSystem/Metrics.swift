import Synchronization

/// Counters and gauges rendered in the Prometheus text format. Counters are kept under one mutex (an
/// uncontended lock costs tens of nanoseconds, far below a fix's parse); gauges are read at render time.
public final class Metrics: Sendable {
    public enum Kind: String, Sendable { case counter, gauge }

    public struct Family: Sendable {
        public let name: String
        public let kind: Kind
        public let help: String
        public init(_ name: String, _ kind: Kind, _ help: String) {
            self.name = name
            self.kind = kind
            self.help = help
        }
    }

    private struct Series: Hashable { let family: String; let labels: String }

    private struct State {
        var families: [String: Family] = [:]
        var order: [String] = []
        var values: [Series: Double] = [:]
        var counters: [Series: Counter] = [:]
        var gauges: [String: @Sendable () -> Double] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    /// Counters and gauges whose values are set as things happen, listed on /metrics in this order; a family
    /// registered again is listed once.
    public func register(_ families: Family...) {
        state.withLock { state in
            for family in families where state.families[family.name] == nil {
                state.families[family.name] = family
                state.order.append(family.name)
            }
        }
    }

    /// A gauge whose value is computed when /metrics is read.
    public func registerGauge(_ family: Family, value: @escaping @Sendable () -> Double) {
        register(family)
        state.withLock { $0.gauges[family.name] = value }
    }

    public func increment(_ family: Family, labels: [(String, String)] = [], by amount: Double = 1) {
        let series = Series(family: family.name, labels: Self.render(labels: labels))
        state.withLock { state in
            if state.families[family.name] == nil {
                state.families[family.name] = family
                state.order.append(family.name)
            }
            state.values[series, default: 0] += amount
        }
    }

    /// One series of a counter family that is counted without taking the metrics lock: for paths that count
    /// on every request from several threads at once, where that lock was a point of contention.
    public final class Counter: Sendable {
        private let count = Atomic<UInt64>(0)
        public func increment() { count.wrappingAdd(1, ordering: .relaxed) }
        var value: Double { Double(count.load(ordering: .relaxed)) }
    }

    /// The lock-free handle of one series; the same handle for the same family and labels. Its count is part of
    /// the series, with anything `increment` adds to it.
    public func counter(_ family: Family, labels: [(String, String)] = []) -> Counter {
        register(family)
        let series = Series(family: family.name, labels: Self.render(labels: labels))
        return state.withLock { state in
            if let existing = state.counters[series] { return existing }
            let counter = Counter()
            state.counters[series] = counter
            return counter
        }
    }

    /// Replaces every series of a labelled gauge family at once (one per destination, say, whose set changes).
    public func setSeries(_ family: Family, _ series: [(labels: [(String, String)], value: Double)]) {
        register(family)
        state.withLock { state in
            state.values = state.values.filter { $0.key.family != family.name }
            for (labels, value) in series { state.values[Series(family: family.name, labels: Self.render(labels: labels))] = value }
        }
    }

    public func value(_ family: Family, labels: [(String, String)] = []) -> Double {
        let series = Series(family: family.name, labels: Self.render(labels: labels))
        return state.withLock { state in
            if let gauge = state.gauges[family.name] { return gauge() }
            return (state.values[series] ?? 0) + (state.counters[series]?.value ?? 0)
        }
    }

    public func renderText() -> String {
        let (families, order, gauges, values) = state.withLock { state in
            var values = state.values
            for (series, counter) in state.counters where counter.value > 0 { values[series, default: 0] += counter.value }
            return (state.families, state.order, state.gauges, values)
        }
        var output = ""
        for name in order {
            guard let family = families[name] else { continue }
            output += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.kind.rawValue)\n"
            if let gauge = gauges[name] {
                output += "\(name) \(Self.format(gauge()))\n"
                continue
            }
            let series = values.filter { $0.key.family == name }.sorted { $0.key.labels < $1.key.labels }
            if series.isEmpty, family.kind == .counter { output += "\(name) 0\n" }
            for (key, value) in series { output += "\(name)\(key.labels) \(Self.format(value))\n" }
        }
        return output
    }

    private static func render(labels: [(String, String)]) -> String {
        guard !labels.isEmpty else { return "" }
        return "{" + labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
    }

    private static func escape(_ value: String) -> String {
        var out = ""
        for char in value {
            switch char {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(char)
            }
        }
        return out
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}

/// The metric families Flare exports, one namespace for `/metrics`. Each module declares its own families in its
/// `Metrics+<Module>.swift` and registers them where it makes them.
public enum FlareMetrics {}
