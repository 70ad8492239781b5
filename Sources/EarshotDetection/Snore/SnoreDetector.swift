import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis

/// One snoring event found by ``SnoreDetector``: a run of snores with no pause longer than the hold time.
package struct SnoreEvent: Sendable, Equatable {
    /// Stream time (s) of the start of the event's first positive window.
    package var start: Double
    /// Stream time (s) of the end of the event's last positive window.
    package var end: Double
    /// Highest snore evidence (0...1) of the event's positive windows.
    package var peakEvidence: Float
    /// Mean snore evidence (0...1) of the event's positive windows.
    package var meanEvidence: Float
    /// Snores in the event: accepted bursts (runs of adjacent windows with evidence at or above the rhythm
    /// threshold), about one per breath; a sustained burst counts one per ``SnoreDetector/Configuration/snoreSeconds``
    /// of its length.
    package var snores: Int
    /// Energy mean of the positive windows' RMS levels, dBFS (`10 log10(mean(10^(L/10)))`).
    package var levelDBFS: Float
    /// The loudest positive window's RMS level, dBFS.
    package var peakLevelDBFS: Float
    /// Stream time (s) the loudest positive window starts.
    package var peakLevelTime: Double
    /// Why the event ended.
    package var endReason: DetectionEvent.EndReason

    /// Seconds from `start` to `end`.
    package var duration: Double { end - start }

    package init(
        start: Double, end: Double, peakEvidence: Float, meanEvidence: Float, snores: Int, levelDBFS: Float,
        peakLevelDBFS: Float, peakLevelTime: Double, endReason: DetectionEvent.EndReason = .holdElapsed
    ) {
        self.start = start
        self.end = end
        self.peakEvidence = peakEvidence
        self.meanEvidence = meanEvidence
        self.snores = snores
        self.levelDBFS = levelDBFS
        self.peakLevelDBFS = peakLevelDBFS
        self.peakLevelTime = peakLevelTime
        self.endReason = endReason
    }
}

