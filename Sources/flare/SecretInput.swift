import Foundation

/// A short secret the owner types (a device's PIN), asked for where no shell history keeps it and no `ps` shows it:
/// never an argument. In this order: the environment variable the command names (for scripts), else the terminal
/// without echo, typed twice, else one line of standard input (`printf '4711\n' | flare devices add …`).
enum SecretInput {
    static func read(_ what: String, from variable: String, _ invocation: Invocation) throws -> String {
        if let given = invocation.environment[variable] { return given }
        if isatty(STDIN_FILENO) == 1 {
            let typed = try withoutEcho { try prompt("\(what): ") }
            guard try withoutEcho({ try prompt("\(what), again: ") }) == typed else { throw CLIError("the \(what) typed again differs from the first; nothing was sent") }
            return typed
        }
        guard let line = readLine(strippingNewline: true) else {
            throw CLIError("no \(what): type it at a terminal, set \(variable), or give it as a line of standard input")
        }
        return line
    }

    private static func prompt(_ text: String) throws -> String {
        FileHandle.standardError.write(Data(text.utf8))
        defer { FileHandle.standardError.write(Data("\n".utf8)) }  // the Return typed was not echoed
        guard let line = readLine(strippingNewline: true) else { throw CLIError("no input") }
        return line
    }

    /// Runs `body` with the terminal's echo off, and puts it back after, also when Ctrl-C ends `flare` meanwhile
    /// (exit status 130, as `track` stopped by Ctrl-C).
    private static func withoutEcho<T>(_ body: () throws -> T) throws -> T {
        guard tcgetattr(STDIN_FILENO, &terminalBeforePrompt) == 0 else { return try body() }
        var quiet = terminalBeforePrompt
        quiet.c_lflag &= ~tcflag_t(ECHO)
        signal(SIGINT) { _ in
            tcsetattr(STDIN_FILENO, TCSANOW, &terminalBeforePrompt)
            _exit(130)
        }
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet)
        defer {
            tcsetattr(STDIN_FILENO, TCSANOW, &terminalBeforePrompt)
            signal(SIGINT, SIG_DFL)
        }
        return try body()
    }
}

/// The terminal's settings while echo is off, for the Ctrl-C handler to restore (a C handler captures nothing).
nonisolated(unsafe) private var terminalBeforePrompt = termios()
