import FlareClient
import FlareTestSupport
import Foundation
import Testing

/// FlareClient against the built `flared`, a real mosquitto and a real SQLite file: what the iOS app talks to.
@Suite struct FlareClientTests {
    static let fast = RetryPolicy(maxAttempts: 3, initialDelay: 0.05, maxDelay: 0.2)

    func client(_ flared: FlaredProcess, ownerKey: String? = nil, retry: RetryPolicy = fast) -> FlareClient {
        FlareClient(baseURL: URL(string: "http://127.0.0.1:\(flared.httpPort)")!, ownerKey: ownerKey ?? flared.ownerKey, retry: retry, timeout: 5)
    }

    func viewTrail(_ flared: FlaredProcess, _ share: CreatedShare) throws -> [Double] {
        let view = try flared.request("GET", "/api/v1/view/\(share.shareURL.lastPathComponent)")
        return ((view.json?["trail"] as? [[String: Any]]) ?? []).compactMap { $0["lat"] as? Double }
    }

    /// Polls the link's view slowly: the link endpoints are rate-limited per address, and a tight poll would be refused.
    func trailBecomes(_ flared: FlaredProcess, _ share: CreatedShare, _ expected: [Double]) -> Bool {
        let deadline = ContinuousClock.now + .seconds(15)
        var last: [Double] = []
        while ContinuousClock.now < deadline {
            last = (try? viewTrail(flared, share)) ?? []
            if last == expected { return true }
            usleep(200_000)
        }
        print("trail is \(last), expected \(expected)")
        return false
    }

    func waitForTrail(_ flared: FlaredProcess, _ share: CreatedShare, until condition: ([Double]) -> Bool) async -> [Double] {
        let deadline = ContinuousClock.now + .seconds(15)
        var last: [Double] = []
        while ContinuousClock.now < deadline {
            last = (try? viewTrail(flared, share)) ?? []
            if condition(last) { break }
            try? await Task.sleep(nanoseconds: 200_000_000)
        }
        return last
    }

    func fix(_ lat: Double, secondsAgo: Double = 0) -> Location {
        Location(latitude: lat, longitude: 11.5, timestamp: Date(timeIntervalSinceNow: -secondsAgo), accuracy: 6, speedKmh: 4, course: 90, battery: 80, trackerID: "ip")
    }

    @Test func ownerCallsDecodeIntoTypes() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = client(flared)

        let share = try await flare.createShare(duration: 600, name: "Anna")
        #expect(share.mqttTopic == "flare/v1/shares/\(share.shareID)/location")
        #expect(share.mqttUsername == share.shareID)
        #expect(share.shareURL.absoluteString.hasPrefix("http://127.0.0.1:\(flared.httpPort)/s/"))
        // Against the server's own creation time: a loaded machine may take seconds to answer.
        #expect(share.durationSeconds == 600)
        let created = try await flare.share(share.shareID).createdAt
        #expect(share.expiresAt.timeIntervalSince(created) == 600)
        #expect(!share.deviceToken.isEmpty)
        let watch = try await flare.createWatchToken(share.shareID)
        #expect(watch.topicFilter == "flare/v1/shares/\(share.shareID)/#" && watch.mqttUsername == share.shareID && !watch.watchToken.isEmpty)
        #expect(watch.expiresAt == share.expiresAt)
        let page = try await flare.listShares(state: .active, limit: 10)
        #expect(page.shares.map(\.shareID) == [share.shareID] && page.nextCursor == nil)

        let receipt = try await flare.reportLocation(fix(48.1), shareID: share.shareID, deviceToken: share.deviceToken)
        #expect(receipt.status == "accepted")
        #expect(trailBecomes(flared, share, [48.1]))

        let status = try await flare.share(share.shareID)
        #expect(status.state == .active)
        #expect(status.name == "Anna")
        #expect(status.last?.latitude == 48.1)
        #expect(status.last?.battery == 80)

        // The OwnTracks link for the same share, with the device token alone.
        let link = try await flare.ownTracksLink(share.shareID, deviceToken: share.deviceToken)
        #expect(link.scheme == "owntracks")
        #expect(link.absoluteString.hasPrefix("owntracks:///config?inline="))

        // The phone extends and stops with the device token alone.
        let extended = try await flare.extendShare(share.shareID, duration: 3600, deviceToken: share.deviceToken)
        #expect(extended.expiresAt > share.expiresAt)
        let stopped = try await flare.stopShare(share.shareID, deviceToken: extended.deviceToken)
        #expect(stopped.state == .ended)
        #expect(stopped.reason == "stopped")
        #expect(try await flare.share(share.shareID).state == .ended)

