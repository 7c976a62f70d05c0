import FlareTestSupport
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `flare track` with its real sources (a GPX file, gpsd fed a recorded NMEA stream) into the built flared
/// through a real mosquitto, including a broker restart in the middle of a stream.
@Suite struct TrackCommandTests {
    struct Share {
        let id: String
        let viewToken: String
        let file: URL
    }

    func createShare(_ flared: FlaredProcess) throws -> Share {
        let created = try flared.flare(["share", "create", "--duration", "600", "--json"])
        #expect(created.status == 0, "\(created.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: String])
        let file = flared.dataDirectory.appendingPathComponent("share-\(UUID().uuidString.prefix(6)).json")
        try created.stdout.write(to: file, atomically: true, encoding: .utf8)
        return Share(id: json["share_id"]!, viewToken: String(json["share_url"]!.split(separator: "/").last!), file: file)
    }

    /// `flare track --share-file <share> <arguments>` in the background, its stderr in a log file of the data
    /// directory: the process and a reader of the log so far.
    func startTracker(_ flared: FlaredProcess, _ share: Share, _ arguments: [String], log name: String) throws -> (process: Process, log: () -> String) {
        let tracker = Process()
        tracker.executableURL = URL(fileURLWithPath: try BuiltProducts.path("flare"))
        tracker.arguments = ["track", "--share-file", share.file.path] + arguments
        tracker.environment = flared.environment
        let logURL = flared.dataDirectory.appendingPathComponent(name)
        FileManager.default.createFile(atPath: logURL.path, contents: nil)
        tracker.standardError = try FileHandle(forWritingTo: logURL)
        tracker.standardOutput = FileHandle.nullDevice
        try tracker.runUnmasked()
        return (tracker, { (try? String(contentsOf: logURL, encoding: .utf8)) ?? "" })
    }

    /// The link's trail, polled gently (link endpoints are rate-limited per address).
    func trail(_ flared: FlaredProcess, _ share: Share, until condition: ([Double]) -> Bool = { _ in true }) -> [Double] {
        let deadline = ContinuousClock.now + .seconds(30)
        var last: [Double] = []
        repeat {
            let view = try? flared.request("GET", "/api/v1/view/\(share.viewToken)")
            last = ((view?.json?["trail"] as? [[String: Any]]) ?? []).compactMap { $0["lat"] as? Double }
            if condition(last) { return last }
            usleep(250_000)
        } while ContinuousClock.now < deadline
        return last
    }

    /// A GPX 1.1 track, points one second apart heading north-east.
    func gpx(points: Int, in directory: URL) throws -> (URL, [Double]) {
        var lats: [Double] = []
        var body = ""
        for index in 0..<points {
            let lat = 48.1 + Double(index) * 0.0001
            lats.append(lat)
            body += "<trkpt lat=\"\(lat)\" lon=\"\(11.5 + Double(index) * 0.0001)\"><ele>\(500 + index)</ele><time>2024-06-01T09:\(String(format: "%02d:%02d", index / 60, index % 60))Z</time></trkpt>\n"
        }
        let text = """
            <?xml version="1.0" encoding="UTF-8"?>
            <gpx version="1.1" creator="flare-tests" xmlns="http://www.topografix.com/GPX/1/1">
            <trk><name>walk</name><trkseg>
            \(body)</trkseg></trk></gpx>
            """
        let url = directory.appendingPathComponent("walk-\(points).gpx")
        try text.write(to: url, atomically: true, encoding: .utf8)
        return (url, lats)
    }

    func matches(_ actual: [Double], _ expected: [Double]) -> Bool {
        actual.count == expected.count && zip(actual, expected).allSatisfy { abs($0 - $1) < 1e-7 }
    }

