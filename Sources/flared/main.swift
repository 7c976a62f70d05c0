import Dispatch
import FlareCore
import FlareSystem
import Foundation
import Synchronization
import FlareSettings

// Wiring only: read the configuration, build the daemon, start its services in order, and on SIGINT/SIGTERM stop
// them in reverse (a second signal exits at once).

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") || arguments.contains("-h") {
    print(FlaredSettings.helpText)
    exit(0)
}
let printConfig = arguments.contains("--print-config")

let daemon: Daemon
do {
    let configuration = try Configuration(settings: FlaredSettings.all, arguments: arguments.filter { $0 != "--print-config" },
                                          environment: ProcessInfo.processInfo.environment,
                                          readFile: { try String(contentsOfFile: $0, encoding: .utf8) })
    if let extra = configuration.positional.first {
        throw Configuration.ConfigurationError("unexpected argument \(extra) (see --help)")
    }
    if printConfig {
        print(configuration.printed, terminator: "")
        exit(0)
    }
    daemon = try Daemon(configuration: configuration)
    try daemon.start()
} catch {
    FileHandle.standardError.write(Data("flared: \(error)\n".utf8))
    exit(1)
}

// Signal sources on the main queue, so their handlers run where main.swift's code is allowed to run. The drain runs
// on a thread of its own, so that the main queue stays free to hear a second signal.
// A parent may have started us with these signals blocked (a mask is inherited): unblock them.
var stopSignals = sigset_t()
sigemptyset(&stopSignals)
sigaddset(&stopSignals, SIGINT)
sigaddset(&stopSignals, SIGTERM)
pthread_sigmask(SIG_UNBLOCK, &stopSignals, nil)
let shuttingDown = Atomic<Bool>(false)
var signalSources: [DispatchSourceSignal] = []
for signalNumber in [SIGINT, SIGTERM] {
    signal(signalNumber, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .main)
    source.setEventHandler { @Sendable in
        if shuttingDown.exchange(true, ordering: .relaxed) { daemon.abandonShutdown() }
        NamedThread.start(name: "flare-drain") { exit(daemon.shutdown()) }
    }
    source.resume()
    signalSources.append(source)
}
dispatchMain()
