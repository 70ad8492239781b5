import Dispatch
import FoundationEssentials
import Glibc
import Synchronization
import EarshotSupport
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// The daemon's analysis queue: drains the capture ring into the detection stage (`DetectionStage`) and hands
/// what it produced, as values, to the output router.
///
/// Everything here runs on one serial Dispatch queue, woken when the capture thread has written to the ring (a
/// user-data source the ring's `didWrite` adds to: one wake-up per capture period, 0.2 s by default, coalesced
/// when the queue is busy), or, without one, by a timer every `pollInterval`. The ring holds seconds of audio, so
/// the capture thread never waits for analysis. (A 40 ms timer cost 0.3 % of a core in wake-ups alone: Dispatch
/// fires timers from its manager thread, which then wakes a worker.)
///
/// On the way to the router: the snore detector's `snoring` events go out while `snoring` is watched or a sleep
/// session runs (``SnorePublication``), muted groups' events stop (`GroupMutes`; an event still open when its group
/// is unmuted is announced then, ``announceHeldOnset(of:)``), sleep sessions see every window
/// and every snore decision, and the clip recorder sees every published event (its audio comes from the stage's resampled samples, on this queue).
///
/// - Important: All methods other than `init` must be called on `queue`.
final class AnalysisPipeline {
    static let pollInterval = DispatchTimeInterval.milliseconds(100)

    let queue: DispatchQueue
    let ring: SampleRingBuffer
    private(set) var stage: DetectionStage
    private let router: OutputRouter
    private let sleep: SleepService
    private let clips: ClipRecorder?
    private let detections: EventCounter
    private let mutes: GroupMutes
    private var snorePublication: SnorePublication
    private let onFirstAudio: () -> Void
    private let onWindow: ((Double) -> Void)?
    private let clock: DaemonClock
    private var sawAudio = false
    private var scratch: [Float]
    private var timer: DispatchSourceTimer?
    private var wakeUp: AudioArrivedSignal?

    /// - Parameters:
    ///   - detections: counts onsets (classifier and alarm), for the status reply.
    ///   - mutes: the groups muted at run time; their events stop here.
    ///   - snoringWatched: whether `snoring` is watched (``DetectionPlan/snoringWatched``).
    ///   - clock: the daemon's clock, which every output is routed with (``DaemonClock``).
    ///   - onWindow: called with each analysis window's end (stream seconds) once the window is published, before
    ///     the outputs after it (mutes on the stream's time end there); nil: not called.
    init(
        queue: DispatchQueue, ring: SampleRingBuffer, stage: DetectionStage, router: OutputRouter,
        sleep: SleepService, clips: ClipRecorder?, detections: EventCounter, mutes: GroupMutes,
        snoringWatched: Bool, clock: DaemonClock, onFirstAudio: @escaping () -> Void,
        onWindow: ((Double) -> Void)? = nil
    ) {
        self.onWindow = onWindow
        self.clock = clock
        self.mutes = mutes
        snorePublication = SnorePublication(watched: snoringWatched)
        self.queue = queue
        self.ring = ring
        self.stage = stage
        self.router = router
        self.sleep = sleep
        self.clips = clips
        self.detections = detections
        self.onFirstAudio = onFirstAudio
        if let clips { stage.onResampledAudio = { samples, index in clips.append(samples, at: index) } }
        // Two seconds at 48 kHz per read: the ring never holds more than a few polls' worth.
        scratch = [Float](repeating: 0, count: 96_000)
        // A session that stops mid-event counts the open event when subscribers saw it start.
        sleep.openSnoreEvent = { [unowned self] in
            snorePublication.openEventPublished ? stage.openSnoreSummary(reason: .streamEnd) : nil
        }
        // A session counts the snores it heard, not those of an event that was open when it started.
        sleep.sessionAudioStarts = { time in stage.countSnores(from: time) }
    }

