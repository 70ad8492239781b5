import Dispatch
import Foundation
import Synchronization
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// A real AF_UNIX datagram socket standing in for systemd's notification socket.
final class NotifySocketFixture {
    let directory: String
    let path: String
    private let descriptor: Int32

    init() throws {
        // Under /tmp: sun_path holds at most 107 bytes.
        directory = "/tmp/earshot-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/notify.sock"
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        // Blocking reads give up after 5 s, so a test never hangs.
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit {
        close(descriptor)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The next datagram, waiting up to 5 s (`wait`), or only what is already queued.
    func receive(wait: Bool = true) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, wait ? 0 : Int32(MSG_DONTWAIT)) }
        guard count >= 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }
}

/// Sets environment variables for the duration of `body` and restores them after.
func withEnvironment(_ values: [String: String?], _ body: () throws -> Void) throws {
    let saved = values.keys.map { ($0, getenv($0).map { String(cString: $0) }) }
    for (name, value) in values {
        if let value { setenv(name, value, 1) } else { unsetenv(name) }
    }
    defer {
        for (name, value) in saved {
            if let value { setenv(name, value, 1) } else { unsetenv(name) }
        }
    }
    try body()
}

/// Polls `condition` every 10 ms for up to `seconds`.
func eventually(within seconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}

@Suite("Lifecycle: sd_notify, watchdog, signals", .serialized)
struct LifecycleTests {
    @Test("earshot bench's notification socket on a path another socket holds: one line, and the other socket's file is left alone")
    func benchNotifySocketOnATakenPath() throws {
        let other = try NotifySocketFixture()
        let error = #expect(throws: EarshotError.self) { _ = try NotifySocket(path: other.path) }
        #expect(error?.message == "cannot bind the notification socket \(other.path): Address already in use")
        // A failed init ran no deinit: nothing closed a descriptor twice or unlinked the path it never bound.
        var info = stat()
        #expect(lstat(other.path, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK)
    }

    @Test("READY=1, STATUS=, STOPPING=1, RELOADING=1 and WATCHDOG=1 reach a real notification socket")
    func notifications() throws {
        let socket = try NotifySocketFixture()
        let notifier = ServiceNotifier()
        try withEnvironment(["NOTIFY_SOCKET": socket.path]) { () throws -> Void in
            #expect(ServiceNotifier.isSupervised)
            #expect(try notifier.ready(status: "capturing from hw:1,0 at 48000 Hz"))
            #expect(socket.receive() == "READY=1\nSTATUS=capturing from hw:1,0 at 48000 Hz")
            #expect(try notifier.ready())
            #expect(socket.receive() == "READY=1")
            #expect(try notifier.status("2 subscribers\nline two"))
            #expect(socket.receive() == "STATUS=2 subscribers line two")
            #expect(try notifier.watchdogPing())
            #expect(socket.receive() == "WATCHDOG=1")
            // MONOTONIC_USEC is CLOCK_MONOTONIC, in microseconds, at the call.
            func monotonicMicroseconds() -> UInt64 {
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
            }
            let before = monotonicMicroseconds()
            #expect(try notifier.reloading())
            let after = monotonicMicroseconds()
            let reloading = socket.receive() ?? ""
            #expect(reloading.hasPrefix("RELOADING=1\nMONOTONIC_USEC="))
            let stamp = try #require(UInt64(reloading.dropFirst("RELOADING=1\nMONOTONIC_USEC=".count)), "\(reloading)")
            #expect(stamp >= before && stamp <= after, "\(before) <= \(stamp) <= \(after)")
            #expect(try notifier.stopping(status: "stopping on SIGTERM"))
            #expect(socket.receive() == "STOPPING=1\nSTATUS=stopping on SIGTERM")
        }
    }

