/// The escalation ladder's setting (`escalate_after_s`): when nobody answers "on my way" or "called emergency
/// services" this long after an SOS started or a check-in was missed, every contact is alerted again, and once more at
/// three times it.
public enum EscalationRules {
    /// Five minutes: long enough for a family member to open the link and answer, short enough that an unread mail
    /// is noticed while it still matters.
    public static let defaultSeconds = 300
    /// 0 turns the ladder off.
    public static let off = 0
    /// Below 5 s a ladder would fire before anyone could have read the first alert; above an hour it is no ladder.
    public static let seconds = 5...3_600
    /// The second step comes at this many times the first.
    public static let secondStepFactor: Int64 = 3

    /// The setting as given in a request; nil when it is not a whole number of seconds, 0 or within `seconds`.
    public static func valid(_ value: Double) -> Int? {
        guard value.rounded() == value, let whole = Int(exactly: value), whole == off || seconds.contains(whole) else { return nil }
        return whole
    }

    public static let invalidMessage = "escalate_after_s must be 0 (off) or a whole number of seconds from 5 to 3600"
}