    /// Starts analysing: on every event of `audioArrived` (a source on `queue` the ring's producer adds to), or, when
    /// it is nil, every `pollInterval`.
    func start(audioArrived: AudioArrivedSignal? = nil) {
        if let audioArrived {
            audioArrived.setHandler { [unowned self] in pump() }
            wakeUp = audioArrived
            return
        }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.pollInterval, repeating: Self.pollInterval, leeway: .milliseconds(20))
        timer.setEventHandler { [unowned self] in pump() }
        self.timer = timer
        timer.resume()
    }

    /// Stops the wake-ups, analyses what the ring still holds and ends open events (`stream_end`).
    func stop() {
        timer?.cancel()
        timer = nil
        wakeUp?.setHandler(nil)
        pump(drain: true)
        hand(stage.stop())
    }

    /// The capture device went away: analyses what the ring holds, then ends open events (`stream_gap`).
    func captureLost() {
        pump(drain: true)
        hand(stage.captureLost())
    }

    /// The capture delivers nothing (`input_stalled`): the gap that may follow is the stall's.
    func captureStalled() {
        stage.captureStalled()
    }

    /// Says the xrun gaps the stage's `overrun` limit held back, once its 10 s have passed (called every second by
    /// the daemon's heartbeat).
    func flushGapReport() {
        hand(stage.flushGapReport())
    }

    /// earshotd was not scheduled for a while: the gap that may follow is that freeze's.
    func notScheduled() {
        stage.interrupted(by: .notScheduled)
    }

    /// The input ended (a file or stdin): scores the audio left in the window (zero-padded as a file's end is),
    /// then ends open events.
    func finishInput() {
        pump(drain: true)
        hand(stage.finishInput())
    }

    /// Applies a reloaded plan, ending only the open events that cannot go on (`reload`; see
    /// `DetectionStage.reconfigure`): a new window, overlap, gate or set of class labels restarts the window grid.
    func reconfigure(
        plan: DetectionPlan, heads: HeadModelSet, snoreHead: SnoreDetector.HeadEvidence?, snoreHeadChanged: Bool
    ) throws(EarshotError) {
        hand(try stage.reconfigure(
            settings: plan.stageSettings, engine: plan.engine, heads: heads, snoreHead: snoreHead,
            snoreHeadChanged: snoreHeadChanged))
        snorePublication.watched = plan.snoringWatched
    }

    /// Swaps in custom models with the same class labels; false (nothing changed) when the labels differ.
    func replaceHeads(_ heads: HeadModelSet) -> Bool { stage.replaceHeads(heads) }

    /// New snore thresholds without ending the open snoring event; false (nothing changed) when the snore settings
    /// differ in more than the thresholds.
    func updateSnoreThresholds(_ configuration: SnoreDetector.Configuration) -> Bool {
        stage.updateSnoreThresholds(configuration)
    }

    /// Names of the groups with an open event (muted ones too): the stage's, then `snoring` while its published
    /// event is open.
    var activeGroups: [String] {
        stage.activeGroups + (snorePublication.openEventPublished ? [SnoreDetector.groupName] : [])
    }

    /// Reads what the capture thread has written and analyses it.
    ///
    /// Without `drain`, at most what the ring held on entry is analysed, and the rest in a block queued behind
    /// whatever else waits on the queue (status replies, sleep commands, reloads): a source that delivers faster
    /// than analysis keeps up with (a PCM without a clock, such as ALSA's `null`) must not starve them.
    func pump(drain: Bool = false) {
        var budget = ring.availableToRead
        while drain || budget > 0 {
            let chunk = scratch.withUnsafeMutableBufferPointer { ring.readChunk(into: $0) }
            if chunk.count == 0 { break }
            budget -= chunk.count
            if !sawAudio {
                sawAudio = true
                onFirstAudio()
            }
            let outputs = scratch.withUnsafeBufferPointer { samples in
                stage.process(
                    UnsafeBufferPointer(rebasing: samples[0..<chunk.count]), sampleRate: chunk.sampleRate,
                    framePosition: chunk.framePosition, gap: chunk.isDiscontinuity ? chunk.gapFrames : nil)
            }
            hand(outputs)
        }
        if !drain, ring.availableToRead > 0 {
            wakeUp?.raise()  // the rest after the blocks already queued (with the timer, at its next tick)
        }
    }

    /// The stage's values, through the sleep session's filter and the clip recorder, to the router.
    private func hand(_ outputs: [DetectionStage.Output]) {
        for output in outputs {
            // One reading of the daemon's clock per output: a snoring event's routing (the history maps its times with
            // it) and the sleep session's copy of it use the same, so the report's times are the history's. The
            // daemon's clock steps only on the heartbeat, on this queue, where what was stamped before is moved.
            let now = clock.now()
            switch output {
            case .window(let result):
                sleep.observe(window: result)
                publish(output, at: now)
                // After the window: a mute ending at its end announces what it held back after that window's line.
                onWindow?(result.timeRange.end)
                continue
            case .detection:
                guard mutes.admits(output) else { continue }
            case .snore(let decision):
                let published = snorePublication.admits(decision, sessionActive: sleep.isActive)
                sleep.observe(decision, published: published, now: now)
                guard published, mutes.admits(output) else { continue }
            case .alarm:
                guard mutes.admits(output) else { continue }
            case .health:
                break
            }
            publish(output, at: now)
        }
    }

    /// `group` has just been unmuted: when it has an event still open whose onset was held back while it was muted,
    /// that onset goes out now, with its original times and `announcedOnUnmute` (the socket's `"reason":"unmuted"`);
    /// its end follows when the event ends. Nothing when the event ended meanwhile or the group was muted again.
    func announceHeldOnset(of group: String) {
        guard let onset = mutes.takeHeldOnset(of: group) else { return }
        publish(onset, announcedOnUnmute: true, at: clock.now())
    }

    /// Hands one admitted output to the clip recorder (events) and the router; counts onsets.
    private func publish(_ output: DetectionStage.Output, announcedOnUnmute: Bool = false, at now: Date) {
        switch output {
        case .detection(let event):
            clips?.observe(event)
            if case .onset = event { detections.add() }
        case .snore(let decision):
            clips?.observe(decision.event)
            if case .onset = decision { detections.add() }
        case .alarm(let alarm):
            clips?.observe(alarm)
            if alarm.kind == .onset { detections.add() }
        case .window, .health:
            break
        }
        router.route(DaemonOutput(output), announcedOnUnmute: announcedOnUnmute, at: now)
    }
}

