import Foundation

// Wiring only: run the command named on the command line, and exit with its status.
exit(await FlareCommandLine.run(Array(CommandLine.arguments.dropFirst())))
