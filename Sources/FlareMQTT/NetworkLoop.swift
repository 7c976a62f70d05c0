internal import CMosquitto
import FlareSystem
#if canImport(Glibc)
import Glibc
#endif

/// The client's network thread, built on libmosquitto's external-loop calls (`mosquitto_loop_read`,
/// `mosquitto_loop_write`, `mosquitto_loop_misc`) instead of `mosquitto_loop_start`, for two reasons:
///
/// - **Acknowledge only what is safe.** libmosquitto queues the PUBACK of a QoS 1 message when it reads it, and its
///   own loop writes that PUBACK as soon as the message callback returns. A subscriber that hands messages to
///   another thread (the bridge's store writer) has then acknowledged messages it may still lose: a process killed
///   at that moment loses them, and the broker will not deliver them again. Here nothing is written to the socket
///   after QoS 1/2 messages were read until the acknowledgement gate says they are safe; a gate that says they
///   cannot be made safe drops the connection instead, and the broker delivers them again on the next one.
/// - **Read everything that is there.** libmosquitto's loop reads one packet per `pselect`. This one reads until the
///   socket is empty (up to `packetsPerWakeup`), which also lets the gate cover many messages at once.
///
/// libmosquitto is told (`mosquitto_threaded_set`) that the application runs the loop, so a publish from another
/// thread only queues its packet; `wake()` then interrupts the `poll`. Reconnection with backoff is done here, as
/// `mosquitto_loop_forever` does it.
final class NetworkLoop: @unchecked Sendable {
    // @unchecked: `thread` is touched only by start/stop (serialised by MQTTClient's lifecycle lock); the other
    // mutable state is guarded by `wakeLock`.
    private let handle: OpaquePointer
    private let core: ClientCore
    private let reconnectDelay: (min: Int, max: Int)
    /// Read end [0] polled by the loop, write end [1] written by `wake()`.
    private var wakePipe: [Int32] = [-1, -1]
    private let wakeLock = ConditionLock()
    private var sleepingInPoll = false
    private var wakePending = false
    private var stopRequested = false
    /// The DISCONNECT also ends the session (MQTT v5: session expiry 0), so the broker keeps nothing for it.
    private var endSessionOnStop = false
    private var thread: NamedThread?

    static let packetsPerWakeup = 1024
    /// How long a stopping loop may take to deliver its DISCONNECT before it drops the connection.
    static let stopGraceMillis: Int64 = 5_000