/// Which of the snore detector's decisions go out: an onset while `snoring` is watched or a sleep session runs, and
/// an end exactly when its onset went out (a session that stops mid-event leaves the event to end when it ends).
package struct SnorePublication: Sendable {
    /// Whether `snoring` is in the watch list.
    package var watched: Bool
    private var onsetPublished = false
    /// Whether an event is open whose onset went out.
    package var openEventPublished: Bool { onsetPublished }

    package init(watched: Bool) {
        self.watched = watched
    }

    /// Whether `decision` goes out; `sessionActive`: a sleep session runs now.
    package mutating func admits(_ decision: SnoreDetector.Decision, sessionActive: Bool) -> Bool {
        switch decision {
        case .onset:
            onsetPublished = watched || sessionActive
            return onsetPublished
        case .offset:
            defer { onsetPublished = false }
            return onsetPublished
        }
    }
}

/// A count several queues add to (the status reply's `detections`).
final class EventCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.wrappingAdd(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Wakes the analysis queue from the capture thread: a Dispatch user-data-add source on that queue, activated at
/// once (a Dispatch object released while still inactive traps, e.g. when the daemon's init fails after making it).
/// `raise()` (`dispatch_source_merge_data`) may be called from any thread: an atomic add, and a wake-up of the
/// queue when the source was idle; it neither locks nor allocates. Raises before a handler is set are dropped (the
/// next one drains the ring anyway).
final class AudioArrivedSignal: @unchecked Sendable {
    private let source: DispatchSourceUserDataAdd

    init(queue: DispatchQueue) {
        source = DispatchSource.makeUserDataAddSource(queue: queue)
        source.activate()
    }

    /// Sets what runs on the queue after raises (nil: nothing). Call on the source's queue or before raises start.
    func setHandler(_ handler: (() -> Void)?) {
        if let handler {
            source.setEventHandler { handler() }
        } else {
            source.setEventHandler(handler: nil)
        }
    }

    func raise() {
        source.add(data: 1)
    }

    deinit {
        source.cancel()
    }
}
