import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
internal import CMosquittoShims

/// What an ``MQTTConnection`` tells its owner, on the connection's thread.
package protocol MQTTConnectionDelegate: AnyObject, Sendable {
    /// The broker accepted the connection. Returns what to send before the messages held in the outbox (e.g. the
    /// availability and discovery configs) and the topic filters to subscribe to. What the owner ``enqueue(_:)``s
    /// during this call is sent after the messages held (e.g. the current states, which replace older ones still
    /// held): an owner whose states change on other threads reads and enqueues them under the lock that guards the
    /// changes, so that a change made meanwhile is never followed by an older copy.
    func connectionDidConnect(_ connection: MQTTConnection) -> MQTTConnection.Birth
    /// An attempt failed or the connection was lost; `retryIn` is the back-off before the next attempt (nil while
    /// stopping). Called once per failed attempt: the owner decides what to say.
    func connection(_ connection: MQTTConnection, didFail cause: String, retryIn: Double?)
    /// A message arrived on a subscribed topic.
    func connection(_ connection: MQTTConnection, didReceive topic: String, payload: [UInt8], retained: Bool)
}

/// One client connection to an MQTT broker through libmosquitto, with its own thread, its own reconnect and a
/// bounded outbox (``MQTTOutbox``): ``enqueue(_:)`` never waits for the network.
///
/// The thread owns the libmosquitto handle alone: it polls the handle's socket and a pipe that
/// ``enqueue(_:)`` and ``stop(finally:timeout:)`` write to, and drives libmosquitto's read, write and keep-alive
/// steps itself (`mosquitto_loop_read`, `_write`, `_misc`). Each attempt uses a fresh handle (a lost connection's
/// handle is destroyed, so that nothing it held is sent twice by libmosquitto; the outbox resends what the broker
/// did not acknowledge). Attempts back off 1, 2, 4, 5, 5 ... s after failures of any kind, a name that does not
/// resolve included (libmosquitto's own reconnect gives up on those); a success resets the back-off.
///
/// MQTT 3.1.1, clean session, QoS 0 and 1. The corresponding C library is libmosquitto (`mosquitto_new`,
/// `mosquitto_connect_async`, `mosquitto_publish`, `mosquitto_subscribe`, `mosquitto_will_set`, `mosquitto_tls_set`).
package final class MQTTConnection: @unchecked Sendable {
    // @unchecked: `handle`, `connecting`, `connectDeadline`, `backoff`, `quickDropsInRow`, `lastLogLine` and
    // `lastErrno` are touched only on the connection's thread (callbacks run there too); the rest is behind
    // `shared` or immutable.

    /// What to send and subscribe right after the broker accepted a connection.
    package struct Birth: Sendable {
        package var first: [MQTTMessage]
        package var subscriptions: [String]

        package init(first: [MQTTMessage] = [], subscriptions: [String] = []) {
            self.first = first
            self.subscriptions = subscriptions
        }
    }

    /// Where and how to connect.
    package struct Endpoint: Sendable {
        package var host: String
        package var port: Int
        package var clientID: String
        package var keepaliveSeconds: Int
        package var username: String?
        package var password: String?
        /// TLS: nil for plain TCP.
        package var tls: TLS?
        /// The Last Will: published by the broker when the connection ends without a DISCONNECT.
        package var will: MQTTMessage?

        package struct TLS: Sendable {
            /// PEM CA file; nil uses `capath` (`/etc/ssl/certs`).
            package var caFile: String?
            package var certFile: String?
            package var keyFile: String?

            package init(caFile: String?, certFile: String?, keyFile: String?) {
                self.caFile = caFile
                self.certFile = certFile
                self.keyFile = keyFile
            }
        }

        package init(
            host: String, port: Int, clientID: String, keepaliveSeconds: Int, username: String? = nil,
            password: String? = nil, tls: TLS? = nil, will: MQTTMessage? = nil
        ) {
            self.host = host
            self.port = port
            self.clientID = clientID
            self.keepaliveSeconds = keepaliveSeconds
            self.username = username
            self.password = password
            self.tls = tls
            self.will = will
        }

        /// `host:port` for messages.
        package var description: String { "\(host.contains(":") ? "[\(host)]" : host):\(port)" }
    }

    /// Seconds between attempts after failures: doubled from the first to the last, 1, 2, 4, 5, 5 ... The cap is
    /// 5 s (it was 60 s) because what waits is an alarm: a broker restarted (a Mosquitto add-on update, a Home
    /// Assistant restart: half a minute) must see the daemon back within 5 s, not after the next step of a back-off
    /// that grew all through the outage (trial 6: a smoke alarm reached Home Assistant 31 s after the broker was
    /// back); an attempt costs one TCP connect (and a TLS handshake), nothing at one per 5 s.
    package static let firstBackoff = 1.0
    package static let maximumBackoff = 5.0
    /// Seconds an attempt may take from its start to the broker's CONNACK.
    package static let connectTimeout = 10.0
    /// Seconds a connection must last for the back-off to start again from ``firstBackoff``: a broker that drops
    /// the client right after accepting it (another client took the same id) is retried ever more slowly.
    package static let stableSeconds = 10.0
    /// Quick drops in a row (each less than ``stableSeconds`` after the broker accepted the connection, the
    /// reconnect in between accepted too) from which the cause is named as another client with the same client id.
    /// One quick drop is what a broker that stops or restarts does as well.
    package static let quickDropsForClientIDHint = 2

    package let endpoint: Endpoint
    /// The quick drops in a row so far, the one just failed included (see ``quickDropsForClientIDHint``). Read it
    /// in the delegate's callbacks only: it belongs to the connection's thread.
    package var quickDropsInARow: Int { quickDropsInRow }
    private weak var delegateReference: (any MQTTConnectionDelegate)?
    /// The read and write ends of the pipe that wakes the thread.
    private let wake: Int32
    private let wakeWrite: Int32

    private struct Shared {
        var outbox: MQTTOutbox
        var connected = false
        var stopping = false
        /// Sent before disconnecting on ``stop(finally:timeout:)``.
        var finalMessages: [MQTTMessage] = []
        var stopDeadline: Double = 0
        var published = 0
        /// Messages someone waits to see acknowledged (``enqueue(_:acknowledged:)``): the outbox sequence numbers
        /// not acknowledged yet, and what runs once none is left.
        var watches: [(sequences: Set<UInt64>, acknowledged: @Sendable () -> Void)] = []
    }

    private let shared: Mutex<Shared>
    private let done = DispatchSemaphore(value: 0)

    private var handle: OpaquePointer?
    private var connecting = false
    private var connectDeadline: Double = 0
    /// When the broker accepted the current connection (monotonic seconds); nil before CONNACK.
    private var connectedAt: Double?
    private var nextAttempt: Double = 0
    private var backoff = MQTTConnection.firstBackoff
    /// Connections in a row that the broker dropped less than ``stableSeconds`` after accepting them, with every
    /// reconnect in between accepted (the broker stayed reachable); an attempt that fails before being accepted, or
    /// a connection that lasts, starts the count again.
    private var quickDropsInRow = 0
    private var lastLogLine: String?
    private var lastErrno: Int32 = 0
    /// The mids of the final messages (stopping), to wait for their acknowledgement.
    private var finalMids: Set<Int32> = []
    private var disconnectSent = false
    /// A failure a callback saw: handled once libmosquitto's call returns (a handle is never destroyed inside its
    /// own callback).
    private var pendingFailure: String?

    /// - Parameters:
    ///   - endpoint: the broker and the client's identity.
    ///   - outboxLimit: messages held while the broker is away (see ``MQTTOutbox``).
    /// - Throws: `EarshotError(.unavailable)` when libmosquitto cannot be loaded or initialised (it is opened with
    ///   `dlopen` on first use: Debian's libmosquitto1), `EarshotError(.system)` when the wake-up pipe cannot be made.
    ///   The corresponding C functions are `dlopen` and `mosquitto_lib_init`.
    package init(endpoint: Endpoint, outboxLimit: Int = 1_000) throws(EarshotError) {
        if let failure = earshot_mosquitto_load() {
            let reason = String(cString: failure)
            throw EarshotError(.unavailable, "[mqtt] needs libmosquitto, which cannot be loaded (\(reason)): install libmosquitto1 (apt-get install libmosquitto1)",
                               cause: reason)
        }
        self.endpoint = endpoint
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            throw EarshotError(.system, "pipe: \(String(cString: strerror(errno)))")
        }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        wake = ends[0]
        wakeWrite = ends[1]
        shared = Mutex(Shared(outbox: MQTTOutbox(limit: outboxLimit)))
    }

    deinit {
        close(wake)
        close(wakeWrite)
    }

    /// Starts the connection's thread, which tells `delegate` (held weakly) what happens; the first attempt is
    /// made at once. Call once.
    package func start(delegate: any MQTTConnectionDelegate) throws(EarshotError) {
        delegateReference = delegate
        try startThread(named: "earshot-mqtt") { [self] in run() }
    }

    /// Queues `message` and wakes the thread: sent now when connected, else when the broker is back (QoS 1), or
    /// dropped (QoS 0). Any thread; never waits for the network.
    package func enqueue(_ message: MQTTMessage) {
        let queued = shared.withLock { shared -> Bool in
            guard !shared.stopping else { return false }
            if message.qos == 0 && !shared.connected { return false }
            shared.outbox.append(message, at: Self.bootSeconds())
            return true
        }
        if queued { signal() }
    }

    /// Queues `messages` (QoS 1: only these are acknowledged) like ``enqueue(_:)``, and runs `acknowledged` once
    /// the broker has acknowledged every one of them (PUBACK; on the connection's thread), however many
    /// reconnects that takes. Returns false, and runs nothing, when they are not queued (stopping). A message the
    /// full outbox drops is never acknowledged: `acknowledged` does not run then.
    package func enqueue(_ messages: [MQTTMessage], acknowledged: @escaping @Sendable () -> Void) -> Bool {
        precondition(messages.allSatisfy { $0.qos == 1 }, "only QoS 1 messages are acknowledged")
        let queued = shared.withLock { shared -> Bool in
            guard !shared.stopping else { return false }
            let now = Self.bootSeconds()
            let sequences = Set(messages.map { shared.outbox.append($0, at: now) })
            // A watch with a message the full outbox dropped (this one's included) can never be done.
            let outbox = shared.outbox
            shared.watches.removeAll { watch in watch.sequences.contains { !outbox.holds(sequence: $0) } }
            if !sequences.isEmpty, sequences.allSatisfy({ outbox.holds(sequence: $0) }) {
                shared.watches.append((sequences, acknowledged))
            }
            return true
        }
        if queued { signal() }
        return queued
    }

    /// Whether the broker has accepted the current connection.
    package var isConnected: Bool { shared.withLock { $0.connected } }

    /// Messages waiting (not acknowledged), and those dropped because the outbox was full.
    package var backlog: (waiting: Int, dropped: Int) {
        shared.withLock { ($0.outbox.count, $0.outbox.dropped) }
    }

    /// Messages handed to libmosquitto so far.
    package var publishedCount: Int { shared.withLock { $0.published } }

    /// Sends `finally` (e.g. `offline` to the availability topic) when connected, waits for the broker to
    /// acknowledge it, disconnects cleanly (no Last Will), and ends the thread; returns within `timeout` seconds
    /// whatever the network does. Returns the messages never delivered. Idempotent.
    @discardableResult
    package func stop(finally messages: [MQTTMessage] = [], timeout: Double = 3) -> Int {
        let first = shared.withLock { shared -> Bool in
            guard !shared.stopping else { return false }
            shared.stopping = true
            shared.finalMessages = messages
            shared.stopDeadline = Self.now() + max(0.5, timeout - 0.5)
            return true
        }
        if first { signal() }
        _ = done.wait(timeout: .now() + timeout)
        done.signal()  // a later stop() returns at once
        return shared.withLock { $0.outbox.count }
    }

    private func signal() {
        var one: UInt8 = 1
        _ = write(wakeWrite, &one, 1)  // a full pipe already wakes the thread
    }

    private static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }

    /// The boot clock in seconds (`CLOCK_BOOTTIME`, which counts a suspend, unlike ``now()``): the age of what the
    /// outbox holds (``MQTTMessage/maximumAgeSeconds``).
    private static func bootSeconds() -> Double {
        Double(DaemonClock.bootNanoseconds()) / 1e9
    }

    // MARK: The connection's thread

    private func run() {
        defer {
            destroyHandle()
            done.signal()
        }
        while true {
            let (stopping, deadline) = shared.withLock { ($0.stopping, $0.stopDeadline) }
            let now = Self.now()
            if stopping {
                guard handle != nil, isConnectedNow else { return }
                if now >= deadline || finishStop() { return }
            }
            if handle == nil {
                if stopping { return }
                if now < nextAttempt {
                    waitForWake(milliseconds: Int32(min(1_000, max(1, (nextAttempt - now) * 1_000))))
                    continue
                }
                attempt()
                continue
            }
            step(timeoutMilliseconds: stopping ? 50 : 1_000)
            if handle != nil, connecting, Self.now() > connectDeadline {
                fail("no answer from the broker within \(Int(Self.connectTimeout)) s")
            }
        }
    }

    private var isConnectedNow: Bool { shared.withLock { $0.connected } }

    /// While stopping: hands the outbox's unsent messages to libmosquitto first (the events and states routed just
    /// before the stop go out before `offline`, as they were routed), sends the final messages once, then
    /// DISCONNECT when the broker has acknowledged both. True when done. (Audit 12 #8: `offline` went first, and
    /// DISCONNECT could follow before the outbox's QoS 1 messages were acknowledged, which then counted as not
    /// delivered.)
    private func finishStop() -> Bool {
        guard let handle else { return true }
        if !connecting { sendQueued(on: handle) }
        let messages = shared.withLock { shared -> [MQTTMessage] in
            defer { shared.finalMessages = [] }
            return shared.finalMessages
        }
        for message in messages {
            if let mid = publish(message, on: handle) { finalMids.insert(mid) }
        }
        let outboxEmpty = shared.withLock { $0.outbox.count == 0 }
        if finalMids.isEmpty, outboxEmpty, !disconnectSent {
            disconnectSent = true
            earshot_mosquitto_disconnect(handle)
            _ = earshot_mosquitto_loop_write(handle, 1)
            return true
        }
        return false
    }

    private func waitForWake(milliseconds: Int32) {
        var descriptor = pollfd(fd: wake, events: Int16(POLLIN), revents: 0)
        if poll(&descriptor, 1, milliseconds) > 0 { drainWake() }
    }

    private func drainWake() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(wake, &bytes, bytes.count) == bytes.count {}
    }

    /// One round: wait for the socket or a wake-up, read, write, send what the outbox holds, keep alive.
    private func step(timeoutMilliseconds: Int32) {
        guard let handle else { return }
        lastErrno = 0  // the disconnect callback keeps errno as libmosquitto left it
        let socket = earshot_mosquitto_socket(handle)
        var descriptors = [
            pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
            pollfd(fd: socket, events: Int16(POLLIN) | (earshot_mosquitto_want_write(handle) ? Int16(POLLOUT) : 0), revents: 0),
        ]
        let ready = poll(&descriptors, socket >= 0 ? 2 : 1, timeoutMilliseconds)
        if ready > 0, descriptors[0].revents != 0 { drainWake() }
        var rc = Int32(MOSQ_ERR_SUCCESS.rawValue)
        let events = descriptors[1].revents
        if ready > 0, socket >= 0, events & Int16(POLLIN | POLLERR | POLLHUP) != 0 {
            rc = earshot_mosquitto_loop_read(handle, 1)
        }
        if rc == success, self.handle != nil, socket >= 0, events & Int16(POLLOUT) != 0 {
            rc = earshot_mosquitto_loop_write(handle, 1)
        }
        if rc == success, self.handle != nil {
            if !connecting { sendQueued(on: handle) }
            rc = earshot_mosquitto_loop_misc(handle)
        }
        if let failure = pendingFailure {
            pendingFailure = nil
            fail(failure)
        } else if rc != success, self.handle != nil {
            if lastErrno == 0 { lastErrno = errno }
            fail(cause(of: rc))
        }
    }

    private var success: Int32 { Int32(MOSQ_ERR_SUCCESS.rawValue) }

    /// Makes a fresh handle and starts connecting (the TCP connect does not wait; the name lookup does).
    private func attempt() {
        guard let handle = earshot_mosquitto_new(endpoint.clientID, true, Unmanaged.passUnretained(self).toOpaque()) else {
            schedule(after: "libmosquitto could not make a client (out of memory)")
            return
        }
        self.handle = handle
        lastLogLine = nil
        _ = earshot_mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311)
        earshot_mosquitto_connect_callback_set(handle) { _, context, code in
            guard let context else { return }
            Unmanaged<MQTTConnection>.fromOpaque(context).takeUnretainedValue().didConnect(code: code)
        }
        earshot_mosquitto_disconnect_callback_set(handle) { _, context, code in
            guard let context else { return }
            let connection = Unmanaged<MQTTConnection>.fromOpaque(context).takeUnretainedValue()
            connection.lastErrno = errno
        }
        earshot_mosquitto_publish_callback_set(handle) { _, context, mid in
            guard let context else { return }
            Unmanaged<MQTTConnection>.fromOpaque(context).takeUnretainedValue().didPublish(mid: mid)
        }
        earshot_mosquitto_message_callback_set(handle) { _, context, message in
            guard let context, let message else { return }
            Unmanaged<MQTTConnection>.fromOpaque(context).takeUnretainedValue().didReceive(message.pointee)
        }
        earshot_mosquitto_log_callback_set(handle) { _, context, level, line in
            guard let context, let line, level & (MOSQ_LOG_ERR | MOSQ_LOG_WARNING) != 0 else { return }
            Unmanaged<MQTTConnection>.fromOpaque(context).takeUnretainedValue().lastLogLine = String(cString: line)
        }
        if let will = endpoint.will {
            let rc = will.payload.withUnsafeBytes { bytes in
                earshot_mosquitto_will_set(handle, will.topic, Int32(bytes.count), bytes.baseAddress, will.qos, will.retain)
            }
            guard rc == success else { return fail("cannot set the Last Will: \(cause(of: rc))") }
        }
        if let username = endpoint.username {
            let rc = earshot_mosquitto_username_pw_set(handle, username, endpoint.password)
            guard rc == success else { return fail("cannot set the credentials: \(cause(of: rc))") }
        }
        if let tls = endpoint.tls {
            let rc = earshot_mosquitto_tls_set(
                handle, tls.caFile, tls.caFile == nil ? "/etc/ssl/certs" : nil, tls.certFile, tls.keyFile, nil)
            guard rc == success else {
                return fail("TLS setup failed: \(cause(of: rc)) (check [mqtt] cafile, certfile and keyfile)")
            }
        }
        connecting = true
        connectDeadline = Self.now() + Self.connectTimeout
        errno = 0
        let rc = earshot_mosquitto_connect_async(handle, endpoint.host, Int32(endpoint.port), Int32(endpoint.keepaliveSeconds))
        if rc != success {
            lastErrno = errno
            if rc == Int32(MOSQ_ERR_EAI.rawValue) {
                return fail("cannot resolve the host name \"\(endpoint.host)\" (check [mqtt] host)")
            }
            return fail(cause(of: rc))
        }
    }

    /// The words for a libmosquitto error code: errno's text for a system error, the TLS library's last line for a
    /// TLS error.
    private func cause(of rc: Int32) -> String {
        if rc == Int32(MOSQ_ERR_KEEPALIVE.rawValue) {
            return "no answer from the broker within the keep-alive time (\(endpoint.keepaliveSeconds) s; is it frozen or overloaded?)"
        }
        let beforeAccept = connectedAt == nil
        if beforeAccept, endpoint.tls == nil,
           rc == Int32(MOSQ_ERR_CONN_LOST.rawValue) || rc == Int32(MOSQ_ERR_PROTOCOL.rawValue) {
            return "the broker closed the connection before accepting it (a TLS port? then set [mqtt] tls = true)"
        }
        if beforeAccept, endpoint.tls != nil, endpoint.tls?.certFile == nil,
           rc == Int32(MOSQ_ERR_CONN_LOST.rawValue) || rc == Int32(MOSQ_ERR_PROTOCOL.rawValue) {
            return "the broker closed the TLS connection before accepting it (does it require a client certificate? set [mqtt] certfile and keyfile)"
        }
        // A broker that closed the connection is seen on a read (end of stream) or, when a write comes first, as
        // EPIPE or ECONNRESET: the same loss.
        let closedByPeer = rc == Int32(MOSQ_ERR_ERRNO.rawValue) && (lastErrno == EPIPE || lastErrno == ECONNRESET)
        if !beforeAccept, rc == Int32(MOSQ_ERR_CONN_LOST.rawValue) || closedByPeer {
            // Once, this is what a broker that stops or restarts does; again and again right after accepting the
            // connection, while the broker stays reachable, it is a broker handing the client id to another client
            // (each connect takes it back from the other).
            let drops = quickDropsCounting()
            guard drops >= Self.quickDropsForClientIDHint else {
                return "the connection was lost (the broker stopped or restarted?)"
            }
            return "the broker accepted the connection and dropped it within \(Int(Self.stableSeconds)) s, \(drops) times in a row (another client using the client id \(endpoint.clientID)? each daemon needs its own: set [mqtt] node to a unique name on each machine, as two machines with the same host name share the default node, or set [mqtt] client_id)"
        }
        if rc == Int32(MOSQ_ERR_ERRNO.rawValue), lastErrno != 0 {
            return String(cString: strerror(lastErrno))
        }
        if rc == Int32(MOSQ_ERR_TLS.rawValue), let line = lastLogLine {
            return "TLS: \(line)"
        }
        if rc == Int32(MOSQ_ERR_CONN_LOST.rawValue), let line = lastLogLine, line.contains("SSL") || line.contains("TLS") {
            return "TLS: \(line)"
        }
        return String(cString: earshot_mosquitto_strerror(rc)).trimmingTrailingPeriod
    }

    private func didConnect(code: Int32) {
        guard code == 0 else {
            let reason = String(cString: earshot_mosquitto_connack_string(code)).trimmingTrailingPeriod
            let advice = code == 4 || code == 5 ? " (check [mqtt] username and password_file)" : ""
            pendingFailure = "the broker refused the connection: \(reason)\(advice)"
            return
        }
        guard let handle else { return }
        connecting = false
        connectedAt = Self.now()
        shared.withLock { shared in
            shared.connected = true
            shared.outbox.connectionLost()  // every held message is sent again on this connection
        }
        let birth = delegateReference?.connectionDidConnect(self) ?? Birth()
        for message in birth.first { _ = publish(message, on: handle) }
        for filter in birth.subscriptions { _ = earshot_mosquitto_subscribe(handle, nil, filter, 1) }
        sendQueued(on: handle)
    }

    /// Hands every unsent outbox entry to libmosquitto, in order, after dropping those held too long
    /// (``MQTTOutbox/dropExpired(now:)``; a test alert waiting for one of them is not acknowledged, and its
    /// receipt says the broker was not reached).
    private func sendQueued(on handle: OpaquePointer) {
        let pending = shared.withLock { shared -> [MQTTOutbox.Entry] in
            guard shared.connected else { return [] }
            if shared.outbox.dropExpired(now: Self.bootSeconds()) > 0 {
                let outbox = shared.outbox
                shared.watches.removeAll { watch in watch.sequences.contains { !outbox.holds(sequence: $0) } }
            }
            return shared.outbox.unsent
        }
        for entry in pending {
            guard let mid = publish(entry.message, on: handle) else { return }
            shared.withLock { $0.outbox.markSent(sequence: entry.sequence, mid: mid) }
        }
    }

    private func publish(_ message: MQTTMessage, on handle: OpaquePointer) -> Int32? {
        var mid: Int32 = 0
        let rc = message.payload.withUnsafeBytes { bytes in
            earshot_mosquitto_publish(handle, &mid, message.topic, Int32(bytes.count), bytes.baseAddress, message.qos, message.retain)
        }
        guard rc == success else { return nil }
        shared.withLock { $0.published += 1 }
        return mid
    }

    private func didPublish(mid: Int32) {
        finalMids.remove(mid)
        let done = shared.withLock { shared -> [@Sendable () -> Void] in
            guard let sequence = shared.outbox.acknowledge(mid: mid), !shared.watches.isEmpty else { return [] }
            for index in shared.watches.indices { shared.watches[index].sequences.remove(sequence) }
            let done = shared.watches.filter { $0.sequences.isEmpty }.map(\.acknowledged)
            shared.watches.removeAll { $0.sequences.isEmpty }
            return done
        }
        for acknowledged in done { acknowledged() }
    }

    private func didReceive(_ message: mosquitto_message) {
        guard let topicPointer = message.topic else { return }
        let topic = String(cString: topicPointer)
        var payload: [UInt8] = []
        if let bytes = message.payload, message.payloadlen > 0 {
            payload = Array(UnsafeRawBufferPointer(start: bytes, count: Int(message.payloadlen)))
        }
        delegateReference?.connection(self, didReceive: topic, payload: payload, retained: message.retain)
    }

    /// The attempt or the connection failed: the handle goes, the next attempt is scheduled.
    private func fail(_ cause: String) {
        destroyHandle()
        schedule(after: cause)
    }

    /// The current connection's end as one of a run of quick drops: the run's length with this one; 0 when it
    /// was never accepted or lasted ``stableSeconds``.
    private func quickDropsCounting() -> Int {
        guard let connectedAt, Self.now() - connectedAt < Self.stableSeconds else { return 0 }
        return quickDropsInRow + 1
    }

    private func schedule(after cause: String) {
        let stopping = shared.withLock { $0.stopping }
        if let connectedAt, Self.now() - connectedAt >= Self.stableSeconds { backoff = Self.firstBackoff }
        quickDropsInRow = quickDropsCounting()
        connectedAt = nil
        let delay = backoff
        nextAttempt = Self.now() + delay
        backoff = min(Self.maximumBackoff, backoff * 2)
        delegateReference?.connection(self, didFail: cause, retryIn: stopping ? nil : delay)
    }

    private func destroyHandle() {
        guard let handle else { return }
        self.handle = nil
        connecting = false
        pendingFailure = nil
        finalMids.removeAll()
        shared.withLock { shared in
            shared.connected = false
            shared.outbox.connectionLost()
        }
        earshot_mosquitto_destroy(handle)
    }
}

extension String {
    fileprivate var trimmingTrailingPeriod: String {
        hasSuffix(".") ? String(dropLast()) : self
    }
}