        // Errors arrive as the server's code and message.
        // Stopping is idempotent: a retried stop whose first answer was lost still succeeds.
        #expect(try await flare.stopShare(share.shareID).reason == "stopped")
        do {
            _ = try await flare.extendShare(share.shareID)
            Issue.record("extending an ended share should fail")
        } catch {
            guard case .api(let apiError) = error else { Issue.record("\(error)"); return }
            #expect(apiError.status == 409)
            #expect(apiError.code == "share_ended")
            #expect(!apiError.isRetryable)
        }
        do {
            _ = try await flare.reportLocation(fix(48.2), shareID: share.shareID, deviceToken: share.deviceToken)
            Issue.record("reporting into an ended share should fail")
        } catch {
            guard case .api(let apiError) = error else { Issue.record("\(error)"); return }
            #expect(apiError.status == 410)
            #expect(apiError.meansShareIsOver)
        }
        do {
            _ = try await client(flared, ownerKey: "not-a-key").createShare()
            Issue.record("a wrong owner key should be refused")
        } catch {
            guard case .api(let apiError) = error else { Issue.record("\(error)"); return }
            #expect(apiError.status == 401)
            #expect(apiError.code == "unauthorized")
        }
        do {
            _ = try await FlareClient(baseURL: URL(string: "http://127.0.0.1:\(flared.httpPort)")!).createShare()
            Issue.record("creating without an owner key should fail before any request")
        } catch {
            guard case .missingCredential = error else { Issue.record("\(error)"); return }
        }
        do {
            _ = try await flare.share("no-such-share")
            Issue.record("an unknown share should be 404")
        } catch {
            guard case .api(let apiError) = error else { Issue.record("\(error)"); return }
            #expect(apiError.status == 404)
            #expect(apiError.code == "not_found")
        }
    }

    /// A 4xx is an answer: the fix is dropped and counted, once, and the fixes behind it still go out.
    /// What docs/ios.md shows: arm a check-in, report into its share, move the deadline from the phone with the
    /// device token (a new token that covers it), check in.
    @Test func aCheckinIsArmedExtendedAndDoneFromThePhone() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = client(flared)
        let mum = try await flare.createContact(ContactRequest(name: "Mum"))
        let armed = try await flare.armCheckin(CheckinRequest(inSeconds: 3600, graceSeconds: 600, contacts: [mum.id], message: "Back by ten",
                                                              arrive: CheckinZone(lat: 47.42, lon: 10.98, radiusM: 200), name: "Anna"))
        #expect(armed.state == "armed" && armed.contacts == [mum.id] && armed.arrive?.radiusM == 200)
        let token = try #require(armed.deviceToken)
        let phone = FlareClient(baseURL: URL(string: "http://127.0.0.1:\(flared.httpPort)")!, retry: Self.fast, timeout: 5)
        let receipt = try await phone.reportLocation(Location(latitude: 48.1, longitude: 11.5, timestamp: Date()), shareID: armed.shareID, deviceToken: token)
        #expect(receipt.status == "accepted")
        let moved = try await phone.extendCheckin(armed.checkinID, inSeconds: 7200, deviceToken: token)
        #expect(moved.dueAt > armed.dueAt && moved.deviceToken != nil && moved.deviceToken != token)
        let done = try await phone.checkinDone(armed.checkinID, deviceToken: try #require(moved.deviceToken))
        #expect(done.state == "done")
        #expect(try await flare.checkin(armed.checkinID).state == "done")
        do {
            _ = try await flare.checkin("AAAAAAAAAAAAAAAAAAAAAA")
            Issue.record("an unknown check-in was found")
        } catch {
            #expect("\(error)".contains("not_found") || "\(error)".contains("404"), "\(error)")
        }
    }

    @Test func refusedFixIsNotRetried() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = client(flared)
        let share = try await flare.createShare()
        let reporter = LocationReporter(client: flare, share: share)

        await reporter.report(fix(48.1, secondsAgo: 2))
        await reporter.report(Location(latitude: 95, longitude: 11.5))  // not a latitude
        await reporter.report(fix(48.3))
        let stats = await reporter.statistics
        #expect(stats.sent == 2)
        #expect(stats.rejected == 1)
        #expect(stats.retries == 0)
        #expect(stats.lastRejection == "invalid_coordinates")
        #expect(stats.pending == 0)
        #expect(await reporter.state == .idle)
        #expect(trailBecomes(flared, share, [48.1, 48.3]))
        let metrics = try flared.metrics()
        #expect(metrics.contains(#"flare_http_requests_total{status="400"} 1"#), "\(metrics)")
    }

    /// Flare cannot store fixes for a while (its database is locked by another process; ingest answers 503): fixes
    /// wait in order, the oldest beyond the bound are dropped and counted, and when the store is back everything
    /// left arrives once, in order.
    @Test func storeOutageKeepsFixesInOrderWithinTheBound() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = client(flared)
        let share = try await flare.createShare()
        let reporter = LocationReporter(client: flare, share: share, capacity: 3)

        await reporter.report(fix(40.0, secondsAgo: 10))
        #expect(trailBecomes(flared, share, [40.0]))

        let lock = try SQLiteLock(path: flared.dataDirectory.appendingPathComponent("flare.db").path)
        for (index, lat) in [41.0, 42.0, 43.0, 44.0, 45.0].enumerated() {
            await reporter.report(fix(lat, secondsAgo: Double(9 - index)))
        }
        var stats = await reporter.statistics
        #expect(stats.sent == 1)
        #expect(stats.pending == 3)
        #expect(stats.droppedOverflow == 2)
        #expect(stats.retries > 0)
        #expect(await reporter.pendingLocations.map(\.latitude) == [43.0, 44.0, 45.0])
        guard case .offline = await reporter.state else { Issue.record("expected offline, got \(await reporter.state)"); return }

        lock.release()
        let deadline = ContinuousClock.now + .seconds(30)
        while await reporter.statistics.pending > 0, ContinuousClock.now < deadline {
            await reporter.flush()
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        stats = await reporter.statistics
        #expect(stats.pending == 0)
        #expect(stats.sent == 4)
        // A 503 means "not stored yet", not "lost": a fix queued before the store failed is written once it is back
        // (41 then arrives although the reporter dropped it). What must hold: the queued fixes all arrive, in
        // order, each once (a resent fix is stored once).
        let arrived = await waitForTrail(flared, share) { Set([40.0, 43.0, 44.0, 45.0]).isSubset(of: $0) }
        #expect(arrived == arrived.sorted() && Set(arrived).count == arrived.count, "\(arrived)")
        #expect(Set(arrived).isSubset(of: [40.0, 41.0, 42.0, 43.0, 44.0, 45.0]))
    }

    /// No answer at all (flared down): retried with backoff, queued, and sent once flared is back.
    @Test func networkFailureIsRetriedAndQueued() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = client(flared)
        let share = try await flare.createShare()
        let reporter = LocationReporter(client: flare, share: share)

        flared.stop()
        await reporter.report(fix(50.1, secondsAgo: 3))
        await reporter.report(fix(50.2, secondsAgo: 2))
        var stats = await reporter.statistics
        #expect(stats.pending == 2)
        #expect(stats.retries == 4)  // each report: three attempts (two retries), then offline
        guard case .offline(let reason) = await reporter.state else { Issue.record("expected offline"); return }
        #expect(reason.contains("no answer"))

        try flared.start()
        await reporter.report(fix(50.3, secondsAgo: 1))
        stats = await reporter.statistics
        #expect(stats.pending == 0)
        #expect(stats.sent == 3)
        #expect(trailBecomes(flared, share, [50.1, 50.2, 50.3]))
    }

    /// The share ends under the reporter: it stops sending, drops its queue and says so.
    @Test func reporterStopsWhenTheShareEnds() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = client(flared)
        let share = try await flare.createShare()
        let reporter = LocationReporter(client: flare, share: share)
        await reporter.report(fix(47.0))
        _ = try await flare.stopShare(share.shareID)
        await reporter.report(fix(47.1))
        #expect(await reporter.state == .ended)
        #expect(await reporter.statistics.pending == 0)
        await reporter.report(fix(47.2))
        #expect(await reporter.statistics.sent == 1)
    }

    @Test func backoffGrowsAndHonoursRetryAfter() {
        let policy = RetryPolicy(maxAttempts: 5, initialDelay: 1, maxDelay: 10, multiplier: 2, jitter: 0)
        #expect(policy.delay(afterAttempt: 1) == 1)
        #expect(policy.delay(afterAttempt: 3) == 4)
        #expect(policy.delay(afterAttempt: 9) == 10)
        #expect(policy.delay(afterAttempt: 1, retryAfter: 5) == 5)
    }

    @Test func locationIsEncodedAsOwnTracks() throws {
        let location = Location(latitude: 1.5, longitude: 2.5, timestamp: Date(timeIntervalSince1970: 1_700_000_000.7),
                                accuracy: -1, speedKmh: 12, course: -1, battery: 50, trackerID: "ab")
        let object = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(location)) as? [String: Any])
        #expect(object["_type"] as? String == "location")
        #expect(object["tst"] as? Int == 1_700_000_000)
        #expect(object["acc"] == nil && object["cog"] == nil)  // CoreLocation's -1 means unknown
        #expect(object["vel"] as? Double == 12)
        #expect(object["tid"] as? String == "ab")
    }
}