/// Finds snoring in a stream of YAMNet windows, catching more snores than the "Snoring" class alone by adding the
/// classifier's breathing sounds as evidence and by accepting weaker evidence when it recurs in a breathing rhythm.
///
/// **Evidence** of a window, in 0...1: `Snoring + (Breathing + Snort + Wheeze + Gasp + Grunt + Groan + Sigh) -
/// (Crying, sobbing + Baby cry, infant cry + Whimper + Wail, moan + Speech + Babbling + Screaming)`, clamped. YAMNet
/// often files a snore under "Breathing" or "Snort" instead of "Snoring"; the subtracted classes keep a crying baby
/// or a sleep-talker, whose breaths also score as breathing, from counting. A gated (quiet) window has evidence 0.
///
/// **Bursts**: a run of adjacent windows with evidence >= ``Configuration/weakThreshold`` (0.2). A burst is a snore
/// when its highest evidence reaches ``Configuration/strongThreshold`` (0.3), or when it lasts at most
/// ``Configuration/maximumRhythmBurstSeconds`` (4 s) and another such burst peaks 2 to 6 s before or after it
/// (``Configuration/rhythmSeconds``: a sleeper breathes every 2-6 s, so snores recur at that period while isolated
/// weak sounds do not).
///
/// **Snoring** is repeated: a snore counts when at least two other snores lie within ``Configuration/holdSeconds``
/// of it (``Configuration/minimumSnores``, default 3), so one snort, or a pair of breath-like sounds, in
/// the night raises nothing. A strong burst that lasts longer counts as one snore per
/// ``Configuration/snoreSeconds`` (1.44 s) of it: snores with no quiet between them merge into one burst at 0.48 s
/// hops (the README demo's three snores are one 4.32 s burst), which is snoring on its own from 4.32 s. Windows are released
/// once their run holds three snores (or can no longer grow): the first snore of a run waits for the third, so
/// the delay is about two breaths, and at most about two hold times plus the bursts.
///
/// **Events**: the windows of counted snores are positive; an event starts at the first positive window and ends
/// when a window ends ``Configuration/holdSeconds`` (8 s, two missed breaths) after the last positive window
/// (``Debouncer`` with a 1-of-1 onset). The onset's confidence is the highest evidence of the snore that opened
/// it (as far as it is known when the onset is released). Stream gaps end events as ``Debouncer`` does.
///
/// Measured on `../shared/audio/snoring-khan` (1 s clips, `earshot eval-snore`): the "Snoring" score >= 0.3 alone
/// flags 63.3 % of the 392 snoring clips, the evidence >= 0.3 flags 74.2 %, and the detector finds 81.4 % of them
/// (86.6 % of clips 250-499) when they recur every 2-4 s as in sleep; of the 388 non-snoring clips none is flagged
/// (in such a sequence they give 2 events in 19 minutes); the 24-hour household stream of `earshot eval --groups`
/// gives 1 event. With a head (``HeadEvidence``) made by `scripts/train-snore` (trained on clips 0-249 of both
/// folders and half of the free-licence household recordings), 98.5 % of the held-out snoring clips (250-499) are
/// found in sequence and none of the held-out non-snoring ones is flagged: 99.2 % clip accuracy, against 93.2 %
/// without it. Such a head knows only the sounds it was trained on: it raised 216 false events per 24 h of the
/// household stream (1 without it; speech, vocoded speech and insects at some levels), so a head is for a
/// sleeper's own recordings with the bedroom's own sounds as its background.
///
/// - Important: A value type without locks: feed it from one queue, windows in stream order.
package struct SnoreDetector: Sendable {
    /// The detector's settings.
    package struct Configuration: Sendable, Equatable {
        /// Evidence at which a burst is a snore on its own, 0...1 (default 0.3: the preset "snoring" group's
        /// threshold, where no clip of `snoring-khan/0` and few windows of the other household recordings score).
        package var strongThreshold: Float = 0.3
        /// Evidence at which a window joins a burst, 0...1, at most `strongThreshold` (default 0.2: at 0.1, where
        /// the non-snoring household recordings of `../shared/audio` start to score, the 24-hour household stream
        /// of `earshot eval --groups` gave 3 false events instead of 1, for 88.1 % instead of 86.6 % of the
        /// held-out snoring clips in sequence).
        package var weakThreshold: Float = 0.2
        /// Seconds between burst peaks that count as a breathing rhythm (default 2...6).
        package var rhythmSeconds: ClosedRange<Double> = 2...6
        /// The longest burst (s) the rhythm may accept; a longer sound needs strong evidence (default 4).
        package var maximumRhythmBurstSeconds: Double = 4
        /// Seconds without a positive window before an event ends (default 8: two missed breaths).
        package var holdSeconds: Double = 8
        /// Snores an event needs: a snore counts only when at least `minimumSnores - 1` other snores lie within
        /// `holdSeconds` of it (default 3: with 2, pairs of breath-like sounds gave 15 false events in the 24-hour
        /// household stream, 1 with 3, for the same held-out recall in sequence; 1 counts every snore).
        package var minimumSnores = 3
        /// Seconds of a strong burst that count as one snore (default 1.44, three 0.48 s hops: about one snore's
        /// sound, so that snores with no quiet between them count one by one; the README demo's three snores, one
        /// 4.32 s burst, count three); a burst counts `max(1, floor(length / snoreSeconds))` snores toward
        /// ``minimumSnores``. 0 or less: every burst is one snore.
        package var snoreSeconds: Double = 1.44

        package init() {}

        /// Sets both thresholds, clamped: `strong` to 0...1 (NaN: 0.3), `weak` to 0...`strong` (NaN: 0.2).
        mutating func setThresholds(strong: Float, weak: Float) {
            strongThreshold = min(1, max(0, strong.isNaN ? 0.3 : strong))
            weakThreshold = min(strongThreshold, max(0, weak.isNaN ? 0.2 : weak))
        }
    }

    /// What the detector decided, in stream order.
    package enum Decision: Sendable, Equatable {
        /// Snoring started (group ``SnoreDetector/groupName``, class "Snoring").
        case onset(DetectionEvent.Onset)
        /// Snoring ended, with the event's summary.
        case offset(DetectionEvent.Offset, SnoreEvent)

        /// The detection event to publish.
        package var event: DetectionEvent {
            switch self {
            case .onset(let onset): .onset(onset)
            case .offset(let offset, _): .offset(offset)
            }
        }
    }

    /// The group name of the detector's events.
    package static let groupName = "snoring"
    /// The class label its events carry.
    package static let classLabel = "Snoring"
    /// Classes whose scores add to the evidence, with "Snoring".
    package static let breathingClassLabels = ["Breathing", "Snort", "Wheeze", "Gasp", "Grunt", "Groan", "Sigh"]
    /// Classes whose scores are subtracted from the evidence.
    package static let vetoClassLabels = [
        "Crying, sobbing", "Baby cry, infant cry", "Whimper", "Wail, moan", "Speech", "Babbling", "Screaming",
    ]

    /// A custom classifier head whose probability of a label adds to the evidence (see ``init(head:label:)``).
    package struct HeadEvidence: Sendable {
        package let head: ClassifierHead
        /// Index of the snoring label among the head's labels.
        package let labelIndex: Int

        /// Uses `head`'s probability of `label`.
        /// - Throws: `EarshotError(.config)` when the head has no such label.
        package init(head: ClassifierHead, label: String = "snoring") throws(EarshotError) {
            guard let index = head.labels.firstIndex(of: label) else {
                throw EarshotError(
                    .config,
                    "head model \(head.path ?? "(in memory)") has no label \"\(label)\" (its labels: \(head.labels.joined(separator: ", "))); train it from a folder with a \(label) sub-folder")
            }
            self.head = head
            labelIndex = index
        }
    }

    /// What a head's probability gives up before it counts as evidence: `p - 0.6`, so that p >= 0.9 is a snore on
    /// its own (evidence 0.3) and p >= 0.8 counts in a breathing rhythm (0.2). A head trained with `earshot train`
    /// on half of `snoring-khan` plus half of the other household recordings scores 98.9 % of the held-out snoring
    /// clips and 1.0 % of the held-out non-snoring ones at p >= 0.9.
    package static let headProbabilityOffset: Float = 0.6

    package private(set) var configuration: Configuration
    private let headEvidence: HeadEvidence?
    private let snoringIndex: Int
    private let breathingIndices: [Int]
    private let vetoIndices: [Int]
    private let classCount: Int

    private struct Window {
        var start: Double
        var end: Double
        var levelDBFS: Float
        var evidence: Float
        var burst: Int?
        /// Set when released: the window belongs to an accepted burst.
        var positive = false
    }

    private struct Burst {
        var id: Int
        var start: Double
        var end: Double
        var peakTime: Double
        var peakEvidence: Float
        var closed = false
        /// A snore by its own evidence: strong, or weak in a breathing rhythm (nil: not known yet).
        var qualified: Bool?
        /// Qualified and with enough other snores near it (``Configuration/minimumSnores``); nil: not known yet.
        var accepted: Bool?
        var duration: Double { end - start }
    }

    /// Snores a burst of `duration` seconds with `peakEvidence` counts toward ``Configuration/minimumSnores``.
    private func snoreCount(duration: Double, peakEvidence: Float) -> Int {
        let unit = configuration.snoreSeconds
        guard unit > 0, peakEvidence >= configuration.strongThreshold else { return 1 }
        return max(1, Int((duration + Self.epsilon) / unit))
    }

    private struct OpenEvent {
        var windows: [Window] = []
    }

    private var pending: [Window] = []
    private var bursts: [Burst] = []
    private var nextBurstID = 0
    private var debouncer: Debouncer
    private var open: OpenEvent?
    private var previous: (start: Double, end: Double)?
    private static let epsilon = 1e-6

    /// - Parameters:
    ///   - classLabels: the classifier's labels, index = score index (YAMNet's 521 AudioSet names).
    ///   - configuration: thresholds and times; out-of-range values are clamped (thresholds to 0...1, the weak one
    ///     to at most the strong one, times to >= 0).
    ///   - head: a custom head (e.g. trained with `earshot train` on the sleeper's own recordings) whose
    ///     probability of snoring, less ``headProbabilityOffset``, counts as evidence when it is higher; nil: the
    ///     built-in classifier's scores only.
    /// - Throws: `EarshotError(.config)` when `classLabels` has no "Snoring" (a custom model's labels).
    package init(
        classLabels: [String], configuration: Configuration = Configuration(), head: HeadEvidence? = nil
    ) throws(EarshotError) {
        headEvidence = head
        var indexOf: [String: Int] = [:]
        for (index, label) in classLabels.enumerated() where indexOf[label] == nil { indexOf[label] = index }
        guard let snoring = indexOf[Self.classLabel] else {
            throw EarshotError(
                .config,
                "the snore detector needs the built-in classifier's \"Snoring\" class, which this model's labels lack (use the built-in model)")
        }
        var settings = configuration
        settings.setThresholds(strong: settings.strongThreshold, weak: settings.weakThreshold)
        settings.holdSeconds = settings.holdSeconds.isFinite ? max(0, settings.holdSeconds) : 8
        settings.minimumSnores = max(1, settings.minimumSnores)
        settings.maximumRhythmBurstSeconds = settings.maximumRhythmBurstSeconds.isFinite
            ? max(0, settings.maximumRhythmBurstSeconds) : 4
        settings.snoreSeconds = settings.snoreSeconds.isFinite ? settings.snoreSeconds : 1.44
        self.configuration = settings
        snoringIndex = snoring
        breathingIndices = Self.breathingClassLabels.compactMap { indexOf[$0] }
        vetoIndices = Self.vetoClassLabels.compactMap { indexOf[$0] }
        classCount = classLabels.count
        // Every accepted window is positive: a threshold just above 0, and accepted windows are fed at least that.
        debouncer = Debouncer(group: LabelGroup(
            name: Self.groupName, classLabels: [Self.classLabel], threshold: Self.positiveScore, onsetWindows: 1,
            onsetOf: 1, holdSeconds: settings.holdSeconds))
    }

    private static let positiveScore: Float = 1e-6

    /// Changes the two thresholds in place (a reload of `[sleep] threshold`/`rhythm_threshold`): an open event goes
    /// on, windows still pending are decided with the new ones, decisions already made stand. Clamped as in
    /// ``init(classLabels:configuration:head:)``.
    package mutating func setThresholds(strong: Float, weak: Float) {
        configuration.setThresholds(strong: strong, weak: weak)
    }

    /// The snore evidence of one window (see the type's documentation), 0...1: from its YAMNet `scores` (0 for a
    /// wrong-length array) and, with a head, the higher of that and the head's probability of its `embedding`
    /// (`[1024]`) less ``headProbabilityOffset``.
    package func evidence(scores: [Float], embedding: [Float] = []) -> Float {
        var value: Float = 0
        if scores.count == classCount {
            value = scores[snoringIndex]
            for index in breathingIndices { value += scores[index] }
            for index in vetoIndices { value -= scores[index] }
            if value.isNaN { value = 0 }
        }
        if let headEvidence {
            let probabilities = headEvidence.head.probabilities(embedding: embedding)
            if headEvidence.labelIndex < probabilities.count, !probabilities[headEvidence.labelIndex].isNaN {
                value = max(value, probabilities[headEvidence.labelIndex] - Self.headProbabilityOffset)
            }
        }
        return min(1, max(0, value))
    }

    /// Whether an event is open.
    package var isActive: Bool { open != nil }

    /// Stream time (s) before which positive windows are left out of the events' summaries (``SnoreEvent``'s
    /// snores, levels and loudest window; nil: none are). Set by ``countSnores(from:)``.
    package private(set) var summaryStart: Double?

    /// Leaves windows that start before `time` (stream seconds) out of the summaries of events (the open one and
    /// later ones): a sleep session that starts while snoring goes on counts only the snores it heard. The events
    /// themselves (onset, end, the `snoring` lines) are unchanged.
    package mutating func countSnores(from time: Double) {
        guard time.isFinite else { return }
        summaryStart = time
    }

    /// When true, the start of every released positive window is appended to ``positiveWindowStarts`` (for
    /// evaluation: which windows the detector called snoring). Default false.
    package var recordsPositiveWindows = false
    /// Starts (s) of the positive windows released so far, when ``recordsPositiveWindows`` is set.
    package private(set) var positiveWindowStarts: [Double] = []

    /// Feeds the next window.
    ///
    /// - Parameters:
    ///   - windowStart: stream time (s) of the window's first sample; windows come in increasing order.
    ///   - windowDuration: its length (s), 0.96 for YAMNet.
    ///   - levelDBFS: its RMS level.
    ///   - scores: its class scores (`classLabels.count` of them), or nil for a gated window (evidence 0).
    ///   - embedding: its YAMNet embedding `[1024]`, used with a head (empty: none).
    /// - Returns: decisions about earlier windows that became final (they lag until the run is decided, see the type), in order.
    package mutating func process(
        windowStart: Double, windowDuration: Double, levelDBFS: Float, scores: [Float]?, embedding: [Float] = []
    ) -> [Decision] {
        guard windowStart.isFinite, windowDuration.isFinite, windowDuration >= 0 else { return [] }
        let value = scores.map { evidence(scores: $0, embedding: embedding) } ?? 0
        return process(windowStart: windowStart, windowDuration: windowDuration, levelDBFS: levelDBFS, evidence: value)
    }

    /// Feeds one analysis window as the detection stage hands it over: its time range, level, YAMNet scores and
    /// embedding; a gated window has evidence 0. See ``process(windowStart:windowDuration:levelDBFS:scores:embedding:)``.
    package mutating func process(_ result: ClassificationResult) -> [Decision] {
        process(
            windowStart: result.timeRange.start, windowDuration: result.timeRange.duration, levelDBFS: result.levelDBFS,
            scores: result.isGated ? nil : result.scores, embedding: result.embedding)
    }

    /// Feeds the next window by its evidence (0...1) instead of its scores; see
    /// ``process(windowStart:windowDuration:levelDBFS:scores:)``.
    package mutating func process(
        windowStart: Double, windowDuration: Double, levelDBFS: Float, evidence: Float
    ) -> [Decision] {
        guard windowStart.isFinite, windowDuration.isFinite, windowDuration >= 0 else { return [] }
        var decisions: [Decision] = []
        let end = windowStart + windowDuration
        if let previous, windowStart > previous.end + Self.epsilon || windowStart < previous.start - Self.epsilon {
            // A gap: no burst or rhythm joins audio across it.
            decisions += drainAll()
        }
        previous = (windowStart, end)

        var window = Window(start: windowStart, end: end, levelDBFS: levelDBFS, evidence: evidence.isNaN ? 0 : evidence)
        if window.evidence >= configuration.weakThreshold {
            if let last = bursts.indices.last, !bursts[last].closed {
                bursts[last].end = end
                if window.evidence > bursts[last].peakEvidence {
                    bursts[last].peakEvidence = window.evidence
                    bursts[last].peakTime = (windowStart + end) / 2
                }
                window.burst = bursts[last].id
            } else {
                bursts.append(Burst(id: nextBurstID, start: windowStart, end: end, peakTime: (windowStart + end) / 2,
                                    peakEvidence: window.evidence))
                window.burst = nextBurstID
                nextBurstID += 1
            }
        } else if let last = bursts.indices.last {
            bursts[last].closed = true
        }
        pending.append(window)
        decideBursts(now: windowStart, final: false)
        decisions += release()
        let horizon = windowStart - 2 * max(configuration.rhythmSeconds.upperBound, configuration.holdSeconds)
            - configuration.maximumRhythmBurstSeconds
        let held = Set(pending.compactMap(\.burst))
        bursts.removeAll { $0.accepted != nil && $0.end < horizon && !held.contains($0.id) }
        return decisions
    }

    /// The stream had a gap: decides and releases every held window, ends an open event (reason `.streamGap`).
    package mutating func reset() -> [Decision] {
        var decisions = drainAll()
        decisions += debouncer.reset(at: previous?.end ?? 0).compactMap { close($0) }
        previous = nil
        return decisions
    }

    /// The stream ended (reason `.streamEnd`) or the detector is replaced (`.reload`): decides and releases every
    /// held window and ends an open event with `reason`.
    package mutating func finish(reason: DetectionEvent.EndReason = .streamEnd) -> [Decision] {
        var decisions = drainAll()
        decisions += debouncer.finish(reason: reason).compactMap { close($0) }
        previous = nil
        return decisions
    }

    /// The open event as it stands (its positive windows released so far), ending at the last of them with
    /// reason `reason`; nil when no event is open. Windows still held (those of snores not yet decided) are not in it.
    package func openEventSummary(reason: DetectionEvent.EndReason) -> SnoreEvent? {
        guard let open else { return nil }
        let windows = open.windows.filter(\.positive)
        guard let first = windows.first, let last = windows.last else { return nil }
        let evidence = windows.map(\.evidence)
        return summary(windows: windows, start: first.start, end: last.end, peakEvidence: evidence.max() ?? 0,
                       meanEvidence: evidence.reduce(0, +) / Float(evidence.count), reason: reason)
    }

    // MARK: Internals

    /// Decides with what is known, releases everything, and forgets the bursts.
    private mutating func drainAll() -> [Decision] {
        for index in bursts.indices { bursts[index].closed = true }
        decideBursts(now: .infinity, final: true)
        let decisions = release()
        bursts.removeAll()
        return decisions
    }

    /// Accepts or rejects bursts whose fate is known. `now` is the start of the latest window: no burst that starts
    /// later can peak within the rhythm range of a burst that peaked more than `rhythm.upperBound` before it.
    ///
    /// A snore is accepted when its run holds `minimumSnores` snores: the snores chained to it by pauses of at most
    /// the hold time (gap between the bursts' spans), a strong burst counting one per `snoreSeconds` once it has
    /// closed. So the first and the last snore of a night's run count as the middle ones do. A run can only grow
    /// while a burst may still start within the hold after its last snore.
    private mutating func decideBursts(now: Double, final: Bool) {
        qualifyBursts(now: now, final: final)
        let needed = max(1, configuration.minimumSnores)
        let hold = configuration.holdSeconds + Self.epsilon
        func snores(_ burst: Burst) -> Int {
            burst.closed ? snoreCount(duration: burst.duration, peakEvidence: burst.peakEvidence) : 1
        }
        for index in bursts.indices where bursts[index].accepted == nil {
            guard let qualified = bursts[index].qualified else { continue }
            guard qualified else {
                bursts[index].accepted = false
                continue
            }
            // The run through this burst: qualified bursts either side, each within the hold of the run so far
            // (bursts are kept in stream order; unqualified and undecided ones neither count nor break it).
            var count = snores(bursts[index])
            var runStart = bursts[index].start, runEnd = bursts[index].end
            var runOpen = !bursts[index].closed
            var left = index - 1
            while left >= 0, count < needed {
                let other = bursts[left]
                left -= 1
                guard other.qualified == true else { continue }
                if runStart - other.end > hold { break }
                count += snores(other)
                runStart = min(runStart, other.start)
            }
            var right = index + 1
            while right < bursts.count, count < needed {
                let other = bursts[right]
                right += 1
                guard other.qualified == true else { continue }
                if other.start - runEnd > hold { break }
                count += snores(other)
                runEnd = max(runEnd, other.end)
                runOpen = runOpen || !other.closed
            }
            if count >= needed {
                bursts[index].accepted = true
            } else if final || (!runOpen && now > runEnd + hold) {
                bursts[index].accepted = false
            }
        }
    }

    /// Decides which bursts are snores by their own evidence: strong ones at once, weak ones once their rhythm
    /// neighbours are known.
    private mutating func qualifyBursts(now: Double, final: Bool) {
        let rhythm = configuration.rhythmSeconds
        for index in bursts.indices where bursts[index].qualified == nil {
            let burst = bursts[index]
            if burst.peakEvidence >= configuration.strongThreshold {
                bursts[index].qualified = true
                continue
            }
            guard burst.closed else { continue }
            if burst.duration > configuration.maximumRhythmBurstSeconds + Self.epsilon {
                bursts[index].qualified = false
                continue
            }
            let hasNeighbour = bursts.contains { other in
                guard other.id != burst.id,
                      other.peakEvidence >= configuration.strongThreshold
                        || other.duration <= configuration.maximumRhythmBurstSeconds + Self.epsilon
                else { return false }
                let distance = abs(other.peakTime - burst.peakTime)
                return distance >= rhythm.lowerBound - Self.epsilon && distance <= rhythm.upperBound + Self.epsilon
            }
            if hasNeighbour {
                bursts[index].qualified = true
            } else if final || now > burst.peakTime + rhythm.upperBound + Self.epsilon {
                bursts[index].qualified = false
            }
        }
    }

    /// Feeds the debouncer every held window whose fate is known, from the front.
    private mutating func release() -> [Decision] {
        var decisions: [Decision] = []
        var released = 0
        for var window in pending {
            if let id = window.burst {
                guard let burst = bursts.first(where: { $0.id == id }), let accepted = burst.accepted else { break }
                window.positive = accepted
            }
            released += 1
            if recordsPositiveWindows, window.positive { positiveWindowStarts.append(window.start) }
            let score = window.positive ? max(Self.positiveScore, window.evidence) : 0
            let events = debouncer.process(
                windowStart: window.start, windowDuration: window.end - window.start, score: score,
                topClass: Self.classLabel)
            var taken = false
            for event in events {
                switch event {
                case .offset:
                    if let decision = close(event) { decisions.append(decision) }
                case .onset(var onset):
                    open = OpenEvent(windows: [window])
                    taken = true
                    // The onset speaks for the snore that opened it, not for its first (often weak) window.
                    if let id = window.burst, let burst = bursts.first(where: { $0.id == id }) {
                        onset.confidence = max(onset.confidence, burst.peakEvidence)
                    }
                    decisions.append(.onset(onset))
                }
            }
            if !taken, open != nil { open?.windows.append(window) }
        }
        pending.removeFirst(released)
        return decisions
    }

    /// The summary of the open event for its offset.
    private mutating func close(_ event: DetectionEvent) -> Decision? {
        guard case .offset(let offset) = event else { return nil }
        let windows = (open?.windows ?? []).filter {
            $0.positive && $0.start >= offset.start - Self.epsilon && $0.end <= offset.end + Self.epsilon
        }
        open = nil
        return .offset(offset, summary(
            windows: windows, start: offset.start, end: offset.end, peakEvidence: offset.peakConfidence,
            meanEvidence: offset.meanConfidence, reason: offset.reason))
    }

    /// An event's summary from its positive windows.
    private func summary(
        windows: [Window], start: Double, end: Double, peakEvidence: Float, meanEvidence: Float,
        reason: DetectionEvent.EndReason
    ) -> SnoreEvent {
        let windows = summaryStart.map { cut in windows.filter { $0.start >= cut - Self.epsilon } } ?? windows
        let (level, peak) = LevelStatistics.levels(windows.map(\.levelDBFS))
        let loudest = windows.max { $0.levelDBFS < $1.levelDBFS }
        var spans: [Int: (start: Double, end: Double, peak: Float)] = [:]
        for window in windows {
            guard let id = window.burst else { continue }
            let span = spans[id] ?? (window.start, window.end, window.evidence)
            spans[id] = (min(span.start, window.start), max(span.end, window.end), max(span.peak, window.evidence))
        }
        let snores = spans.values.reduce(0) { $0 + snoreCount(duration: $1.end - $1.start, peakEvidence: $1.peak) }
        return SnoreEvent(
            start: start, end: end, peakEvidence: peakEvidence, meanEvidence: meanEvidence, snores: snores,
            levelDBFS: level, peakLevelDBFS: peak, peakLevelTime: loudest?.start ?? start, endReason: reason)
    }
}
