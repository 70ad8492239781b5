import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio

/// Keeps a capture source running for the daemon: opens it, reopens it with back-off when it fails or is
/// unavailable, and reports each change of state once.
///
/// All sessions write into one ``SampleRingBuffer``, so the analysis queue keeps reading the same ring across
/// reopenings. Stream positions continue across a reopening: the new session starts at the position the stream
/// would have reached by then (time since the stream started, at the new session's rate), so the consumer sees the
/// outage as a gap (``SampleRingBuffer/Chunk/gapFrames``), never as joined audio.
///
/// Back-off: after the n-th failure in a row the next attempt waits `initialDelay * 2^(n-1)` seconds, at most
/// `maximumDelay` (defaults 1, 2, 4, 4, 4, ... seconds: a device that comes back is capturing again within about 4 s,
/// however long it was away; an attempt on a missing device costs well under a millisecond). The count resets once
/// a session has run for `stableDuration` seconds, so a device that opens but fails at once cannot cause a fast
/// crash loop.
///
/// Stalls: while a session runs, the supervisor checks how long its source has been waiting for input
/// (``CaptureSource/secondsWithoutInput``), once when that wait could first reach `stallSeconds` (about once per
/// `stallSeconds` while audio flows, so a healthy daemon is not woken twice a second); past `stallSeconds` the state
/// becomes ``State/stalled(name:seconds:)``, checked every ``stallCheckInterval`` from then on, and the next chunk
/// makes it ``State/running(name:format:)`` again (each said once). A stall ends nothing: the source keeps reading, and no gap is added (the stream resumes where it stopped).
///
/// State reports: `onStateChange` runs on `callbackQueue`, in order, only when the state differs from the last one
/// reported; a device that stays missing is reported once, however many retries fail the same way.
///
/// - Important: Thread-safe. The `open` closure runs on the supervisor's private serial queue.
public final class CaptureSupervisor: Sendable {
    /// What the supervisor is doing.
    public enum State: Sendable, Equatable {
        /// Opening the source for the first time.
        case opening
        /// A session is capturing: the source's name and negotiated format.
        case running(name: String, format: CaptureFormat)
        /// The running session's source has delivered nothing for `seconds` (the supervisor's `stallSeconds`),
        /// having delivered audio before: a hung pipe writer or device. The session goes on; audio arriving again
        /// makes the state ``running(name:format:)``.
        case stalled(name: String, seconds: Double)
        /// The source cannot be opened or failed; the supervisor retries after a back-off. The error is the one
        /// line to show (e.g. `cannot open capture device "hw:2,0": Device or resource busy (...)`).
        case unavailable(EarshotError)
        /// The input ended (a file or stdin); no retry.
        case finished
        /// ``stop(timeout:)`` was called.
        case stopped

        /// Equal when the case and its values are; errors compare by code and message (not `cause`, whose ALSA
        /// detail may vary from one failed attempt to the next without being a new state).
        public static func == (lhs: State, rhs: State) -> Bool {
            switch (lhs, rhs) {
            case (.opening, .opening), (.finished, .finished), (.stopped, .stopped): true
            case (.running(let a, let f), .running(let b, let g)): a == b && f == g
            case (.stalled(let a, let x), .stalled(let b, let y)): a == b && x == y
            case (.unavailable(let a), .unavailable(let b)): a.code == b.code && a.message == b.message
            default: false
            }
        }
    }

    /// Retry delays.
    public struct Backoff: Sendable, Equatable {
        /// Seconds before the first retry (> 0). Default 1.
        public var initialDelay: Double
        /// Longest wait between retries, in seconds. Default 4 (the most a returning device waits to be used).
        public var maximumDelay: Double
        /// A session that ran this many seconds resets the back-off. Default 30.
        public var stableDuration: Double

        public init(initialDelay: Double = 1, maximumDelay: Double = 4, stableDuration: Double = 30) {
            self.initialDelay = initialDelay
            self.maximumDelay = maximumDelay
            self.stableDuration = stableDuration
        }

        /// Seconds to wait after `failures` failures in a row (>= 1): `initialDelay * 2^(failures-1)`, capped.
        public func delay(afterFailures failures: Int) -> Double {
            let exponent = Double(min(max(failures, 1) - 1, 62))
            return min(maximumDelay, initialDelay * pow(2, exponent))
        }

