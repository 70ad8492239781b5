import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio

/// What a capture source delivers, after negotiation with the device (or from the file's header).
public struct CaptureFormat: Sendable, Equatable, CustomStringConvertible {
    /// The sample format read from the device (files decoded by libsndfile report `.floatLE`; raw stdin `.s16LE`).
    public var sampleFormat: SampleFormat
    /// Interleaved channels read per frame (>= 1); the ring receives their mean (mono).
    public var channels: Int
    /// Frames per second, in Hz.
    public var sampleRate: Int
    /// Frames per read (one ALSA period; for files, 20 ms).
    public var periodFrames: Int
    /// Frames the device buffer holds (several periods; for files, equal to `periodFrames`).
    public var bufferFrames: Int

    public init(sampleFormat: SampleFormat, channels: Int, sampleRate: Int, periodFrames: Int, bufferFrames: Int) {
        self.sampleFormat = sampleFormat
        self.channels = channels
        self.sampleRate = sampleRate
        self.periodFrames = periodFrames
        self.bufferFrames = bufferFrames
    }

    /// `S16_LE, 1 channel, 16000 Hz, period 320 frames, buffer 2560 frames`.
    public var description: String {
        "\(sampleFormat.rawValue), \(channels) channel\(channels == 1 ? "" : "s"), \(sampleRate) Hz, "
            + "period \(periodFrames) frames, buffer \(bufferFrames) frames"
    }
}

/// How a capture thread keeps time.
public enum CapturePacing: Sendable, Equatable {
    /// Trust the source: a real device delivers frames at its own clock, so reads block until audio exists.
    case device
    /// Never run ahead of the monotonic clock: after each chunk the thread sleeps until `frames / (rate * speed)`
    /// seconds have passed since start. For sources without a clock (files, stdin, the ALSA `null` and `file`
    /// plugins). `speed` > 0; 1 is real time, larger values replay faster (tests).
    case clock(speed: Double)
    /// No clock: before each chunk the thread waits (in 2 ms steps) until the ring has room for it, so the source is
    /// replayed as fast as the ring's consumer reads it and nothing is dropped. For files and stdin replayed at full
    /// speed through the daemon's path (`earshotd --input-speed max`, `scripts/soak`); a live device must not wait.
    case consumer

    /// Real time (`.clock(speed: 1)`).
    public static let realTime = CapturePacing.clock(speed: 1)
}

/// Why a capture thread ended.
public enum CaptureEnd: Sendable, Equatable {
    /// ``CaptureSource/stop(timeout:)`` was called.
    case stopped
    /// The input ended (end of file, stdin closed). Live devices never finish.
    case finished
    /// The device failed or vanished (unplugged: `-ENODEV`; repeated `-EIO`), or the input could not be read.
    case failed(EarshotError)
}

/// A producer of mono audio into a ``SampleRingBuffer``: a live ALSA device (``PCMCapture``) or a file or stdin
/// replayed in real time (``RealtimeFileSource``). Both run the same producer loop on their own thread.
///
/// Lifecycle: create (opens and negotiates; throws on failure), ``start(into:startingAt:queue:onEnd:)`` once,
/// ``stop(timeout:)`` when done (also called by `deinit`). `onEnd` runs exactly once, on the given queue, after the
/// thread has left its loop.
public protocol CaptureSource: AnyObject, Sendable {
    /// What the source reads: the ALSA PCM name, the file path, or `-` for stdin.
    var name: String { get }
    /// The negotiated format.
    var format: CaptureFormat { get }
    /// Frames read from the source so far (excludes frames lost in xruns). Any thread.
    var framesCaptured: Int64 { get }
    /// Overruns (`-EPIPE`), suspends (`-ESTRPIPE`) and device errors (`-EIO`) recovered so far; each became a gap
    /// in the frame positions. Any thread.
    var xrunCount: Int { get }
    /// True from ``start(into:startingAt:queue:onEnd:)`` until the thread has left its loop. Any thread.
    var isRunning: Bool { get }
    /// Why the thread ended, once it has (nil while running or before start). Any thread.
    var end: CaptureEnd? { get }
    /// The frame position the next frame will have (the start position plus frames captured plus frames lost in
    /// xruns). After the thread ends, where a resumed stream would continue. Any thread.
    var nextFramePosition: Int64 { get }
    /// Once the thread has ended with ``CaptureEnd/finished``: what the caller should hear about how the input
    /// ended, e.g. a file cut short (``AudioFileDecoder/truncationWarning``, one line without a program prefix);
    /// nil otherwise. Read it after `onEnd` has run. Default nil.
    var endNote: String? { get }
    /// Seconds the thread has been waiting for its input without getting a frame, counted from the end of the last
    /// chunk delivered: 0 while audio flows, before the first frame ever arrived, and while the thread waits for the
    /// ring or its pacing clock (the input is not late then). A hung pipe or device makes it grow. Any thread.
    /// Default 0 (a source that cannot stall).
    var secondsWithoutInput: Double { get }

