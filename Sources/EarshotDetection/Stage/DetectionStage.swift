import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis

/// The daemon's detection stage as a value-returning step: chunks of mono audio in, what they produced out.
///
/// One chunk (a capture period, or any run of samples) goes through the RMS gate and the sliding-window classifier
/// (`AudioStreamAnalyzer`, YAMNet, custom heads), the debouncer (`DetectionEngine`), the smoke/CO pattern detector
/// (`AlarmDetector`), the snore detector (`SnoreDetector`, the one that decides group `snoring` for the daemon,
/// its sleep sessions, `earshot detect` and `earshot report --snore`) and the digital-silence watch; ``process(_:sampleRate:framePosition:gap:)`` returns every
/// window, detection, alarm and health change it caused, in order, as ``Output`` values. Nothing is called back:
/// the caller hands the values on (the daemon to its output router, `earshot detect` to standard output), so the
/// daemon and `earshot detect` run exactly the same detection over the same audio.
///
/// Chunking: the stage analyses audio in pieces that end on a fixed grid of the stream's frame positions, every
/// ``analysisPeriodDuration`` (0.2 s, the capture's default period), holding back the rest of a chunk until the
/// piece is complete. So what it produces depends on the audio and its positions alone, never on how the caller cut
/// it into chunks (a capture period, a ring read of several seconds when analysis fell behind, a pipe's reads): the
/// glass-break check of a window reads the audio up to the end of the piece that completed it, and the pattern
/// detector and the silence watch count per piece. Held audio is analysed at a discontinuity, at
/// ``finishInput()``, ``stop()`` and ``reconfigure(settings:engine:heads:snoreHead:snoreHeadChanged:)``.
///
/// Gaps: a chunk after a discontinuity (an xrun, a device reopened: `gap` non-nil) ends open events at their last
/// positive window, and windows restart after it. Silence: `silenceSeconds` of digital silence (every sample 0)
/// gives one `input_silent` health event; sound after it `capture_live`.
///
/// - Important: Not thread-safe: one owner (the daemon's analysis queue, or the thread of `earshot detect`).
package final class DetectionStage {
    /// What one chunk produced, in the order it happened.
    package enum Output: Sendable {
        /// An analysis window's result (gated ones too): its time range, RMS level (dBFS) and scores.
        case window(ClassificationResult)
        /// A classifier-group event: onset or end (`DetectionEvent`).
        case detection(DetectionEvent)
        /// A smoke or CO alarm (or low-battery chirp) from the pattern detector, see `AlarmDetector`.
        case alarm(AlarmEvent)
        /// A `snoring` onset or end from the snore detector (the end with its summary: snores, levels), see
        /// `SnoreDetector`. Decided with a delay: the detector waits for the run's third snore, about two breaths
        /// after the first.
        case snore(SnoreDetector.Decision)
        /// A change in the input's health (silence, gaps, a sample rate that cannot be analysed).
        case health(HealthEvent)
    }

    /// How windows are cut, gated and turned into events; the daemon fills it from `[analysis]`, `[alarms]` and
    /// `[detection] watch`.
    package struct Settings: Sendable, Equatable {
        /// Window duration in seconds (0.96...10).
        package var windowDuration: Double = 0.96
        /// Fraction of a window shared with the next, in [0, 1).
        package var overlapFactor: Double = 0.5
        /// RMS level in dBFS below which a window is not classified (counts as negative).
        package var gateThresholdDBFS: Double = -50
        /// Seconds of uninterrupted digital silence before an `input_silent` health event; 0 turns it off.
        package var silenceSeconds: Double = 600
        /// Whether the smoke/CO pattern detector runs.
        package var alarmPatternDetection: Bool = true
        /// Whether a watched `glass_break` group needs a shatter onset (`ShatterOnsets`) in or just before each
        /// positive window.
        package var glassOnsetGate: Bool = true
        /// The watch list: `smoke_alarm` and `co_alarm` pattern events go out when watched, `alarm_chirp` when
        /// either is.
        package var watch: [String] = []
        /// The snore detector's settings; nil: no snore detector (no `.snore` outputs). The daemon runs it always
        /// (its sleep sessions need it even when `snoring` is not watched) and publishes what it decides.
        package var snore: SnoreDetector.Configuration? = SnoreDetector.Configuration()

        package init() {}
    }

    /// Counters for the daemon's status reply.
    package struct Counters: Sendable {
        package var windows = 0
        package var gatedWindows = 0
        package var gaps = 0
        /// Stream time (s) of the latest window's end.
        package var streamTime: Double = 0
        package var lastLevelDBFS: Float = ClassificationResult.levelFloorDBFS
        /// Whether the latest window's gate was open (it was classified).
        package var lastGateOpen = false
        /// The latest window's time range (nil before the first).
        package var lastWindow: TimeRange?
        /// The latest window's highest-scoring classes, at most ``topClassCount``, highest first (YAMNet's, or a
        /// custom model's when the request uses one); empty when it was gated.
        package var lastTopClasses: [Classification] = []
        /// Seconds of audio handed to ``process(_:sampleRate:framePosition:gap:)`` (samples / sample rate).
        package var processedSeconds: Double = 0
        /// Seconds of audio lost in the gaps reported to it.
        package var lostSeconds: Double = 0
    }

    /// How many classes ``Counters/lastTopClasses`` keeps.
    package static let topClassCount = 5

    /// One `overrun` health event per gap, at most one per this much wall time (nanoseconds); the gaps held back
    /// meanwhile are said together once it has passed (``flushGapReport()``) or at ``stop()``.
    static let gapReportInterval: UInt64 = 10_000_000_000
    /// The clock of that limit, in nanoseconds (`DispatchTime` uptime); a test sets a clock of its own.
    package var clock: () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }

    package private(set) var counters = Counters()
    private var settings: Settings
    private var engine: DetectionEngine
    private var heads: HeadModelSet
    private var analyzer: AudioStreamAnalyzer?
    private var request: ClassifySoundRequest
    private var alarms: AlarmDetector?
    private var alarmGroups: Set<String> = []
    private var snore: SnoreDetector?
    private var snoreHead: SnoreDetector.HeadEvidence?
    /// The glass-break onset finder, when `glass_break` is watched and the gate is on. It runs only over the audio
    /// of a window that the classifier scores as glass (at the group's threshold), so it costs nothing on the
    /// other windows: the last ``shatterAudioSeconds`` of the classifier's 16 kHz audio are kept for it.
    private var shatter: ShatterOnsets?
    private var glassIndices: [Int] = []
    private var glassThreshold: Float = 1
    /// A ring of the last ``shatterAudioSeconds`` of 16 kHz audio: timeline index `i` (for `glassAudioStart <= i <
    /// glassAudioEnd`) is at `glassAudio[i % glassAudio.count]`; allocated when the gate is on.
    private var glassAudio: [Float] = []
    private var glassAudioStart: Int64 = 0
    private var glassAudioEnd: Int64 = 0
    static let shatterAudioSeconds = 3.5
    /// The group the shatter gate applies to.
    package static let glassGroup = "glass_break"
    /// Seconds before a window's start in which a shatter onset still counts for it (the classifier hears the
    /// shatter's tail in the next window too).
    static let shatterLead = 0.5
    private var outputs: [Output] = []
    /// Seconds of audio per analysed piece: pieces end at frame positions that are multiples of
    /// `round(sampleRate * analysisPeriodDuration)` (0.2 s: `CaptureConfiguration.defaultPeriodDuration`, the
    /// chunks `earshot detect` and the daemon's capture hand over, for which the stage's rules were tuned).
    package static let analysisPeriodDuration = 0.2
    /// The start of a piece not yet complete (fewer frames than reach the next grid position): its samples, the
    /// frame position of the first and their rate.
    private var held: [Float] = []
    private var heldPosition: Int64 = 0
    private var heldSampleRate = 0
    /// Audio handed in and lost, counted in frames so that the seconds stay exact (16 000 frames at 16 kHz are 1 s,
    /// not a sum of float fractions).
    private var processedAudio = AudioDuration()
    private var lostAudio = AudioDuration()
    private lazy var observer = Observer(stage: self)
    private var silentSeconds: Double = 0
    private var silenceReported = false
    /// Why the capture stopped delivering, when it did (``captureLost()``, ``captureStalled()``): the gap that the
    /// returning audio brings is that outage's, not an xrun's; cleared by the next chunk.
    private var interruption: Interruption?
    /// What made the capture stop delivering, for the `overrun` message of the gap that follows.
    package enum Interruption: String, Sendable {
        /// `capture_unavailable`: the device went away or failed.
        case captureUnavailable = "capture_unavailable"
        /// `input_stalled`: the source delivered nothing for a while.
        case inputStalled = "input_stalled"
        /// earshotd itself was not scheduled (stopped, starved of CPU): its capture thread could not read.
        case notScheduled = "not_scheduled"

        /// `while the capture device was unavailable`, `while no audio came from the input`.
        package var words: String {
            switch self {
            case .captureUnavailable: "while the capture device was unavailable"
            case .inputStalled: "while no audio came from the input (input_stalled)"
            case .notScheduled: "while earshotd was not scheduled (CPU starvation or a stopped process)"
            }
        }
    }
    private var unreportedGaps = 0
    private var unreportedGapSeconds: Double = 0
    /// When the last `overrun` line for xrun gaps was said (``clock``); nil before the first.
    private var lastGapReport: UInt64?
    /// Called with the 16 kHz samples the classifier hears and the timeline index of the first
    /// (`AudioStreamAnalyzer.onResampledAudio`), on the owner's thread; must return at once (the daemon's clip
    /// recorder keeps them). Set it before the first chunk.
    package var onResampledAudio: ((UnsafeBufferPointer<Float>, Int64) -> Void)?

    private final class Observer: ResultsObserving {
        unowned let stage: DetectionStage
        init(stage: DetectionStage) { self.stage = stage }
        func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
            stage.handle(result)
        }
        func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) {
            stage.outputs.append(.health(HealthEvent(state: .overrun, message: "analysis error: \(error.message)")))
        }
    }

    /// - Parameters:
    ///   - engine: the debouncer over the classifier groups (the alarm groups left out when pattern detection is
    ///     on: `AlarmDetector.engineWatchList`).
    ///   - heads: the custom models whose classes follow YAMNet's in the engine's labels.
    ///   - snoreHead: a head whose snoring probability adds to the snore evidence (`[sleep] model`), or nil.
    /// - Throws: `EarshotError(.usage)` when the window or overlap is out of range.
    package init(
        settings: Settings, engine: DetectionEngine, heads: HeadModelSet = HeadModelSet(),
        snoreHead: SnoreDetector.HeadEvidence? = nil
    ) throws(EarshotError) {
        self.settings = settings
        self.engine = engine
        self.heads = heads
        self.snoreHead = snoreHead
        request = try ClassifySoundRequest(windowDuration: settings.windowDuration, overlapFactor: settings.overlapFactor)
        configureAlarms()
        configureShatter()
        configureSnore()
    }

    /// A fresh snore detector per the settings (YAMNet's labels always hold "Snoring"), or none.
    private func configureSnore() {
        appendSnore(snore?.finish(reason: .reload) ?? [])
        guard let configuration = settings.snore else {
            snore = nil
            return
        }
        // The detector reads YAMNet's scores: the first `YAMNet.classCount` labels (heads' labels follow them).
        snore = try? SnoreDetector(
            classLabels: Array(engine.classLabels.prefix(YAMNet.classCount)), configuration: configuration, head: snoreHead)
    }

    private func appendSnore(_ decisions: [SnoreDetector.Decision]) {
        for decision in decisions { outputs.append(.snore(decision)) }
    }

    /// The snoring event open now as it stands (for a sleep session that stops while it runs), see
    /// `SnoreDetector.openEventSummary(reason:)`.
    package func openSnoreSummary(reason: DetectionEvent.EndReason) -> SnoreEvent? {
        snore?.openEventSummary(reason: reason)
    }

    /// A sleep session's audio starts at `time` (stream seconds): snores before it are left out of the snoring
    /// events' summaries, see `SnoreDetector.countSnores(from:)`. A detector made later (a reload) sees only later
    /// windows anyway.
    package func countSnores(from time: Double) {
        snore?.countSnores(from: time)
    }

    private func configureShatter() {
        let glass = engine.watched.first { $0.group.name == Self.glassGroup }
        shatter = settings.glassOnsetGate && glass != nil ? ShatterOnsets() : nil
        glassIndices = glass?.classIndices ?? []
        glassThreshold = glass?.group.threshold ?? 1
        glassAudio = shatter != nil ? [Float](repeating: 0, count: Int(Self.shatterAudioSeconds * 16_000)) : []
        glassAudioStart = 0
        glassAudioEnd = 0
        pendingGlass = nil
    }

    /// The shatter check after a reload that keeps the window grid: the kept audio and a pending shatter go on
    /// when `glass_break` stays watched (its classes and threshold as reloaded); otherwise as at start.
    private func updateShatter() {
        let glass = engine.watched.first { $0.group.name == Self.glassGroup }
        guard shatter != nil, settings.glassOnsetGate, let glass else {
            configureShatter()
            return
        }
        glassIndices = glass.classIndices
        glassThreshold = glass.group.threshold
    }

    /// Keeps the classifier's audio for the shatter check (a discontinuity starts afresh).
    private func keepGlassAudio(_ samples: UnsafeBufferPointer<Float>, firstIndex: Int64) {
        let size = glassAudio.count
        guard size > 0 else { return }
        if firstIndex != glassAudioEnd {
            glassAudioStart = firstIndex
            glassAudioEnd = firstIndex
        }
        glassAudio.withUnsafeMutableBufferPointer { ring in
            // Only the last `size` samples of a long chunk can be kept.
            let skip = max(0, samples.count - size)
            var index = Int((firstIndex + Int64(skip)) % Int64(size))
            var offset = skip
            while offset < samples.count {
                let count = min(samples.count - offset, size - index)
                ring.baseAddress!.advanced(by: index).update(from: samples.baseAddress!.advanced(by: offset), count: count)
                offset += count
                index = (index + count) % size
            }
        }
        glassAudioEnd = firstIndex + Int64(samples.count)
        glassAudioStart = max(glassAudioStart, glassAudioEnd - Int64(size))
    }

    /// A window that scored as glass over an onset whose late level was not yet known (``ShatterOnsets`` decides
    /// 1 s after the onset): the onsets from `from` on still count, and the window that confirms one carries this
    /// window's glass score at class index `index`.
    private struct PendingGlass {
        var from: Double
        var index: Int
        var score: Float
    }
    private var pendingGlass: PendingGlass?

    /// The glass verdict on one window: `scores` as the engine should see them (a window that confirms a pending
    /// shatter carries the glass score of the window that heard it, where that is higher) and whether `glass_break`
    /// is vetoed. A window
    /// counts for glass when it scores as glass, or follows one that did, and a shatter onset that passed every
    /// test of ``ShatterOnsets`` started in it or in the ``shatterLead`` before it (or, for a follower, from the
    /// pending window's lead on).
    private func glassVerdict(_ result: ClassificationResult, scores: [Float]?, shatter: ShatterOnsets) -> (scores: [Float]?, vetoed: Bool) {
        guard let scores else { return (nil, false) }  // gated: negative for every group
        let best = glassIndices.filter { $0 < scores.count }.max { scores[$0] < scores[$1] }
        let scoresGlass = best.map { scores[$0] >= glassThreshold } ?? false
        guard scoresGlass || pendingGlass != nil else { return (scores, false) }  // negative for glass anyway
        let from = min(scoresGlass ? result.timeRange.start - Self.shatterLead : .infinity, pendingGlass?.from ?? .infinity)
        // From 0.5 s before (the onset's background) to the latest audio (the chunk that completed the window may
        // hold up to one capture period more: the tail of an onset near the window's end).
        let first = max(glassAudioStart, Int64(((from - 0.5) * 16_000).rounded()))
        let last = glassAudioEnd
        guard last > first else { pendingGlass = nil; return (scores, true) }
        shatter.reset()
        let size = Int64(glassAudio.count)
        glassAudio.withUnsafeBufferPointer { ring in
            var index = first
            while index < last {  // at most two pieces: up to the ring's end, then from its start
                let position = Int(index % size)
                let count = Int(min(last - index, size - Int64(position)))
                shatter.feed(UnsafeBufferPointer(rebasing: ring[position..<(position + count)]), firstIndex: index)
                index += Int64(count)
            }
        }
        let end = result.timeRange.end
        if shatter.hasShatter(from: from, to: end) {
            defer { pendingGlass = nil }
            guard let pending = pendingGlass, pending.index < scores.count else { return (scores, false) }
            var carried = scores
            carried[pending.index] = max(carried[pending.index], pending.score)
            return (carried, false)
        }
        if shatter.hasProvisional(from: from, to: end) {
            if scoresGlass, let best, scores[best] > pendingGlass?.score ?? -1 {
                pendingGlass = PendingGlass(from: from, index: best, score: scores[best])
            } else {
                pendingGlass?.from = from
            }
        } else {
            pendingGlass = nil
        }
        return (scores, true)
    }

    /// Names of the groups with an open event: the classifier groups' (in watch-list order), then the smoke and CO
    /// alarms' (the pattern detector's). The snore detector's event is its caller's to add: whether it is published
    /// depends on the watch list and sleep sessions.
    package var activeGroups: [String] {
        engine.activeGroups + (alarms?.activeGroups.filter { alarmGroups.contains($0) } ?? [])
    }

    /// Analyses one chunk of mono samples in -1...1 at `sampleRate` Hz whose first frame is `framePosition` on the
    /// capture timeline. `gap`: frames lost just before it (nil: none; the chunk continues the previous one).
    /// - Returns: what the chunk produced, in order.
    ///
    /// The samples are analysed in pieces on the stage's grid (see the type's documentation): the part of
    /// `samples` after the last grid position is held until the next chunk completes it (or a discontinuity,
    /// ``finishInput()`` or ``stop()`` comes), so its windows may be produced by a later call.
    package func process(
        _ samples: UnsafeBufferPointer<Float>, sampleRate: Int, framePosition: Int64, gap: Int64? = nil
    ) -> [Output] {
        processedAudio.add(frames: Int64(samples.count), sampleRate: sampleRate)
        counters.processedSeconds = processedAudio.seconds
        if gap != nil || sampleRate != heldSampleRate || framePosition != heldPosition + Int64(held.count) {
            analyseHeld()
        }
        if let gap {
            lostAudio.add(frames: max(gap, 0), sampleRate: sampleRate)
            counters.lostSeconds = lostAudio.seconds
        }
        let interruption = self.interruption
        self.interruption = nil
        if let gap, analyzer != nil {
            counters.gaps += 1
            for event in engine.reset(at: counters.streamTime) { outputs.append(.detection(event)) }
            if snore != nil { appendSnore(snore!.reset()) }
            if let interruption {
                reportOutageGap(frames: gap, sampleRate: sampleRate, interruption: interruption)
            } else {
                reportGap(frames: gap, sampleRate: sampleRate)
            }
        }
        let period = Int64(max(1, (Double(sampleRate) * Self.analysisPeriodDuration).rounded()))
        var offset = 0
        if !held.isEmpty {
            // Complete the held piece up to its grid position, if this chunk reaches it.
            let missing = Int(period - (heldPosition + Int64(held.count)) % period)
            let taken = min(missing, samples.count)
            held.append(contentsOf: UnsafeBufferPointer(rebasing: samples[0..<taken]))
            offset = taken
            guard taken == missing else { return takeOutputs() }
            analyseHeld()
        }
        while offset < samples.count {
            let position = framePosition + Int64(offset)
            let length = Int(period - position % period)
            guard offset + length <= samples.count else {
                held.append(contentsOf: UnsafeBufferPointer(rebasing: samples[offset...]))
                heldPosition = position
                heldSampleRate = sampleRate
                break
            }
            analyse(UnsafeBufferPointer(rebasing: samples[offset..<(offset + length)]), sampleRate: sampleRate, framePosition: position)
            offset += length
        }
        return takeOutputs()
    }

    /// Analyses one piece: the gate, the classifier's windows, the pattern detector and the silence watch.
    private func analyse(_ samples: UnsafeBufferPointer<Float>, sampleRate: Int, framePosition: Int64) {
        if analyzer == nil || analyzer?.format.sampleRate != Double(sampleRate) {
            makeAnalyzer(sampleRate: sampleRate)
        }
        trackSilence(samples, sampleRate: sampleRate)
        if let alarms {
            appendAlarms(alarms.process(samples: samples, sampleRate: sampleRate, framePosition: framePosition))
        }
        analyzer?.analyze(samples, atAudioFramePosition: framePosition)
    }

    /// Analyses the held samples (a piece cut short by a discontinuity or the end, or one just completed).
    private func analyseHeld() {
        guard !held.isEmpty else { return }
        held.withUnsafeBufferPointer { analyse($0, sampleRate: heldSampleRate, framePosition: heldPosition) }
        heldPosition += Int64(held.count)
        held.removeAll(keepingCapacity: true)
    }

    /// The input ended (a file or stdin): scores the audio left in the window (zero-padded as a file's end is),
    /// then ends open events (`stream_end`).
    package func finishInput() -> [Output] {
        analyseHeld()
        analyzer?.completeAnalysis()
        return stop()
    }

    /// The capture device went away: ends open alarm, classifier and snoring events now (`stream_gap`, each at its
    /// last positive window, as the gap that comes when audio returns would), after analysing the held audio, so
    /// that an event does not stay open for the whole outage, or for ever when the device never returns. The audio
    /// that returns starts a new window grid, as after any gap.
    package func captureLost() -> [Output] {
        interruption = .captureUnavailable
        analyseHeld()
        appendAlarms(alarms?.finish(reason: .streamGap) ?? [])
        for event in engine.reset(at: counters.streamTime) { outputs.append(.detection(event)) }
        if snore != nil { appendSnore(snore!.reset()) }
        return takeOutputs()
    }

    /// The capture delivers nothing (`input_stalled`): the gap the returning audio brings, if any, is said to be
    /// that stall's (trial 11 #5), not an xrun's. Events stay open (the hold ends them, or that gap).
    package func captureStalled() {
        interrupted(by: .inputStalled)
    }

    /// The capture could not deliver for `interruption` (``captureLost()`` sets `.captureUnavailable` itself): the
    /// gap the returning audio brings, if any, is said to be its. An outage already noted is kept.
    package func interrupted(by interruption: Interruption) {
        if self.interruption != .captureUnavailable { self.interruption = interruption }
    }

    /// Ends open alarm and classifier events now (the daemon stops: `stream_end`), after analysing the held audio;
    /// first says the gaps the `overrun` limit held back, if any.
    package func stop() -> [Output] {
        if unreportedGaps > 0 { sayGaps(at: clock()) }
        analyseHeld()
        appendAlarms(alarms?.finish() ?? [])
        for event in engine.finish() { outputs.append(.detection(event)) }
        if snore != nil { appendSnore(snore!.finish()) }
        return takeOutputs()
    }

    /// Applies new settings, ending only the events that cannot go on.
    ///
    /// When the window, overlap, gate and the class labels (YAMNet's and the custom models') stay the same, the
    /// window grid goes on and only these events end (reason `reload`): a classifier group's that is no longer
    /// watched or whose rules changed in more than its threshold (``DetectionEngine/takeOver(from:)``; a threshold
    /// change decides from the next window on); the smoke/CO pattern detector's when `[alarms]` pattern detection or
    /// the alarm groups it publishes changed; the snoring event when `snoreHeadChanged` or the snore settings
    /// changed in more than their thresholds. Otherwise every open event ends and the next chunk starts a new grid.
    /// - Throws: `EarshotError(.usage)` when the window or overlap is out of range (nothing changes then).
    package func reconfigure(
        settings: Settings, engine: DetectionEngine, heads: HeadModelSet = HeadModelSet(),
        snoreHead: SnoreDetector.HeadEvidence? = nil, snoreHeadChanged: Bool = true
    ) throws(EarshotError) -> [Output] {
        let request = try ClassifySoundRequest(windowDuration: settings.windowDuration, overlapFactor: settings.overlapFactor)
        analyseHeld()  // the audio before the reload, under the old settings
        let gridKept = settings.windowDuration == self.settings.windowDuration
            && settings.overlapFactor == self.settings.overlapFactor
            && settings.gateThresholdDBFS == self.settings.gateThresholdDBFS
            && settings.glassOnsetGate == self.settings.glassOnsetGate
        var fresh = engine
        if gridKept, let ended = fresh.takeOver(from: &self.engine) {
            for event in ended { outputs.append(.detection(event)) }
            let alarmsChanged = settings.alarmPatternDetection != self.settings.alarmPatternDetection
                || AlarmDetector.emittedGroups(watch: settings.watch) != alarmGroups
            let previousSnore = self.settings.snore
            self.engine = fresh
            self.heads = heads
            self.settings = settings
            if alarmsChanged { configureAlarms() }
            updateShatter()
            if snoreHeadChanged {
                self.snoreHead = snoreHead
                configureSnore()
            } else if settings.snore != previousSnore {
                self.settings.snore = previousSnore
                if let snoreSettings = settings.snore, updateSnoreThresholds(snoreSettings) { return takeOutputs() }
                self.settings.snore = settings.snore
                configureSnore()
            }
            return takeOutputs()
        }
        for event in self.engine.finish(reason: .reload) { outputs.append(.detection(event)) }
        self.engine = engine
        self.heads = heads
        self.request = request
        self.settings = settings
        analyzer = nil  // rebuilt with the new window at the next chunk; the next window starts there
        configureAlarms()  // a fresh pattern detector: open alarm events end
        configureShatter()
        self.snoreHead = snoreHead
        configureSnore()  // a fresh snore detector: an open snoring event ends (`reload`)
        return takeOutputs()
    }

    /// Applies snore settings that differ from the running ones in the thresholds alone (a reload of `[sleep]
    /// threshold` or `rhythm_threshold`): the snore detector keeps its open event and pending windows
    /// (``SnoreDetector/setThresholds(strong:weak:)``). Returns false, changing nothing, when anything else differs
    /// or there is no snore detector (then ``reconfigure``).
    package func updateSnoreThresholds(_ configuration: SnoreDetector.Configuration) -> Bool {
        guard let current = settings.snore, snore != nil else { return false }
        var same = configuration
        same.strongThreshold = current.strongThreshold
        same.weakThreshold = current.weakThreshold
        guard same == current else { return false }
        snore!.setThresholds(strong: configuration.strongThreshold, weak: configuration.weakThreshold)
        settings.snore = configuration
        return true
    }

    /// Swaps in custom models with the same class labels (a reloaded file): they score from the next window on;
    /// open events go on. Returns false, changing nothing, when the labels differ (then ``reconfigure``).
    package func replaceHeads(_ heads: HeadModelSet) -> Bool {
        guard heads.classLabels == self.heads.classLabels else { return false }
        self.heads = heads
        return true
    }

    private func takeOutputs() -> [Output] {
        defer { outputs.removeAll(keepingCapacity: true) }
        return outputs
    }

    /// A fresh pattern detector (open alarm events end) or none, per the settings.
    private func configureAlarms() {
        appendAlarms(alarms?.finish(reason: .reload) ?? [])
        alarms = settings.alarmPatternDetection ? AlarmDetector(classLabels: engine.classLabels) : nil
        alarmGroups = AlarmDetector.emittedGroups(watch: settings.watch)
    }

    private func appendAlarms(_ events: [AlarmEvent]) {
        for event in events where alarmGroups.contains(event.group) { outputs.append(.alarm(event)) }
    }

    private func makeAnalyzer(sampleRate: Int) {
        do {
            let analyzer = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: Double(sampleRate), channelCount: 1))
            analyzer.gateThresholdDBFS = Float(settings.gateThresholdDBFS)
            // Always through the shatter check's ring (it keeps nothing while glass_break is not watched), so that
            // a reload that starts watching it needs no new analyzer.
            let clips = onResampledAudio
            analyzer.onResampledAudio = { [unowned self] samples, index in
                keepGlassAudio(samples, firstIndex: index)
                clips?(samples, index)
            }
            try analyzer.add(request, withObserver: observer)
            self.analyzer = analyzer
        } catch {
            analyzer = nil
            outputs.append(.health(HealthEvent(state: .captureUnavailable, message: "cannot analyse \(sampleRate) Hz audio: \(error.message)")))
        }
    }

    private func handle(_ result: ClassificationResult) {
        outputs.append(.window(result))
        counters.windows += 1
        if result.isGated { counters.gatedWindows += 1 }
        counters.streamTime = result.timeRange.end
        counters.lastLevelDBFS = result.levelDBFS
        counters.lastGateOpen = !result.isGated
        counters.lastWindow = result.timeRange
        counters.lastTopClasses = Array(result.classifications.prefix(Self.topClassCount))
        var scores = result.isGated ? nil : heads.extendedScores(yamnetScores: result.scores, embedding: result.embedding)
        var vetoed: Set<String> = []
        if let shatter {
            let verdict = glassVerdict(result, scores: scores, shatter: shatter)
            scores = verdict.scores
            if verdict.vetoed { vetoed.insert(Self.glassGroup) }
        }
        let events = engine.process(
            windowStart: result.timeRange.start, windowDuration: result.timeRange.duration, scores: scores,
            levelDBFS: result.levelDBFS, vetoed: vetoed)
        for event in events { outputs.append(.detection(event)) }
        if let alarms { appendAlarms(alarms.observe(classification: result)) }
        if snore != nil { appendSnore(snore!.process(result)) }
    }

    /// One `overrun` health event per gap, at most one per `gapReportInterval` of wall time (a storm of xruns
    /// must not flood subscribers); the event carries the gaps seen since the last report.
    private func reportGap(frames: Int64, sampleRate: Int) {
        unreportedGaps += 1
        unreportedGapSeconds += Double(max(frames, 0)) / Double(sampleRate)
        let now = clock()
        if let last = lastGapReport, now < last + Self.gapReportInterval { return }
        sayGaps(at: now)
    }

    /// The gaps the `overrun` limit held back, said together once `gapReportInterval` has passed since the last
    /// such line: `audio lost: 2 gap(s), 0.12 s in all (...)`. Otherwise, or with none held back, nothing. The
    /// daemon asks every second (its heartbeat, on the analysis queue), so the tail of a burst of xruns is said
    /// 10-11 s after the burst's first line, not only when another gap comes (audit 12 #4).
    package func flushGapReport() -> [Output] {
        guard unreportedGaps > 0 else { return [] }
        let now = clock()
        if let last = lastGapReport, now < last + Self.gapReportInterval { return [] }
        sayGaps(at: now)
        return takeOutputs()
    }

    /// The `overrun` line for the gaps not yet said; starts the next `gapReportInterval`.
    private func sayGaps(at now: UInt64) {
        lastGapReport = now
        let seconds = JSONValue.format(unreportedGapSeconds, decimals: 3)
        outputs.append(.health(HealthEvent(
            state: .overrun,
            message: "audio lost: \(unreportedGaps) gap(s), \(seconds) s in all (xrun or the analysis fell behind); windows restart after each gap",
            details: ["gaps": .int(unreportedGaps), "lost_seconds": .number(unreportedGapSeconds, decimals: 3),
                      "total_gaps": .int(counters.gaps)])))
        unreportedGaps = 0
        unreportedGapSeconds = 0
    }

    /// The `overrun` health event of the gap left by a capture outage or stall, at once and alone (one per outage;
    /// trial 11 #5: it read `xrun or the analysis fell behind`): `audio lost: 1 gap, 23.021 s in all, while the
    /// capture device was unavailable; windows restart after the gap`, with `"cause":"capture_unavailable"`.
    private func reportOutageGap(frames: Int64, sampleRate: Int, interruption: Interruption) {
        let lost = Double(max(frames, 0)) / Double(sampleRate)
        let seconds = JSONValue.format(lost, decimals: 3)
        outputs.append(.health(HealthEvent(
            state: .overrun,
            message: "audio lost: 1 gap, \(seconds) s in all, \(interruption.words); windows restart after the gap",
            details: ["gaps": .int(1), "lost_seconds": .number(lost, decimals: 3), "total_gaps": .int(counters.gaps),
                      "cause": .string(interruption.rawValue)])))
    }

    private func trackSilence(_ samples: UnsafeBufferPointer<Float>, sampleRate: Int) {
        guard settings.silenceSeconds > 0 else { return }
        if samples.allSatisfy({ $0 == 0 }) {
            silentSeconds += Double(samples.count) / Double(sampleRate)
            if !silenceReported, silentSeconds >= settings.silenceSeconds {
                silenceReported = true
                let minutes = JSONValue.format(silentSeconds / 60, decimals: 1)
                outputs.append(.health(HealthEvent(
                    state: .inputSilent,
                    message: "the input has been digital silence for \(minutes) minutes (muted or disconnected microphone? check alsamixer capture levels)",
                    details: ["silent_seconds": .number(silentSeconds, decimals: 1)])))
            }
        } else {
            silentSeconds = 0
            if silenceReported {
                silenceReported = false
                outputs.append(.health(HealthEvent(state: .captureLive, message: "sound again after digital silence")))
            }
        }
    }
}

/// A duration counted in frames at the current sample rate, plus the seconds counted at earlier rates.
struct AudioDuration {
    private var earlierSeconds: Double = 0
    private var frames: Int64 = 0
    private var sampleRate = 0

    mutating func add(frames count: Int64, sampleRate rate: Int) {
        guard rate > 0 else { return }
        if rate != sampleRate {
            earlierSeconds = seconds
            frames = 0
            sampleRate = rate
        }
        frames += count
    }

    var seconds: Double { sampleRate > 0 ? earlierSeconds + Double(frames) / Double(sampleRate) : earlierSeconds }
}
