public import FlareCore
import FlareWire
public import FlareSystem

/// A rendered view document (`FlareAPI.ViewDocument`) without its closing `server_time`, which changes every second.
public struct RenderedView: Sendable {
    public let share: Share
    public let body: [UInt8]
}

extension RenderedView {
    /// The whole document, closed with `server_time`.
    public func document(serverTime: UnixMillis) -> [UInt8] { ViewDocumentRenderer.closing(body, serverTime: serverTime) }
}
