internal import CCurl

/// What both of this module's clients need of libcurl.
enum Curl {
    /// curl_global_init, once, before the first handle (Swift runs a global's initialiser once, thread-safely).
    static let libraryReady: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    /// A time limit as libcurl's `_MS` options take it: at least 1 (0 would mean none).
    static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return max(1, Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
    }
}
