internal import CQREncode

/// A QR code symbol from libqrencode (Debian `libqrencode-dev`), as a square of dark/light modules, with
/// renderers for PNG and SVG. The C handle never leaves this file.
public struct QRCode: Sendable, Equatable {
    public enum Correction: Sendable {
        /// ~7 % of the symbol may be damaged. Smallest symbol: right for a screen.
        case low
        /// ~15 %: right for paper.
        case medium

        var level: QRecLevel { self == .low ? QR_ECLEVEL_L : QR_ECLEVEL_M }
    }

    public struct EncodeError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Modules per side.
    public let size: Int
    /// Row-major, `true` = dark.
    public let modules: [Bool]

    /// Encodes `text` as 8-bit data (URLs with base64url payloads are not alphanumeric-mode text anyway).
    public init(_ text: String, correction: Correction = .low) throws(EncodeError) {
        guard !text.isEmpty else { throw EncodeError(description: "nothing to encode") }
        // libqrencode returns NULL with errno ERANGE when the data does not fit version 40.
        guard let symbol = text.withCString({ QRcode_encodeString8bit($0, 0, correction.level) }) else {
            throw EncodeError(description: "text of \(text.utf8.count) bytes does not fit in a QR code")
        }
        defer { QRcode_free(symbol) }
        let width = Int(symbol.pointee.width)
        // Bit 0 of each byte is the module's colour; the other bits describe its role in the symbol.
        let buffer = UnsafeBufferPointer(start: symbol.pointee.data, count: width * width)
        size = width
        modules = buffer.map { $0 & 1 == 1 }
    }

    public func isDark(x: Int, y: Int) -> Bool { modules[y * size + x] }
}
