import FlareClient
import FlareTestSupport
import Foundation
import Testing

/// A phone with a device secret and nothing else, against the built flared: the owner adds the device (FlareClient,
/// owner key), and `DeviceClient` starts the SOS, reports into it, reads it and stops it with the PIN.
@Suite struct DeviceClientTests {
    static let fast = RetryPolicy(maxAttempts: 3, initialDelay: 0.05, maxDelay: 0.2)

    func owner(_ flared: FlaredProcess) -> FlareClient {
        FlareClient(baseURL: URL(string: "http://127.0.0.1:\(flared.httpPort)")!, ownerKey: flared.ownerKey, retry: Self.fast, timeout: 5)
    }

    func phone(_ flared: FlaredProcess, _ secret: String, retry: RetryPolicy = fast) -> DeviceClient {
        DeviceClient(baseURL: URL(string: "http://127.0.0.1:\(flared.httpPort)")!, secret: secret, retry: retry, timeout: 5)
    }

    func fix(_ lat: Double, secondsAgo: Double = 0) -> Location {
        Location(latitude: lat, longitude: 13.4, timestamp: Date(timeIntervalSinceNow: -secondsAgo), accuracy: 8, trackerID: "AN")
    }

    /// The latitudes on the SOS's own link, which the contacts follow, once they are `expected` (or what they were
    /// after 15 s). Asked slowly: the link endpoints are rate-limited per address.
    func trail(_ flared: FlaredProcess, _ sos: SOSStarted, becomes expected: [Double]) async -> [Double] {
        let deadline = ContinuousClock.now + .seconds(15)
        var last: [Double] = []
        while ContinuousClock.now < deadline {
            let view = try? flared.request("GET", "/api/v1/view/\(sos.shareURL.split(separator: "/").last ?? "")")
            last = ((view?.json?["trail"] as? [[String: Any]]) ?? []).compactMap { $0["lat"] as? Double }
            if last == expected { break }
            try? await Task.sleep(nanoseconds: 200_000_000)
        }
        return last
    }

    /// The error a call threw, as Flare's code.
    func refusal(_ call: () async throws(FlareClientError) -> some Any) async -> FlareAPIError? {
        do { _ = try await call() } catch {
            if case .api(let refusal) = error { return refusal }
            Issue.record("expected Flare's refusal, got \(error)")
        }
        return nil
    }

    @Test func thePhoneStartsReportsReadsAndStopsItsSOSWithTheSecretAlone() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = owner(flared)
        let mum = try await flare.createContact(ContactRequest(name: "Mum", email: "mum@example.org"))
        let created = try await flare.createDevice(DeviceRequest(name: "Anna", contacts: [mum.id], durationSeconds: 1800, pin: "4711"))
        #expect(created.contacts == [mum.id] && created.setup.includesSecret && !created.secret.isEmpty)
        #expect(try await flare.listDevices().devices.map(\.deviceID) == [created.deviceID])
        #expect(try await flare.deviceSetup(created.deviceID).lastHeardSecondsAgo == nil)
        #expect(try await flare.changeDevice(created.deviceID, DeviceRequest(message: "Hiking")).message == "Hiking")

        let phone = phone(flared, created.secret)
        #expect(try await phone.sosState().status == "none")
        let card = try await phone.card()
        #expect(card.name == "Anna" && card.hasPin && card.countdownSeconds == 5 && card.contacts.map(\.name) == ["Mum"])
        #expect(await refusal { () async throws(FlareClientError) in try await phone.extendSOS() }?.code == "not_sharing")
        #expect(try await phone.reportLocation(fix(52.50, secondsAgo: 3)) == false, "no SOS: dropped, nothing kept")
        #expect(try await flare.deviceSetup(created.deviceID).lastHeardSecondsAgo != nil, "the setup's test: Flare heard the phone")

        let sos = try await phone.startSOS(first: fix(52.51, secondsAgo: 2))
        #expect(!sos.repeated && sos.links.map(\.name) == ["Mum"] && sos.mqttTopic == "flare/v1/shares/\(sos.shareID)/location")
        let again = try await phone.startSOS()
        let extended = try await phone.extendSOS(durationSeconds: 7_200)
        #expect(extended.status == "live" && (extended.expiresAt ?? .distantPast) > sos.expiresAt)
        #expect(again.repeated && again.shareID == sos.shareID && again.shareURL == sos.shareURL)
        #expect(try await phone.reportLocation(fix(52.52, secondsAgo: 1)))
        // docs/ios.md's controller: the start's device token feeds a LocationReporter, the stream with a queue.
        let reporter = LocationReporter(client: FlareClient(baseURL: phone.baseURL, retry: Self.fast, timeout: 5), shareID: sos.shareID,
                                        deviceToken: sos.deviceToken)
        await reporter.report(fix(52.53))
        #expect(await reporter.statistics.sent == 1)
        #expect(await trail(flared, sos, becomes: [52.51, 52.52, 52.53]) == [52.51, 52.52, 52.53])
        let live = try await phone.sosState()
        #expect(live.status == "live" && live.shareID == sos.shareID && live.expiresAt == extended.expiresAt && live.audience != nil)
        #expect(try await flare.device(created.deviceID).sos == "live")