    init(handle: OpaquePointer, core: ClientCore, reconnectDelay: (min: Int, max: Int)) throws {
        self.handle = handle
        self.core = core
        self.reconnectDelay = reconnectDelay
        guard pipe(&wakePipe) == 0 else {
            throw MQTTError(operation: "init", code: Int32(MOSQ_ERR_ERRNO.rawValue), message: "cannot create a pipe: \(String(cString: strerror(errno)))")
        }
        for fd in wakePipe {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        // Publishes from other threads then only queue their packet; this loop writes it.
        try MQTTError.check(mosquitto_threaded_set(handle, true), "threaded_set")
    }

    deinit {
        for fd in wakePipe where fd >= 0 { close(fd) }
    }

    // MARK: - control, from other threads

    func start() {
        wakeLock.withLock {
            stopRequested = false
            wakePending = false
        }
        thread = NamedThread.start(name: "flare-mqtt") { [self] in run() }
    }

    /// Has the loop send DISCONNECT (after whatever was queued before it) and waits for the thread to end.
    func stop(endingSession: Bool = false) {
        guard let thread else { return }
        wakeLock.withLock {
            stopRequested = true
            endSessionOnStop = endingSession
        }
        wake()
        thread.join()
        self.thread = nil
    }

    /// Makes the loop look at libmosquitto's outgoing queue now (a publish or subscribe from another thread).
    func wake() {
        let mustWrite = wakeLock.withLock {
            if sleepingInPoll {
                sleepingInPoll = false
                return true
            }
            wakePending = true
            return false
        }
        if mustWrite {
            var byte: UInt8 = 1
            _ = write(wakePipe[1], &byte, 1)  // a full pipe (EAGAIN) still wakes the poll
        }
    }

    // MARK: - the loop, on its own thread

    private func sendDisconnect() {
        guard core.isV5, wakeLock.withLock({ endSessionOnStop }) else {
            _ = mosquitto_disconnect(handle)
            return
        }
        var properties: OpaquePointer?
        _ = mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), 0)
        _ = mosquitto_disconnect_v5(handle, 0, properties)
        mosquitto_property_free_all(&properties)
    }

    private var isStopRequested: Bool { wakeLock.withLock { stopRequested } }

    private func run() {
        core.lock.withLock { core.networkThread = .current }
        var failedAttempts = 0
        var generation = core.lock.withLock { core.generation }
        var stopDeadline: Int64?
        while true {
            let stopping = isStopRequested
            let socket = mosquitto_socket(handle)
            if stopping && stopDeadline == nil {
                // Here rather than in stop(): this thread also reconnects, so the two cannot cross.
                stopDeadline = monotonicMillis() + Self.stopGraceMillis
                if socket >= 0 { sendDisconnect() }
            }
            if socket < 0 {
                if stopping { break }
                // A refused connection does not fix itself: wait for disconnect().
                if core.lock.withLock({ core.refused }) {
                    waitForEvents(on: nil, timeoutMillis: 1000)
                    continue
                }
                waitForEvents(on: nil, timeoutMillis: reconnectDelayMillis(afterFailedAttempts: failedAttempts))
                if isStopRequested { break }
                failedAttempts += 1
                // Blocking, as in mosquitto_loop_forever: until the TCP connection stands there is no socket, so a
                // publish meanwhile is refused as "not connected" rather than queued behind a connection attempt.
                _ = mosquitto_reconnect(handle)  // a failure leaves no socket; the next turn waits longer
                continue
            }
            if let stopDeadline, monotonicMillis() > stopDeadline {
                shutdown(socket, Int32(SHUT_RDWR))  // the broker is not reading: give up on a clean DISCONNECT
                break
            }

            waitForEvents(on: socket, timeoutMillis: stopping ? 100 : 1000)
            guard readAvailablePackets(from: socket) else { continue }

            let currentGeneration = core.lock.withLock { core.generation }
            if currentGeneration != generation {  // a CONNACK arrived: the backoff starts over
                generation = currentGeneration
                failedAttempts = 0
            }
            if core.deliveriesAwaitingAcknowledgement {
                core.deliveriesAwaitingAcknowledgement = false
                if !(core.lock.withLock { core.acknowledgementGate }?() ?? true) {
                    // Never acknowledge them: drop the connection, and the broker delivers them again later.
                    shutdown(socket, Int32(SHUT_RDWR))
                    _ = mosquitto_loop_read(handle, 1)  // sees the shut socket: closes it and reports the disconnect
                    continue
                }
            }
            guard mosquitto_loop_misc(handle) == MOSQ_ERR_SUCCESS.rawValue, mosquitto_socket(handle) >= 0 else { continue }
            _ = mosquitto_loop_write(handle, 1)  // an error closes the socket and reports it; the next turn reconnects
        }
        core.lock.withLock { core.networkThread = nil }
    }

    /// Reads packets until the socket has no more (the message callback runs for each). False if the connection
    /// ended (libmosquitto has then closed the socket and reported the disconnect).
    private func readAvailablePackets(from socket: Int32) -> Bool {
        for _ in 0..<Self.packetsPerWakeup {
            errno = 0
            let rc = mosquitto_loop_read(handle, 1)
            if rc != MOSQ_ERR_SUCCESS.rawValue || mosquitto_socket(handle) < 0 { return false }
            // libmosquitto stops at EAGAIN, but errno can also say EAGAIN for a reason of its own (an internal
            // pipe that is full), so look before concluding that the socket is empty.
            if errno == EAGAIN || errno == EWOULDBLOCK {
                var byte: UInt8 = 0
                if recv(socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) <= 0 { break }
            }
        }
        return true
    }

    /// Waits in `poll` for the socket (when there is one) or for `wake()`, up to `timeoutMillis`; returns at once
    /// if woken since the last wait. `stop()` wakes too, so a reconnect back-off ends when the client stops.
    private func waitForEvents(on socket: Int32?, timeoutMillis: Int32) {
        let wantsWrite = socket != nil && mosquitto_want_write(handle)
        let wokenAlready = wakeLock.withLock {
            if wakePending {
                wakePending = false
                return true
            }
            sleepingInPoll = true
            return false
        }
        guard !wokenAlready else { return }
        var descriptors = [pollfd(fd: wakePipe[0], events: Int16(POLLIN), revents: 0)]
        if let socket {
            descriptors.append(pollfd(fd: socket, events: Int16(POLLIN) | (wantsWrite ? Int16(POLLOUT) : 0), revents: 0))
        }
        _ = poll(&descriptors, nfds_t(descriptors.count), timeoutMillis)
        wakeLock.withLock { sleepingInPoll = false }
        if descriptors[0].revents != 0 { drainWakePipe() }
    }

    private func drainWakePipe() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakePipe[0], &buffer, buffer.count) > 0 {}
    }

    /// libmosquitto's "exponential" backoff: min × (attempts + 1)², at most max.
    private func reconnectDelayMillis(afterFailedAttempts attempts: Int) -> Int32 {
        let factor = min(attempts + 1, 1000)
        return Int32(clamping: min(reconnectDelay.min * factor * factor, reconnectDelay.max) * 1000)
    }

}