    @Test func gpxReplayArrivesCompleteAndInOrder() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let (file, lats) = try gpx(points: 20, in: flared.dataDirectory)
        // 1 s apart in the file, 20× faster: 0.05 s apart.
        let track = try flared.flare(["track", "--share-file", share.file.path, "--gpx", file.path, "--speed-factor", "20", "--quiet"])
        #expect(track.status == 0, "\(track.stderr)")
        #expect(track.stderr.contains("20 points from walk-20.gpx at 20× speed"))
        #expect(track.stderr.contains("sent 20 fixes"))
        #expect(track.stderr.contains("done: connected, 20 fixes sent, 0 queued, 0 dropped, 20 confirmed stored, 0 awaiting confirmation, last ack 20"))
        #expect(track.stderr.contains("sent 20 fixes, all confirmed stored by Flare"))
        #expect(matches(trail(flared, share) { $0.count >= 20 }, lats))
        #expect(!track.stderr.contains("48.1"))  // positions stay off the terminal
    }

    @Test func brokerRestartMidStreamLosesAndDuplicatesNothing() throws {
        let broker = try TestBroker()
        // The viewer's trail holds 32 points by default; this test wants to see all 60.
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_TRAIL_LENGTH": "100"])
        let share = try createShare(flared)
        let (file, lats) = try gpx(points: 60, in: flared.dataDirectory)

        let (tracker, log) = try startTracker(flared, share, ["--gpx", file.path, "--speed-factor", "10", "--quiet", "--status-every", "1"], log: "track.log")
        defer { if tracker.isRunning { Glibc.kill(tracker.processIdentifier, SIGKILL) } }

        // Some fixes in, then the broker goes away for a while in the middle of the stream.
        #expect(trail(flared, share) { $0.count >= 10 }.count >= 10)
        broker.stop()
        #expect(eventually(timeout: .seconds(10)) { log().contains("disconnected") })
        // While it is away the send queue fills (fixes keep coming at 0.1 s).
        #expect(eventually(timeout: .seconds(10)) { log().range(of: #"status: disconnected, \d+ fixes sent, [1-9]\d* queued"#, options: .regularExpression) != nil }, "\(log())")
        try broker.start()

        let deadline = ContinuousClock.now + .seconds(60)
        while tracker.isRunning && ContinuousClock.now < deadline { usleep(100_000) }
        try #require(!tracker.isRunning, "\(log())")
        #expect(tracker.terminationStatus == 0, "\(log())")
        #expect(log().contains("sent 60 fixes"), "\(log())")
        #expect(log().contains("0 queued, 0 dropped"))
        let arrived = trail(flared, share) { $0.count >= 60 }
        #expect(matches(arrived, lats), "\(arrived.count) fixes: \(arrived)")
    }

    /// A send queue too small for a broker outage drops its oldest fixes never sent (they have no number yet, so Flare's
    /// mark does not wait for them): what it kept is confirmed and stored, and it finishes.
    @Test func aFullSendQueueDropsTheOldestUnsentAndStillEndsConfirmed() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_TRAIL_LENGTH": "100"])
        let share = try createShare(flared)
        let (file, _) = try gpx(points: 90, in: flared.dataDirectory)
        // Room for the fixes that wait for the mark (about a second's worth) but not for a broker outage.
        let (tracker, log) = try startTracker(flared, share, ["--gpx", file.path, "--speed-factor", "10", "--quiet", "--status-every", "1",
                                                              "--queue", "30"], log: "small-send-queue.log")
        defer { if tracker.isRunning { Glibc.kill(tracker.processIdentifier, SIGKILL) } }
        #expect(trail(flared, share) { $0.count >= 5 }.count >= 5)
        broker.stop()
        #expect(eventually(timeout: .seconds(15)) { log().range(of: #"[1-9]\d* dropped"#, options: .regularExpression) != nil }, "\(log())")
        try broker.start()
        let deadline = ContinuousClock.now + .seconds(60)
        while tracker.isRunning && ContinuousClock.now < deadline { usleep(100_000) }
        try #require(!tracker.isRunning, "\(log())")
        #expect(tracker.terminationStatus == 0, "\(log())")
        #expect(log().contains("all confirmed stored by Flare"), "\(log())")
        // Each fix is numbered once: the queue does not send the same fixes again and again while it is full (it once
        // started a new stream on every drop, and sent ~1,000 messages for these 90 fixes).
        let done = try #require(log().split(separator: "\n").last { $0.contains("done:") }.map(String.init), "\(log())")
        let again = done.firstMatch(of: /\((\d+) sent again\)/).flatMap { Int($0.1) } ?? 0
        let sent = done.firstMatch(of: /(\d+) fixes sent/).flatMap { Int($0.1) } ?? .max
        #expect(sent <= 90 && again <= 4 * 30, "\(done)")
        #expect(done.contains("0 awaiting confirmation"), "\(done)")
        // What the send queue kept is stored, the track's last point included. (Not necessarily last in the trail: fixes
        // a second apart share a `tst`, and a fix sent again after a newer one arrives after it.)
        let last = 48.1 + 89 * 0.0001
        let arrived = trail(flared, share) { $0.contains { abs($0 - last) < 1e-7 } }
        #expect(arrived.contains { abs($0 - last) < 1e-7 }, "\(arrived)")
    }

    /// `flare track` answers "locate now" with its next fix (`t: "r"`), and its last will tells Flare when its
    /// connection is lost: killed with SIGKILL, the page's tracker goes offline.
    @Test func theTrackerAnswersLocateNowAndItsLastWillMarksItOffline() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let (tracker, log) = try startTracker(flared, share, ["--interval", "0.3", "--quiet"], log: "locate.log")
        defer { if tracker.isRunning { Glibc.kill(tracker.processIdentifier, SIGKILL) } }
        #expect(trail(flared, share) { $0.count >= 2 }.count >= 2)

        // What flared publishes for "locate now", on the command topic the tracker subscribes to.
        let topic = "flare/v1/shares/\(share.id)/location"
        let answers = Process()
        answers.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_sub")
        answers.arguments = ["-p", String(broker.port), "-t", topic, "-F", "%p", "-W", "20"]
        let output = Pipe()
        answers.standardOutput = output
        try answers.runUnmasked()
        defer { if answers.isRunning { Glibc.kill(answers.processIdentifier, SIGKILL) } }
        #expect(try MosquittoClients.publish(port: broker.port, topic: topic + "/cmd", payload: #"{"_type":"cmd","action":"reportLocation"}"#,
                                             retain: false).status == 0)
        #expect(eventually(timeout: .seconds(10)) { log().contains("asked for a fresh position") }, "\(log())")
        let seen = Mutex("")
        output.fileHandleForReading.readabilityHandler = { handle in
            let chunk = String(decoding: handle.availableData, as: UTF8.self)
            seen.withLock { $0 += chunk }
        }
        #expect(eventually(timeout: .seconds(10)) { seen.withLock { $0.contains(#""t":"r""#) } })
        output.fileHandleForReading.readabilityHandler = nil

        Glibc.kill(tracker.processIdentifier, SIGKILL)
        tracker.waitUntilExit()
        #expect(eventually(timeout: .seconds(15)) {
            let view = try? flared.request("GET", "/api/v1/view/\(share.viewToken)")
            let tracker = view?.json?["tracker"] as? [String: Any]
            return tracker?["state"] as? String == "offline" && tracker?["reason"] as? String == "connection_lost"
        })
    }

    @Test func interruptedTrackerSaysWhatItSent() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let (tracker, log) = try startTracker(flared, share, ["--interval", "0.05", "--quiet"], log: "interrupted.log")
        defer { if tracker.isRunning { Glibc.kill(tracker.processIdentifier, SIGKILL) } }
        #expect(trail(flared, share) { $0.count >= 3 }.count >= 3)
        tracker.terminate()
        let deadline = ContinuousClock.now + .seconds(15)
        while tracker.isRunning && ContinuousClock.now < deadline { usleep(50_000) }
        try #require(!tracker.isRunning)
        #expect(tracker.terminationStatus == 130, "\(log())")
        #expect(log().range(of: #"interrupted: connected, [1-9]\d* fixes sent"#, options: .regularExpression) != nil, "\(log())")
    }

    /// A broker that refuses the device token (as one with Flare's auth does once a share ended) stops the
    /// tracker with a clear message instead of leaving it waiting forever.
    @Test func refusedTokenStopsTheTracker() throws {
        let passwords = try TempDirectory.make(prefix: "passwd").appendingPathComponent("passwd")
        try "".write(to: passwords, atomically: true, encoding: .utf8)
        let broker = try TestBroker(extraConfig: ["allow_anonymous false", "password_file \(passwords.path)"])
        let result = try runCommand(try BuiltProducts.path("flare"), [
            "track", "--share-id", "AAAAAAAAAAAAAAAAAAAAAA", "--token", "not-a-token",
            "--mqtt-url", "mqtt://127.0.0.1:\(broker.port)", "--interval", "0.05", "--quiet",
        ])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("refused the device token"), "\(result.stderr)")
        #expect(!result.stderr.contains("not-a-token"))
    }

    /// A Raspberry-Pi-style GPS box: gpsd reading a serial port (here a pseudo-terminal that the test feeds with a
    /// recorded NMEA stream, as the receiver would), `flare track --gpsd` publishing what gpsd reports.
    @Test func gpsdReceiverPositionsReachTheShare() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let share = try createShare(flared)
        let gpsdPath = "/usr/sbin/gpsd"
        try #require(FileManager.default.isExecutableFile(atPath: gpsdPath), "install gpsd (scripts/deps.sh)")

        let (master, device) = try Self.openPseudoTerminal()
        defer { close(master) }
        let gpsdPort = try FreePort.next()
        let gpsd = Process()
        gpsd.executableURL = URL(fileURLWithPath: gpsdPath)
        // -N foreground, -n open the device now, -b read-only (never reconfigure the receiver), -S port.
        gpsd.arguments = ["-N", "-n", "-b", "-S", String(gpsdPort), device]
        gpsd.standardOutput = FileHandle.nullDevice
        gpsd.standardError = FileHandle.nullDevice
        try gpsd.runUnmasked()
        defer { gpsd.terminate(within: .seconds(30), what: "gpsd") }
        #expect(FreePort.waitUntilAccepting(port: gpsdPort, timeout: .seconds(10)))

        let (tracker, log) = try startTracker(flared, share, ["--gpsd", "127.0.0.1:\(gpsdPort)", "--interval", "0", "--count", "8", "--quiet"], log: "gpsd-track.log")
        defer { if tracker.isRunning { Glibc.kill(tracker.processIdentifier, SIGKILL) } }
        #expect(eventually(timeout: .seconds(15)) { log().contains("gpsd: connected") }, "\(log())")

        // The receiver speaks: one GGA and one RMC per second of the recording, sped up 2.5 times, until the tracker
        // has what it asked for. (Fed much faster, gpsd merges cycles and reports fewer fixes than recorded.)
        for line in Self.recordedNMEA.split(separator: "\n") where tracker.isRunning {
            let bytes = Array((line + "\r\n").utf8)
            _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
            usleep(200_000)
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while tracker.isRunning && ContinuousClock.now < deadline { usleep(100_000) }
        try #require(!tracker.isRunning, "\(log())")
        #expect(tracker.terminationStatus == 0, "\(log())")
        #expect(log().contains("sent 8 fixes"), "\(log())")
        // The recording is from 2024: the tracker says so and stamps the fixes with the system clock.
        #expect(log().contains("off the system clock"))

        let recorded = Self.recordedLatitudes
        let arrived = trail(flared, share) { $0.count >= 8 }
        #expect(arrived.count == 8, "\((try? flared.metrics()) ?? "")\n\(flared.log.suffix(3000))\n\(log())")
        #expect(arrived == arrived.sorted() && Set(arrived).count == 8, "\(arrived)")
        #expect(arrived.allSatisfy { lat in recorded.contains { abs($0 - lat) < 1e-6 } }, "\(arrived) vs \(recorded)")
        let last = try #require(try flared.request("GET", "/api/v1/shares/\(share.id)", bearer: flared.ownerKey).json?["last"] as? [String: Any])
        #expect(last["alt"] as? Double == 519.6)
        #expect(last["vel"] as? Double == 1.7)  // 0.9 kn = 0.463 m/s = 1.7 km/h
    }

    /// A pseudo-terminal pair: the master end for the test, the slave's path for gpsd. posix_openpt and friends
    /// are not visible to Swift on Glibc, so this is what they do on Linux: open /dev/ptmx, unlock, ask the number.
    static func openPseudoTerminal() throws -> (Int32, String) {
        let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
        guard master >= 0 else { throw TestSupportError("cannot open /dev/ptmx") }
        var unlock: Int32 = 0
        var number: UInt32 = 0
        let TIOCSPTLCK: UInt = 0x4004_5431, TIOCGPTN: UInt = 0x8004_5430
        guard withUnsafeMutablePointer(to: &unlock, { ioctl(master, TIOCSPTLCK, $0) }) == 0,
              withUnsafeMutablePointer(to: &number, { ioctl(master, TIOCGPTN, $0) }) == 0 else {
            close(master)
            throw TestSupportError("cannot set up a pseudo-terminal")
        }
        return (master, "/dev/pts/\(number)")
    }

    static var recordedLatitudes: [Double] {
        recordedNMEA.split(separator: "\n").filter { $0.hasPrefix("$GPGGA") }.map { line in
            let field = line.split(separator: ",")[2]
            return Double(field.prefix(2))! + Double(field.dropFirst(2))! / 60
        }
    }

    /// Recorded from a u-blox-style receiver walking north-east (GGA + RMC at 1 Hz), 1 June 2024.
    static let recordedNMEA = """
        $GPGGA,093000.00,4808.2200,N,01134.5000,E,1,09,0.8,519.6,M,47.2,M,,*6B
        $GPRMC,093000.00,A,4808.2200,N,01134.5000,E,0.9,28.4,010624,2.9,E,A*04
        $GPGGA,093001.00,4808.2272,N,01134.5054,E,1,09,0.8,519.6,M,47.2,M,,*6E
        $GPRMC,093001.00,A,4808.2272,N,01134.5054,E,0.9,28.4,010624,2.9,E,A*01
        $GPGGA,093002.00,4808.2344,N,01134.5108,E,1,09,0.8,519.6,M,47.2,M,,*61
        $GPRMC,093002.00,A,4808.2344,N,01134.5108,E,0.9,28.4,010624,2.9,E,A*0E
        $GPGGA,093003.00,4808.2416,N,01134.5162,E,1,09,0.8,519.6,M,47.2,M,,*6C
        $GPRMC,093003.00,A,4808.2416,N,01134.5162,E,0.9,28.4,010624,2.9,E,A*03
        $GPGGA,093004.00,4808.2488,N,01134.5216,E,1,09,0.8,519.6,M,47.2,M,,*6C
        $GPRMC,093004.00,A,4808.2488,N,01134.5216,E,0.9,28.4,010624,2.9,E,A*03
        $GPGGA,093005.00,4808.2560,N,01134.5270,E,1,09,0.8,519.6,M,47.2,M,,*6A
        $GPRMC,093005.00,A,4808.2560,N,01134.5270,E,0.9,28.4,010624,2.9,E,A*05
        $GPGGA,093006.00,4808.2632,N,01134.5324,E,1,09,0.8,519.6,M,47.2,M,,*6D
        $GPRMC,093006.00,A,4808.2632,N,01134.5324,E,0.9,28.4,010624,2.9,E,A*02
        $GPGGA,093007.00,4808.2704,N,01134.5378,E,1,09,0.8,519.6,M,47.2,M,,*61
        $GPRMC,093007.00,A,4808.2704,N,01134.5378,E,0.9,28.4,010624,2.9,E,A*0E
        $GPGGA,093008.00,4808.2776,N,01134.5432,E,1,09,0.8,519.6,M,47.2,M,,*62
        $GPRMC,093008.00,A,4808.2776,N,01134.5432,E,0.9,28.4,010624,2.9,E,A*0D
        $GPGGA,093009.00,4808.2848,N,01134.5486,E,1,09,0.8,519.6,M,47.2,M,,*6E
        $GPRMC,093009.00,A,4808.2848,N,01134.5486,E,0.9,28.4,010624,2.9,E,A*01
        $GPGGA,093010.00,4808.2920,N,01134.5540,E,1,09,0.8,519.6,M,47.2,M,,*62
        $GPRMC,093010.00,A,4808.2920,N,01134.5540,E,0.9,28.4,010624,2.9,E,A*0D
        $GPGGA,093011.00,4808.2992,N,01134.5594,E,1,09,0.8,519.6,M,47.2,M,,*63
        $GPRMC,093011.00,A,4808.2992,N,01134.5594,E,0.9,28.4,010624,2.9,E,A*0C
        $GPGGA,093012.00,4808.3064,N,01134.5648,E,1,09,0.8,519.6,M,47.2,M,,*63
        $GPRMC,093012.00,A,4808.3064,N,01134.5648,E,0.9,28.4,010624,2.9,E,A*0C
        $GPGGA,093013.00,4808.3136,N,01134.5702,E,1,09,0.8,519.6,M,47.2,M,,*6B
        $GPRMC,093013.00,A,4808.3136,N,01134.5702,E,0.9,28.4,010624,2.9,E,A*04
        $GPGGA,093014.00,4808.3208,N,01134.5756,E,1,09,0.8,519.6,M,47.2,M,,*63
        $GPRMC,093014.00,A,4808.3208,N,01134.5756,E,0.9,28.4,010624,2.9,E,A*0C
        """
}

@Suite struct ShareIDArgumentTests {
    /// Share ids are base64url: one in 64 begins with "-". The CLI must take it as the id, not as an option.
    @Test func aShareIDStartingWithADashIsAnArgument() throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let result = try flared.flare(["share", "stop", "-AAAAAAAAAAAAAAAAAAAAA"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("no such share"), "\(result.stderr)")
        #expect(try flared.flare(["share", "stop", "--nonsense"]).stderr.contains("unknown option"))
    }
}