        // Only the PIN stops it; a wrong one is an answer, not an outage.
        let wrong = await refusal { () async throws(FlareClientError) in try await phone.stopSOS(pin: "0000") }
        #expect(wrong?.status == 403 && wrong?.code == "wrong_pin" && wrong?.isRetryable == false)
        #expect(await refusal { () async throws(FlareClientError) in try await phone.stopSOS() }?.code == "wrong_pin")
        let stopped = try await phone.stopSOS(pin: "4711")
        #expect(stopped.status == "stopped" && stopped.shareID == sos.shareID && stopped.stoppedAt != nil)
        #expect(try await phone.sosState().status == "stopped")
        #expect(try await phone.reportLocation(fix(52.54)) == false)
        #expect(try await flare.share(sos.shareID).state == .ended)
        await reporter.report(fix(52.55))
        #expect(await reporter.state == .ended, "the reporter hears the end, and stops")

        // A new secret: the old one is unknown at once, and no retry helps.
        let renewed = try await flare.newDeviceSecret(created.deviceID)
        let unknown = await refusal { () async throws(FlareClientError) in try await phone.sosState() }
        #expect(unknown?.status == 404 && unknown?.code == "unknown_device")
        #expect(try await self.phone(flared, renewed.secret).sosState().status == "stopped")
        try await flare.removeDevice(created.deviceID)
        #expect(await refusal { () async throws(FlareClientError) in try await flare.device(created.deviceID) }?.status == 404)
    }

    /// The duress PIN: the phone reads a stop, to the member, and its positions are "not kept", while the contacts'
    /// share goes on with them and the owner sees the duress.
    @Test func underDuressThePhoneReadsAStopWhileTheContactsKeepFollowing() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = owner(flared)
        let mum = try await flare.createContact(ContactRequest(name: "Mum"))
        let created = try await flare.createDevice(DeviceRequest(name: "Anna", contacts: [mum.id], pin: "4711", duressPin: "9999"))
        let phone = phone(flared, created.secret)
        let sos = try await phone.startSOS(first: fix(48.10, secondsAgo: 2))
        let answer = try await phone.stopSOS(pin: "9999")
        #expect(answer.status == "stopped" && answer.shareID == sos.shareID && answer.expiresAt == nil && answer.audience == nil)
        #expect(try await phone.sosState().status == "stopped")
        #expect(try await phone.reportLocation(fix(48.11, secondsAgo: 1)) == false, "the phone is told nothing was kept")
        #expect(await trail(flared, sos, becomes: [48.10, 48.11]) == [48.10, 48.11], "and the contacts see it")
        #expect(try await flare.device(created.deviceID).sos == "duress")
    }

    /// Flare cannot write for a while (another process holds the database's lock): the start answers 503 with
    /// `Retry-After`, is retried after that long, and starts one SOS once the store is back.
    @Test func aStartDuringAStoreOutageIsRetriedAfterRetryAfterAndStartsOnce() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker)
        let flare = owner(flared)
        let mum = try await flare.createContact(ContactRequest(name: "Mum"))
        let created = try await flare.createDevice(DeviceRequest(name: "Anna", contacts: [mum.id]))
        let phone = phone(flared, created.secret, retry: RetryPolicy(maxAttempts: 6, initialDelay: 0.05, maxDelay: 5, jitter: 0))
        #expect(try await phone.sosState().status == "none")  // heard now: the start writes nothing else first

        let lock = try SQLiteLock(path: flared.dataDirectory.appendingPathComponent("flare.db").path)
        let began = ContinuousClock.now
        let pressing = Task { try await phone.startSOS() }
        let refused = eventually(timeout: .seconds(20)) { (try? flared.metrics())?.contains(#"flare_http_requests_total{status="503"} 1"#) == true }
        lock.release()
        #expect(refused, "\((try? flared.metrics()) ?? "")")
        let sos = try await pressing.value
        // The first attempt waits out SQLite's busy timeout (2 s) before its 503; the retry waits the 2 s it names.
        #expect(ContinuousClock.now - began >= .seconds(3.9))
        #expect(!sos.repeated && sos.links.map(\.name) == ["Mum"])
        #expect(try await phone.sosState().shareID == sos.shareID)
        #expect(try await flare.listShares().shares.map(\.shareID) == [sos.shareID], "one SOS, not one per attempt")
    }

    @Test func aPressPastTheHourlyLimitIsRefusedAtOnceNotWaitedOut() async throws {
        let broker = try TestBroker()
        let flared = try FlaredProcess(broker: broker, extraEnvironment: ["FLARE_SOS_PER_DEVICE_PER_HOUR": "1"])
        let flare = owner(flared)
        let mum = try await flare.createContact(ContactRequest(name: "Mum"))
        let created = try await flare.createDevice(DeviceRequest(name: "Anna", contacts: [mum.id]))
        // Retries that would wait out the Retry-After (half an hour) if the limit were taken for an outage.
        let phone = phone(flared, created.secret, retry: RetryPolicy(maxAttempts: 5, initialDelay: 0.05, maxDelay: 3_600))
        _ = try await phone.startSOS()
        _ = try await phone.stopSOS(pin: nil)
        let started = ContinuousClock.now
        let refused = await refusal { () async throws(FlareClientError) in try await phone.startSOS() }
        #expect(refused?.code == "sos_limit" && (refused?.retryAfter ?? 0) > 60)
        #expect(ContinuousClock.now - started < .seconds(10), "answered at once")
    }
}
