extension QRCode {
    /// An SVG image: one path of unit squares, crisp at any size, `border` light modules around.
    public func svg(border: Int = 4) -> String {
        let border = max(0, border)
        let side = size + 2 * border
        var path = ""
        for y in 0..<size {
            var x = 0
            while x < size {
                guard isDark(x: x, y: y) else { x += 1; continue }
                // A horizontal run of dark modules becomes one rectangle.
                var run = 1
                while x + run < size && isDark(x: x + run, y: y) { run += 1 }
                path += "M\(x + border) \(y + border)h\(run)v1h-\(run)z"
                x += run
            }
        }
        return """
            <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 \(side) \(side)" shape-rendering="crispEdges">\
            <rect width="\(side)" height="\(side)" fill="#fff"/><path fill="#000" d="\(path)"/></svg>
            """
    }
}
