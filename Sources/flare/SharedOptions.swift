/// The options that several commands take with one meaning, declared once. An option that means something else in
/// another command (`--qr`, `--e2e`, `--count`) is declared by that command's group instead.
enum SharedOptions {
    static let server = OptionSpec.value("--server", "URL", "Flare's HTTP address (env FLARE_SERVER_URL; default http:// and flared's FLARE_HTTP_ADDR)")
    static let key = OptionSpec.value("--key", "KEY", "the owner key (env FLARE_OWNER_KEY; default the file $FLARE_DATA_DIR/owner.key)")
    static let dataDirectory = OptionSpec.value("--data-dir", "DIR", "Flare's data directory (env FLARE_DATA_DIR; default flared's)")
    static let json = OptionSpec.switch("--json", "print the answer as JSON")
    static let e2eKey = OptionSpec.value("--e2e-key", "PASSPHRASE",
                                         "the share's end-to-end key (default: the file `flare share create --e2e` wrote in $FLARE_DATA_DIR/e2e/)")
    static let limit = OptionSpec.value("--limit", "N", "how many on one page")
    static let cursor = OptionSpec.value("--cursor", "C", "the next page: the cursor the last page printed")
    static let name = OptionSpec.value("--name", "NAME", "the share's name, which its page shows")

    /// What every command that talks to a running flared takes: where it is, and the key it is asked with.
    static let reachFlare = [server, key, dataDirectory]
    /// What every command that opens flared's store itself takes (the store is FLARE_STORE_URL, else in the directory).
    static let openStore = [dataDirectory]
}
