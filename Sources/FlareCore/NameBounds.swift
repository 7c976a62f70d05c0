/// How long a name people type may be (a share's name, an answer's name, a key's label): counted in Unicode scalars
/// and in UTF-8 bytes, never in grapheme clusters.
///
/// A cluster holds any number of combining marks: "Mom" followed by thousands of them is 3 clusters (Swift's
/// `String.count`), thousands of scalars and bytes, and a stack of marks that draws far above and below its line. A
/// bound on scalars bounds the marks; a bound on bytes bounds what is stored and sent to every viewer.
public struct NameBounds: Sendable, Equatable {
    public let maximumScalars: Int
    public let maximumBytes: Int

    /// Three bytes a scalar: a whole name in Chinese, Japanese or Korean fits; as many emoji (four bytes each) do not.
    public init(maximumScalars: Int) {
        self.maximumScalars = maximumScalars
        self.maximumBytes = 3 * maximumScalars
    }

    /// A share's name (the page's title).
    public static let shareName = NameBounds(maximumScalars: 80)
    /// An answer's name: the viewer's form takes 40 UTF-16 units, which always fits.
    public static let answerName = NameBounds(maximumScalars: 40)
    /// An owner key's label.
    public static let keyLabel = NameBounds(maximumScalars: 80)

    /// Whether `text` is within both bounds (bytes first: a native string knows its UTF-8 length at once).
    public func admits(_ text: some StringProtocol) -> Bool {
        text.utf8.count <= maximumBytes && text.unicodeScalars.count <= maximumScalars
    }

    /// Whether `text` holds a scalar that is not drawn but changes how what is around it reads: a control character, or
    /// a format character (the bidirectional overrides and isolates U+202A-202E and U+2066-2069, which turn
    /// "Anna\u{202E}lrig" into "Annagirl" backwards; zero-width spaces; soft hyphens). Names and messages a sharer or
    /// a key types are shown to other people, in pages, mail subjects and notifications: such a scalar lets one
    /// pass for another text. The zero-width joiner (U+200D) stays: emoji sequences such as a family need it.
    /// - Parameter allowingNewlines: for messages of several lines.
    public static func hasHiddenScalars(_ text: some StringProtocol, allowingNewlines: Bool = false) -> Bool {
        text.unicodeScalars.contains { scalar in
            switch scalar.properties.generalCategory {
            case .control: !(allowingNewlines && scalar == "\n")
            case .format: scalar.value != 0x200D
            default: false
            }
        }
    }

    /// For error messages: "at most 40 characters (Unicode code points) and 120 bytes".
    public var description: String { "at most \(maximumScalars) characters (Unicode code points) and \(maximumBytes) bytes" }
}
