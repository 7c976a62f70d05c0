import Dispatch
import FlareCore
import Foundation

// Wiring only: read the configuration, build the daemon, run until SIGINT/SIGTERM, drain in order.

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") || arguments.contains("-h") {
    print(Configuration.helpText(usage: FlaredSettings.usage, settings: FlaredSettings.all))
    exit(0)
}

let daemon: Daemon
do {
    let configuration = try Configuration(settings: FlaredSettings.all, arguments: arguments,
                                          environment: ProcessInfo.processInfo.environment,
                                          readFile: { try String(contentsOfFile: $0, encoding: .utf8) })
    if let extra = configuration.positional.first {
        throw Configuration.ConfigurationError("unexpected argument \(extra) (see --help)")
    }
    daemon = try Daemon(configuration: configuration)
    try daemon.start()
} catch {
    FileHandle.standardError.write(Data("flared: \(error)\n".utf8))
    exit(1)
}

// Signal sources on the main queue, so their handlers run where main.swift's code is allowed to run.
// A parent may have started us with these signals blocked (a mask is inherited): unblock them.
var stopSignals = sigset_t()
sigemptyset(&stopSignals)
sigaddset(&stopSignals, SIGINT)
sigaddset(&stopSignals, SIGTERM)
pthread_sigmask(SIG_UNBLOCK, &stopSignals, nil)
var signalSources: [DispatchSourceSignal] = []
for signalNumber in [SIGINT, SIGTERM] {
    signal(signalNumber, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .main)
    source.setEventHandler {
        exit(daemon.shutdown() ? 0 : 1)
    }
    source.resume()
    signalSources.append(source)
}
dispatchMain()