    /// Starts the capture thread, which writes mono chunks into `ring` at ``CaptureFormat/sampleRate``, the first
    /// at `framePosition`.
    ///
    /// - Parameters:
    ///   - ring: the ring the thread writes (it becomes the ring's only producer).
    ///   - framePosition: absolute position of the first frame (> 0 when resuming a stream after a reopen).
    ///   - queue: where `onEnd` runs.
    ///   - onEnd: called once when the thread ends, with the reason.
    /// - Throws: ``EarshotError`` `.system` when the source was already started, was stopped before (a stop that
    ///   came first wins: no thread starts), or the thread cannot start.
    func start(
        into ring: SampleRingBuffer, startingAt framePosition: Int64, queue: DispatchQueue,
        onEnd: @escaping @Sendable (CaptureEnd) -> Void) throws

    /// Asks the thread to stop and waits up to `timeout` seconds for it to leave its loop (it checks at least
    /// every 250 ms). Returns true when it has stopped (or never ran). Idempotent. Called before
    /// ``start(into:startingAt:queue:onEnd:)``, it makes that start throw, so no thread runs.
    @discardableResult
    func stop(timeout: Double) -> Bool
}

extension CaptureSource {
    public var endNote: String? { nil }
    public var secondsWithoutInput: Double { 0 }
}

// MARK: - The shared producer loop

/// What one read from a source produced. Carries no allocation, so the loop stays allocation-free.
package enum SourceReadResult {
    /// `frames` mono samples were written to the destination.
    case frames(Int)
    /// Nothing yet (timeout or would-block): check the stop flag and read again.
    case idle
    /// An xrun or a recovered error lost `frames` (estimated from the clock): counted in `xrunCount`, and the next
    /// chunk's position jumps by that much.
    case lost(frames: Int64)
    /// The input ended.
    case end
    /// The source failed; the message is built after the loop from this value.
    case failure(SourceFailure)
}

/// A failure as plain values (no allocation on the capture thread).
package struct SourceFailure {
    /// The C function that failed.
    package var function: StaticString
    /// Its negative error code (ALSA) or `-errno`.
    package var code: Int32
}

/// A source's reading side, used only on the producer thread.
package protocol SourceReader: AnyObject {
    /// Reads up to `capacity` mono frames into `destination`. Must return within about 100 ms so stop requests
    /// are seen; must not allocate, lock or log.
    func read(into destination: UnsafeMutablePointer<Float>, capacity: Int) -> SourceReadResult
    /// Builds the end-of-capture error for `failure` (called after the loop, allocation allowed).
    func error(for failure: SourceFailure) -> EarshotError
    /// Called on the producer thread before the first read and after the last (e.g. to install a log buffer).
    func threadWillStart()
    func threadDidEnd()
}

