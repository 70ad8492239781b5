import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotSupport
import EarshotOutputs
import EarshotService
import EarshotTools

/// Feeds `samples` to `detector` in 40 ms chunks (the daemon's poll) from stream position `offset`.
private func feed(_ detector: AlarmDetector, _ samples: ArraySlice<Float>, sampleRate: Int, offset: Int64 = 0) -> [AlarmEvent] {
    var events: [AlarmEvent] = []
    let chunk = sampleRate / 25
    var position = samples.startIndex
    while position < samples.endIndex {
        let end = min(samples.endIndex, position + chunk)
        events += detector.process(
            samples: Array(samples[position..<end]), sampleRate: sampleRate,
            framePosition: offset + Int64(position - samples.startIndex))
        position = end
    }
    return events
}

/// Feeds `samples` to a fresh detector (with `configuration`) in 40 ms chunks and returns every event, finish included.
private func detect(_ samples: [Float], sampleRate: Int, configuration: AlarmDetector.Configuration = .init()) -> [AlarmEvent] {
    let detector = AlarmDetector(configuration: configuration)
    return feed(detector, samples[...], sampleRate: sampleRate) + detector.finish()
}

private func onsets(_ events: [AlarmEvent], _ group: String) -> [AlarmEvent] {
    events.filter { $0.kind == .onset && $0.group == group }
}

private func smokeOrCO(_ events: [AlarmEvent]) -> [AlarmEvent] {
    events.filter { $0.group == AlarmEvent.smokeAlarm || $0.group == AlarmEvent.coAlarm }
}

/// Gaussian white noise from a fixed seed (SplitMix64, Box-Muller), RMS `rms`: the same samples on every run.
private func whiteNoise(count: Int, rms: Float, seed: UInt64) -> [Float] {
    var random = SplitMix64(seed: seed)
    // Open at both ends (half a step off each), so that log never sees 0.
    func next() -> Double { (Double(random.next() >> 11) + 0.5) / 9_007_199_254_740_992 }
    return (0..<count).map { _ in Float((-2 * log(next())).squareRoot() * cos(2 * Double.pi * next())) * rms }
}

/// The eval's synthetic cases, built from the pool's noise beds (as `earshot eval` does), loaded once.
private let poolSyntheticCases: [AlarmEvaluation.Case] = {
    guard TestPaths.sharedAvailable else { return [] }
    var skipped: [String] = []
    guard let recordings = try? AlarmEvaluation.manifestCases(manifest: TestPaths.sharedFile("audio/MANIFEST.tsv"), skipped: &skipped)
    else { return [] }
    let beds = AlarmEvaluation.noiseBeds(from: recordings)
    return AlarmEvaluation.syntheticCases(household: beds.household, speech: beds.speech)
}()

@Suite("Alarm patterns")
struct AlarmPatternTests {
    @Test("the tone tracker measures a 0.5 s 1 kHz sine: start, end, frequency and level")
    func toneSegment() throws {
        let samples = AlarmSignals.render(
            [AlarmSignals.Tone(start: 1.0, duration: 0.5, frequencyHz: 1000)], seconds: 3, sampleRate: 48_000, amplitude: 0.5)
        let tracker = try ToneTracker(sampleRate: 48_000)
        let segments = tracker.process(samples, framePosition: 0) + tracker.finish()
        #expect(segments.count == 1)
        let segment = try #require(segments.first)
        // Frame centres: the first frame mostly inside the tone, the last one mostly inside.
        #expect(abs(segment.start - 1.0) <= 0.02)
        #expect(abs(segment.end - 1.5) <= 0.02)
        #expect(abs(segment.frequencyHz - 1000) <= 2)
        // A sine of amplitude 0.5 has RMS 0.3536: -9.03 dBFS (the ramps and edge frames pull the mean down a little).
        #expect(abs(segment.peakLevelDBFS - (-9.03)) <= 0.3)
        #expect(abs(segment.levelDBFS - (-9.03)) <= 1.0)
    }

    @Test("the tone tracker follows two tones that overlap, each in its own segment")
    func twoTones() throws {
        let samples = AlarmSignals.render(
            [AlarmSignals.Tone(start: 1.0, duration: 1.0, frequencyHz: 1000),
             AlarmSignals.Tone(start: 1.5, duration: 1.0, frequencyHz: 2500)],
            seconds: 4, sampleRate: 16_000, amplitude: 0.3)
        let tracker = try ToneTracker(sampleRate: 16_000)
        let segments = tracker.process(samples, framePosition: 0) + tracker.finish()
        #expect(segments.count == 2)
        let low = try #require(segments.first), high = try #require(segments.last)
        #expect(abs(low.frequencyHz - 1000) <= 2 && abs(high.frequencyHz - 2500) <= 2)
        #expect(abs(low.start - 1.0) <= 0.02 && abs(low.end - 2.0) <= 0.02)
        #expect(abs(high.start - 1.5) <= 0.02 && abs(high.end - 2.5) <= 0.02)
        // Steady sines: the peak's frequency moves by less than 1 Hz.
        #expect(low.frequencySpreadHz < 1 && high.frequencySpreadHz < 1)
    }

    @Test("a tone 0 dB below white noise stands 15-19 dB above its bins' noise floor and is tracked whole")
    func toneInNoise() throws {
        let rate = 16_000
        var samples = AlarmSignals.render(
            [AlarmSignals.Tone(start: 3.0, duration: 0.5, frequencyHz: 3100)], seconds: 5, sampleRate: rate, amplitude: 0.1)
        // Noise power equal to the tone's while it sounds (0 dB SNR): RMS 0.1 / sqrt(2).
        let noise = whiteNoise(count: samples.count, rms: 0.0707, seed: 5)
        for n in samples.indices { samples[n] += noise[n] }
        let tracker = try ToneTracker(sampleRate: rate)
        let segments = (tracker.process(samples, framePosition: 0) + tracker.finish())
            .filter { abs($0.frequencyHz - 3100) <= 31 }
        #expect(segments.count == 1)
        let tone = try #require(segments.first)
        #expect(abs(tone.start - 3.0) <= 0.03)
        #expect(abs(tone.end - 3.5) <= 0.03)
        // In one frame the tone's main lobe (5 bins of 31 Hz) holds 1/51 of the white noise, and the Hann window's
        // 1.5-bin noise bandwidth takes 1.8 dB of that: 15.3 dB above the floor on average; 18.8 dB at its loudest
        // frame with this noise (fixed seed).
        #expect(abs(tone.peakSNRDB - 18.77) <= 0.1, "\(tone.peakSNRDB) dB")
    }

