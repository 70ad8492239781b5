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

/// The daemon's signals: SIGTERM and SIGINT stop it, SIGHUP reloads its configuration, SIGPIPE is ignored.
///
/// Use in two steps:
/// 1. First thing in `main`, before any thread starts: ``blockSignals()``. Threads inherit the mask, so no thread
///    ever runs the default action (termination) for these signals.
/// 2. ``install(queue:onTerminate:onReload:)``: Dispatch signal sources (on Linux, a `signalfd` read by Dispatch)
///    deliver the blocked signals to ordinary closures on `queue`, where any code may run (no async-signal rules).
package enum SignalHandling {
    /// The signals that stop the daemon gracefully.
    package static let terminationSignals: [Int32] = [SIGTERM, SIGINT]
    /// The signal that reloads the configuration.
    package static let reloadSignal: Int32 = SIGHUP

    /// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and ignores SIGPIPE in the process (a subscriber
    /// that disconnects makes `write` fail with EPIPE instead of killing the daemon).
    ///
    /// - Important: Call from `main` before any thread is started (Dispatch queues, capture thread); a thread
    ///   started earlier keeps the signals unblocked and would be killed by them.
    /// - Throws: `EarshotError(.system)` if the mask or the disposition cannot be set.
    ///   The corresponding C functions are `pthread_sigmask` and `sigaction`.
    package static func blockSignals() throws(EarshotError) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in terminationSignals + [reloadSignal] { sigaddset(&set, signal) }
        let result = pthread_sigmask(SIG_BLOCK, &set, nil)
        if result != 0 {
            throw EarshotError.posix(.system, "cannot block SIGTERM, SIGINT and SIGHUP (pthread_sigmask)", errno: result)
        }
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        sigemptyset(&ignore.sa_mask)
        if sigaction(SIGPIPE, &ignore, nil) != 0 {
            throw EarshotError.posix(.system, "cannot ignore SIGPIPE (sigaction)", errno: errno)
        }
    }

    /// Whether `signal` is blocked in the calling thread.
    package static func isBlocked(_ signal: Int32) -> Bool {
        var current = sigset_t()
        guard pthread_sigmask(SIG_BLOCK, nil, &current) == 0 else { return false }
        return sigismember(&current, signal) == 1
    }

    /// Starts delivering the signals to closures on `queue`.
    ///
    /// - Parameters:
    ///   - queue: Where the closures run (a serial queue of the daemon).
    ///   - onTerminate: Called once, with SIGTERM or SIGINT, for the first of them; later ones are ignored, so
    ///     there is a single shutdown path (which sends `STOPPING=1`, stops capture, removes the socket, exits).
    ///   - onReload: Called for each SIGHUP.
    /// - Returns: The owner of the signal sources; keep it for the life of the process (dropping it cancels them,
    ///   after which the signals stay blocked and pending, i.e. have no effect).
    /// - Important: Call ``blockSignals()`` first, in `main`.
    package static func install(
        queue: DispatchQueue, onTerminate: @escaping @Sendable (Int32) -> Void,
        onReload: @escaping @Sendable () -> Void
    ) -> SignalSources {
        SignalSources(queue: queue, onTerminate: onTerminate, onReload: onReload)
    }
}

/// The Dispatch signal sources of ``SignalHandling/install(queue:onTerminate:onReload:)``; cancels them on deinit.
// @unchecked: the only non-Sendable members are the Dispatch sources, `let`s whose methods libdispatch makes
// thread-safe (the Swift overlay does not mark the source protocols Sendable); the flag is an Atomic.
package final class SignalSources: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]
    private let terminated = Atomic<Bool>(false)
    private let registered = DispatchGroup()

    package init(queue: DispatchQueue, onTerminate: @escaping @Sendable (Int32) -> Void, onReload: @escaping @Sendable () -> Void) {
        let terminationSources = SignalHandling.terminationSignals.map { signal in
            (signal, DispatchSource.makeSignalSource(signal: signal, queue: queue))
        }
        let reload = DispatchSource.makeSignalSource(signal: SignalHandling.reloadSignal, queue: queue)
        sources = terminationSources.map(\.1) + [reload]
        for (signal, source) in terminationSources {
            source.setEventHandler { [weak self] in
                guard let self else { return }
                // Only the first termination signal starts the shutdown.
                let (exchanged, _) = self.terminated.compareExchange(
                    expected: false, desired: true, ordering: .acquiringAndReleasing)
                if exchanged { onTerminate(signal) }
            }
        }
        reload.setEventHandler { onReload() }
        for source in sources {
            registered.enter()
            let group = registered
            source.setRegistrationHandler { group.leave() }
            source.activate()
        }
    }

    /// Waits until Dispatch has registered every source (it does so asynchronously after `install`).
    ///
    /// A process whose threads do not all block the signals must wait, or an early signal takes its default action
    /// (SIGHUP ends the process). The daemon is such a process: OpenBLAS starts its worker threads in a library
    /// constructor, before `main` can block anything (seen as a SIGHUP right after start killing earshotd).
    ///
    /// - Returns: false on timeout.
    /// - Important: Do not call on the `queue` given to `install` (the registration handlers run there).
    package func waitUntilRegistered(timeout: DispatchTime) -> Bool {
        registered.wait(timeout: timeout) == .success
    }

    deinit {
        for source in sources { source.cancel() }
    }

    /// Whether a termination signal has arrived.
    package var hasTerminated: Bool { terminated.load(ordering: .acquiring) }
}
