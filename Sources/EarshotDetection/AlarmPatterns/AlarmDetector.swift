import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis

/// Smoke and CO alarm detection from the temporal pattern of their tones, fused with the classifier's scores.
///
/// Feed it the mono audio at the capture rate with ``process(samples:sampleRate:framePosition:)`` (a
/// ``ToneTracker`` and an ``AlarmPatternMatcher`` run on it) and, optionally, each classifier window with
/// ``observe(classification:)``. It returns ``AlarmEvent``s:
/// - `smoke_alarm` onset when a T3 cycle is seen (decided at the next cycle's first tone: about 4 s after the
///   alarm starts), whatever the tone's frequency (a 3 kHz piezo or a 520 Hz low-frequency sounder). Tone segments
///   a lossy codec or noise broke into pieces are also rejoined and matched again for T3, by a second matcher
///   (gaps of at most ``Configuration/rejoinGapSeconds``) and a third (``Configuration/t3RejoinGapSeconds``);
///   only their T3 matches count, so that T4's 0.1 s gaps are never bridged;
/// - `smoke_alarm` onset, source `tone+classifier`, for a smoke alarm whose cadence is not T3: one tone in 400 Hz-4
///   kHz sounding in long beeps most of the time (``Configuration/persistentCoverage`` of the last
///   ``Configuration/persistentSeconds``, no silence longer than ``Configuration/persistentMaxGapSeconds``, beeps
///   of ``Configuration/persistentMinimumBeepSeconds`` or more) while the classifier's smoke/fire score averages
///   ``Configuration/persistentScore`` or more, or ``Configuration/cadenceScore`` or more when the tone beeps in a
///   regular long-beep cadence (three whole beeps or more of 0.78-2.6 s, even in length, with even pauses of 0.15 s
///   or more). A tone that warbles within ``Configuration/warbleTolerance`` of its frequency counts as one tone,
///   with the ``Configuration/persistentScore`` bar. Short beeps, half-duty beeping (timers, clocks, monitors, a
///   reversing truck, a fridge door) and the classifier alone never are (it scores a kitchen timer 0.9); fast
///   beeping that a room's echo merges into one tone can be (``Configuration/fastBeatPeriodicity`` refuses it, off
///   by default: a real alarm beats as fast);
/// - `co_alarm` onset when two T4 bursts are seen 3 to 9 s apart (three, on the tone of an open T3 `smoke_alarm`),
///   unless a louder tone that sounds with the first burst sounds again between them (a kitchen timer's alias);
/// - `alarm_chirp` (onset only) when ``Configuration/minimumChirps`` (3) isolated short chirps of one frequency come
///   15 to 120 s apart at a steady interval (a low-battery detector chirps every 30-60 s for days, so waiting for the
///   third chirp costs a minute or two and keeps coincidences of household clicks out), then at most once per
///   ``Configuration/chirpRepeatSeconds``;
/// - one event per alarm: once a `smoke_alarm` (or `co_alarm`) is open, every later cycle, every beep of its tone
///   (within ``Configuration/continuationTolerance`` of it, a harmonic or its fundamental) and every classifier
///   window agreeing while a tone sounds keep it open, whatever the evidence that opened it; it ends
///   (`pattern_stopped`) when none came for ``Configuration/holdSeconds`` (CO: ``Configuration/coHoldSeconds``),
///   or at a gap (`stream_gap`), the end of the stream (`stream_end`) or a reload (`reload`).
///
/// Stream time is `framePosition / sampleRate` for the audio and `ClassificationResult.timeRange` for windows: both
/// count from the stream's first frame.
///
/// - Important: Not thread-safe: own it on one queue (the daemon's analysis queue).
package final class AlarmDetector {
    /// Fusion settings.
    package struct Configuration: Sendable, Equatable {
        /// Classifier classes whose score counts as "smoke alarm" for fusion (AudioSet display names).
        package var smokeClasses = ["Smoke detector, smoke alarm", "Fire alarm"]
        /// Classes reported as the classifier's agreement with a CO (T4) pattern.
        package var coClasses = ["Smoke detector, smoke alarm", "Alarm", "Beep, bleep"]
        /// Score (0...1) at or above which a window counts as the classifier agreeing.
        package var classifierThreshold: Float = 0.5
        /// Seconds a persistent tone must sound (with the classifier agreeing) for a `tone+classifier` smoke alarm.
        package var persistentSeconds = 8.0
        /// Fraction (0...1) of those seconds the tone must be on (a T3 is on 50 %, half-duty beepers 50 %).
        package var persistentCoverage = 0.75
        /// Longest silence of the tone within them, seconds.
        package var persistentMaxGapSeconds = 0.6
        /// Median length of its beeps (after rejoining fragments), seconds: a timer's or a clock's beeps are short.
        package var persistentMinimumBeepSeconds = 0.2
        /// Mean smoke/fire classifier score (0...1) over the windows within them.
        package var persistentScore: Float = 0.6
        /// The lower mean smoke/fire score (0...1) that suffices when the persistent tone beeps in a regular
        /// long-beep cadence (see ``cadenceMinimumBeepSeconds``): the non-T3 alarms (0.8-2 s beeps, 0.25-0.5 s
        /// gaps) score 0.3-0.7 over 8 s in pink noise at +10 dB and 0.1-0.4 in speech at 0 dB (tuning sets: the twin
        /// and seeds 21-31), under the 0.6 above; no beeping confuser of those sets beeps in such a cadence.
        /// Set with `persistentScore` or above to turn the cadence rule off.
        package var cadenceScore: Float = 0.3
        /// Shortest median length (s) of the whole beeps in a regular long-beep cadence. The non-T3 alarms beep 0.8 s
        /// or longer (measured 0.80-0.81 s clean); the longest beeps of the tuning confusers' timers and microwaves
        /// are 0.6 s, which a room's tail makes 0.70-0.75 s (tuning seeds 30, 36, 39, `beep_kitchen_timer_long`, whose
        /// 0.4 s pauses it also shortens to 75 % coverage); a fridge door's 1 s beeps are 1 s apart: half duty,
        /// refused by the coverage.
        package var cadenceMinimumBeepSeconds = 0.78
        /// Longest median length (s) of those beeps: 2 s in the tuning alarms, with room for a reverberant tail (a
        /// tone that never pauses is the persistent rule's, with the 0.6 bar).
        package var cadenceMaximumBeepSeconds = 2.6
        /// dB a T3 cycle's tone may be below the loudest tone sounding at its first beep (see `isDominant`).
        package var dominanceDB = 16.0
        /// dB a tone starting with a first T3 or T4 cycle's first beep must be louder than the cycle's tone to count
        /// as the sounder it is part of (see `isPartOfSteadyBeeper`); the tuning cases, a 1 s alarm clock's alias and
        /// a kitchen timer's, were 14 and 23-29 dB below their fundamentals.
        package var companionDB = 6.0
        /// Mean "Music" score over a first T3 cycle at or above which (with the smoke/fire score below
        /// ``musicAlarmScore`` in all its windows) the second cycle in a row is needed.
        package var musicScore: Float = 0.5
        package var musicAlarmScore: Float = 0.1
        /// Relative frequency tolerance for a beep that keeps an open alarm event going (its tone, a harmonic or
        /// its fundamental).
        package var continuationTolerance = 0.04
        /// Longest gap (s, frame centre to frame centre) between two pieces of one tone that are rejoined for the
        /// second T3 matcher and for the persistent-tone rule (there with ``AlarmDetector/gridSlackSeconds``; a lossy
        /// codec's or noise's fragments, a warbling piezo's dips in a room: 0.02-0.05 s).
        package var rejoinGapSeconds = 0.05
        /// Longest gap (s) bridged for a third T3 matcher: a speech codec (GSM 06.10 at 8 kHz, in speech at
        /// +10 dB) chops a 3 kHz beep into pieces up to 0.19 s apart, which the first two matchers do not see
        /// as beeps. Below T3's 0.5 s off time (with 0.3 s to spare for a room's tail), and T4's gaps are never
        /// bridged (only T3 matches of these matchers count). 0 turns that matcher off.
        package var t3RejoinGapSeconds = 0.2
        /// Seconds without a new cycle (or agreeing window) before an event ends; 10 s is 2.5 T3 cycles.
        package var holdSeconds = 10.0
        /// The same for CO: 16 s is 2.5 T4 cycles.
        package var coHoldSeconds = 16.0
        /// Seconds after an `alarm_chirp` event before the next one (a chirping detector chirps for days).
        package var chirpRepeatSeconds = 900.0
        /// Chirps in a row at a steady interval before an `alarm_chirp` event, at least 2 (default 3: with two, the
        /// 24-hour household stream of `earshot eval --groups` gave 56 events; see README, "Evaluation of every
        /// group").
        package var minimumChirps = 3
        /// Whether `alarm_chirp` events are emitted.
        package var reportChirps = true
        /// Whether the `tone+classifier` decision (a persistent alarm tone that is not T3) is made.
        package var persistentToneDetection = true
        /// A persistent tone whose pieces beat with a period of 0.2-0.6 s this strongly (0...1,
        /// ``EnvelopeModulation``: its level within its longest piece, or its on/off train) is a fast beeper, not a
        /// `tone+classifier` smoke alarm. Off by default (above 1): at 0.5 it removed the 4 such false events on the
        /// 990 beeping confusers of the 22 tuning sets (alarm clocks' 0.25 s and kitchen timers' 0.5 s beats score
        /// 0.56-0.73; the synthetic non-T3 alarms at most 0.48), but it also refused a real smoke alarm in
        /// `../shared` (`ALRMElec_Smoke_detector_alarm_2`: 0.26 s beeps every 0.34 s, 0.52-0.61), which beats just as
        /// a clock does. 0.5 turns it on.
        package var fastBeatPeriodicity = 2.0
        /// Relative frequency band (0.03...0.5) within which a persistent tone's pieces may wander and still be one
        /// warbling alarm tone (the `tone+classifier` rule; the classifier's bar is then ``persistentScore``). A
        /// warbling smoke alarm in `../shared` (`alarm-wpmonitor/Smoke_alarm.wav`: "Fire alarm" 0.94-1.0) steps
        /// its loudest partial through 2454, 2676 and 2864 Hz every second (-8 % to +7 % of the longest piece), in
        /// pieces 0.1-0.5 s long that no one frequency covers 75 % of. 0.03 or less turns the warble off.
        package var warbleTolerance = 0.1

        package init() {}
    }

    package let configuration: Configuration
    /// Where ``observe(classification:)`` reads each class it checks in a window's `scores` (smoke classes, CO
    /// classes, "Music"): the class's index in `classLabels` given at init, nil for a class not among them (or
    /// every class, without labels: then it is looked up by name in the window's classifications).
    private let smokeIndices: [Int?], coIndices: [Int?], musicIndices: [Int?]
    private var tracker: ToneTracker?
    private var matcher = AlarmPatternMatcher()
    /// The second and third matchers, fed segments rejoined across gaps of ``Configuration/rejoinGapSeconds`` and
    /// ``Configuration/t3RejoinGapSeconds``; only their T3 matches are used.
    private var rejoiningMatchers: [RejoiningT3Matcher]
    private var announcedOnsets: [(start: Double, frequencyHz: Double)] = []
    private var windows: [(range: TimeRange, smoke: Float, smokeClass: String?, co: Float, coClass: String?, music: Float)] = []
    private var recentTones: [ToneSegment] = []
    private var smoke: Active?
    private var co: Active?
    private var lastChirpEvent: Double = -.infinity
    private var streamTime = 0.0

    private struct Active {
        var source: AlarmEvent.Source
        var pattern: AlarmPattern?
        var start: Double
        var lastEvidence: Double
        /// Decision time of the last pattern cycle counted (-infinity: none yet).
        var lastCycle = -Double.infinity
        var cycles: Int
        var toneHz: Double
        var levelDBFS: Double
        var score: Float?
        var scoreClass: String?

        /// Takes a better classifier score.
        mutating func take(score newScore: Float?, label: String?) {
            guard let newScore, score.map({ newScore > $0 }) ?? true else { return }
            score = newScore
            scoreClass = label
        }
    }

    /// - Parameters:
    ///   - classLabels: the labels of the windows' `scores`, in index order (YAMNet's 521, then any heads'), so
    ///     that each window's classes are read by index; nil looks them up by name in each window's
    ///     classifications (the same scores, one linear search per class).
    package init(configuration: Configuration = Configuration(), classLabels: [String]? = nil) {
        self.configuration = configuration
        rejoiningMatchers = [configuration.rejoinGapSeconds, configuration.t3RejoinGapSeconds]
            .filter { $0 > 0 }.map { RejoiningT3Matcher(gap: $0) }
        func indices(_ names: [String]) -> [Int?] {
            guard let classLabels else { return names.map { _ in nil } }
            return names.map { classLabels.firstIndex(of: $0) }
        }
        smokeIndices = indices(configuration.smokeClasses)
        coIndices = indices(configuration.coClasses)
        musicIndices = indices([Self.musicClass])
    }

    private static let musicClass = "Music"

    /// Slack (s) added where the persistent-tone rule compares a gap between two pieces of a tone with
    /// ``Configuration/rejoinGapSeconds``: segment times sit on the tracker's 10 ms hop, and their difference carries
    /// rounding (a gap of 0.05 s measured 0.05000000000000071), so a limit of 0.05 s admitted some gaps of exactly
    /// 0.05 s and refused others (a warbling piezo's 2 s beeps in a room, broken every 0.14 s by dips at which the
    /// tracker ends a segment and resumes 0.05 s later, stayed rows of 0.1 s pieces: tuning sets, `smoke_other_2`).
    /// A fifth of a hop: no gap one hop longer is admitted. The rejoining T3 matchers do not use it (see
    /// `RejoiningT3Matcher.init(gap:)`).
    static let gridSlackSeconds = 0.002

    /// Analyses mono samples at the capture rate.
    ///
    /// - Parameters:
    ///   - samples: mono, full scale -1...1.
    ///   - sampleRate: Hz, 8000...384000 (below 8.9 kHz the band ends at 0.45 x the rate; other rates give no
    ///     events).
    ///   - framePosition: absolute frame of `samples[0]`; a jump (or a new rate) is a gap: open events end and
    ///     patterns start again.
    /// - Returns: the events decided in this audio, in time order.
    package func process(samples: UnsafeBufferPointer<Float>, sampleRate: Int, framePosition: Int64) -> [AlarmEvent] {
        var events: [AlarmEvent] = []
        if tracker?.sampleRate != sampleRate {
            if tracker != nil { events += reset(at: streamTime) }
            var parameters = Self.trackerParameters(sampleRate: sampleRate)
            parameters.tracksEnvelopeBeat = configuration.fastBeatPeriodicity <= 1
            tracker = try? ToneTracker(sampleRate: sampleRate, parameters: parameters)
        }
        guard let tracker else { return events }
        if let expected = expectedPosition, expected != framePosition {
            events += reset(at: streamTime)
        }
        expectedPosition = framePosition + Int64(samples.count)
        // A long chunk (the daemon catching up after a stall) is taken in 40 ms blocks, so that every decision
        // carries the stream time at which its evidence was complete, not the end of the chunk.
        let block = max(1, sampleRate / 25)
        var offset = 0
        while offset < samples.count {
            let count = min(block, samples.count - offset)
            let slice = UnsafeBufferPointer(rebasing: samples[offset..<(offset + count)])
            events += processBlock(slice, tracker: tracker, framePosition: framePosition + Int64(offset))
            offset += count
        }
        return events
    }

    private func processBlock(_ samples: UnsafeBufferPointer<Float>, tracker: ToneTracker, framePosition: Int64) -> [AlarmEvent] {
        var events: [AlarmEvent] = []
        // Segments come out in order; a block may hold several, so each is handed over with the time it was known.
        let segments = tracker.process(samples, framePosition: framePosition)
        streamTime = tracker.analysedTime
        var matches: [PatternMatch] = []
        for segment in segments {
            recentTones.append(segment)
            matches += matcher.add(segment, now: min(streamTime, segment.end + 0.03))
            for index in rejoiningMatchers.indices { rejoiningMatchers[index].add(segment) }
        }
        let open = tracker.openSegments
        for index in rejoiningMatchers.indices {
            matches += rejoiningMatchers[index].release(open: open, streamTime: streamTime)
        }
        continueActive(with: segments, open: open)
        // Open segments are told to the matcher once, when they appear (keyed by start and frequency: a square
        // wave's harmonics start together).
        func same(_ a: ToneSegment, _ b: (start: Double, frequencyHz: Double)) -> Bool {
            a.start == b.start && abs(a.frequencyHz - b.frequencyHz) <= AlarmPatternMatcher.frequencyTolerance * a.frequencyHz
        }
        announcedOnsets.removeAll { onset in !open.contains { same($0, onset) } }
        for segment in open where !announcedOnsets.contains(where: { same(segment, $0) }) {
            announcedOnsets.append((segment.start, segment.frequencyHz))
            matches += matcher.toneStarted(segment, now: streamTime)
        }
        matches += matcher.recheck(open: open, now: streamTime)
        matches += matcher.advance(to: streamTime)
        for index in rejoiningMatchers.indices { matches += rejoiningMatchers[index].advance(to: streamTime) }
        recentTones.removeAll { $0.end < streamTime - 30 }
        for match in matches.sorted(by: { $0.decisionTime < $1.decisionTime }) { events += handle(match) }
        events += expire(at: streamTime)
        return events
    }

    private var expectedPosition: Int64?

    /// The tone tracker's settings at `sampleRate` (Hz): the defaults, with the band ending at 0.45 x the rate
    /// when the rate is below 8.9 kHz (at 8 kHz, a telephone-rate input, it stops at 3.6 kHz, still above the
    /// usual 3.0-3.5 kHz piezo).
    package static func trackerParameters(sampleRate: Int) -> ToneTracker.Parameters {
        var parameters = ToneTracker.Parameters()
        parameters.maximumHz = min(parameters.maximumHz, Double(sampleRate) * 0.45)
        return parameters
    }

    /// Convenience for arrays; see ``process(samples:sampleRate:framePosition:)``.
    package func process(samples: [Float], sampleRate: Int, framePosition: Int64) -> [AlarmEvent] {
        samples.withUnsafeBufferPointer { process(samples: $0, sampleRate: sampleRate, framePosition: framePosition) }
    }

    /// Takes one classifier window (its scores are looked up by class label; a gated window counts as not
    /// agreeing) and returns a classifier-sourced `smoke_alarm` onset when the fusion rule is met.
    package func observe(classification result: ClassificationResult) -> [AlarmEvent] {
        func best(_ classes: [String], at indices: [Int?]) -> (Float, String?) {
            var score: Float = 0
            var label: String?
            guard !result.isGated else { return (0, nil) }
            for (name, index) in zip(classes, indices) {
                let value: Float?
                if let index, index < result.scores.count {
                    value = result.scores[index]
                } else {
                    value = result.classification(forIdentifier: name).map { Float($0.confidence) }
                }
                if let value, value > score {
                    score = value
                    label = name
                }
            }
            return (score, label)
        }
        let (smokeScore, smokeClass) = best(configuration.smokeClasses, at: smokeIndices)
        let (coScore, coClass) = best(configuration.coClasses, at: coIndices)
        let (musicScore, _) = best([Self.musicClass], at: musicIndices)
        windows.append((result.timeRange, smokeScore, smokeClass, coScore, coClass, musicScore))
        windows.removeAll { $0.range.end < result.timeRange.end - 60 }
        var events: [AlarmEvent] = []
        let toneSounds = toneFraction(from: result.timeRange.start, to: result.timeRange.end) >= 0.2
        if var active = smoke, toneSounds, smokeScore >= configuration.classifierThreshold {
            active.lastEvidence = max(active.lastEvidence, result.timeRange.end)
            active.take(score: smokeScore, label: smokeClass)
            if active.source == .pattern { active.source = .patternAndClassifier }
            smoke = active
        } else if var active = co, toneSounds, coScore >= configuration.classifierThreshold {
            active.lastEvidence = max(active.lastEvidence, result.timeRange.end)
            active.take(score: coScore, label: coClass)
            if active.source == .pattern { active.source = .patternAndClassifier }
            co = active
        } else if smoke == nil, co == nil, configuration.persistentToneDetection,
                  let tone = persistentTone(endingAt: result.timeRange.end) {
            let span = (result.timeRange.end - configuration.persistentSeconds, result.timeRange.end)
            let scores = windows.filter { $0.range.start >= span.0 - 0.5 && $0.range.end <= span.1 + 0.01 }
            let mean = scores.isEmpty ? 0 : scores.reduce(Float(0)) { $0 + $1.smoke } / Float(scores.count)
            let bar = tone.shape == .cadence ? min(configuration.cadenceScore, configuration.persistentScore) : configuration.persistentScore
            // Windows must span half of those seconds or more (8 windows of the default 0.96 s every 0.48 s, 3 of
            // 2 s every 1 s): a count of windows would refuse longer windows (7 of 2 s fit in 8.5 s).
            let heard = (scores.map(\.range.end).max() ?? 0) - (scores.map(\.range.start).min() ?? 0)
            if heard >= configuration.persistentSeconds / 2, mean >= bar {
                let best = scores.max { $0.smoke < $1.smoke }
                let active = Active(
                    source: .toneAndClassifier, pattern: nil, start: tone.start, lastEvidence: result.timeRange.end,
                    cycles: 0, toneHz: tone.frequencyHz, levelDBFS: tone.levelDBFS, score: best?.smoke,
                    scoreClass: best?.smokeClass)
                smoke = active
                events.append(onsetEvent(group: AlarmEvent.smokeAlarm, active, time: result.timeRange.end))
            }
        }
        return events
    }

    /// A tone that sounded most of the last ``Configuration/persistentSeconds`` in long beeps (see the type's
    /// rules), with its first beep's start, frequency and mean level, and whether it beeps in a regular long-beep
    /// cadence (``isLongBeepCadence(_:begin:end:)``); nil when none did. The tone is the longest piece's frequency
    /// (within 3 %) or, where that does not cover enough, the same frequency warbling: pieces within
    /// ``Configuration/warbleTolerance`` of it that are not all within 3 % of one another (``ToneShape/warble``,
    /// never a cadence: it needs ``Configuration/persistentScore``).
    private func persistentTone(endingAt end: Double) -> (start: Double, frequencyHz: Double, levelDBFS: Double, shape: ToneShape)? {
        let begin = end - configuration.persistentSeconds
        var tones = recentTones.filter { $0.end >= begin }
        for open in tracker?.openSegments ?? [] {
            var segment = open
            segment.end = max(segment.end, min(end, streamTime))
            tones.append(segment)
        }
        // The loudest-in-total frequency, then every piece of it (rejoined where a codec broke it).
        guard let main = tones.max(by: { $0.duration < $1.duration }), main.duration >= 0.15
        else { return nil }
        func pieces(within tolerance: Double) -> [ToneSegment] {
            tones.filter { abs($0.frequencyHz - main.frequencyHz) <= tolerance * main.frequencyHz }.sorted { $0.start < $1.start }
        }
        let steady = pieces(within: 0.03)
        // A fast beeper is no alarm, even where a room's echo or the rejoining below made its beeps one tone.
        if configuration.fastBeatPeriodicity <= 1, fastBeat(steady, begin: begin, end: end) >= configuration.fastBeatPeriodicity {
            return nil
        }
        let joined: [ToneSegment], shape: ToneShape
        if let sounded = sounding(steady, begin: begin, end: end) {
            joined = sounded
            shape = isLongBeepCadence(sounded, begin: begin, end: end) ? .cadence : .steady
        } else {
            let band = pieces(within: configuration.warbleTolerance)
            guard configuration.warbleTolerance > 0.03, band.count > steady.count,
                  let low = band.map(\.frequencyHz).min(), let high = band.map(\.frequencyHz).max(), high > 1.03 * low,
                  let sounded = sounding(band, begin: begin, end: end)
            else { return nil }
            joined = sounded
            shape = .warble
        }
        let level = joined.reduce(0) { $0 + $1.levelDBFS } / Double(joined.count)
        return (joined[0].start, main.frequencyHz, level, shape)
    }

    /// How a persistent tone sounds, which sets the classifier's bar (``observe(classification:)``).
    private enum ToneShape {
        /// One frequency, not in a long-beep cadence: ``Configuration/persistentScore``.
        case steady
        /// One frequency in a regular long-beep cadence: ``Configuration/cadenceScore``.
        case cadence
        /// A frequency that warbles over a few per cent: ``Configuration/persistentScore``.
        case warble
    }

    /// `pieces` (time order) rejoined across gaps of ``Configuration/rejoinGapSeconds``, when they sound most of
    /// [begin, end] in long beeps: ``Configuration/persistentCoverage`` of it, no silence longer than
    /// ``Configuration/persistentMaxGapSeconds`` (from `begin` to the first piece too), median beep
    /// ``Configuration/persistentMinimumBeepSeconds`` or longer; nil otherwise.
    private func sounding(_ pieces: [ToneSegment], begin: Double, end: Double) -> [ToneSegment]? {
        let joined = ToneSegment.joined(pieces, gap: configuration.rejoinGapSeconds + Self.gridSlackSeconds)
        var covered = 0.0
        var longestGap = 0.0
        var cursor = begin
        for piece in joined {
            let from = max(piece.start, begin), to = min(piece.end + 0.01, end)
            guard to > from else { continue }
            longestGap = max(longestGap, from - cursor)
            covered += to - max(from, cursor)
            cursor = max(cursor, to)
        }
        longestGap = max(longestGap, end - cursor)
        let beeps = joined.map { $0.end - $0.start + 0.01 }.sorted()
        guard !beeps.isEmpty, covered >= configuration.persistentCoverage * configuration.persistentSeconds,
              longestGap <= configuration.persistentMaxGapSeconds,
              beeps[beeps.count / 2] >= configuration.persistentMinimumBeepSeconds,
              joined.first.map({ $0.start <= begin + configuration.persistentMaxGapSeconds }) ?? false
        else { return nil }
        return joined
    }

    /// How strongly a persistent tone's pieces (as the tracker ended them, before rejoining) beat with a period of
    /// 0.20-0.60 s over [begin, end] (0...1, ``EnvelopeModulation``): the larger of the beat of its level within its
    /// longest piece (a room's echo merged a fast beeper's beeps into one tone) and the beat of its on/off train at
    /// the tracker's 10 ms hop (the tracker ended a piece at each dip).
    private func fastBeat(_ pieces: [ToneSegment], begin: Double, end: Double) -> Double {
        let longest = pieces.max { $0.duration < $1.duration }?.envelopePeriodicity ?? 0
        var train = EnvelopeModulation()
        let hop = 0.01
        var index = 0
        var time = begin
        while time < end {
            while index < pieces.count, pieces[index].end + hop / 2 < time { index += 1 }
            let on = pieces[index...].prefix(4).contains { $0.start - hop / 2 <= time && $0.end + hop / 2 >= time }
            train.add(on ? 1 : 0)
            time += hop
        }
        return max(longest, train.periodicity(minimumVariance: 0.04).score)
    }

    /// Whether the (rejoined) beeps of a persistent tone keep a smoke alarm's regular long-beep cadence over
    /// [begin, end]: three whole beeps or more (not cut by the span's edges), their median length within
    /// ``Configuration/cadenceMinimumBeepSeconds``...``Configuration/cadenceMaximumBeepSeconds``, every one within
    /// 25 % of it (one sounder's timer; noise may cut one: one may be off), and every pause between them 0.15 s or
    /// longer and within 0.15 s of their median (a kitchen timer's or a clock's fast beeps that a room's echo
    /// merges into irregular lumps with 0.1 s dips are no cadence: tuning, tune22 `beep_alarm_clock_fast_1`).
    private func isLongBeepCadence(_ pieces: [ToneSegment], begin: Double, end: Double) -> Bool {
        let whole = pieces.filter { $0.start > begin + 0.02 && $0.end < end - 0.05 }
        guard whole.count >= 3 else { return false }
        let lengths = whole.map { $0.end - $0.start + 0.01 }.sorted()
        let median = lengths[lengths.count / 2]
        guard median >= configuration.cadenceMinimumBeepSeconds, median <= configuration.cadenceMaximumBeepSeconds,
              lengths.filter({ abs($0 - median) > 0.25 * median }).count <= 1
        else { return false }
        let pauses = zip(pieces.dropFirst(), pieces).map { $0.start - $1.end - 0.01 }.sorted()
        guard let shortest = pauses.first, shortest >= 0.15 else { return false }
        let medianPause = pauses[pauses.count / 2]
        return pauses.allSatisfy { abs($0 - medianPause) <= 0.15 }
    }

    /// Beeps of an open alarm's tone (or a harmonic, or its fundamental) keep it open: an alarm whose cycles grew
    /// irregular or were masked is still the same alarm while it sounds.
    private func continueActive(with finished: [ToneSegment], open: [ToneSegment]) {
        func belongs(_ segment: ToneSegment, to active: Active) -> Bool {
            segment.duration >= 0.07 && isSounder(segment.frequencyHz, of: active)
        }
        for segment in finished + open {
            let end = open.contains(segment) ? streamTime : segment.end
            if var active = smoke, belongs(segment, to: active) {
                active.lastEvidence = max(active.lastEvidence, end)
                smoke = active
            }
            if var active = co, belongs(segment, to: active) {
                active.lastEvidence = max(active.lastEvidence, end)
                co = active
            }
        }
    }

    /// Ends open events (`reason`: the stream ended, or a reload) and forgets all state.
    package func finish(reason: DetectionEvent.EndReason = .streamEnd) -> [AlarmEvent] {
        let events = reset(at: streamTime, reason: reason)
        tracker = nil
        expectedPosition = nil
        return events
    }

    /// The group folded into `smoke_alarm` when the pattern detector runs.
    package static let fireAlarm = "fire_alarm"

    /// The groups the classifier-only `DetectionEngine` watches when the pattern detector runs: `watch` without
    /// smoke_alarm, co_alarm and fire_alarm (the detector decides those, with the classifier's scores, "Fire alarm"
    /// included, as evidence: one alarm is one event), or `watch` unchanged when `patternDetection` is false.
    package static func engineWatchList(_ watch: [String], patternDetection: Bool) -> [String] {
        patternDetection ? watch.filter { ![AlarmEvent.smokeAlarm, AlarmEvent.coAlarm, fireAlarm].contains($0) } : watch
    }

    /// The alarm groups to publish for a watch list: smoke_alarm when smoke_alarm or fire_alarm is watched
    /// (fire_alarm is folded into it), co_alarm when watched, alarm_chirp when either is (a chirp is a smoke or CO
    /// alarm asking for a battery).
    package static func emittedGroups(watch: [String]) -> Set<String> {
        var groups = Set(watch).intersection([AlarmEvent.smokeAlarm, AlarmEvent.coAlarm])
        if watch.contains(fireAlarm) { groups.insert(AlarmEvent.smokeAlarm) }
        if !groups.isEmpty { groups.insert(AlarmEvent.alarmChirp) }
        return groups
    }

    /// The alarm groups that are not in the watch list but are published (and may be subscribed to): alarm_chirp
    /// when the pattern detector runs and smoke_alarm or co_alarm is watched; otherwise none.
    package static func extraGroups(watch: [String], patternDetection: Bool) -> [String] {
        guard patternDetection else { return [] }
        return emittedGroups(watch: watch).subtracting(watch).sorted()
    }

    /// The groups with an open event.
    package var activeGroups: [String] {
        (smoke != nil ? [AlarmEvent.smokeAlarm] : []) + (co != nil ? [AlarmEvent.coAlarm] : [])
    }

    /// Ends open events at `time` (the end of the audio heard) and forgets all state. An event's end is its last
    /// evidence, but not after `time`: the last window of a stream that ended is padded past its audio (trial 8 #6:
    /// a T3 recording of 11.168 s ended at 11.52 s, its last window's end).
    private func reset(at time: Double, reason: DetectionEvent.EndReason = .streamGap) -> [AlarmEvent] {
        var events: [AlarmEvent] = []
        for (group, open) in [(AlarmEvent.smokeAlarm, smoke), (AlarmEvent.coAlarm, co)] {
            guard var active = open else { continue }
            active.lastEvidence = max(active.start, min(active.lastEvidence, time))
            events.append(endEvent(group: group, active, reason: reason))
        }
        smoke = nil
        co = nil
        matcher.reset()
        for index in rejoiningMatchers.indices { rejoiningMatchers[index].reset() }
        if let tracker { _ = tracker.finish() }
        recentTones.removeAll()
        windows.removeAll()
        announcedOnsets.removeAll()
        return events
    }

    private func expire(at time: Double) -> [AlarmEvent] {
        var events: [AlarmEvent] = []
        if let active = smoke, time - active.lastEvidence >= configuration.holdSeconds {
            events.append(endEvent(group: AlarmEvent.smokeAlarm, active, reason: .patternStopped))
            smoke = nil
        }
        if let active = co, time - active.lastEvidence >= configuration.coHoldSeconds {
            events.append(endEvent(group: AlarmEvent.coAlarm, active, reason: .patternStopped))
            co = nil
        }
        return events
    }

    /// Fraction of [start, end] covered by tone segments (finished or open) between 400 Hz and 4 kHz.
    private func toneFraction(from start: Double, to end: Double) -> Double {
        guard end > start else { return 0 }
        var covered = 0.0
        var tones = recentTones
        tones += tracker?.openSegments ?? []
        for tone in tones {
            let overlap = min(end, tone.end + 0.01) - max(start, tone.start)
            if overlap > 0 { covered += overlap }
        }
        return min(1, covered / (end - start))
    }

    /// The best classifier score over windows overlapping [start, end].
    private func classifierEvidence(from start: Double, to end: Double, co: Bool) -> (Float?, String?) {
        var best: Float?
        var label: String?
        for window in windows where window.range.end > start && window.range.start < end {
            let score = co ? window.co : window.smoke
            if best.map({ score > $0 }) ?? true {
                best = score
                label = co ? window.coClass : window.smokeClass
            }
        }
        return (best, label)
    }

    /// Whether a T3 match's tone stands out: within ``Configuration/dominanceDB`` of the loudest tone sounding at
    /// its cycle's first beep. A sounder is the loudest tone in the room (a square wave's harmonics are within
    /// 17 dB of its fundamental); the weak overtones of a piano's chords, which can fall into a T3 rhythm, are not.
    private func isDominant(_ match: PatternMatch) -> Bool {
        if smoke != nil { return true }
        let from = match.cycleStart - 0.02, to = match.cycleStart + 0.3
        var loudest = -Double.infinity
        for tone in recentTones + (tracker?.openSegments ?? []) where tone.end >= from && tone.start <= to {
            loudest = max(loudest, tone.levelDBFS)
        }
        return match.levelDBFS >= loudest - configuration.dominanceDB
    }

    /// Whether `frequencyHz` is an open event's tone, a harmonic of it or its fundamental (up to the 7th, within
    /// ``Configuration/continuationTolerance``).
    private func isSounder(_ frequencyHz: Double, of active: Active) -> Bool {
        guard active.toneHz > 0 else { return false }
        let ratio = frequencyHz / active.toneHz
        let harmonic = (ratio >= 1 ? ratio : 1 / ratio).rounded()
        guard harmonic >= 1, harmonic <= 7 else { return false }
        let expected = ratio >= 1 ? active.toneHz * harmonic : active.toneHz / harmonic
        return abs(frequencyHz - expected) <= configuration.continuationTolerance * expected
    }

    /// Whether a T4 match is the beeps of an open T3 smoke event falling into T4's grid: its tone is the
    /// sounder's, no `co_alarm` is open, and it is the first cycle of its T4 run (two bursts) or a cycle whose bursts
    /// fit the grid only once repaired (``PatternMatch/repaired``). A long T3 alarm whose cycles grow irregular,
    /// heard in speech, did that once 58-110 s in (tuning: tune23, tune25 and the tuning twin `t3_irregular_2`), and
    /// with the repairs twice in a row (validation seeds 71 and 75: an irregular T3 in speech, a T3 through an Opus
    /// phone call); a real T4 from the same sounder repeats every 5.7 s and is a `co_alarm` at its next cycle whose
    /// bursts fit as they are, or once the smoke event ends.
    private func isSmokeSounderInT4Grid(_ match: PatternMatch) -> Bool {
        guard co == nil, let active = smoke, active.pattern == .t3, match.count <= 1 || match.repaired else { return false }
        return isSounder(match.frequencyHz, of: active)
    }

    /// Whether a first T3 or T4 cycle is a weaker part of a louder sounder that does not pause: a tone at another
    /// frequency, ``Configuration/companionDB`` or more louder, that starts with the cycle's first beep (within
    /// 0.06 s) or sounds through at least half of each of its beeps (T3: its three; T4: its first burst's), and sounds
    /// again (within 2 % of its frequency and 6 dB of its level; T4: twice) in the cycle's long pause (from 0.1 s after
    /// its last beep, T4: 0.5 s, to 0.2 s before the tone that closed it: T3's next cycle, T4's second burst). A steady beeper (a
    /// reversing truck, an alarm clock) whose overtone or alias loses one beep in speech looks like T3 at that
    /// overtone; a kitchen timer's groups of four, a group every 1.2 s, look like T4 at an alias that speech masks
    /// in all but two groups 3-9 s apart (tuning seeds 42 and 52, `beep_kitchen_timer_4x_2`: aliases at 3.7-3.9 kHz
    /// 23-29 dB below the 2.9-3.0 kHz fundamental). A square-wave alarm's fundamental pauses with its harmonics.
    /// Later cycles of an open event of the same group pass.
    private func isPartOfSteadyBeeper(_ match: PatternMatch) -> Bool {
        guard (match.pattern == .t4 ? co : smoke) == nil else { return false }
        let tones = recentTones + (tracker?.openSegments ?? [])
        // The long pause: from 0.1 s after the last beep to 0.2 s before the closing tone (a square wave's partials
        // start up to 0.15 s apart in noise or a room). A T4 burst matched on three beeps may have lost its fourth,
        // which the companion still sounds: there the pause starts 0.5 s after the last beep (one step of at most
        // 0.3 s and a beep; tuning seeds 34 and 39, a 520 Hz square T4 in speech matched on its 7th harmonic).
        // A T3 pause ends, too, three and a half beep periods after the cycle's start: a steady beeper sounds its
        // lost beep three periods on, a square wave's fundamental starts its next cycle four on, and a partial's
        // onsets may come late enough (up to 0.34 s through a phone codec: tuning seed 35, `t3_phone_opus_3`, a 520
        // Hz square T3 heard on its 5th harmonic) that the fundamental's next cycle falls before the closing tone.
        guard let first = match.beeps.first, let last = match.beeps.last, let closing = match.closingToneStart
        else { return false }
        let pauseStart = last.upperBound + (match.pattern == .t4 ? 0.5 : 0.1)
        var pauseEnd = closing - 0.2
        if match.pattern == .t3, match.beeps.count == 3 {
            pauseEnd = min(pauseEnd, first.lowerBound + 3.5 * (last.lowerBound - first.lowerBound) / 2)
        }
        guard pauseStart < pauseEnd else { return false }
        let pause = pauseStart...pauseEnd
        let tolerance = AlarmPatternMatcher.frequencyTolerance
        // A tone of the companion's sounder: within 2 % of its frequency.
        func isAt(_ tone: ToneSegment, of companion: ToneSegment) -> Bool {
            abs(tone.frequencyHz - companion.frequencyHz) <= 0.02 * companion.frequencyHz
        }
        // Part of the sounder: it starts with the first beep, or its pieces together sound through at least half of
        // each beep (the weak tone's onsets come late in noise: tuning, seeds 32, 37 and 41, an alias 0.08-0.19 s
        // late; a room splits a 1 kHz reversing beeper's 0.5 s beeps into four pieces 0.03-0.06 s apart while its
        // second harmonic, 13 dB down, keeps whole beeps: validation seed 105, `beep_truck_reverse_1`).
        func sounds(with companion: ToneSegment) -> Bool {
            abs(companion.start - match.cycleStart) <= 0.06 || match.beeps.allSatisfy { beep in
                let overlap = tones.filter { isAt($0, of: companion) }.reduce(0.0) { sum, tone in
                    sum + max(0, min(tone.end, beep.upperBound) - max(tone.start, beep.lowerBound))
                }
                return overlap >= 0.5 * (beep.upperBound - beep.lowerBound)
            }
        }
        // T3's pause (about 1.5 s) holds one beep of a 1 s beeper; T4's (about 5 s) holds several of a timer's, and
        // there one tone at the companion's frequency can be a voice's (stress test, `earshot eval --rate-factor
        // 0.85`: a 520 Hz square T4 in a room in speech at 0 dB, matched at an alias, lost its event to one).
        let recurrences = match.pattern == .t4 ? 2 : 1
        for companion in tones where abs(companion.frequencyHz - match.frequencyHz) > tolerance * max(companion.frequencyHz, match.frequencyHz)
            && companion.levelDBFS >= match.levelDBFS + configuration.companionDB && sounds(with: companion) {
            let again = tones.filter { pause.contains($0.start) && isAt($0, of: companion)
                && abs($0.levelDBFS - companion.levelDBFS) <= 6 }
            if again.count >= recurrences { return true }
        }
        return false
    }

    /// Whether a first T3 cycle is heard over music the classifier is sure of, with no alarm score at all: music
    /// can fall into T3's rhythm once (a chord's overtone three times, then a rest); an alarm heard over music
    /// repeats, so there the second cycle in a row decides (about 4 s later). Later cycles of an open event pass.
    private func isMusicOnly(_ match: PatternMatch) -> Bool {
        guard smoke == nil, match.count < 2 else { return false }
        let cycle = windows.filter { $0.range.end > match.cycleStart && $0.range.start < match.decisionTime }
        guard !cycle.isEmpty else { return false }
        let music = cycle.map(\.music).reduce(0, +) / Float(cycle.count)
        let alarm = cycle.map(\.smoke).max() ?? 0
        return music >= configuration.musicScore && alarm < configuration.musicAlarmScore
    }

    private func handle(_ match: PatternMatch) -> [AlarmEvent] {
        switch match.pattern {
        case .t3:
            guard isDominant(match), !isMusicOnly(match), !isPartOfSteadyBeeper(match) else { return [] }
            return patternCycle(match, group: AlarmEvent.smokeAlarm, co: false)
        case .t4:
            guard !isSmokeSounderInT4Grid(match), !isPartOfSteadyBeeper(match) else { return [] }
            return patternCycle(match, group: AlarmEvent.coAlarm, co: true)
        case .chirp:
            guard configuration.reportChirps, smoke == nil, co == nil,
                  match.count >= max(2, configuration.minimumChirps),
                  match.decisionTime - lastChirpEvent >= configuration.chirpRepeatSeconds
            else { return [] }
            lastChirpEvent = match.decisionTime
            let (score, label) = classifierEvidence(from: match.cycleStart, to: match.cycleStart + 0.96, co: false)
            return [AlarmEvent(
                kind: .onset, group: AlarmEvent.alarmChirp, source: .pattern, pattern: .chirp, cycles: match.count,
                toneHz: match.frequencyHz, toneLevelDBFS: match.levelDBFS, classifierScore: score,
                classifierClass: label, start: match.cycleStart, time: match.decisionTime,
                intervalSeconds: match.intervalSeconds)]
        }
    }

    /// The sounder's fundamental for a match heard on `frequencyHz`: the lowest f / k (k = 2...7, at least 400 Hz)
    /// with a tone sounding at the cycle's first tone (starting within 0.15 s of it: in a room or in noise the
    /// harmonics' onsets spread), or the match's own frequency.
    private func fundamental(of match: PatternMatch) -> Double {
        var tones = recentTones.filter { abs($0.start - match.cycleStart) <= 0.15 }
        tones += (tracker?.openSegments ?? []).filter { abs($0.start - match.cycleStart) <= 0.15 }
        var best = match.frequencyHz
        for divisor in 2...7 {
            let expected = match.frequencyHz / Double(divisor)
            guard expected >= 400 * 0.97 else { break }
            if let tone = tones.first(where: { abs($0.frequencyHz - expected) <= 0.03 * expected }) {
                best = min(best, tone.frequencyHz)
            }
        }
        return best
    }

    private func patternCycle(_ match: PatternMatch, group: String, co isCO: Bool) -> [AlarmEvent] {
        var match = match
        match.frequencyHz = fundamental(of: match)
        let (score, label) = classifierEvidence(from: match.cycleStart, to: match.decisionTime, co: isCO)
        let agrees = (score ?? 0) >= configuration.classifierThreshold
        if var active = isCO ? co : smoke {
            // A harmonic of the same sounder completes the same cycle at about the same time: count it once.
            if match.decisionTime - active.lastCycle >= 1.5 { active.cycles += 1 }
            active.lastCycle = max(active.lastCycle, match.decisionTime)
            active.lastEvidence = max(active.lastEvidence, match.decisionTime)
            if active.pattern == nil {
                active.pattern = match.pattern
                active.toneHz = match.frequencyHz
                if active.source == .toneAndClassifier { active.source = .patternAndClassifier }
            }
            if agrees, active.source == .pattern { active.source = .patternAndClassifier }
            active.take(score: score, label: label)
            if isCO { co = active } else { smoke = active }
            return []
        }
        let active = Active(
            source: agrees ? .patternAndClassifier : .pattern, pattern: match.pattern, start: match.cycleStart,
            lastEvidence: match.decisionTime, lastCycle: match.decisionTime, cycles: 1, toneHz: match.frequencyHz, levelDBFS: match.levelDBFS,
            score: score, scoreClass: label)
        if isCO { co = active } else { smoke = active }
        return [onsetEvent(group: group, active, time: match.decisionTime)]
    }

    private func onsetEvent(group: String, _ active: Active, time: Double) -> AlarmEvent {
        AlarmEvent(
            kind: .onset, group: group, source: active.source, pattern: active.pattern, cycles: active.cycles,
            toneHz: active.toneHz, toneLevelDBFS: active.levelDBFS, classifierScore: active.score,
            classifierClass: active.scoreClass, start: active.start, time: time)
    }

    private func endEvent(group: String, _ active: Active, reason: DetectionEvent.EndReason) -> AlarmEvent {
        AlarmEvent(
            kind: .end, group: group, source: active.source, pattern: active.pattern, cycles: active.cycles,
            toneHz: active.toneHz, toneLevelDBFS: active.levelDBFS, classifierScore: active.score,
            classifierClass: active.scoreClass, start: active.start, time: active.lastEvidence, reason: reason)
    }
}