/// The thread, stop flag, positions, pacing and counters shared by every ``CaptureSource``.
///
/// The loop: read a chunk from the reader into a preallocated mono buffer, write it into the ring at the current
/// frame position, advance the position (by the frames read, plus the frames an xrun lost), pace. Nothing in the
/// loop allocates, locks or logs.
package final class ProducerLoop: @unchecked Sendable {
    package let sampleRate: Int
    package let chunkFrames: Int
    package let pacing: CapturePacing
    /// Whether a full ring makes the thread wait rather than drop (see ``init(reader:sampleRate:chunkFrames:pacing:waitsForRoom:)``).
    package let waitsForRoom: Bool

    private let reader: SourceReader
    private let mono: UnsafeMutablePointer<Float>
    private let stopRequested = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    /// Whether ``start(into:startingAt:name:queue:onEnd:)`` and ``stop(timeout:)`` have been called, decided under
    /// one lock (never taken by the capture thread): a stop that comes first makes the start refuse, so a stop that
    /// races a start (the supervisor stopped while it reopens) never leaves a thread running (audit 12 #3).
    private let lifecycle = Mutex<(started: Bool, stopped: Bool)>((false, false))
    private let captured = Atomic<Int64>(0)
    private let xruns = Atomic<Int>(0)
    private let nextPosition = Atomic<Int64>(0)
    /// Monotonic nanoseconds at which the thread began waiting for input after the last chunk; 0 while it is not
    /// waiting (before the first frame, between a read that delivered and the next read).
    private let waitingForInputSince = Atomic<UInt64>(0)
    private let exited = DispatchSemaphore(value: 0)
    private let endReason = Mutex<CaptureEnd?>(nil)

    /// - Parameters:
    ///   - reader: the source; owned by the loop from now on (touched only by the producer thread once started).
    ///   - chunkFrames: the most frames one read returns (> 0).
    ///   - waitsForRoom: before each chunk, wait (in 2 ms steps) until the ring has room for it instead of
    ///     dropping what does not fit. Default: only with ``CapturePacing/consumer``. A source without a clock of its
    ///     own (a file, stdin) passes true whatever its pacing: replayed faster than the analysis reads, it would lose
    ///     audio, and a loss at the end of the input is not even seen as a gap (no chunk follows it). A live device
    ///     must not wait: its overruns become gaps the analysis reports.
    package init(
        reader: SourceReader, sampleRate: Int, chunkFrames: Int, pacing: CapturePacing, waitsForRoom: Bool? = nil
    ) {
        self.reader = reader
        self.sampleRate = sampleRate
        self.chunkFrames = chunkFrames
        self.pacing = pacing
        self.waitsForRoom = waitsForRoom ?? (pacing == .consumer)
        mono = .allocate(capacity: chunkFrames)
        mono.initialize(repeating: 0, count: chunkFrames)
    }

    deinit { mono.deallocate() }

    package var framesCaptured: Int64 { captured.load(ordering: .relaxed) }
    package var xrunCount: Int { xruns.load(ordering: .relaxed) }
    package var isRunning: Bool { running.load(ordering: .acquiring) }
    package var nextFramePosition: Int64 { nextPosition.load(ordering: .relaxed) }
    package var end: CaptureEnd? { endReason.withLock { $0 } }
    /// See ``CaptureSource/secondsWithoutInput``.
    package var secondsWithoutInput: Double {
        let since = waitingForInputSince.load(ordering: .relaxed)
        guard since > 0 else { return 0 }
        let now = Self.monotonicNanoseconds()
        return now > since ? Double(now - since) / 1e9 : 0
    }

    package func start(
        into ring: SampleRingBuffer, startingAt framePosition: Int64, name: String, queue: DispatchQueue,
        onEnd: @escaping @Sendable (CaptureEnd) -> Void
    ) throws {
        try lifecycle.withLock { state throws(EarshotError) in
            if state.started {
                throw EarshotError(.system, "capture from \"\(name)\" was already started (create a new source to restart)")
            }
            if state.stopped {
                throw EarshotError(.system, "capture from \"\(name)\" was stopped before it started (create a new source to capture)")
            }
            state.started = true
            nextPosition.store(framePosition, ordering: .relaxed)
            running.store(true, ordering: .releasing)
        }
        do {
            try startThread(named: "earshot-capture", stackSize: 1 << 20) { [self] in
                let end = self.run(ring: ring, startPosition: framePosition)
                self.endReason.withLock { $0 = end }  // after the loop: locking is fine here
                self.running.store(false, ordering: .releasing)
                self.exited.signal()
                queue.async { onEnd(end) }
            }
        } catch {
            running.store(false, ordering: .releasing)  // no thread: nothing for a stop to wait for
            throw error
        }
    }

    /// Asks the thread to stop and waits up to `timeout` seconds for it. Before ``start(into:startingAt:name:queue:onEnd:)``
    /// it makes that start refuse (returns true: nothing runs).
    @discardableResult
    package func stop(timeout: Double) -> Bool {
        let started = lifecycle.withLock { state -> Bool in
            state.stopped = true
            stopRequested.store(true, ordering: .releasing)
            return state.started
        }
        guard started else { return true }
        guard running.load(ordering: .acquiring) else { return true }
        let deadline = DispatchTime.now() + .nanoseconds(Int(max(0, timeout) * 1e9))
        guard exited.wait(timeout: deadline) == .success else { return false }
        exited.signal()  // leave it signalled for any later stop() call
        return true
    }

    /// The loop. Runs on the producer thread; returns why it ended.
    private func run(ring: SampleRingBuffer, startPosition: Int64) -> CaptureEnd {
        reader.threadWillStart()
        defer { reader.threadDidEnd() }
        var position = startPosition
        var failure: SourceFailure?
        let clockStart = Self.monotonicNanoseconds()
        let nanosecondsPerFrame: Double
        switch pacing {
        case .device, .consumer: nanosecondsPerFrame = 0
        case .clock(let speed): nanosecondsPerFrame = 1e9 / (Double(sampleRate) * max(speed, 1e-6))
        }
        // Whether a frame has ever arrived, and whether `waitingForInputSince` is set: the stall clock starts after
        // the first chunk (a daemon started before its writer is waiting, not stalled) and is cleared while the
        // thread waits for the ring or its clock.
        var delivered = false
        var waiting = false
        loop: while !stopRequested.load(ordering: .acquiring) {
            if delivered, !waiting {
                waitingForInputSince.store(Self.monotonicNanoseconds(), ordering: .relaxed)
                waiting = true
            }
            switch reader.read(into: mono, capacity: chunkFrames) {
            case .frames(let count):
                guard count > 0 else { continue }
                delivered = true
                if waiting {
                    waitingForInputSince.store(0, ordering: .relaxed)
                    waiting = false
                }
                if waitsForRoom {
                    while ring.availableToWrite < count && !stopRequested.load(ordering: .acquiring) { usleep(2_000) }
                }
                ring.write(
                    from: UnsafeBufferPointer(start: mono, count: count), framePosition: position,
                    sampleRate: sampleRate)
                position += Int64(count)
                nextPosition.store(position, ordering: .relaxed)
                captured.add(Int64(count), ordering: .relaxed)
            case .lost(let frames):
                if waiting {
                    waitingForInputSince.store(0, ordering: .relaxed)
                    waiting = false
                }
                xruns.add(1, ordering: .relaxed)
                position += max(1, frames)
                nextPosition.store(position, ordering: .relaxed)
            case .idle:
                continue
            case .end:
                break loop
            case .failure(let value):
                failure = value
                break loop
            }
            if nanosecondsPerFrame > 0 {
                let due = clockStart + UInt64(Double(position - startPosition) * nanosecondsPerFrame)
                Self.sleep(until: due, orStop: stopRequested)
            }
        }
        waitingForInputSince.store(0, ordering: .relaxed)
        if let failure { return .failed(reader.error(for: failure)) }
        return stopRequested.load(ordering: .acquiring) ? .stopped : .finished
    }

    package static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// Sleeps until the monotonic clock reaches `due`, in steps of at most 250 ms (longer than a period, so one
    /// sleep per period) so a stop request is seen.
    package static func sleep(until due: UInt64, orStop stop: borrowing Atomic<Bool>) {
        while !stop.load(ordering: .acquiring) {
            let now = monotonicNanoseconds()
            guard now < due else { return }
            let step = min(due - now, 250_000_000)
            var interval = timespec(tv_sec: Int(step / 1_000_000_000), tv_nsec: Int(step % 1_000_000_000))
            _ = nanosleep(&interval, nil)
        }
    }
}