        /// What a user reads about the retries, given the wait before the next one (`delay`, seconds): `retrying in
        /// 1 s, then twice as long each time, up to every 4 s`, or `retrying every 4 s` once the wait is the
        /// longest. An outage is reported once, so the words must hold for all of it, not only the next retry.
        public func retryText(delay: Double) -> String {
            let longest = SettingRules.format(maximumDelay)
            if delay >= maximumDelay { return "retrying every \(longest) s" }
            return "retrying in \(SettingRules.format(delay)) s, then twice as long each time, up to every \(longest) s"
        }
    }

    private struct Inner {
        var state: State = .stopped
        var lastReported: State?
        var started = false
        var stopped = false
        /// Increases on every session start and on stop, so stale retries and end callbacks are ignored.
        var generation = 0
        var source: (any CaptureSource)?
        var failures = 0
        var nextRetryDelay: Double?
        var sessionStart: UInt64 = 0
        /// Stream time, in seconds, reached when the last session ended, and when (CLOCK_BOOTTIME ns: an outage
        /// across a suspend counts the time the machine slept).
        var streamSecondsAtEnd: Double?
        var endedAt: UInt64 = 0
        var finishedXruns = 0
        var finishedFrames: Int64 = 0
        var endNote: String?
        /// Checks the running session for a stall (``stallSeconds``), from start to stop.
        var stallTimer: DispatchSourceTimer?
        /// The source's ``CaptureSource/framesCaptured`` when it was found stalled: more means audio came back.
        var framesAtStall: Int64 = 0
        /// When the stall timer is due next (monotonic ns): a check that runs much later than that ran in a process
        /// that was not scheduled (stopped, starved), whose capture thread could not read either.
        var checkDueAt: UInt64 = 0
    }

    /// A stall check that runs more than this many seconds after it was due finds a process that was not scheduled
    /// (SIGSTOP, CPU starvation): the source's wait spans that time, so it is measured again before a stall is said
    /// (trial 11 #3: a 50 s SIGSTOP was said as the device delivering nothing for 5 s, "again after about 6 s").
    public static let lateCheckSeconds = 2.0

    /// The ring every session writes.
    public let ring: SampleRingBuffer
    /// The retry delays.
    public let backoff: Backoff
    /// Seconds without input, after audio has flowed, that make a running session ``State/stalled(name:seconds:)``;
    /// nil: never.
    public let stallSeconds: Double?
    /// How often a stalled session is checked for the audio's return: 0.5 s, so a stall's end is said within half a
    /// second of it. It is also the timer's leeway, so a stall is said at most half a second after `stallSeconds`.
    public static let stallCheckInterval = 0.5
    private let open: @Sendable () throws -> any CaptureSource
    private let onStateChange: @Sendable (State) -> Void
    private let callbackQueue: DispatchQueue
    private let queue = DispatchQueue(label: "earshot.capture-supervisor")
    private let inner = Mutex(Inner())

    /// - Parameters:
    ///   - ring: the ring all sessions write into (the supervisor's sources are its only producer).
    ///   - backoff: retry delays.
    ///   - callbackQueue: where `onStateChange` runs (serial queues keep the reports in order).
    ///   - open: creates and opens a source, e.g. `{ try PCMCapture(configuration: configuration) }`; throw an
    ///     ``EarshotError`` to report a failure line (other errors are shown with their description).
    ///   - stallSeconds: see ``stallSeconds`` (> 0, or nil for no stall check).
    ///   - onStateChange: called once per change of ``State``.
    public init(
        ring: SampleRingBuffer, backoff: Backoff = Backoff(), stallSeconds: Double? = nil, callbackQueue: DispatchQueue,
        open: @escaping @Sendable () throws -> any CaptureSource,
        onStateChange: @escaping @Sendable (State) -> Void
    ) {
        self.ring = ring
        self.backoff = backoff
        self.stallSeconds = stallSeconds.flatMap { $0 > 0 ? $0 : nil }
        self.callbackQueue = callbackQueue
        self.open = open
        self.onStateChange = onStateChange
    }

    deinit {
        inner.withLock { $0.stallTimer }?.cancel()
        // Sessions hold no reference to the supervisor (their callbacks capture it weakly), so this runs; make sure
        // no capture thread outlives it.
        inner.withLock { $0.source }?.stop(timeout: 1)
    }