/// A T3 matcher fed segments rejoined across gaps of at most `gap` seconds (frame centre to frame centre): pieces of
/// one tone (within 1.5 %) that a lossy codec or noise broke apart. Its T3 matches count only where a rejoined
/// segment (two pieces or more) is in the cycle; elsewhere it saw what the first matcher saw. The tone that closes a
/// cycle's long pause lasts 0.08 s or more (it is a whole, rejoined beep; tuning: a 0.03 s click 11.6 dB below an
/// oven's three beeps, in household noise in a room, closed a cycle the 0.2 s gap had made whole).
private struct RejoiningT3Matcher {
    let gap: Double
    private var matcher = AlarmPatternMatcher(minimumClosingToneSeconds: 0.08)
    /// Finished segments waiting for a continuation before the matcher gets them.
    private var pending: [ToneSegment] = []
    /// Start times of rejoined segments handed to the matcher, last 30 s.
    private var rejoinedStarts: [Double] = []
    /// Start times of pending segments that have taken a second piece.
    private var mergedStarts: [Double] = []

    /// - Parameter gap: the longest gap bridged, s. Compared without ``AlarmDetector/gridSlackSeconds``, so a gap
    ///   of exactly `gap` may or may not be bridged as the subtraction rounds: these matchers' rules were chosen with
    ///   that rounding, and with the slack a real T3 alarm read 5 % slow (`earshot eval --rate-factor 0.95`,
    ///   `alarm-firealarm-detector/Alarm_0.wav`) was decided at 30.6 s instead of 10.9 s.
    init(gap: Double) { self.gap = gap }