    @Test("without NOTIFY_SOCKET nothing is sent; a socket that is gone is an error naming the message")
    func unsupervisedAndBroken() throws {
        try withEnvironment(["NOTIFY_SOCKET": nil]) { () throws -> Void in
            #expect(!ServiceNotifier.isSupervised)
            #expect(try ServiceNotifier().ready() == false)
        }
        try withEnvironment(["NOTIFY_SOCKET": "/tmp/earshot-no-such-dir-\(getpid())/notify.sock"]) { () throws -> Void in
            #expect(throws: EarshotError(.system, "cannot notify systemd (READY=1): No such file or directory",
                                         cause: "No such file or directory")) {
                try ServiceNotifier().ready(status: "ignored")
            }
        }
    }

    @Test("the watchdog timeout comes from WATCHDOG_USEC for this process only")
    func watchdogTimeout() throws {
        try withEnvironment(["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": String(getpid())]) { () throws -> Void in
            #expect(try ServiceNotifier.watchdogTimeout() == .seconds(30))
        }
        try withEnvironment(["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"]) { () throws -> Void in
            #expect(try ServiceNotifier.watchdogTimeout() == nil)
        }
        try withEnvironment(["WATCHDOG_USEC": nil, "WATCHDOG_PID": nil]) { () throws -> Void in
            #expect(try ServiceNotifier.watchdogTimeout() == nil)
            #expect(try ServiceWatchdog(queue: .main, isHealthy: { true }) == nil)
        }
        try withEnvironment(["WATCHDOG_USEC": "soon", "WATCHDOG_PID": nil]) { () throws -> Void in
            #expect(throws: EarshotError(.config, "cannot read the systemd watchdog setting (WATCHDOG_USEC): Invalid argument",
                                         cause: "Invalid argument")) {
                try ServiceNotifier.watchdogTimeout()
            }
        }
    }

    @Test("the watchdog pings at half the timeout while healthy, and never while not")
    func watchdogPings() throws {
        let socket = try NotifySocketFixture()
        let queue = DispatchQueue(label: "earshot.test.watchdog")
        try withEnvironment([
            "NOTIFY_SOCKET": socket.path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": String(getpid()),
        ]) { () throws -> Void in
            let healthy = try #require(try ServiceWatchdog(queue: queue, isHealthy: { true }))
            #expect(healthy.timeout == .milliseconds(200))
            #expect(healthy.interval == .milliseconds(100))
            #expect(socket.receive() == "WATCHDOG=1")
            #expect(socket.receive() == "WATCHDOG=1")
            healthy.cancel()
            queue.sync {}  // a tick already running finishes
            #expect(eventually { healthy.pingCounts.sent >= 2 })
            while socket.receive(wait: false) != nil {}  // drain pings sent before cancel

            let stalled = try #require(try ServiceWatchdog(queue: queue, isHealthy: { false }))
            #expect(eventually { stalled.pingCounts.skipped >= 3 })
            stalled.cancel()
            queue.sync {}
            #expect(stalled.pingCounts.sent == 0)
            #expect(socket.receive(wait: false) == nil)
        }
    }

    @Test("the watchdog's health check: a heartbeat under 5 s old is recent, one stored after the clock was read too")
    func heartbeatIsRecent() {
        let now: UInt64 = 100_000_000_000
        #expect(EarshotDaemon.heartbeatIsRecent(now - 4_999_999_999, now: now))
        #expect(!EarshotDaemon.heartbeatIsRecent(now - 5_000_000_000, now: now))
        #expect(!EarshotDaemon.heartbeatIsRecent(0, now: now))
        #expect(EarshotDaemon.heartbeatIsRecent(now, now: now))
        // The analysis queue stored its heartbeat between the check's two readings (a subtraction trapped here,
        // audit 12 #1): recent, not a crash.
        #expect(EarshotDaemon.heartbeatIsRecent(now + 5, now: now))
    }

    @Test("blockSignals blocks SIGTERM, SIGINT and SIGHUP in the calling thread and ignores SIGPIPE")
    func blockSignals() throws {
        // On a pthread of its own, whose mask starts with the three signals unblocked: the mask is per thread.
        let thread = try #require(BlockSignalsProbe.run())
        #expect(thread.before == [false, false, false])
        #expect(thread.after == [true, true, true])
        #expect(thread.error == nil)
        var current = sigaction()
        sigaction(SIGPIPE, nil, &current)
        #expect(unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self))
    }

    /// The environment variable that turns ``signalsReachHandlers()`` into the child side: it names the file for
    /// the child's report.
    static let childReportVariable = "EARSHOT_TEST_SIGNAL_CHILD_REPORT"

    @Test("SIGHUP reaches onReload and only the first SIGTERM reaches onTerminate (in a child process)")
    func signalsReachHandlers() throws {
        if let report = ProcessInfo.processInfo.environment[Self.childReportVariable] {
            try Self.signalChild(report: report)
            return
        }
        // A signal sent to this test process would kill it: its other threads do not block the signals. So the
        // test binary runs itself again, filtered to this test, with the signals blocked from its first
        // instruction (posix_spawn's initial mask, inherited by every thread the child starts).
        let report = "/tmp/earshot-signal-report-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(report) }
        let executable = try #require(Self.testExecutable())
        let arguments = [executable, "--testing-library", "swift-testing", "--filter", "signalsReachHandlers"]
        var environment = ProcessInfo.processInfo.environment
        environment[Self.childReportVariable] = report
        let status = try Self.spawnWithSignalsBlocked(arguments, environment: environment, timeoutSeconds: 120)
        let text = (try? String(contentsOfFile: report, encoding: .utf8)) ?? "(no report)"
        #expect(status == 0, "child exit status; report: \(text)")
        #expect(text == "blocked=true reloads=2 terminate=15 terminations=1")
    }

    /// The child side: install the handlers, signal this process, report what arrived.
    static func signalChild(report: String) throws {
        try SignalHandling.blockSignals()
        let queue = DispatchQueue(label: "earshot.test.signals")
        let reloads = Mutex(0)
        let terminations = Mutex<[Int32]>([])
        let reloaded = DispatchSemaphore(value: 0)
        let terminated = DispatchSemaphore(value: 0)
        let sources = SignalHandling.install(
            queue: queue,
            onTerminate: { signal in
                terminations.withLock { $0.append(signal) }
                terminated.signal()
            },
            onReload: {
                reloads.withLock { $0 += 1 }
                reloaded.signal()
            })
        let blocked = SignalHandling.isBlocked(SIGTERM)
        // The test runner's threads do not all block the signals: wait for the handlers before signalling.
        guard sources.waitUntilRegistered(timeout: .now() + 10) else {
            try "sources not registered".write(toFile: report, atomically: true, encoding: .utf8)
            return
        }
        kill(getpid(), SIGHUP)
        _ = reloaded.wait(timeout: .now() + 10)
        kill(getpid(), SIGHUP)
        _ = reloaded.wait(timeout: .now() + 10)
        kill(getpid(), SIGTERM)
        _ = terminated.wait(timeout: .now() + 10)
        kill(getpid(), SIGINT)  // a second termination signal: ignored
        // Let the second signal be delivered, then flush the queue.
        usleep(200_000)
        queue.sync {}
        let text = "blocked=\(blocked) reloads=\(reloads.withLock { $0 }) terminate=\(terminations.withLock { $0.first ?? 0 }) terminations=\(terminations.withLock { $0.count })"
        withExtendedLifetime(sources) {}
        try text.write(toFile: report, atomically: true, encoding: .utf8)
    }

    /// The test bundle executable running now (`*.xctest`).
    static func testExecutable() -> String? {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
    }

    /// Runs `arguments` with SIGTERM, SIGINT and SIGHUP blocked from the start; returns the exit status.
    /// Kills the child after `timeoutSeconds`.
    static func spawnWithSignalsBlocked(_ arguments: [String], environment: [String: String], timeoutSeconds: Double)
        throws -> Int32
    {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var mask = sigset_t()
        sigemptyset(&mask)
        for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&mask, signal) }
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var fileActions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&fileActions)
        defer { posix_spawn_file_actions_destroy(&fileActions) }
        // The child's own test output would interleave with ours: discard it (the report file carries the result).
        posix_spawn_file_actions_addopen(&fileActions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&fileActions, 2, "/dev/null", O_WRONLY, 0)

        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, arguments[0], &fileActions, &attributes, argv, envp)
        guard spawned == 0 else { throw POSIXError(.init(rawValue: spawned) ?? .EIO) }
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid { break }
            if result < 0 && errno != EINTR { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
            if Date() > deadline {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                return -1
            }
            usleep(20_000)
        }
        // WIFEXITED / WEXITSTATUS are macros: exited normally when the low 7 bits are 0.
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}

/// Runs `SignalHandling.blockSignals()` on a new pthread and reports the thread's mask before and after.
enum BlockSignalsProbe {
    struct Result: Sendable {
        var before: [Bool] = []
        var after: [Bool] = []
        var error: EarshotError?
    }

    static let signals = [SIGTERM, SIGINT, SIGHUP]

    static func run() -> Result? {
        let box = Unmanaged.passRetained(ResultBox())
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            guard let context else { return nil }
            let box = Unmanaged<ResultBox>.fromOpaque(context).takeUnretainedValue()
            var unblock = sigset_t()
            sigemptyset(&unblock)
            for signal in BlockSignalsProbe.signals { sigaddset(&unblock, signal) }
            pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
            box.result.before = BlockSignalsProbe.signals.map(SignalHandling.isBlocked)
            do throws(EarshotError) {
                try SignalHandling.blockSignals()
            } catch {
                box.result.error = error
            }
            box.result.after = BlockSignalsProbe.signals.map(SignalHandling.isBlocked)
            return nil
        }, box.toOpaque())
        guard created == 0 else {
            box.release()
            return nil
        }
        pthread_join(thread, nil)
        let result = box.takeRetainedValue().result
        return result
    }

    final class ResultBox {
        var result = Result()
    }
}
