extension QRCode {
    /// A 1-bit greyscale PNG: `scale` pixels per module, `border` light modules around (the standard asks for 4).
    ///
    /// Written by hand: IHDR, one IDAT holding a zlib stream of stored (uncompressed) deflate blocks, IEND.
    /// A QR image is a few kilobytes uncompressed, so compression would buy nothing worth a dependency.
    public func png(scale: Int = 8, border: Int = 4) -> [UInt8] {
        let scale = max(1, scale), border = max(0, border)
        let side = (size + 2 * border) * scale
        let rowBytes = (side + 7) / 8
        var raw: [UInt8] = []
        raw.reserveCapacity((rowBytes + 1) * side)
        for pixelY in 0..<side {
            raw.append(0)  // filter type: none
            let moduleY = pixelY / scale - border
            var byte: UInt8 = 0
            for pixelX in 0..<side {
                let moduleX = pixelX / scale - border
                let dark = moduleX >= 0 && moduleY >= 0 && moduleX < size && moduleY < size && isDark(x: moduleX, y: moduleY)
                // 1-bit greyscale: 1 is white.
                if !dark { byte |= 0x80 >> UInt8(pixelX % 8) }
                if pixelX % 8 == 7 || pixelX == side - 1 {
                    raw.append(byte)
                    byte = 0
                }
            }
        }

        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        var header: [UInt8] = []
        header += PNG.bigEndian(UInt32(side))
        header += PNG.bigEndian(UInt32(side))
        header += [1, 0, 0, 0, 0]  // bit depth 1, colour type greyscale, deflate, adaptive filtering, no interlace
        PNG.chunk("IHDR", header, into: &png)
        PNG.chunk("IDAT", PNG.zlibStored(raw), into: &png)
        PNG.chunk("IEND", [], into: &png)
        return png
    }
}

enum PNG {
    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    static func chunk(_ type: String, _ data: [UInt8], into png: inout [UInt8]) {
        let typeBytes = Array(type.utf8)
        png += bigEndian(UInt32(data.count))
        png += typeBytes
        png += data
        png += bigEndian(crc32(typeBytes + data))
    }

    /// A zlib stream (RFC 1950) whose deflate data (RFC 1951) is stored blocks of at most 65,535 bytes.
    static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]  // deflate, 32 KiB window, no preset dictionary; (0x7801 % 31 == 0)
        var offset = 0
        repeat {
            let count = min(65_535, data.count - offset)
            let final: UInt8 = offset + count == data.count ? 1 : 0
            out.append(final)  // BFINAL, BTYPE = 00 (stored)
            out += [UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8((~count >> 8) & 0xFF)]
            out += data[offset..<offset + count]
            offset += count
        } while offset < data.count
        out += bigEndian(adler32(data))
        return out
    }

    static func adler32(_ data: [UInt8]) -> UInt32 {
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in data {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        return b << 16 | a
    }

    static let crcTable: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 == 1 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func crc32(_ data: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in data { crc = crcTable[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