    /// A finished segment: a piece that starts within the gap after a pending piece of the same tone ends extends it.
    mutating func add(_ segment: ToneSegment) {
        let tolerance = 0.015 * segment.frequencyHz
        if let index = pending.lastIndex(where: {
            abs($0.frequencyHz - segment.frequencyHz) <= tolerance && segment.start >= $0.start
                && segment.start - $0.end <= gap
        }) {
            var joined = pending[index]
            joined.end = max(joined.end, segment.end)
            if !mergedStarts.contains(joined.start) { mergedStarts.append(joined.start) }
            joined.peakLevelDBFS = max(joined.peakLevelDBFS, segment.peakLevelDBFS)
            joined.peakSNRDB = max(joined.peakSNRDB, segment.peakSNRDB)
            pending[index] = joined
        } else {
            pending.append(segment)
        }
    }

    /// Gives the matcher the rejoined segments that can no longer grow (no piece of their tone is open or due within
    /// the gap); returns its T3 matches.
    mutating func release(open: [ToneSegment], streamTime: Double) -> [PatternMatch] {
        var matches: [PatternMatch] = []
        pending.sort { $0.start < $1.start }
        while let first = pending.first {
            let tolerance = 0.015 * first.frequencyHz
            let continuing = open.contains {
                abs($0.frequencyHz - first.frequencyHz) <= tolerance && $0.start >= first.start && $0.start - first.end <= gap
            }
            guard !continuing, streamTime - first.end > gap + 0.02 else { break }
            pending.removeFirst()
            if let merged = mergedStarts.firstIndex(of: first.start) {
                mergedStarts.remove(at: merged)
                rejoinedStarts.append(first.start)
            }
            matches += matcher.add(first, now: streamTime)
        }
        rejoinedStarts.removeAll { $0 < streamTime - 30 }
        if pending.count > 64 { pending.removeFirst(pending.count - 64) }
        if mergedStarts.count > 64 { mergedStarts.removeFirst(mergedStarts.count - 64) }
        return counted(matches)
    }

    /// The matcher's T3 matches decided by `time` (its T4 and chirp decisions are dropped).
    mutating func advance(to time: Double) -> [PatternMatch] { counted(matcher.advance(to: time)) }

    mutating func reset() {
        matcher.reset()
        pending.removeAll()
        rejoinedStarts.removeAll()
        mergedStarts.removeAll()
    }

    private func counted(_ matches: [PatternMatch]) -> [PatternMatch] {
        matches.filter { match in
            match.pattern == .t3 && rejoinedStarts.contains { $0 >= match.cycleStart - 0.05 && $0 <= match.decisionTime }
        }
    }
}