    /// The current state.
    public var state: State { inner.withLock { $0.state } }
    /// The running session's source, if any.
    public var currentSource: (any CaptureSource)? { inner.withLock { $0.source } }
    /// Seconds until the next attempt while ``State/unavailable(_:)``, else nil.
    public var nextRetryDelay: Double? { inner.withLock { $0.nextRetryDelay } }
    /// Xruns recovered over all sessions.
    public var xrunCount: Int { inner.withLock { $0.finishedXruns + ($0.source?.xrunCount ?? 0) } }
    /// Frames captured over all sessions.
    public var framesCaptured: Int64 { inner.withLock { $0.finishedFrames + ($0.source?.framesCaptured ?? 0) } }
    /// Once the state is ``State/finished``: the source's ``CaptureSource/endNote`` (e.g. a file cut short), or nil.
    public var endNote: String? { inner.withLock { $0.endNote } }

    /// Starts the first attempt (asynchronously). Calling it again has no effect.
    public func start() {
        let begin = inner.withLock { inner -> Bool in
            guard !inner.started else { return false }
            inner.started = true
            return true
        }
        guard begin else { return }
        transition(to: .opening)
        queue.async { [weak self] in self?.attempt(generation: 0) }
        if let stallSeconds {
            let queue = queue
            inner.withLock { inner in
                // One shot, set again by each check for the next time a stall could be due (`checkStall`).
                let timer = DispatchSource.makeTimerSource(queue: queue)
                Self.schedule(timer, after: stallSeconds)
                inner.checkDueAt = ProducerLoop.monotonicNanoseconds() + UInt64(stallSeconds * 1e9)
                timer.setEventHandler { [weak self] in
                    guard let self else { return }
                    let now = ProducerLoop.monotonicNanoseconds()
                    let due = self.inner.withLock { $0.checkDueAt }
                    let late = now > due ? Double(now - due) / 1e9 : 0
                    let delay = self.checkStall(stallSeconds: stallSeconds, lateSeconds: late)
                    self.inner.withLock { $0.checkDueAt = now + UInt64(max(delay, 0.01) * 1e9) }
                    if let timer = self.inner.withLock({ $0.stallTimer }) { Self.schedule(timer, after: delay) }
                }
                timer.resume()
                inner.stallTimer = timer
            }
        }
    }

    /// Stops the running session (waiting up to `timeout` seconds for its thread) and cancels retries. The state
    /// becomes ``State/stopped``. Idempotent.
    public func stop(timeout: Double = 2) {
        let source = inner.withLock { inner -> (any CaptureSource)? in
            inner.stopped = true
            inner.stallTimer?.cancel()
            inner.stallTimer = nil
            inner.generation += 1
            inner.nextRetryDelay = nil
            let source = inner.source
            if let source {
                inner.finishedXruns += source.xrunCount
                inner.finishedFrames += source.framesCaptured
            }
            inner.source = nil
            return source
        }
        source?.stop(timeout: timeout)
        transition(to: .stopped)
    }

    // MARK: Private, on `queue`

    /// A running session whose source has waited `stallSeconds` for input is stalled; one that delivers again runs.
    /// - Returns: seconds until the next check: while running, until the current wait would reach `stallSeconds`
    ///   (`stallSeconds` itself while audio flows); while stalled, ``stallCheckInterval``; otherwise `stallSeconds`.
    ///   A check that ran more than ``lateCheckSeconds`` after it was due (`lateSeconds`) says nothing: the wait
    ///   it would read spans a time the capture thread was not scheduled either; it looks again `stallSeconds` on.
    private func checkStall(stallSeconds: Double, lateSeconds: Double = 0) -> Double {
        let (source, state, framesAtStall) = inner.withLock { ($0.source, $0.state, $0.framesAtStall) }
        guard let source else { return stallSeconds }
        switch state {
        case .running:
            let waited = source.secondsWithoutInput
            guard waited >= stallSeconds else { return stallSeconds - waited }
            guard lateSeconds <= Self.lateCheckSeconds else { return stallSeconds }
            inner.withLock { $0.framesAtStall = source.framesCaptured }
            transition(to: .stalled(name: source.name, seconds: stallSeconds), ifStill: state)
            return Self.stallCheckInterval
        case .stalled:
            if source.framesCaptured > framesAtStall {
                transition(to: .running(name: source.name, format: source.format), ifStill: state)
                return stallSeconds
            }
            return Self.stallCheckInterval
        default:
            return stallSeconds
        }
    }

    /// Arms the one-shot stall timer `seconds` from now (at least 10 ms), with ``stallCheckInterval`` of leeway.
    private static func schedule(_ timer: any DispatchSourceTimer, after seconds: Double) {
        let nanoseconds = Int(max(seconds, 0.01) * 1e9)
        timer.schedule(
            deadline: .now() + .nanoseconds(nanoseconds),
            leeway: .milliseconds(Int(stallCheckInterval * 1000)))
    }

