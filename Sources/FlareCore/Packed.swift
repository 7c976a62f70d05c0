/// An optional number kept in the number's own eight bytes, with a sentinel for "absent", instead of Swift's
/// optional wrapper, which pads an `Int64?` or a `Double?` to sixteen. `Share` and `Fix` are held for every live share
/// in the registry, so each of their optional numbers is paid 100,000 times at that scale (docs/performance.md,
/// "A share's memory"). The sentinel is a value Flare never holds: `Int64.min` for instants and row ids, minus
/// infinity for measurements (the parser takes finite numbers only). Storing the sentinel itself reads back as nil.
@propertyWrapper
public struct Packed<Value: PackableNumber>: Sendable, Equatable {
    private var stored: Value

    public init(wrappedValue: Value?) {
        stored = wrappedValue ?? Value.absent
    }

    public var wrappedValue: Value? {
        get { stored == Value.absent ? nil : stored }
        set { stored = newValue ?? Value.absent }
    }
}

/// A number with a value that stands for "absent" in `Packed`.
public protocol PackableNumber: Sendable, Equatable {
    static var absent: Self { get }
}

extension Int64: PackableNumber {
    public static var absent: Int64 { .min }
}

extension Double: PackableNumber {
    public static var absent: Double { -.infinity }
}
