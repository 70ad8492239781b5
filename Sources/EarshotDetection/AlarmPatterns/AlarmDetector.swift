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
///   alarm starts), whatever the tone's frequency (a 3 kHz piezo or a 520 Hz low-frequency sounder);
/// - `smoke_alarm` onset, source `classifier`, when the classifier's smoke-alarm classes score at least
///   ``Configuration/classifierThreshold`` in ``Configuration/classifierWindows`` consecutive windows while a tone
///   sounds in each of them (alarms with another pattern; a continuous tone alone or the classifier alone is not
///   enough: the classifier scores a hospital monitor 0.88 and an alarm clock 0.70);
/// - `co_alarm` onset when two T4 bursts are seen 3 to 9 s apart;
/// - `alarm_chirp` (onset only) when two isolated short chirps of one frequency come 15 to 120 s apart, then at most
///   once per ``Configuration/chirpRepeatSeconds``;
/// - an end (`detection_end`) for `smoke_alarm` and `co_alarm` when no new cycle (or positive classifier window)
///   came for ``Configuration/holdSeconds``, or at a gap or the end of the stream.
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
        /// Consecutive agreeing windows with a tone for a classifier-sourced smoke_alarm (16 at the 0.48 s hop:
        /// 8 s, longer than a monitor's or a clock's beeping usually lasts while the classifier confuses it).
        package var classifierWindows = 16
        /// Seconds without a new cycle (or agreeing window) before an event ends; 10 s is 2.5 T3 cycles.
        package var holdSeconds = 10.0
        /// The same for CO: 16 s is 2.5 T4 cycles.
        package var coHoldSeconds = 16.0
        /// Seconds after an `alarm_chirp` event before the next one (a chirping detector chirps for days).
        package var chirpRepeatSeconds = 900.0
        /// Whether `alarm_chirp` events are emitted.
        package var reportChirps = true
        /// Whether the classifier-only `smoke_alarm` decision is made.
        package var classifierFallback = true

        package init() {}
    }

    package let configuration: Configuration
    private var tracker: ToneTracker?
    private var matcher = AlarmPatternMatcher()
    private var announcedOnsets: [(start: Double, frequencyHz: Double)] = []
    private var windows: [(range: TimeRange, smoke: Float, smokeClass: String?, co: Float, coClass: String?)] = []
    private var classifierRun = 0
    private var classifierRunStart = 0.0
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
        var cycles: Int
        var toneHz: Double
        var levelDBFS: Double
        var score: Float?
        var scoreClass: String?
    }

    package init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

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
            tracker = try? ToneTracker(sampleRate: sampleRate, parameters: Self.trackerParameters(sampleRate: sampleRate))
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
        }
        let open = tracker.openSegments
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
        matches += matcher.advance(to: streamTime)
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
        func best(_ classes: [String]) -> (Float, String?) {
            var score: Float = 0
            var label: String?
            guard !result.isGated else { return (0, nil) }
            for name in classes {
                if let value = result.classification(forIdentifier: name)?.confidence, Float(value) > score {
                    score = Float(value)
                    label = name
                }
            }
            return (score, label)
        }
        let (smokeScore, smokeClass) = best(configuration.smokeClasses)
        let (coScore, coClass) = best(configuration.coClasses)
        windows.append((result.timeRange, smokeScore, smokeClass, coScore, coClass))
        windows.removeAll { $0.range.end < result.timeRange.end - 60 }
        var events: [AlarmEvent] = []
        let agrees = smokeScore >= configuration.classifierThreshold
            && toneFraction(from: result.timeRange.start, to: result.timeRange.end) >= 0.2
        if agrees {
            if classifierRun == 0 { classifierRunStart = result.timeRange.start }
            classifierRun += 1
            if var active = smoke {
                active.lastEvidence = max(active.lastEvidence, result.timeRange.end)
                if active.score.map({ smokeScore > $0 }) ?? true {
                    active.score = smokeScore
                    active.scoreClass = smokeClass
                }
                smoke = active
            } else if configuration.classifierFallback, classifierRun >= configuration.classifierWindows {
                let tone = dominantTone(from: classifierRunStart, to: result.timeRange.end)
                let active = Active(
                    source: .classifier, pattern: nil, start: classifierRunStart, lastEvidence: result.timeRange.end,
                    cycles: 0, toneHz: tone.frequencyHz, levelDBFS: tone.levelDBFS, score: smokeScore,
                    scoreClass: smokeClass)
                smoke = active
                events.append(onsetEvent(group: AlarmEvent.smokeAlarm, active, time: result.timeRange.end))
            }
        } else {
            classifierRun = 0
        }
        return events
    }

    /// Ends open events (the stream ended) and forgets all state.
    package func finish() -> [AlarmEvent] {
        let events = reset(at: streamTime)
        tracker = nil
        expectedPosition = nil
        return events
    }

    /// The groups the classifier-only `DetectionEngine` watches when the pattern detector runs: `watch` without
    /// smoke_alarm and co_alarm (the detector decides those, with the classifier's scores as evidence), or `watch`
    /// unchanged when `patternDetection` is false.
    package static func engineWatchList(_ watch: [String], patternDetection: Bool) -> [String] {
        patternDetection ? watch.filter { $0 != AlarmEvent.smokeAlarm && $0 != AlarmEvent.coAlarm } : watch
    }

    /// The alarm groups to publish for a watch list: smoke_alarm and co_alarm when watched, alarm_chirp when either
    /// is (a chirp is a smoke or CO alarm asking for a battery).
    package static func emittedGroups(watch: [String]) -> Set<String> {
        var groups = Set(watch).intersection([AlarmEvent.smokeAlarm, AlarmEvent.coAlarm])
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

    private func reset(at time: Double) -> [AlarmEvent] {
        var events: [AlarmEvent] = []
        if let active = smoke { events.append(endEvent(group: AlarmEvent.smokeAlarm, active)) }
        if let active = co { events.append(endEvent(group: AlarmEvent.coAlarm, active)) }
        smoke = nil
        co = nil
        matcher.reset()
        if let tracker { _ = tracker.finish() }
        recentTones.removeAll()
        windows.removeAll()
        classifierRun = 0
        announcedOnsets.removeAll()
        return events
    }

    private func expire(at time: Double) -> [AlarmEvent] {
        var events: [AlarmEvent] = []
        if let active = smoke, time - active.lastEvidence >= configuration.holdSeconds {
            events.append(endEvent(group: AlarmEvent.smokeAlarm, active))
            smoke = nil
        }
        if let active = co, time - active.lastEvidence >= configuration.coHoldSeconds {
            events.append(endEvent(group: AlarmEvent.coAlarm, active))
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

    /// The loudest-in-total tone frequency over [start, end], with its mean level.
    private func dominantTone(from start: Double, to end: Double) -> (frequencyHz: Double, levelDBFS: Double) {
        var tones = recentTones.filter { $0.end >= start && $0.start <= end }
        tones += tracker?.openSegments ?? []
        guard let longest = tones.max(by: { $0.duration < $1.duration }) else { return (0, -120) }
        return (longest.frequencyHz, longest.levelDBFS)
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

    private func handle(_ match: PatternMatch) -> [AlarmEvent] {
        switch match.pattern {
        case .t3:
            return patternCycle(match, group: AlarmEvent.smokeAlarm, co: false)
        case .t4:
            return patternCycle(match, group: AlarmEvent.coAlarm, co: true)
        case .chirp:
            guard configuration.reportChirps, smoke == nil, co == nil,
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

    private func patternCycle(_ match: PatternMatch, group: String, co isCO: Bool) -> [AlarmEvent] {
        let (score, label) = classifierEvidence(from: match.cycleStart, to: match.decisionTime, co: isCO)
        let agrees = (score ?? 0) >= configuration.classifierThreshold
        if var active = isCO ? co : smoke {
            // A harmonic of the same sounder completes the same cycle at about the same time: count it once.
            if match.decisionTime - active.lastEvidence >= 1.5 { active.cycles += 1 }
            active.lastEvidence = max(active.lastEvidence, match.decisionTime)
            if active.pattern == nil {
                active.pattern = match.pattern
                active.toneHz = match.frequencyHz
            }
            if let score, active.score.map({ score > $0 }) ?? true {
                active.score = score
                active.scoreClass = label
            }
            if isCO { co = active } else { smoke = active }
            return []
        }
        let active = Active(
            source: agrees ? .patternAndClassifier : .pattern, pattern: match.pattern, start: match.cycleStart,
            lastEvidence: match.decisionTime, cycles: 1, toneHz: match.frequencyHz, levelDBFS: match.levelDBFS,
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

    private func endEvent(group: String, _ active: Active) -> AlarmEvent {
        AlarmEvent(
            kind: .end, group: group, source: active.source, pattern: active.pattern, cycles: active.cycles,
            toneHz: active.toneHz, toneLevelDBFS: active.levelDBFS, classifierScore: active.score,
            classifierClass: active.scoreClass, start: active.start, time: active.lastEvidence)
    }
}
