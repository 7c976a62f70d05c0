import Testing
@testable import FlareGateway

/// What the viewer's files lose on the way to a phone: indentation, blank lines, comments; never content.
@Suite struct ViewerAssetsTests {
    @Test func stylesLoseTheirCommentsButNotAQuotedOne() {
        let css = Array("""
            /* the header */
            .bar {
              color: #fff; /* white */
              content: "/* kept */";
            }
            /* a comment
               over lines */
            .x { background: url('a/*b.png'); }
            """.utf8)
        let served = String(decoding: ViewerAssets.compactStyles(css), as: UTF8.self)
        #expect(served == ".bar {\ncolor: #fff; \ncontent: \"/* kept */\";\n}\n.x { background: url('a/*b.png'); }\n")
    }

    @Test func scriptsLoseWholeLineCommentsAndTablesTheirIndentation() {
        let js = Array("  // why\n  var a = 1; // kept: not a whole line\n\n".utf8)
        #expect(String(decoding: ViewerAssets.compact(js, dropLineComments: true), as: UTF8.self) == "var a = 1; // kept: not a whole line\n")
        let json = Array("{\n  \"a\": \"x  y\",\n  \"b\": 2\n}\n".utf8)
        #expect(String(decoding: ViewerAssets.compact(json, dropLineComments: false), as: UTF8.self) == "{\n\"a\": \"x  y\",\n\"b\": 2\n}\n")
    }

    @Test func pagesLoseTheirCommentsOverLinesAndWithin() {
        let html = Array("<p>a</p>\n<!-- hooks:\n  body[data-state] -->\n<select><!-- filled --><option>x</option></select>\n<!-- unclosed".utf8)
        #expect(String(decoding: ViewerAssets.dropHTMLComments(html), as: UTF8.self) == "<p>a</p>\n\n<select><option>x</option></select>\n")
    }
}