    @Test("a sample rate that cannot hold the band is a usage error naming the rate")
    func badRate() {
        #expect(throws: EarshotError(.usage, "tone tracker: sample rate 6000 Hz cannot hold tones up to 4000 Hz (use 8000...384000 Hz, above twice the highest tone)")) {
            _ = try ToneTracker(sampleRate: 6000)
        }
    }

    @Test("T3 at 3.1 kHz: smoke_alarm from the pattern at the next cycle's first tone", arguments: [16_000, 48_000])
    func t3Piezo(sampleRate: Int) throws {
        let tones = AlarmSignals.t3(frequencyHz: 3100, cycles: 3, start: 2)
        let samples = AlarmSignals.render(tones, seconds: 20, sampleRate: sampleRate, amplitude: 0.3)
        let events = detect(samples, sampleRate: sampleRate)
        #expect(onsets(events, AlarmEvent.coAlarm).isEmpty)
        let onset = try #require(onsets(events, AlarmEvent.smokeAlarm).first)
        #expect(onsets(events, AlarmEvent.smokeAlarm).count == 1)
        #expect(onset.pattern == .t3)
        #expect(onset.source == .pattern)
        #expect(onset.cycles == 1)
        #expect(abs(onset.start - 2.0) <= 0.03)
        // Decided when the second cycle's first tone (at 6.0 s) has sounded 0.08 s (a first cycle's closing tone),
        // within one 40 ms block.
        #expect(onset.time >= 6.08 && onset.time <= 6.14)
        #expect(abs(onset.toneHz - 3100) <= 5)
        // The end: two cycles were followed by a next one (decided at 6.0 and 10.0 s); the event lasts while the
        // alarm sounds, to its last beep (10.0 + 2 + 0.5 = 12.5 s, the tracker's last frame centre a few ms
        // before). The file ends 7.5 s later, inside the 10 s hold: the end of the stream ends it.
        let end = try #require(events.first { $0.kind == .end && $0.group == AlarmEvent.smokeAlarm })
        #expect(end.cycles == 2)
        #expect(end.time >= 12.44 && end.time <= 12.5)
        #expect(end.reason == .streamEnd)
        #expect(events.filter { $0.kind == .end }.count == 1)
    }

    @Test("T3 from a 520 Hz square-wave sounder is still a smoke alarm")
    func t3LowFrequency() throws {
        let tones = AlarmSignals.t3(frequencyHz: 520, cycles: 3, start: 1)
        let samples = AlarmSignals.render(tones, seconds: 14, sampleRate: 44_100, waveform: .square, amplitude: 0.3)
        let onset = try #require(onsets(detect(samples, sampleRate: 44_100), AlarmEvent.smokeAlarm).first)
        #expect(onset.pattern == .t3)
        #expect(abs(onset.start - 1.0) <= 0.03)
        #expect(onset.time >= 5.08 && onset.time <= 5.14)
        #expect(abs(onset.toneHz - 520) <= 3)
    }

    @Test("T4 at 3.1 kHz: co_alarm when the second burst closes")
    func t4() throws {
        let tones = AlarmSignals.t4(frequencyHz: 3100, cycles: 3, start: 1)
        let samples = AlarmSignals.render(tones, seconds: 20, sampleRate: 16_000, amplitude: 0.3)
        let events = detect(samples, sampleRate: 16_000)
        #expect(onsets(events, AlarmEvent.smokeAlarm).isEmpty)
        let onset = try #require(onsets(events, AlarmEvent.coAlarm).first)
        #expect(onset.pattern == .t4)
        #expect(abs(onset.start - 1.0) <= 0.03)
        // Second burst: tones at 6.7, 6.9, 7.1, 7.3 s; closed 0.9 s after the last onset.
        #expect(abs(onset.time - 8.2) <= 0.05)
        #expect(abs(onset.toneHz - 3100) <= 5)
    }

    @Test("T4 whose beeps noise merged or cut: a burst still covers its four slots")
    func t4MergedBeeps() throws {
        // Each burst: beep 1, beeps 2 and 3 joined by a filled gap (0.3 s), beep 4 with its first 40 ms lost.
        let tones = [0.0, 5.7, 11.4].flatMap { cycle in
            [AlarmSignals.Tone(start: 1 + cycle, duration: 0.1, frequencyHz: 3100),
             AlarmSignals.Tone(start: 1.2 + cycle, duration: 0.3, frequencyHz: 3100),
             AlarmSignals.Tone(start: 1.64 + cycle, duration: 0.06, frequencyHz: 3100)]
        }
        let samples = AlarmSignals.render(tones, seconds: 15, sampleRate: 16_000, amplitude: 0.3)
        let events = detect(samples, sampleRate: 16_000)
        #expect(onsets(events, AlarmEvent.smokeAlarm).isEmpty)
        let onset = try #require(onsets(events, AlarmEvent.coAlarm).first)
        #expect(abs(onset.start - 1.0) <= 0.03)
        // Second burst: onsets 6.7, 6.9, 7.34; closed 0.9 s after its last onset.
        #expect(abs(onset.time - 8.24) <= 0.05, "decided at \(onset.time)")
    }

    /// Three T4 bursts 5.9 s apart at 3315 Hz, each made of `burst` (offset from the burst's start in s, length
    /// first to last frame in s, peak dBFS), every tone `snr` dB above its noise floor (the tuning cases: 49-86),
    /// handed to a matcher as finished segments in time order; its T4 matches.
    private func t4Matches(_ burst: [(offset: Double, length: Double, peak: Double)], snr: Double = 60) -> [PatternMatch] {
        t4Matches([5.1, 11.0, 16.9].map { start in (start, burst.map { ($0.offset, $0.length, $0.peak, snr) }) })
    }

    /// The T4 matches of `bursts` (each: its start, s, and its tones: offset and length in s, peak dBFS, dB above
    /// the noise floor) at 3315 Hz, handed to a matcher as finished segments in time order.
    private func t4Matches(_ bursts: [(start: Double, tones: [(offset: Double, length: Double, peak: Double, snr: Double)])],
                           frequencyHz: Double = 3315) -> [PatternMatch] {
        var matcher = AlarmPatternMatcher()
        var matches: [PatternMatch] = []
        for burst in bursts {
            for piece in burst.tones {
                let segment = ToneSegment(
                    start: burst.start + piece.offset, end: burst.start + piece.offset + piece.length,
                    frequencyHz: frequencyHz, levelDBFS: piece.peak - 4, peakLevelDBFS: piece.peak, peakSNRDB: piece.snr)
                matches += matcher.add(segment, now: segment.end + 0.03)
                matches += matcher.advance(to: segment.end + 0.03)
            }
        }
        matches += matcher.advance(to: (bursts.last?.start ?? 0) + 3)
        return matches.filter { $0.pattern == .t4 }
    }

    @Test("a T4 burst whose beeps a room split, or left short weak pieces around, is still T4")
    func t4SplitBeepAndTail() throws {
        // The tuning cases, as the tracker segmented them: seed 43 `t4_4` (brown noise at 0 dB in a room; each
        // burst's first beep in two pieces) and seed 44 `t4_2` (household noise at +10 dB in a room; a 0.03 s piece
        // 0.04 s after the fourth beep, 5.8 dB down). Without the repairs none of these gave a T4 match.
        func split(gap: Double, first: Double = -19.2) -> [(offset: Double, length: Double, peak: Double)] {
            [(0, 0.04, first), (0.04 + gap, 0.05, -16.1), (0.22, 0.10, -15.9), (0.42, 0.11, -16.0), (0.62, 0.11, -16.0)]
        }
        let joined = try #require(t4Matches(split(gap: 0.03)).first)
        #expect(abs(joined.cycleStart - 5.1) < 1e-9)
        #expect(abs(joined.frequencyHz - 3315) < 1e-9)
        #expect(joined.repaired)
        // Tones under 20 dB above their floor are not repaired: noise shapes them.
        #expect(t4Matches(split(gap: 0.03), snr: 19).isEmpty)
        // Pieces as loud as the beeps: joined with three frames missing between them (seed 53 `t4_4`, brown noise
        // at 0 dB in a room: 0.04 s), two tones with four (five tones on no grid).
        #expect(t4Matches(split(gap: 0.04, first: -16.1)).first?.repaired == true)
        #expect(t4Matches(split(gap: 0.05, first: -16.1)).isEmpty)

        func tailed(gap: Double, peak: Double) -> [(offset: Double, length: Double, peak: Double)] {
            [(0, 0.13, -13.47), (0.17, 0.16, -13.23), (0.37, 0.16, -13.28), (0.57, 0.16, -13.28), (0.73 + gap, 0.03, peak)]
        }
        let trimmed = try #require(t4Matches(tailed(gap: 0.04, peak: -19.24)).first)
        #expect(abs(trimmed.cycleStart - 5.1) < 1e-9)
        // A piece under 2 dB below the beeps is no decay of them (nor, under 3 dB, a tail) for these repairs; the
        // merged-burst rule (``t4MergedByRoom``) reads such a burst, four beeps and a piece 0.04 s after the fourth,
        // as a burst of four cut apart (cuts every 0.2 s, 0.80 s in all).
        #expect(t4Matches(tailed(gap: 0.04, peak: -15.3)).first?.repaired == true)

        // Seed 34 `t4_2`: the first beep 0.04 s longer than the others (its onset quieter) and an echo 0.12 s after
        // the fourth, 8.3 dB below the median beep but only 4.8 dB below the first.
        func echoed(peak: Double) -> [(offset: Double, length: Double, peak: Double)] {
            [(0, 0.14, -17.2), (0.19, 0.10, -13.5), (0.39, 0.10, -13.7), (0.59, 0.10, -13.7), (0.81, 0.07, peak)]
        }
        let cleaned = try #require(t4Matches(echoed(peak: -22.0)).first)
        #expect(abs(cleaned.cycleStart - 5.1) < 1e-9)
        // An echo under 6 dB below the median beep is a fifth tone: no grid of four.
        #expect(t4Matches(echoed(peak: -19.0)).isEmpty)

        // A room's weak pieces around the beeps (``AlarmPatternMatcher/withoutWeakPieces``), as the tracker
        // segmented the tuning cases: seed 52 `t4_4` (brown noise at 0 dB in a room), a 0.04 s tail 0.05 s after the
        // fourth beep, 3.7 dB below the fourth-loudest tone; seed 48 `t4_4`, each beep's onset heard apart from its
        // body, three of them as tails of the beep before (0.02-0.03 s, 2.4-4.9 dB down); seed 37 `t4_2` (household
        // noise at +10 dB in a room), a 0.03-0.05 s piece after every beep and an echo 7.5 dB down.
        func seed52(tail: Double, length: Double = 0.04) -> [(offset: Double, length: Double, peak: Double)] {
            [(0, 0.12, -15.7), (0.18, 0.14, -15.2), (0.37, 0.15, -15.2), (0.57, 0.15, -15.2), (0.77, length, tail)]
        }
        func seed48(onset: Double) -> [(offset: Double, length: Double, peak: Double)] {
            [(0, 0.03, onset), (0.07, 0.10, -15.9), (0.21, 0.02, -20.3), (0.27, 0.10, -15.5), (0.41, 0.02, -20.0),
             (0.47, 0.10, -15.4), (0.61, 0.02, -20.1), (0.67, 0.10, -15.4)]
        }
        let seed37: [(offset: Double, length: Double, peak: Double)] = [
            (0, 0.07, -16.2), (0.10, 0.05, -18.5), (0.21, 0.07, -13.1), (0.32, 0.05, -18.8), (0.41, 0.07, -13.3),
            (0.52, 0.03, -18.7), (0.61, 0.07, -13.3), (0.72, 0.03, -18.8), (0.82, 0.09, -20.8)]
        // The cycle starts where the burst's first tone does, a weak onset piece included (seed 48).
        for (name, burst) in [("seed 52", seed52(tail: -19.4)), ("seed 48", seed48(onset: -18.3)), ("seed 37", seed37)] {
            let match = try #require(t4Matches(burst).first, "\(name)")
            #expect(abs(match.cycleStart - 5.1) < 1e-9, "\(name): \(match.cycleStart)")
            #expect(match.repaired, "\(name)")
        }
        // Controls: a tail as long as the beeps is a fifth tone (five beeps; cut apart they last 0.92 s, more than
        // four beeps and a tail); an onset piece 1 dB below the beeps is a tone of its own (eight tones, on no grid).
        // A tail only 1.8 dB down is a fifth tone for these repairs, but the merged-burst rule reads the burst
        // (0.81 s, cut every 0.2 s) as four beeps cut apart.
        #expect(t4Matches(seed52(tail: -19.4, length: 0.15)).isEmpty)
        #expect(t4Matches(seed52(tail: -17.5)).first?.repaired == true)
        #expect(t4Matches(seed48(onset: -16.9)).isEmpty)

        // Chirps of a noise recording at 1279 Hz in the 24-hour stream of `earshot eval --groups`, as the tracker
        // segmented them: cutting back their second and third tones' tails (0.12 s against 0.07 s) made them a T4;
        // only a burst's first beep is cut back.
        let chirps = t4Matches([
            (16247.866, [(0, 0.07, -41.13, 47.1), (0.23, 0.12, -33.41, 54.8), (0.46, 0.05, -37.07, 51.2)]),
            (16252.526, [(0, 0.07, -35.67, 52.8), (0.13, 0.07, -30.41, 58.1), (0.23, 0.12, -27.93, 60.6),
                         (0.46, 0.05, -31.45, 57.0)]),
        ], frequencyHz: 1279)
        #expect(chirps.isEmpty)
    }

    @Test("the tone tracker reports a tone's level dips: a T4 burst a room merged into one tone keeps its beat")
    func levelDips() throws {
        // One 0.83 s tone at 3025 Hz whose level dips every 0.2 s, 6.5 dB at the dip's centre and less, in dB
        // linearly, up to 0.04 s either side of it (the beat that tuning seed 22's merged T4 bursts kept: dips of 5-8
        // dB 0.17 s after the start and every 0.2 s, a frame or two deep), and a steady tone as the control.
        let rate = 16_000
        let dipCentres = [1.17, 1.37, 1.57]
        var samples = [Float](repeating: 0, count: 3 * rate)
        for n in Int(1.0 * Double(rate))..<Int(1.83 * Double(rate)) {
            let t = Double(n) / Double(rate)
            let depthDB = dipCentres.map { 6.5 * max(0, 1 - abs(t - $0) / 0.04) }.max() ?? 0
            let gain = pow(10, -depthDB / 20)
            samples[n] = Float(0.3 * gain * sin(2 * Double.pi * 3025 * t))
        }
        let tracker = try ToneTracker(sampleRate: rate)
        let segments = tracker.process(samples, framePosition: 0) + tracker.finish()
        let tone = try #require(segments.first { abs($0.frequencyHz - 3025) <= 30 })
        #expect(segments.count == 1)
        #expect(tone.levelDips.count == 3, "\(tone.levelDips)")
        for (dip, centre) in zip(tone.levelDips, dipCentres) {
            #expect(abs(dip - centre) <= 0.015, "\(dip) for \(centre)")
        }
        let steady = try ToneTracker(sampleRate: rate)
        let plain = AlarmSignals.render(
            [AlarmSignals.Tone(start: 1.0, duration: 0.83, frequencyHz: 3025)], seconds: 3, sampleRate: rate, amplitude: 0.3)
        let steadySegments = steady.process(plain, framePosition: 0) + steady.finish()
        #expect(steadySegments.count == 1 && steadySegments.allSatisfy { $0.levelDips.isEmpty })
    }

    @Test("a T4 burst a very reverberant room merged into long tones is T4 by its level's beat")
    func t4MergedByRoom() throws {
        /// Bursts at 5.1, 11.0 and 16.9 s of `tones` (offset and length, s; dips, s after the burst's start) at
        /// 3025 Hz, 60 dB above the floor unless said, handed to a matcher as finished segments.
        func matches(_ tones: [(offset: Double, length: Double, dips: [Double])], snr: Double = 60,
                     spreadHz: Double = 4.6) -> [PatternMatch] {
            var matcher = AlarmPatternMatcher()
            var found: [PatternMatch] = []
            for start in [5.1, 11.0, 16.9] {
                for piece in tones {
                    let segment = ToneSegment(
                        start: start + piece.offset, end: start + piece.offset + piece.length, frequencyHz: 3025,
                        levelDBFS: -16.7, peakLevelDBFS: -14.1, peakSNRDB: snr, frequencySpreadHz: spreadHz,
                        levelDips: piece.dips.map { start + $0 })
                    found += matcher.add(segment, now: segment.end + 0.03)
                    found += matcher.advance(to: segment.end + 0.03)
                }
            }
            found += matcher.advance(to: 19.9)
            return found.filter { $0.pattern == .t4 }
        }
        // Seed 22 `t4_2` (household noise at +10 dB in a room), as the tracker segmented it: one 0.82 s tone per
        // burst, its level dipping 0.17, 0.37, 0.57 and 0.77 s after its start.
        let seed22 = try #require(matches([(0, 0.82, [0.17, 0.37, 0.57, 0.77])]).first)
        #expect(abs(seed22.cycleStart - 5.1) < 1e-9)
        #expect(abs(seed22.decisionTime - 11.9) < 1e-9, "\(seed22.decisionTime)")
        #expect(seed22.repaired)
        // Seed 50 `t4_2`: two tones of 0.39 and 0.37 s, 0.42 s apart, dipping 0.12 s into each beep.
        #expect(matches([(0, 0.39, [0.12, 0.32]), (0.42, 0.37, [0.52, 0.72])]).first?.repaired == true)
        // Controls: two dips only; dips every 0.25 s (a fast alarm clock's beep and gap); a tone of 1.3 s (longer
        // than four beeps and a tail); a second tone off the beat's grid; a pitch that moves by 2 % (a singer's
        // vibrato beats about every 0.2 s too); tones under 20 dB above their floor.
        #expect(matches([(0, 0.82, [0.17, 0.37])]).isEmpty)
        #expect(matches([(0, 0.95, [0.2, 0.45, 0.7])]).isEmpty)
        #expect(matches([(0, 1.3, [0.17, 0.37, 0.57, 0.77])]).isEmpty)
        #expect(matches([(0, 0.39, [0.12, 0.32]), (0.5, 0.3, [0.52, 0.72])]).isEmpty)
        #expect(matches([(0, 0.82, [0.17, 0.37, 0.57, 0.77])], spreadHz: 60).isEmpty)
        #expect(matches([(0, 0.82, [0.17, 0.37, 0.57, 0.77])], snr: 19).isEmpty)
        // Beepers a room merged, as the tracker segmented them (validation seed 129 `beep_kitchen_timer_4x_1`, a
        // kitchen timer's four 0.08 s beeps 0.15 s apart; tuning seed 34 `beep_fridge_door_0`, a fridge's 1 s
        // beeps): dips that include a three-step run only when every other one is left out. A first version of this
        // rule, which looked for three dips on one grid among any number, took both for T4.
        #expect(matches([(0, 0.62, [0.14, 0.19, 0.34, 0.49])]).isEmpty)
        #expect(matches([(0, 1.04, [0.09, 0.25, 0.30, 0.44, 0.59, 0.73, 0.87])]).isEmpty)

        // A room whose tail fills most of each 0.2 s step cuts the tone instead of dipping: the middle of a gap of
        // at most 0.055 s between pieces is a dip. Validation seed 129 `t4_4`, as traced: five pieces 0.04-0.05 s
        // apart, cut every 0.2 s.
        let seed129 = try #require(matches([
            (0, 0.05, []), (0.10, 0.16, []), (0.30, 0.16, []), (0.50, 0.16, []), (0.70, 0.11, []),
        ]).first)
        #expect(abs(seed129.decisionTime - 12.6) < 1e-9, "\(seed129.decisionTime)")
        #expect(seed129.repaired)
        // Tuning seed 60 `t4_2`: five pieces 0.02-0.04 s apart and level dips, two per beep (at the cut after its
        // onset and where its tail meets the next onset): every other dip keeps the 0.2 s beat, and so do the ones
        // between (0.15, 0.35, 0.55, 0.75 and 0.235, 0.435, 0.635 s).
        #expect(matches([
            (0, 0.13, []), (0.17, 0.05, []), (0.25, 0.17, [0.35, 0.39]), (0.45, 0.17, [0.55, 0.59]), (0.65, 0.17, [0.75]),
        ]).first?.repaired == true)
        // Controls: every other dip on the 0.2 s beat but the ones between every 0.25 s; a 10 Hz beeper's eight
        // beeps, cut apart 0.02 s each (more pieces than a burst of four beeps is cut into); a patient monitor's six
        // beeps 0.175 s apart, as traced (tuning seed 50 `beep_monitor_medium_1`: five cuts on one beat, more than
        // four beeps have; a first version of this rule took it for T4).
        #expect(matches([(0, 0.82, [0.15, 0.2, 0.35, 0.45, 0.55, 0.7, 0.75])]).isEmpty)
        #expect(matches((0..<8).map { (0.1 * Double($0), 0.08, []) }).isEmpty)
        #expect(matches([
            (0, 0.14, []), (0.19, 0.14, []), (0.36, 0.13, []), (0.54, 0.14, []), (0.71, 0.13, []), (0.89, 0.14, []),
        ]).isEmpty)
    }

    @Test("confusers raise no smoke or CO event",
          arguments: ["truck", "microwave", "oven", "clock", "phone", "monitor medium", "monitor high"])
    func confusers(name: String) {
        let tones: [AlarmSignals.Tone]
        switch name {
        case "truck": tones = AlarmSignals.truckBeeper(seconds: 40, start: 1)
        case "microwave": tones = AlarmSignals.microwave(start: 1)
        case "oven": tones = AlarmSignals.ovenTimer(seconds: 30, start: 1)
        case "clock": tones = AlarmSignals.alarmClock(seconds: 30, start: 1)
        case "monitor medium": tones = AlarmSignals.monitorMedium(seconds: 40, start: 1)
        case "monitor high": tones = AlarmSignals.monitorHigh(seconds: 40, start: 1)
        default: tones = AlarmSignals.phoneRing(seconds: 30, start: 1)
        }
        var samples = AlarmSignals.render(tones, seconds: (tones.last?.start ?? 0) + 3, sampleRate: 16_000, amplitude: 0.3)
        AlarmSignals.reverberate(&samples, sampleRate: 16_000, rt60: 0.4, wet: 0.3)
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)
    }

    /// A kitchen timer's groups of four: 0.08 s beeps every 0.15 s, a group every 1.2 s, at 3 kHz for 40 s.
    private func kitchenTimer4x(start: Double) -> [AlarmSignals.Tone] {
        stride(from: start, to: start + 40, by: 1.2).flatMap { group in
            (0..<4).map { AlarmSignals.Tone(start: group + 0.15 * Double($0), duration: 0.08, frequencyHz: 3000) }
        }
    }

    @Test("a kitchen timer's groups of four in a reverberant kitchen are no CO alarm; a T4 in the same room is")
    func reverberantKitchenTimer() throws {
        // A diffuse tail (rt60 0.6 s, direct sound 4x a tap's gain) smears each group's last beep past the
        // matcher's 0.9 s wait: the burst must not close (as a four-beep T4 burst) while a tone of its frequency
        // that started in that wait still sounds. Without that rule this timer was a co_alarm decided at 6.0 s;
        // the tuning case was the same timer recorded in a kitchen (tune21 beep_kitchen_timer_4x_1).
        var timer = AlarmSignals.render(kitchenTimer4x(start: 1), seconds: 43, sampleRate: 16_000, amplitude: 0.3)
        AlarmSignals.reverberateDiffuse(&timer, sampleRate: 16_000, rt60: 0.6, direct: 4, seed: 1)
        #expect(smokeOrCO(detect(timer, sampleRate: 16_000)).isEmpty)

        var t4 = AlarmSignals.render(AlarmSignals.t4(frequencyHz: 3000, cycles: 3, start: 1), seconds: 20,
                                     sampleRate: 16_000, amplitude: 0.3)
        AlarmSignals.reverberateDiffuse(&t4, sampleRate: 16_000, rt60: 0.6, direct: 4, seed: 1)
        let events = detect(t4, sampleRate: 16_000)
        #expect(onsets(events, AlarmEvent.smokeAlarm).isEmpty)
        let onset = try #require(onsets(events, AlarmEvent.coAlarm).first)
        #expect(onsets(events, AlarmEvent.coAlarm).count == 1)
        #expect(abs(onset.start - 1.0) <= 0.05)
        // The second burst's last beep starts at 7.3 s; its reverberant tail ends before the 0.9 s wait does.
        #expect(onset.time >= 8.15 && onset.time <= 8.3, "decided at \(onset.time)")
    }

    @Test("a steady 1 s beeper whose alias 14 dB down loses one beep is no T3; without the companion rule it was")
    func steadyBeeperAlias() throws {
        // The fundamental (2455 Hz) sounds 0.5 s of every second from 1 s; its alias (3724 Hz, 14 dB down) misses
        // the beep at 4 s, so at 3724 Hz the beeps at 1, 2 and 3 s and the next at 5 s are a T3 cycle.
        let starts = Array(stride(from: 1.0, to: 30, by: 1.0))
        var samples = AlarmSignals.render(starts.map { AlarmSignals.Tone(start: $0, duration: 0.5, frequencyHz: 2455) },
                                          seconds: 31, sampleRate: 16_000, amplitude: 0.3)
        let alias = AlarmSignals.render(starts.filter { $0 != 4 }.map { AlarmSignals.Tone(start: $0, duration: 0.5, frequencyHz: 3724) },
                                        seconds: 31, sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -14.0 / 20)))
        for n in samples.indices { samples[n] += alias[n] }
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)

        var configuration = AlarmDetector.Configuration()
        configuration.companionDB = .infinity
        let events = detect(samples, sampleRate: 16_000, configuration: configuration)
        let onset = try #require(onsets(events, AlarmEvent.smokeAlarm).first)
        #expect(abs(onset.toneHz - 3724) <= 10)
        #expect(abs(onset.start - 1.0) <= 0.05)
    }

    @Test("a reversing beeper whose room-split fundamental sounds on while its harmonic loses one beep is no T3; without the companion rule it was")
    func splitFundamentalCompanion() throws {
        // The validation case (seed 105, `beep_truck_reverse_1`: a 1082 Hz reversing beeper in a room, household
        // noise at +10 dB): a room split each 0.5 s beep of the fundamental into pieces 0.03-0.06 s apart, none
        // sounding through half of a beep of the second harmonic (13 dB down, its onsets 0.1 s late), which lost
        // the beep at 4 s and so was a T3 cycle at 2164 Hz. The fundamental's pieces together cover the harmonic's
        // beeps and it sounds in the pause: part of a steady beeper. (The build before this rule raised a T3
        // `smoke_alarm` on this signal, written to a WAV file and run through `earshot detect`.)
        let starts = Array(stride(from: 1.0, to: 30, by: 1.0))
        let pieces = starts.flatMap { start in
            [(0.0, 0.17), (0.24, 0.32), (0.39, 0.5)].map {
                AlarmSignals.Tone(start: start + $0.0, duration: $0.1 - $0.0, frequencyHz: 1082)
            }
        }
        var samples = AlarmSignals.render(pieces, seconds: 31, sampleRate: 16_000, amplitude: 0.3)
        let harmonic = AlarmSignals.render(
            starts.filter { $0 != 4 }.map { AlarmSignals.Tone(start: $0 + 0.1, duration: 0.33, frequencyHz: 2164) },
            seconds: 31, sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -13.0 / 20)))
        for n in samples.indices { samples[n] += harmonic[n] }
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)

        var configuration = AlarmDetector.Configuration()
        configuration.companionDB = .infinity
        let onset = try #require(onsets(detect(samples, sampleRate: 16_000, configuration: configuration), AlarmEvent.smokeAlarm).first)
        #expect(onset.pattern == .t3)
        #expect(abs(onset.start - 1.1) <= 0.05, "start \(onset.start)")
    }

    @Test("a kitchen timer whose alias 23 dB down is heard in only two groups 6 s apart is no CO alarm; without the companion rule it was")
    func kitchenTimerAlias() throws {
        // The tuning cases (seeds 42 and 52, `beep_kitchen_timer_4x_2`, a square wave in speech at 0 dB): the timer's
        // groups of four at 2943 Hz sound every 1.2 s; speech masks its alias (3861 Hz, 23 dB down) in all groups but
        // two 6 s apart, which at 3861 Hz are two T4 bursts with a long pause between them.
        let timer = kitchenTimer4x(start: 1).map { AlarmSignals.Tone(start: $0.start, duration: $0.duration, frequencyHz: 2943) }
        var samples = AlarmSignals.render(timer, seconds: 43, sampleRate: 16_000, amplitude: 0.3)
        let heard = timer.filter { abs($0.start - 1) < 0.5 || abs($0.start - 7) < 0.5 }
        #expect(heard.count == 8)
        let alias = AlarmSignals.render(
            heard.map { AlarmSignals.Tone(start: $0.start, duration: $0.duration, frequencyHz: 3861) },
            seconds: 43, sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -23.0 / 20)))
        for n in samples.indices { samples[n] += alias[n] }
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)

        var configuration = AlarmDetector.Configuration()
        configuration.companionDB = .infinity
        let events = detect(samples, sampleRate: 16_000, configuration: configuration)
        let onset = try #require(onsets(events, AlarmEvent.coAlarm).first)
        #expect(onset.pattern == .t4)
        #expect(abs(onset.toneHz - 3861) <= 10)
        #expect(abs(onset.start - 1.0) <= 0.05)
    }

    @Test("an appliance's three beeps and a faint blip where T3's next beep would be are no T3; a faint whole beep is")
    func faintNextTone() throws {
        // Three 0.5 s beeps a second apart at 3 kHz, then at 5 s (the long pause's end) a 0.08 s blip 15.5 dB down:
        // the tuning case was an oven's end (tune22 beep_oven_end_1), the blip from its noise bed.
        let beeps = [1.0, 2.0, 3.0].map { AlarmSignals.Tone(start: $0, duration: 0.5, frequencyHz: 3000) }
        var oven = AlarmSignals.render(beeps, seconds: 12, sampleRate: 16_000, amplitude: 0.3)
        addFaint([AlarmSignals.Tone(start: 5.0, duration: 0.08, frequencyHz: 3000)], to: &oven)
        #expect(smokeOrCO(detect(oven, sampleRate: 16_000)).isEmpty)

        // A T3 whose second cycle starts with a beep as faint but whole (0.5 s) is decided when that beep ends.
        let t3 = AlarmSignals.t3(frequencyHz: 3000, cycles: 3, start: 1)
        var alarm = AlarmSignals.render(t3.filter { $0.start != 5.0 }, seconds: 14, sampleRate: 16_000, amplitude: 0.3)
        addFaint(t3.filter { $0.start == 5.0 }, to: &alarm)
        let events = detect(alarm, sampleRate: 16_000)
        let onset = try #require(onsets(events, AlarmEvent.smokeAlarm).first)
        #expect(onsets(events, AlarmEvent.smokeAlarm).count == 1)
        #expect(abs(onset.start - 1.0) <= 0.05)
        #expect(onset.time >= 5.45 && onset.time <= 5.65, "decided at \(onset.time)")
    }

    @Test("a steady beeper (1 s on, 1 s off) with one beep split by a 0.05 s dip is no T3: the pieces are one beep")
    func splitBeep() {
        // The tuning case: `beep_fridge_door` in household noise (seeds 28, 31, 37), a beep split 0.66 s in; its
        // pieces and the next beep fell on a T3 grid with a moved onset. T3's beeps are 0.5 s apart.
        let tones = (0..<14).flatMap { k -> [AlarmSignals.Tone] in
            let start = 1 + 2 * Double(k)
            return k == 3 ? [AlarmSignals.Tone(start: start, duration: 0.66, frequencyHz: 3065),
                             AlarmSignals.Tone(start: start + 0.71, duration: 0.29, frequencyHz: 3065)]
                          : [AlarmSignals.Tone(start: start, duration: 1.0, frequencyHz: 3065)]
        }
        let samples = AlarmSignals.render(tones, seconds: 30, sampleRate: 16_000, amplitude: 0.3)
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)
    }

    @Test("an appliance's three beeps and a 0.03 s blip at their level where T3's next beep would be are no T3")
    func shortClosingBlip() throws {
        // The tuning cases (`beep_oven_end`, seeds 28, 31, 38): a blip of speech or noise at the beeps' frequency,
        // 0.02-0.03 s long, 2 s after the third beep. A first cycle's closing tone must sound 0.08 s.
        let beeps = [1.0, 2.0, 3.0].map { AlarmSignals.Tone(start: $0, duration: 0.5, frequencyHz: 3000) }
        let oven = AlarmSignals.render(beeps + [AlarmSignals.Tone(start: 5.0, duration: 0.03, frequencyHz: 3000)],
                                       seconds: 12, sampleRate: 16_000, amplitude: 0.3)
        #expect(smokeOrCO(detect(oven, sampleRate: 16_000)).isEmpty)
        // A T3 is decided once its second cycle's first beep has sounded 0.08 s: 5.08-5.2 s.
        let alarm = AlarmSignals.render(AlarmSignals.t3(frequencyHz: 3000, cycles: 3, start: 1), seconds: 14,
                                        sampleRate: 16_000, amplitude: 0.3)
        let onset = try #require(onsets(detect(alarm, sampleRate: 16_000), AlarmEvent.smokeAlarm).first)
        #expect(onset.time >= 5.08 && onset.time <= 5.2, "decided at \(onset.time)")
    }

    @Test("a steady beeper whose alias starts 0.08 s late and loses one beep is no T3: the alias sounds with each beep")
    func lateAlias() {
        // The tuning cases (seeds 32, 37, 41): a reversing truck or an alarm clock as a square wave in speech, the
        // alias 10-16 dB down, its onsets 0.08-0.19 s after the fundamental's.
        let starts = (1...20).map(Double.init)
        var samples = AlarmSignals.render(starts.map { AlarmSignals.Tone(start: $0, duration: 0.5, frequencyHz: 1100) },
                                          seconds: 22, sampleRate: 16_000, amplitude: 0.3)
        let alias = AlarmSignals.render(
            starts.filter { $0 != 4 }.map { AlarmSignals.Tone(start: $0 + 0.08, duration: 0.42, frequencyHz: 3394) },
            seconds: 22, sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -10.0 / 20)))
        for n in samples.indices { samples[n] += alias[n] }
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)
    }

    @Test("a steady 1 s beeper whose lost beep left its last 0.07 s is no T3")
    func lostBeepPiece() {
        // 0.4 s beeps every second from 1 s at 2330 Hz; speech masked all but the last 0.07 s of the one at 4 s (the
        // tuning case: an alarm clock's square wave in speech at 0 dB, tune27 beep_alarm_clock_pulse_2).
        let tones = stride(from: 1.0, to: 20, by: 1.0).map { start in
            start == 4 ? AlarmSignals.Tone(start: 4.33, duration: 0.07, frequencyHz: 2330)
                       : AlarmSignals.Tone(start: start, duration: 0.4, frequencyHz: 2330)
        }
        let samples = AlarmSignals.render(tones, seconds: 21, sampleRate: 16_000, amplitude: 0.3)
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)
    }

    /// `tones` rendered 15.5 dB below the tests' amplitude of 0.3 (a beep or blip that a first T3 cycle's closing
    /// tone check calls weak), added into `samples` (16 kHz, from 0 s).
    private func addFaint(_ tones: [AlarmSignals.Tone], to samples: inout [Float]) {
        let faint = AlarmSignals.render(
            tones, seconds: Double(samples.count) / 16_000, sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -15.5 / 20)))
        for n in 0..<min(samples.count, faint.count) { samples[n] += faint[n] }
    }

    /// T3 beeps (3 kHz, 3 cycles from 1 s, 14 s in all) as a GSM call at +10 dB speech left them: each beep in four
    /// pieces, 0.03, 0.12 and 0.07 s apart (measured on tune21 t3_phone_gsm_1); the beep starting at `faintBeepAt`
    /// (if any) chopped the same way but 15.5 dB down (``addFaint(_:to:)``).
    private func choppedT3(faintBeepAt: Double? = nil) -> [Float] {
        let pieces = [(0.0, 0.14), (0.17, 0.24), (0.36, 0.40), (0.47, 0.57)].map { (start: $0.0, end: $0.1) }
        func chopped(_ beeps: [AlarmSignals.Tone]) -> [AlarmSignals.Tone] {
            beeps.flatMap { beep in
                pieces.map { AlarmSignals.Tone(start: beep.start + $0.start, duration: $0.end - $0.start, frequencyHz: 3000) }
            }
        }
        let t3 = AlarmSignals.t3(frequencyHz: 3000, cycles: 3, start: 1)
        var samples = AlarmSignals.render(
            chopped(t3.filter { $0.start != faintBeepAt }), seconds: 14, sampleRate: 16_000, amplitude: 0.3)
        addFaint(chopped(t3.filter { $0.start == faintBeepAt }), to: &samples)
        return samples
    }

    @Test("a T3 whose beeps a codec chopped 0.12 s apart is one smoke_alarm; without the 0.2 s rejoining it is missed")
    func widelyChoppedT3() throws {
        let samples = choppedT3()
        let events = detect(samples, sampleRate: 16_000)
        let onset = try #require(onsets(events, AlarmEvent.smokeAlarm).first)
        #expect(onsets(events, AlarmEvent.smokeAlarm).count == 1)
        #expect(abs(onset.start - 1.0) <= 0.05)
        // The second cycle's first beep (5.0 s) is whole once its last piece (5.47-5.57 s) is rejoined: decided
        // about 0.25 s after that.
        #expect(onset.time >= 5.6 && onset.time <= 6.0, "decided at \(onset.time)")

        var configuration = AlarmDetector.Configuration()
        configuration.t3RejoinGapSeconds = 0
        let detector = AlarmDetector(configuration: configuration)
        #expect(smokeOrCO(feed(detector, samples[...], sampleRate: 16_000) + detector.finish()).isEmpty)
    }

    @Test("a chopped T3 whose second cycle starts with a faint whole beep is decided when that beep is rejoined")
    func choppedT3FaintNextBeep() throws {
        // The chopped T3 above, its beep at 5 s (the first cycle's closing tone) 15.5 dB down but whole: the
        // rejoining matchers see only finished segments, so that tone must be judged on its final level and length
        // (it lasts a quarter period: a beep) when it is handed over, not parked for a re-check as an open tone
        // would be. Before, the rejoining matcher refused it and the alarm (seen by no other matcher) was missed.
        let events = detect(choppedT3(faintBeepAt: 5.0), sampleRate: 16_000)
        let onset = try #require(onsets(events, AlarmEvent.smokeAlarm).first)
        #expect(onsets(events, AlarmEvent.smokeAlarm).count == 1)
        #expect(abs(onset.start - 1.0) <= 0.05)
        #expect(onset.time >= 5.6 && onset.time <= 6.0, "decided at \(onset.time)")
    }

    @Test("three chopped beeps and a 0.03 s click where T3's next beep would be are no T3")
    func clickAfterChoppedBeeps() {
        // An appliance's three beeps (chopped as above), then a 0.03 s click 11 dB down 2 s after the third (the
        // tuning case: tune21 beep_oven_end_1 in household noise in a room).
        var samples = choppedT3()
        let cut = Int(5.0 * 16_000)
        for n in cut..<samples.count { samples[n] = 0 }
        let click = AlarmSignals.render([AlarmSignals.Tone(start: 5.0, duration: 0.03, frequencyHz: 3000)], seconds: 14,
                                        sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -11.0 / 20)))
        for n in samples.indices { samples[n] += click[n] }
        #expect(smokeOrCO(detect(samples, sampleRate: 16_000)).isEmpty)
    }

    @Test("a T4 from the sounder of an open T3 smoke event is a co_alarm at its second cycle, not its first")
    func t4AfterT3SameSounder() throws {
        // A combination unit: T3 at 3 kHz from 1 s (three cycles), then T4 from 12 s while the smoke event is still
        // open. Its first T4 cycle (decided at 19.2 s) could be a long T3's beeps falling into T4's grid; the
        // second (5.7 s later) cannot.
        let tones = AlarmSignals.t3(frequencyHz: 3000, cycles: 3, start: 1) + AlarmSignals.t4(frequencyHz: 3000, cycles: 3, start: 12)
        let events = detect(AlarmSignals.render(tones, seconds: 34, sampleRate: 16_000, amplitude: 0.3), sampleRate: 16_000)
        #expect(onsets(events, AlarmEvent.smokeAlarm).count == 1)
        let co = onsets(events, AlarmEvent.coAlarm)
        #expect(co.count == 1)
        let onset = try #require(co.first)
        #expect(onset.time >= 24.7 && onset.time <= 25.1, "decided at \(onset.time)")
    }

    @Test("low-battery chirps: no smoke or CO event, one alarm_chirp at the third chirp of a steady series")
    func chirps() throws {
        let tones = AlarmSignals.chirps(count: 4, interval: 40, start: 2)
        let samples = AlarmSignals.render(tones, seconds: 130, sampleRate: 16_000, amplitude: 0.3)
        let events = detect(samples, sampleRate: 16_000)
        #expect(smokeOrCO(events).isEmpty)
        let chirps = onsets(events, AlarmEvent.alarmChirp)
        // The fourth chirp is within the 15-minute repeat interval of the first event.
        #expect(chirps.count == 1)
        let chirp = try #require(chirps.first)
        #expect(abs(chirp.start - 82) <= 0.03)
        #expect(abs(chirp.time - 84.5) <= 0.03)
        #expect(chirp.cycles == 3)
        #expect(abs(chirp.intervalSeconds - 40) <= 0.03)
    }

    @Test("chirps that do not keep time raise no alarm_chirp: intervals 40 s then 20 s, 60 s then 30 s, 40 s then 42 s; 40 then 41 s does")
    func chirpsIrregular() throws {
        func chirpEvents(at starts: [Double]) -> [AlarmEvent] {
            let one = AlarmSignals.chirps(count: 1, interval: 40, start: 0)[0]
            let tones = starts.map { start in
                var tone = one
                tone.start = start
                return tone
            }
            let samples = AlarmSignals.render(tones, seconds: starts.last! + 5, sampleRate: 16_000, amplitude: 0.3)
            return onsets(detect(samples, sampleRate: 16_000), AlarmEvent.alarmChirp)
        }
        #expect(chirpEvents(at: [2, 42, 62]).isEmpty)
        #expect(chirpEvents(at: [2, 62, 92]).isEmpty)
        #expect(chirpEvents(at: [2, 42, 84]).isEmpty)
        // 41 s is within max(1 s, 3 % of 40 s) of 40 s: the series goes on.
        let steady = chirpEvents(at: [2, 42, 83])
        #expect(steady.count == 1)
        #expect(steady.first.map { abs($0.time - 85.5) <= 0.03 } == true)
        #expect(steady.first?.cycles == 3)
    }

    @Test("a shatter repeated every 20 s whose tail rings on at 2264 Hz 38 dB below it raises no alarm_chirp; the same ring alone does")
    func impulseRingIsNoChirp() throws {
        // trial14 D5: breaking glass repeated every 9 s left, 0.45 s after every other shatter, a 0.05 s ring at
        // 2264 Hz 40 dB below it, isolated and steady, which made three "chirps" 18 s apart. Here: a 0.1 s burst of
        // white noise (RMS 0.3, decaying) at 2, 22, 42 and 62 s, each followed 0.45 s later by a 0.05 s 2264 Hz
        // tone of amplitude 0.003 (-53.5 dBFS), in digital silence.
        let rate = 16_000
        let rings = (0..<4).map { AlarmSignals.Tone(start: 2.45 + 20 * Double($0), duration: 0.05, frequencyHz: 2264) }
        let ringsAlone = AlarmSignals.render(rings, seconds: 70, sampleRate: rate, amplitude: 0.003)
        var withShatters = ringsAlone
        let burst = whiteNoise(count: rate / 10, rms: 0.3, seed: 14)
        for repetition in 0..<4 {
            let first = (2 + 20 * repetition) * rate
            for n in burst.indices { withShatters[first + n] += burst[n] * Float(exp(-Double(n) / (0.03 * Double(rate)))) }
        }
        // Alone, the rings are a chirp series: an alarm_chirp at the third (42.45 s, decided 2.5 s later).
        let alone = onsets(detect(ringsAlone, sampleRate: rate), AlarmEvent.alarmChirp)
        #expect(alone.count == 1)
        #expect(alone.first.map { abs($0.time - 44.95) <= 0.03 } == true)
        // After a shatter each ring stands 37.9 dB below the loudest sound of the second before it (more than
        // AlarmPatternMatcher.chirpMaximumPrecedingDB, 20 dB): no chirp.
        let tracker = try ToneTracker(sampleRate: rate)
        let ring = try #require((tracker.process(withShatters, framePosition: 0) + tracker.finish()).first {
            abs($0.frequencyHz - 2264) <= 20 && abs($0.start - 2.45) <= 0.05
        })
        #expect(abs(ring.precedingPeakDBFS - ring.peakLevelDBFS - 37.9) <= 0.5, "\(ring.precedingPeakDBFS - ring.peakLevelDBFS) dB")
        #expect(onsets(detect(withShatters, sampleRate: rate), AlarmEvent.alarmChirp).isEmpty)
        #expect(smokeOrCO(detect(withShatters, sampleRate: rate)).isEmpty)
    }

    /// Four 3100 Hz chirps of 0.1 s (amplitude 0.3) 40 s apart from 2 s, each followed by `after` (start offset s,
    /// duration s, amplitude): the pieces a reverberant room leaves, or a second beep; in digital silence.
    private static func chirpsWith(after: [(offset: Double, duration: Double, amplitude: Float)]) -> [Float] {
        let rate = 16_000, starts = [2.0, 42, 82, 122]
        var samples = AlarmSignals.render(starts.map { AlarmSignals.Tone(start: $0, duration: 0.1, frequencyHz: 3100) },
                                          seconds: 130, sampleRate: rate, amplitude: 0.3)
        for piece in after {
            let tones = starts.map { AlarmSignals.Tone(start: $0 + piece.offset, duration: piece.duration, frequencyHz: 3100) }
            let rendered = AlarmSignals.render(tones, seconds: 130, sampleRate: rate, amplitude: piece.amplitude)
            for n in samples.indices { samples[n] += rendered[n] }
        }
        return samples
    }

    @Test("a chirp's echo in a room is part of it: an echo piece 6 dB down 0.25 s after it, or a louder piece 0.03 s after its first, still give alarm_chirp at the third; a second beep as loud does not")
    func chirpEchoPieces() throws {
        func chirpOnsets(_ samples: [Float]) -> [AlarmEvent] { onsets(detect(samples, sampleRate: 16_000), AlarmEvent.alarmChirp) }
        // Alone: one alarm_chirp at the third chirp (82 s, decided 2.5 s after it).
        let alone = chirpOnsets(Self.chirpsWith(after: []))
        #expect(alone.count == 1 && alone.first.map { abs($0.time - 84.5) <= 0.03 } == true)
        // As in the tuning sets' rooms (0.6 s RT60): an echo piece 0.15 s after the chirp's end, 6 dB down.
        // Before AlarmPatternMatcher.chirpEchoSeconds it was a neighbour (within 10 dB) and no chirp was isolated.
        let echo = chirpOnsets(Self.chirpsWith(after: [(0.25, 0.07, 0.15)]))
        #expect(echo.count == 1)
        #expect(echo.first.map { abs($0.time - 84.5) <= 0.03 && abs($0.start - 82) <= 0.03 } == true)
        #expect(echo.first?.cycles == 3)
        // The echo's dip split the chirp: a louder piece 0.03 s after a first one (chirpPieceGapSeconds, 0.08 s).
        let split = chirpOnsets(Self.chirpsWith(after: [(0.13, 0.1, 0.45)]))
        #expect(split.count == 1)
        #expect(split.first.map { abs($0.start - 82) <= 0.03 } == true, "\(split.map(\.start))")
        // A double beep (a second beep as loud, 0.1 s after the first's end) is two beeps, not a chirp.
        #expect(chirpOnsets(Self.chirpsWith(after: [(0.2, 0.1, 0.3)])).isEmpty)
    }

    @Test("a 3000 Hz tone sounding with a louder 1500 Hz one is its harmonic, not a chirp: no alarm_chirp; alone it is a chirp series")
    func chirpHarmonicOfLouderTone() throws {
        // The door close of ../shared repeated every 45 s: a 2891 Hz click over a louder 1439 Hz one gave three
        // "chirps". Here: 0.08 s at 3000 Hz (amplitude 0.05) 40 s apart, alone and with 1500 Hz (amplitude 0.2) from
        // 0.01 s before to 0.01 s after each.
        let rate = 16_000, starts = [2.0, 42, 82, 122]
        let high = AlarmSignals.render(starts.map { AlarmSignals.Tone(start: $0, duration: 0.08, frequencyHz: 3000) },
                                       seconds: 130, sampleRate: rate, amplitude: 0.05)
        let alone = onsets(detect(high, sampleRate: rate), AlarmEvent.alarmChirp)
        #expect(alone.count == 1 && alone.first.map { abs($0.time - 84.5) <= 0.03 } == true)
        let low = AlarmSignals.render(starts.map { AlarmSignals.Tone(start: $0 - 0.01, duration: 0.1, frequencyHz: 1500) },
                                      seconds: 130, sampleRate: rate, amplitude: 0.2)
        let both = zip(high, low).map { $0 + $1 }
        #expect(onsets(detect(both, sampleRate: rate), AlarmEvent.alarmChirp).isEmpty)
        #expect(smokeOrCO(detect(both, sampleRate: rate)).isEmpty)
    }

    @Test("a thump at 80 Hz 0.5 s before each chirp does not count in the loudest sound before it (300 Hz up): alarm_chirp at the third")
    func chirpAfterLowThump() throws {
        // audit 15 F2: the preceding peak was measured from the first bin (31 Hz), so an 80 Hz thump or mains hum
        // 20 dB above the chirp removed the series.
        let rate = 16_000
        var samples = AlarmSignals.render(AlarmSignals.chirps(count: 3, interval: 30, frequencyHz: 3150, duration: 0.1, start: 5),
                                          seconds: 75, sampleRate: rate, amplitude: 0.01)
        let thumps = AlarmSignals.render((0..<3).map { AlarmSignals.Tone(start: 4.5 + 30 * Double($0), duration: 0.1, frequencyHz: 80) },
                                         seconds: 75, sampleRate: rate, amplitude: 0.15)
        for n in samples.indices { samples[n] += thumps[n] }
        let tracker = try ToneTracker(sampleRate: rate)
        let chirp = try #require((tracker.process(samples, framePosition: 0) + tracker.finish()).first {
            abs($0.frequencyHz - 3150) <= 20 && abs($0.start - 5) <= 0.05
        })
        // From 300 Hz up, only the clicks of the thump's 5 ms ramps sounded in the second before: 19.0 dB below the
        // chirp (the whole band, from 31 Hz, put the thump 23.5 dB above it).
        #expect(abs(chirp.precedingPeakDBFS - chirp.peakLevelDBFS + 19.0) <= 0.5, "\(chirp.precedingPeakDBFS - chirp.peakLevelDBFS) dB")
        let events = onsets(detect(samples, sampleRate: rate), AlarmEvent.alarmChirp)
        #expect(events.count == 1)
        #expect(events.first.map { abs($0.time - 67.5) <= 0.03 } == true)
    }

    @Test("cases that were decided late at 0 dB SNR (issue 5) are decided within the deadline: first cycle + 4 s",
          .needsShared,
          arguments: [
              // name, pattern, decision time (s; the alarm starts at 5 s), tone Hz of the event
              ("T3 3100 Hz, phone, household 0 dB", "T3", 9.10, 3098.0),
              // (matched on its 3rd harmonic; tone_hz reports the sounder's fundamental since issue 13)
              ("T3 520 Hz square, room, household 0 dB", "T3", 9.10, 520.0),
              ("T4 520 Hz square, dry, speech 0 dB", "T4", 12.01, 521.0),
              ("T4 520 Hz square, room, household 0 dB", "T4", 12.21, 522.0),
          ])
    func lateCasesInTime(name: String, pattern: String, decision: Double, toneHz: Double) throws {
        let testCase = try #require(poolSyntheticCases.first { $0.name == name })
        let outcome = try AlarmEvaluation.run(testCase, classifier: false)
        let event = try #require(outcome.detection)
        #expect(event.pattern?.rawValue == pattern)
        #expect(abs(event.time - decision) <= 0.03, "decided at \(event.time)")
        #expect(abs(event.toneHz - toneHz) <= 5, "\(event.toneHz) Hz")
        #expect(outcome.metTarget)
        #expect(outcome.falseEvents.isEmpty)
    }

    @Test("low-battery chirps in household noise at +10 dB: one alarm_chirp at the third chirp", .needsShared)
    func chirpsInNoise() throws {
        let testCase = try #require(poolSyntheticCases.first { $0.name == "low-battery chirps, household 10 dB" })
        let outcome = try AlarmEvaluation.run(testCase, classifier: false)
        let chirps = outcome.onsets.filter { $0.group == AlarmEvent.alarmChirp }
        #expect(chirps.count == 1)
        let chirp = try #require(chirps.first)
        #expect(abs(chirp.start - 83) <= 0.03 && abs(chirp.time - 85.5) <= 0.03)
        #expect(abs(chirp.intervalSeconds - 40) <= 0.03)
        #expect(abs(chirp.toneHz - 3200) <= 5)
        #expect(outcome.falseEvents.isEmpty)
    }

    @Test("a gap in the stream ends the event and patterns do not join across it")
    func gap() throws {
        let tones = AlarmSignals.t3(frequencyHz: 3100, cycles: 3, start: 1)
        let samples = AlarmSignals.render(tones, seconds: 13, sampleRate: 16_000, amplitude: 0.3)
        let detector = AlarmDetector()
        // First 4.5 s (one cycle and a half of the pause), then the rest 10 s later in stream position.
        let split = 72_000
        var events = feed(detector, samples[..<split], sampleRate: 16_000)
        events += feed(detector, samples[split...], sampleRate: 16_000, offset: Int64(split + 160_000))
        events += detector.finish()
        // After the gap the stream holds tones at 4+1...: cycle 2 (5, 6, 7 s) then cycle 3 at 9 s: one onset there.
        let found = onsets(events, AlarmEvent.smokeAlarm)
        #expect(found.count == 1)
        let onset = try #require(found.first)
        #expect(abs(onset.start - 15.0) <= 0.03)
        // Its first tone starts at 18.996 s (frame centre): decided once it has sounded 0.08 s.
        #expect(onset.time >= 19.07 && onset.time <= 19.14, "decided at \(onset.time)")
    }

    @Test("event JSON carries the evidence")
    func json() {
        let event = AlarmEvent(
            kind: .onset, group: "smoke_alarm", source: .patternAndClassifier, pattern: .t3, cycles: 1, toneHz: 3149.6,
            toneLevelDBFS: -21.34, classifierScore: 0.81234, classifierClass: "Smoke detector, smoke alarm",
            start: 12.0104, time: 16.02)
        let line = JSONValue.object(event.object(wallClock: Date(timeIntervalSince1970: 1_700_000_000.5))).encoded
        // confidence 1 - (1 - 0.8) (1 - 0.81234) = 0.962468
        #expect(line == #"{"type":"detection","group":"smoke_alarm","source":"pattern+classifier","pattern":"T3","cycles":1,"tone_hz":3150,"tone_dbfs":-21.3,"confidence":0.9625,"classifier_score":0.8123,"class":"Smoke detector, smoke alarm","stream_time":12.01,"decision_time":16.02,"time":"2023-11-14T22:13:20.500Z"}"#)
        #expect(event.message == "smoke_alarm detected: T3 pattern at 3150 Hz (1 cycle, classifier 0.81) at stream time 12.01 s")
    }

    @Test("a real T3 smoke alarm recording is detected on its second cycle", .needsShared)
    func realRecording() throws {
        let url = TestPaths.sharedFile("audio/alarm-ml-audio-classifier-example-for-pico/ALRMElec_Smoke_detector_alarm_(ID_0800)_BSB.wav")
        let decoder = try AudioFileDecoder(url: url)
        let samples = try decoder.readAllMono()
        let onset = try #require(onsets(detect(samples, sampleRate: decoder.sampleRate), AlarmEvent.smokeAlarm).first)
        #expect(onset.pattern == .t3)
        // Tones start at 0.20, 1.20, 2.20 s; the second cycle's first tone at 4.24 s.
        #expect(abs(onset.start - 0.2) <= 0.03)
        // Decided once that tone has sounded 0.08 s and the 40 ms chunk holding it is in.
        #expect(onset.time >= 4.33 && onset.time <= 4.41)
        #expect(abs(onset.toneHz - 3057) <= 15)
    }

    @Test("the freedesktop alarm clock raises no smoke or CO event, with the classifier fused in", .needsShared)
    func alarmClockRecording() throws {
        let url = TestPaths.sharedFile("audio/debian-sound-theme-freedesktop/sounds/freedesktop/stereo/alarm-clock-elapsed.oga")
        let decoder = try AudioFileDecoder(url: url)
        let samples = try decoder.readAllMono()
        let outcome = try AlarmEvaluation.run(
            AlarmEvaluation.Case(name: "clock", fileClass: "alarm_clock_beep", expectedGroup: nil, samples: samples,
                                 sampleRate: decoder.sampleRate),
            classifier: true)
        #expect(outcome.falseEvents.isEmpty)
    }

    @Test("earshotd publishes a T3 alarm heard through a real ALSA PCM as a pattern smoke_alarm with its evidence")
    func daemonPublishesPatternEvent() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let daemon = Process()
        daemon.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--device", "earshot_e2e", "--socket", sandbox.socket, "--watch", "smoke_alarm,co_alarm", "--no-journal"]
        daemon.environment = DaemonEndToEndTests.environment(home: sandbox.home)
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        defer { if daemon.isRunning { daemon.terminate() } }
        var subscriber: EventSubscriber?
        for _ in 0..<100 where subscriber == nil {
            subscriber = try? EventSubscriber(path: sandbox.socket)
            if subscriber == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        let client = try #require(subscriber, "earshotd did not create its socket")
        try client.subscribe(groups: ["smoke_alarm", "co_alarm"])

        // 6 s at 16 kHz (the file PCM's negotiated rate), S16_LE: a 3.1 kHz T3 from 0.5 s.
        let samples = AlarmSignals.render(AlarmSignals.t3(frequencyHz: 3100, cycles: 2, start: 0.5), seconds: 6,
                                          sampleRate: 16_000, amplitude: 0.3)
        var raw = Data(capacity: samples.count * 2)
        for value in samples {
            let sample = Int16(max(-32768, min(32767, (value * 32768).rounded())))
            withUnsafeBytes(of: sample.littleEndian) { raw.append(contentsOf: $0) }
        }
        let staging = sandbox.directory.appendingPathComponent("staging.raw")
        try raw.write(to: staging)
        #expect(rename(staging.path, sandbox.infile) == 0)

        var onset: [String: Any]?
        while onset == nil {
            guard case .line(let line) = try client.readLine(timeoutSeconds: 20) else { break }
            let object = DaemonEndToEndTests.parse(line)
            if object["type"] as? String == "detection" { onset = object }
        }
        let event = try #require(onset)
        #expect(event["group"] as? String == "smoke_alarm")
        // "pattern", or "pattern+classifier" when the classifier had already scored the cycle's windows at the
        // decision (the pump's chunking decides which, under load; a known nondeterminism of the source field).
        #expect(["pattern", "pattern+classifier"].contains(event["source"] as? String ?? ""), "\(event)")
        #expect(event["pattern"] as? String == "T3")
        #expect(event["cycles"] as? Int == 1)
        #expect((event["tone_hz"] as? Int).map { abs($0 - 3100) <= 5 } == true)
        let start = try #require(event["stream_time"] as? Double)
        let decision = try #require(event["decision_time"] as? Double)
        #expect(abs(start - 0.5) <= 0.03)
        // The second cycle's first tone starts at 4.5 s; decided once it has sounded 0.08 s, within one 40 ms block.
        #expect(decision >= 4.58 && decision <= 4.68, "decision_time \(decision)")
        daemon.terminate()
        daemon.waitUntilExit()
    }
}

