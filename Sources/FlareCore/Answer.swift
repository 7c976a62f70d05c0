import FlareSystem
/// What a family member can answer the person who shared, in one tap.
public enum AnswerKind: String, Sendable, CaseIterable {
    case onMyWay = "on_my_way"
    case calledEmergency = "called_emergency"
    case cannotHelp = "cannot_help"
}

/// A family member's answer, as stored with the share (and purged with its history).
public struct Answer: Sendable, Equatable {
    /// Increasing in the order the store took them, across instances: a reader asks for those after the last it has.
    public let id: Int64
    public let kind: AnswerKind
    /// As typed (within `NameBounds.answerName`, never markup: pages show it as text); "" for none.
    public let name: String
    public let at: UnixMillis

    public init(id: Int64, kind: AnswerKind, name: String, at: UnixMillis) {
        self.id = id
        self.kind = kind
        self.name = name
        self.at = at
    }

    /// The name to store, trimmed; nil when it is too long or holds control characters (refused, not cut).
    public static func validName(_ text: String?) -> String? {
        let trimmed = (text ?? "").trimmingWhitespace
        guard NameBounds.answerName.admits(trimmed), !NameBounds.hasHiddenScalars(trimmed) else { return nil }
        return trimmed
    }
}

/// Who has seen a share's link: when it was first opened, by how many distinct browsers, and how many watch now.
/// Counted from a random viewer id each page keeps, stored only as a hash of (share, id).
public struct Audience: Sendable, Equatable {
    public var firstOpenedAt: UnixMillis?
    public var opened: Int
    public var watching: Int
    /// The share's personal links, oldest first (none for a share made without contacts).
    public var links: [LinkAudience]

    public init(firstOpenedAt: UnixMillis?, opened: Int, watching: Int, links: [LinkAudience] = []) {
        self.firstOpenedAt = firstOpenedAt
        self.opened = opened
        self.watching = watching
        self.links = links
    }

    public static let nobody = Audience(firstOpenedAt: nil, opened: 0, watching: 0)
}