    private func attempt(generation: Int) {
        let proceed = inner.withLock { !$0.stopped && $0.generation == generation }
        guard proceed else { return }
        let source: any CaptureSource
        do {
            source = try open()
        } catch {
            failed(with: Self.earshotError(error), generation: generation)
            return
        }
        let now = DaemonClock.bootNanoseconds()
        let plan = inner.withLock { inner -> (generation: Int, position: Int64)? in
            guard !inner.stopped, inner.generation == generation else { return nil }
            inner.generation += 1
            var position: Int64 = 0
            if let seconds = inner.streamSecondsAtEnd {
                let elapsed = Double(now &- inner.endedAt) / 1e9
                position = Int64(((seconds + elapsed) * Double(source.format.sampleRate)).rounded(.up))
            }
            inner.source = source
            inner.sessionStart = now
            inner.nextRetryDelay = nil
            return (inner.generation, position)
        }
        guard let plan else {
            source.stop(timeout: 1)
            return
        }
        do {
            try source.start(into: ring, startingAt: plan.position, queue: queue) { [weak self] end in
                self?.sessionEnded(end, source: source, generation: plan.generation)
            }
        } catch {
            inner.withLock { $0.source = nil }
            failed(with: Self.earshotError(error), generation: plan.generation)
            return
        }
        // Not when a stop came meanwhile (it has stopped this source and said `stopped`, which must stay the last
        // word); a stop before `start` made `start` throw above, and `failed` says nothing after a stop.
        transition(to: .running(name: source.name, format: source.format), ifGeneration: plan.generation)
    }

    private func sessionEnded(_ end: CaptureEnd, source: any CaptureSource, generation: Int) {
        let now = DaemonClock.bootNanoseconds()
        let current = inner.withLock { inner -> Bool in
            guard !inner.stopped, inner.generation == generation else { return false }
            inner.finishedXruns += source.xrunCount
            inner.finishedFrames += source.framesCaptured
            inner.source = nil
            inner.streamSecondsAtEnd = Double(source.nextFramePosition) / Double(source.format.sampleRate)
            inner.endedAt = now
            if end == .finished { inner.endNote = source.endNote }
            if Double(now &- inner.sessionStart) / 1e9 >= backoff.stableDuration { inner.failures = 0 }
            return true
        }
        guard current else { return }
        // Audio that came back just before the end (a writer that resumed, then closed its pipe within one check)
        // ends the stall first, so that the stall's end is said before the input's.
        let resumed = inner.withLock { inner -> Bool in
            guard case .stalled = inner.state else { return false }
            return source.framesCaptured > inner.framesAtStall
        }
        if resumed { transition(to: .running(name: source.name, format: source.format)) }
        switch end {
        case .stopped:
            return
        case .finished:
            transition(to: .finished)
        case .failed(let error):
            failed(with: error, generation: generation)
        }
    }

    private func failed(with error: EarshotError, generation: Int) {
        let delay = inner.withLock { inner -> Double? in
            guard !inner.stopped, inner.generation == generation else { return nil }
            inner.failures += 1
            let delay = backoff.delay(afterFailures: inner.failures)
            inner.nextRetryDelay = delay
            return delay
        }
        guard let delay else { return }
        transition(to: .unavailable(error))
        queue.asyncAfter(deadline: .now() + delay) { [weak self] in self?.attempt(generation: generation) }
    }

    /// Sets the state and reports it if it differs from the last report; with `expected`, only while the state is
    /// still that one (a stall check must not undo a failure or a stop reported meanwhile); with `generation`, only
    /// while that session is current and the supervisor not stopped.
    private func transition(to state: State, ifStill expected: State? = nil, ifGeneration generation: Int? = nil) {
        let onStateChange = onStateChange
        inner.withLock { inner in
            if let expected, inner.state != expected { return }
            if let generation, inner.stopped || inner.generation != generation { return }
            inner.state = state
            guard inner.lastReported != state else { return }
            inner.lastReported = state
            // Enqueued under the lock so reports from different threads keep their order (async: never blocks).
            callbackQueue.async { onStateChange(state) }
        }
    }

    private static func earshotError(_ error: any Error) -> EarshotError {
        if let error = error as? EarshotError { return error }
        return EarshotError(.unavailable, "capture failed: \(error)")
    }
}
