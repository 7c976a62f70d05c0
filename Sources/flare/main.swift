import Foundation

// Wiring only: run the command named on the command line and turn errors into a message and exit status 1.
do {
    exit(try Commands.run(Array(CommandLine.arguments.dropFirst())))
} catch {
    FileHandle.standardError.write(Data("flare: \(error)\n".utf8))
    exit(1)
}
