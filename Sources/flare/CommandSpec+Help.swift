/// The texts made from a command's table: its synopsis (for usage errors too) and `flare help COMMAND`. Nothing here
/// is written by hand per command; what a command says about itself is in its `CommandSpec`.
extension CommandSpec {
    static let lineWidth = 110

    /// `usage: flare share create [--duration SECONDS] …`, wrapped below the command's name.
    var usage: String {
        let head = "usage: flare \(name) "
        let parts = arguments.map(\.label) + options.map { "[\($0.label)\($0.repeatable ? " ..." : "")]" }
        return parts.isEmpty ? "usage: flare \(name)" : Self.wrap(parts, after: head, indent: head.count)
    }

    /// `flare help COMMAND` and `flare COMMAND --help`: the usage, what it does, then every argument and every option
    /// the parser accepts, each with its help.
    var help: String {
        var text = usage + "\n\n" + Self.paragraph(summary) + "\n"
        if !details.isEmpty { text += "\n" + Self.paragraph(details) + "\n" }
        if !arguments.isEmpty {
            text += "\narguments:\n" + Self.table(arguments.map { ($0.name, $0.help + ($0.optional ? " (optional)" : "")) })
        }
        let rows = options.map { ($0.label, $0.help + ($0.repeatable ? " (repeatable)" : "")) }
        text += "\noptions:\n" + Self.table(rows + [("-h, --help", "this help")])
        return text
    }

    /// Two columns: the names, and beside each its help, wrapped; a name too long for the column has its help below.
    static func table(_ rows: [(name: String, help: String)], column: Int? = nil) -> String {
        let column = column ?? nameColumn(rows.map(\.name))
        return rows.map { row in
            let words = row.help.split(separator: " ").map(String.init)
            let name = "  " + row.name
            guard name.count + 2 <= column else { return name + "\n" + wrap(words, after: String(repeating: " ", count: column), indent: column) }
            return wrap(words, after: name + String(repeating: " ", count: column - name.count), indent: column)
        }.joined(separator: "\n") + "\n"
    }

    static func paragraph(_ text: String) -> String { wrap(text.split(separator: " ").map(String.init), after: "", indent: 0) }

    /// Where the help column of a table of `names` begins: past the longest name, unless it is very long.
    static func nameColumn(_ names: [String]) -> Int { min(names.map(\.count).max() ?? 0, 26) + 4 }

    /// `words` after `prefix`, wrapped at `lineWidth`, each following line indented by `indent` spaces.
    static func wrap(_ words: [String], after prefix: String, indent: Int) -> String {
        var lines: [String] = []
        var line = prefix, lineHasWords = false
        for word in words {
            if lineHasWords && line.count + 1 + word.count > lineWidth {
                lines.append(line)
                line = String(repeating: " ", count: indent) + word
            } else {
                line += (lineHasWords ? " " : "") + word
            }
            lineHasWords = true
        }
        lines.append(line)
        return lines.joined(separator: "\n")
    }
}
