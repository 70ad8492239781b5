import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// The daemon's analysis queue: drains the capture ring, runs the RMS gate and the sliding-window classifier
/// (`AudioStreamAnalyzer`), turns window scores into detection events (`DetectionEngine`) and hands every event and
/// health change to its outputs.
///
/// Everything here runs on one serial Dispatch queue, woken when the capture thread has written to the ring (a
/// user-data source the ring's `didWrite` adds to: one wake-up per capture period, 0.2 s by default, coalesced
/// when the queue is busy), or, without one, by a timer every `pollInterval`. The ring holds seconds of audio, so
/// the capture thread never waits for analysis. (A 40 ms timer cost 0.3 % of a core in wake-ups alone: Dispatch
/// fires timers from its manager thread, which then wakes a worker.)
///
/// Gaps: a chunk that follows a discontinuity (an xrun, a ring overrun, a device reopened) ends open events at
/// their last positive window (`DetectionEngine.reset(at:)`), and the stream analyzer starts new windows after it.
/// Silence: a run of digital silence (every sample exactly 0) of `silenceSeconds` raises one `input_silent` health
/// event; sound after it raises `capture_live` again.
///
/// - Important: All methods other than `init` must be called on `queue`.
package final class AnalysisPipeline {
    /// Where detection events and health changes go. Called on the analysis queue; must return at once.
    package typealias Emit = (_ output: PipelineOutput) -> Void

    package enum PipelineOutput {
        case detection(DetectionEvent)
        case health(HealthEvent)
        /// A smoke or CO alarm (or low-battery chirp) from the pattern detector, see `AlarmDetector`.
        case alarm(AlarmEvent)
    }

    /// Counters for the status reply (read on the analysis queue).
    package struct Counters {
        package var windows = 0
        package var gatedWindows = 0
        package var gaps = 0
        package var streamTime: Double = 0
        package var lastLevelDBFS: Float = ClassificationResult.levelFloorDBFS
    }

    package static let pollInterval = DispatchTimeInterval.milliseconds(100)

    package let queue: DispatchQueue
    package let ring: SampleRingBuffer
    private(set) var counters = Counters()
    private(set) var lastPump = DispatchTime.now()
    private var analysis: DaemonConfiguration.Analysis
    private var engine: DetectionEngine
    private var analyzer: AudioStreamAnalyzer?
    private var request: ClassifySoundRequest
    private let emit: Emit
    private let onFirstAudio: () -> Void
    private var sawAudio = false
    private var scratch: [Float]
    private var timer: DispatchSourceTimer?
    private var wakeUp: AudioArrivedSignal?
    private var silentSeconds: Double = 0
    private var silenceReported = false
    private var unreportedGaps = 0
    private var unreportedGapSeconds: Double = 0
    private var lastGapReport: UInt64 = 0
    package static let gapReportInterval: UInt64 = 10_000_000_000
    private lazy var observer = Observer(pipeline: self)
    /// The smoke/CO pattern detector (`[alarms] pattern_detection`), or nil; and the alarm groups it may emit.
    private var alarms: AlarmDetector?
    private var alarmGroups: Set<String> = []
    /// Called with every window's result (gated ones too) before the detection engine sees it, on `queue`; must
    /// return at once (the event history's level meter and sleep sessions use it).
    package var onWindow: ((ClassificationResult) -> Void)?
    /// Called with the 16 kHz samples the classifier hears and the timeline index of the first
    /// (`AudioStreamAnalyzer.onResampledAudio`), on `queue`; must return at once (clip saving keeps them). Set it
    /// before ``start()``.
    package var onResampledAudio: ((UnsafeBufferPointer<Float>, Int64) -> Void)?

    private final class Observer: ResultsObserving {
        unowned let pipeline: AnalysisPipeline
        init(pipeline: AnalysisPipeline) { self.pipeline = pipeline }
        func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
            pipeline.handle(result)
        }
        func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) {
            pipeline.emit(.health(HealthEvent(state: .overrun, message: "analysis error: \(error.message)")))
        }
    }

    /// - Throws: `EarshotError(.usage)` when the window or overlap is out of range.
    package init(
        queue: DispatchQueue, ring: SampleRingBuffer, analysis: DaemonConfiguration.Analysis,
        engine: DetectionEngine, heads: HeadModelSet = HeadModelSet(), emit: @escaping Emit,
        onFirstAudio: @escaping () -> Void
    ) throws(EarshotError) {
        self.heads = heads
        self.queue = queue
        self.ring = ring
        self.analysis = analysis
        self.engine = engine
        self.emit = emit
        self.onFirstAudio = onFirstAudio
        request = try ClassifySoundRequest(
            windowDuration: analysis.windowDuration, overlapFactor: analysis.overlapFactor)
        // Two seconds at 48 kHz per read: the ring never holds more than a few polls' worth.
        scratch = [Float](repeating: 0, count: 96_000)
    }

    /// Starts analysing: on every event of `audioArrived` (a source on `queue` the ring's producer adds to), or, when
    /// it is nil, every `pollInterval`.
    package func start(audioArrived: AudioArrivedSignal? = nil) {
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

    /// Stops the timer; open events end now (`detection_end` with reason `stopped` or as the engine names it).
    package func stop() {
        timer?.cancel()
        timer = nil
        wakeUp?.setHandler(nil)
        pump(drain: true)
        emitAlarms(alarms?.finish() ?? [])
        for event in engine.finish() { emit(.detection(event)) }
    }

    /// The input ended (a file or stdin): scores the audio left in the window (zero-padded as a file's end is),
    /// then ends open events.
    package func finishInput() {
        pump(drain: true)
        analyzer?.completeAnalysis()
        emitAlarms(alarms?.finish() ?? [])
        for event in engine.finish() { emit(.detection(event)) }
    }

    /// Applies a reloaded configuration: open events end, the engine and the analyzer's window and gate change.
    /// `heads`: the custom models whose classes follow YAMNet's in the engine's labels (`HeadModelSet.classLabels`).
    package func reconfigure(analysis: DaemonConfiguration.Analysis, engine: DetectionEngine, heads: HeadModelSet = HeadModelSet())
        throws(EarshotError)
    {
        let request = try ClassifySoundRequest(
            windowDuration: analysis.windowDuration, overlapFactor: analysis.overlapFactor)
        for event in self.engine.finish(reason: .reload) { emit(.detection(event)) }
        self.engine = engine
        self.heads = heads
        self.analysis = analysis
        self.request = request
        analyzer = nil  // rebuilt with the new window at the next chunk; the next window starts there
    }

    /// Swaps in custom models with the same class labels (a reloaded file): they score from the next window on;
    /// open events go on. Returns false, changing nothing, when the labels differ (then `reconfigure`).
    package func replaceHeads(_ heads: HeadModelSet) -> Bool {
        guard heads.classLabels == self.heads.classLabels else { return false }
        self.heads = heads
        return true
    }

    /// Custom models: each scores every window's embedding after YAMNet (one backbone pass for all of them).
    private var heads: HeadModelSet

    /// Names of the groups with an open event.
    package var activeGroups: [String] { engine.activeGroups }

    /// Reads what the capture thread has written and analyses it.
    ///
    /// Without `drain`, at most what the ring held on entry is analysed, and the rest in a block queued behind
    /// whatever else waits on the queue (status replies, sleep commands, reloads): a source that delivers faster
    /// than analysis keeps up with (a PCM without a clock, such as ALSA's `null`) must not starve them.
    package func pump(drain: Bool = false) {
        lastPump = DispatchTime.now()
        var budget = ring.availableToRead
        while drain || budget > 0 {
            let chunk = scratch.withUnsafeMutableBufferPointer { ring.readChunk(into: $0) }
            if chunk.count == 0 { break }
            budget -= chunk.count
            if !sawAudio {
                sawAudio = true
                onFirstAudio()
            }
            if chunk.isDiscontinuity, analyzer != nil {
                counters.gaps += 1
                let gapStart = counters.streamTime
                for event in engine.reset(at: gapStart) { emit(.detection(event)) }
                reportGap(frames: chunk.gapFrames, sampleRate: chunk.sampleRate)
            }
            if analyzer == nil || analyzer?.format.sampleRate != Double(chunk.sampleRate) {
                makeAnalyzer(sampleRate: chunk.sampleRate)
            }
            scratch.withUnsafeBufferPointer { samples in
                let chunkSamples = UnsafeBufferPointer(rebasing: samples[0..<chunk.count])
                trackSilence(chunkSamples, sampleRate: chunk.sampleRate)
                if let alarms {
                    emitAlarms(alarms.process(samples: chunkSamples, sampleRate: chunk.sampleRate, framePosition: chunk.framePosition))
                }
                analyzer?.analyze(chunkSamples, atAudioFramePosition: chunk.framePosition)
            }
        }
        if !drain, ring.availableToRead > 0 {
            wakeUp?.raise()  // the rest after the blocks already queued (with the timer, at its next tick)
        }
    }

    /// One `overrun` health event per gap, at most one per `gapReportInterval` of wall time (a storm of xruns
    /// must not flood subscribers); the event carries the gaps seen since the last report.
    private func reportGap(frames: Int64, sampleRate: Int) {
        unreportedGaps += 1
        unreportedGapSeconds += Double(max(frames, 0)) / Double(sampleRate)
        let now = DispatchTime.now().uptimeNanoseconds
        guard now >= lastGapReport + Self.gapReportInterval else { return }
        lastGapReport = now
        let seconds = JSONValue.format(unreportedGapSeconds, decimals: 3)
        emit(.health(HealthEvent(
            state: .overrun,
            message: "audio lost: \(unreportedGaps) gap(s), \(seconds) s in all (xrun or the analysis fell behind); windows restart after each gap",
            details: ["gaps": .int(unreportedGaps), "lost_seconds": .number(unreportedGapSeconds, decimals: 3),
                      "total_gaps": .int(counters.gaps)])))
        unreportedGaps = 0
        unreportedGapSeconds = 0
    }

    private func makeAnalyzer(sampleRate: Int) {
        do {
            let analyzer = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: Double(sampleRate), channelCount: 1))
            analyzer.gateThresholdDBFS = Float(analysis.gateThresholdDBFS)
            analyzer.onResampledAudio = onResampledAudio
            try analyzer.add(request, withObserver: observer)
            self.analyzer = analyzer
        } catch {
            analyzer = nil
            emit(.health(HealthEvent(state: .captureUnavailable, message: "cannot analyse \(sampleRate) Hz audio: \(error.message)")))
        }
    }

    private func handle(_ result: ClassificationResult) {
        onWindow?(result)
        counters.windows += 1
        if result.isGated { counters.gatedWindows += 1 }
        counters.streamTime = result.timeRange.end
        counters.lastLevelDBFS = result.levelDBFS
        let events = engine.process(
            windowStart: result.timeRange.start, windowDuration: result.timeRange.duration,
            scores: result.isGated ? nil : heads.extendedScores(yamnetScores: result.scores, embedding: result.embedding))
        for event in events { emit(.detection(event)) }
        if let alarms { emitAlarms(alarms.observe(classification: result)) }
    }

    /// Turns the smoke/CO pattern detector on (a fresh one: open alarm events end) or off. `watch` is the watch
    /// list: smoke_alarm and co_alarm events go out when watched, alarm_chirp when either is. With the detector on,
    /// the daemon leaves those two groups out of the classifier-only engine (`AlarmDetector.engineWatchList`).
    package func configureAlarms(enabled: Bool, watch: [String]) {
        emitAlarms(alarms?.finish() ?? [])
        alarms = enabled ? AlarmDetector() : nil
        alarmGroups = AlarmDetector.emittedGroups(watch: watch)
    }

    private func emitAlarms(_ events: [AlarmEvent]) {
        for event in events where alarmGroups.contains(event.group) { emit(.alarm(event)) }
    }

    private func trackSilence(_ samples: UnsafeBufferPointer<Float>, sampleRate: Int) {
        guard analysis.silenceSeconds > 0 else { return }
        if samples.allSatisfy({ $0 == 0 }) {
            silentSeconds += Double(samples.count) / Double(sampleRate)
            if !silenceReported, silentSeconds >= analysis.silenceSeconds {
                silenceReported = true
                let minutes = JSONValue.format(silentSeconds / 60, decimals: 1)
                emit(.health(HealthEvent(
                    state: .inputSilent,
                    message: "the input has been digital silence for \(minutes) minutes (muted or disconnected microphone? check alsamixer capture levels)",
                    details: ["silent_seconds": .number(silentSeconds, decimals: 1)])))
            }
        } else {
            silentSeconds = 0
            if silenceReported {
                silenceReported = false
                emit(.health(HealthEvent(state: .captureLive, message: "sound again after digital silence")))
            }
        }
    }
}

/// Wakes the analysis queue from the capture thread: a Dispatch user-data-add source on that queue, activated at
/// once (a Dispatch object released while still inactive traps, e.g. when the daemon's init fails after making it).
/// `raise()` (`dispatch_source_merge_data`) may be called from any thread: an atomic add, and a wake-up of the
/// queue when the source was idle; it neither locks nor allocates. Raises before a handler is set are dropped (the
/// next one drains the ring anyway).
package final class AudioArrivedSignal: @unchecked Sendable {
    private let source: DispatchSourceUserDataAdd

    package init(queue: DispatchQueue) {
        source = DispatchSource.makeUserDataAddSource(queue: queue)
        source.activate()
    }

    /// Sets what runs on the queue after raises (nil: nothing). Call on the source's queue or before raises start.
    package func setHandler(_ handler: (() -> Void)?) {
        if let handler {
            source.setEventHandler { handler() }
        } else {
            source.setEventHandler(handler: nil)
        }
    }

    package func raise() {
        source.add(data: 1)
    }

    deinit {
        source.cancel()
    }
}
