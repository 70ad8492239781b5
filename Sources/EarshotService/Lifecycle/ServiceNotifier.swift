internal import CSystemd
import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// Tells systemd how the service is doing (`Type=notify`): ready, stopping, a status line, watchdog pings.
///
/// Each call sends one datagram to the socket named by the `NOTIFY_SOCKET` environment variable (systemd sets it
/// for `Type=notify` units); without that variable nothing is sent and the calls return false, so the daemon runs
/// the same from a terminal.
///
/// - Important: Safe from any thread (libsystemd opens a socket per call and reads the environment each time).
package struct ServiceNotifier: Sendable {
    package init() {}

    /// Whether a service manager listens (`NOTIFY_SOCKET` is set).
    package static var isSupervised: Bool { getenv("NOTIFY_SOCKET") != nil }

    /// Sends `state`: newline-separated `VARIABLE=value` assignments (see sd_notify(3)).
    ///
    /// - Returns: true when sent, false when no service manager listens.
    /// - Throws: `EarshotError(.system)` when the datagram cannot be sent (e.g. the socket is gone).
    ///   The corresponding C function is `sd_notify`.
    @discardableResult
    package func notify(_ state: String) throws(EarshotError) -> Bool {
        let result = sd_notify(0, state)
        if result < 0 {
            let first = state.split(separator: "\n").first.map(String.init) ?? state
            throw EarshotError.posix(.system, "cannot notify systemd (\(first))", errno: -result)
        }
        return result > 0
    }

    /// `READY=1`, with a `STATUS=` line if given: startup is complete. Send it once audio flows, so that
    /// `systemctl start` waits for a working capture. `MAINPID` is not needed (systemd started this process).
    @discardableResult
    package func ready(status: String? = nil) throws(EarshotError) -> Bool {
        try notify(Self.message("READY=1", status: status))
    }

    /// `STOPPING=1`, with a `STATUS=` line if given: shutdown has begun (send it first on the shutdown path).
    @discardableResult
    package func stopping(status: String? = nil) throws(EarshotError) -> Bool {
        try notify(Self.message("STOPPING=1", status: status))
    }

    /// `RELOADING=1` with the time of the request (`MONOTONIC_USEC`, CLOCK_MONOTONIC microseconds, which
    /// systemd 253+ requires for `Type=notify-reload`): a reload has begun; send ``ready(status:)`` when done.
    @discardableResult
    package func reloading(status: String? = nil) throws(EarshotError) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let microseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
        return try notify(Self.message("RELOADING=1\nMONOTONIC_USEC=\(microseconds)", status: status))
    }

    /// `STATUS=text`: one line shown by `systemctl status`.
    @discardableResult
    package func status(_ text: String) throws(EarshotError) -> Bool {
        try notify(Self.message(nil, status: text))
    }

    /// `WATCHDOG=1`: the service is alive (needed at least every `WatchdogSec=`).
    @discardableResult
    package func watchdogPing() throws(EarshotError) -> Bool {
        try notify("WATCHDOG=1")
    }

    /// The watchdog timeout systemd asks for (`WatchdogSec=`, passed as `WATCHDOG_USEC` for this process), or nil
    /// when there is none.
    ///
    /// - Throws: `EarshotError(.config)` when the environment holds a malformed watchdog setting.
    ///   The corresponding C function is `sd_watchdog_enabled`.
    package static func watchdogTimeout() throws(EarshotError) -> Duration? {
        var microseconds: UInt64 = 0
        let result = sd_watchdog_enabled(0, &microseconds)
        if result < 0 {
            throw EarshotError.posix(.config, "cannot read the systemd watchdog setting (WATCHDOG_USEC)", errno: -result)
        }
        guard result > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(clamping: microseconds))
    }

    /// `first` and a `STATUS=` line; newlines in the status would start new assignments, so they become spaces.
    package static func message(_ first: String?, status: String?) -> String {
        var lines: [String] = first.map { [$0] } ?? []
        if let status {
            lines.append("STATUS=" + status.replacing("\n", with: " "))
        }
        return lines.joined(separator: "\n")
    }
}

/// Sends `WATCHDOG=1` at half the systemd watchdog timeout, but only while the daemon says it is healthy: a stalled
/// analysis stops the pings, and systemd restarts the service after `WatchdogSec=`.
///
/// - Important: The health check runs on `queue`; it must be cheap and must not block (read an atomic or a
///   `Mutex`-guarded timestamp). Dropping the object or calling ``cancel()`` stops the pings.
// @unchecked: the only non-Sendable member is the Dispatch timer, a `let` whose methods libdispatch makes
// thread-safe (the Swift overlay does not mark the source protocols Sendable); the counters sit in a Mutex.
package final class ServiceWatchdog: @unchecked Sendable {
    /// Time between pings: half of ``timeout``, as sd_watchdog_enabled(3) recommends.
    package let interval: Duration
    /// `WatchdogSec=` of the unit.
    package let timeout: Duration
    private let timer: any DispatchSourceTimer
    private let notifier: ServiceNotifier
    private let isHealthy: @Sendable () -> Bool
    private let onError: @Sendable (EarshotError) -> Void
    private let counts = Mutex((sent: 0, skipped: 0))

    /// Starts pinging if systemd asked for a watchdog.
    ///
    /// - Parameters:
    ///   - queue: Where the timer's handler runs.
    ///   - notifier: Sends the pings.
    ///   - isHealthy: Called before each ping; false skips it (e.g. no audio window analysed for a while).
    ///   - onError: Called on `queue` when a ping cannot be sent (the daemon logs it and goes on).
    /// - Returns: nil when `WatchdogSec=` is not set for this process.
    /// - Throws: `EarshotError(.config)` for a malformed `WATCHDOG_USEC` (see ``ServiceNotifier/watchdogTimeout()``).
    package init?(
        queue: DispatchQueue, notifier: ServiceNotifier = ServiceNotifier(),
        isHealthy: @escaping @Sendable () -> Bool, onError: @escaping @Sendable (EarshotError) -> Void = { _ in }
    ) throws(EarshotError) {
        guard let timeout = try ServiceNotifier.watchdogTimeout() else { return nil }
        self.timeout = timeout
        interval = timeout / 2
        self.notifier = notifier
        self.isHealthy = isHealthy
        self.onError = onError
        timer = DispatchSource.makeTimerSource(queue: queue)
        let (seconds, attoseconds) = interval.components
        let nanoseconds = Int(clamping: seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
        timer.schedule(deadline: .now(), repeating: .nanoseconds(nanoseconds), leeway: .milliseconds(10))
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.activate()
    }

    deinit {
        timer.cancel()
    }

    /// Stops the pings (idempotent).
    package func cancel() {
        timer.cancel()
    }

    /// Pings sent and pings skipped because the daemon was not healthy, so far.
    package var pingCounts: (sent: Int, skipped: Int) { counts.withLock { $0 } }

    /// One timer tick: ping if healthy.
    package func tick() {
        guard isHealthy() else {
            counts.withLock { $0.skipped += 1 }
            return
        }
        do {
            try notifier.watchdogPing()
            counts.withLock { $0.sent += 1 }
        } catch {
            onError(error)
        }
    }
}