@Suite("Eval segment line")
struct EvalSegmentLineTests {
    /// Audit 15 F6: a chirp 29 dB above the second before it printed `-29.0 dB below the second before`.
    @Test("the loudest sound of the second before is said above, below, or absent, never as a negative 'below'")
    func precedingPeakWords() {
        func segment(preceding: Double) -> ToneSegment {
            ToneSegment(start: 5, end: 5.1, frequencyHz: 3150, levelDBFS: -43.3, peakLevelDBFS: -43, peakSNRDB: 46.1,
                        frequencySpreadHz: 1.1, precedingPeakDBFS: preceding)
        }
        let head = "     5.00   0.11 s    3150 Hz +-  1.1   -43.3 dBFS  peak  -43.0 dBFS  46.1 dB above the floor  "
        #expect(AlarmEvaluation.segmentLine(segment(preceding: -72)) == head + " 29.0 dB above the second before")
        #expect(AlarmEvaluation.segmentLine(segment(preceding: -19.5)) == head + " 23.5 dB below the second before")
        #expect(AlarmEvaluation.segmentLine(segment(preceding: -43)) == head + "  0.0 dB below the second before")
        #expect(AlarmEvaluation.segmentLine(segment(preceding: -.infinity)) == head + "nothing in the second before")
    }
}
