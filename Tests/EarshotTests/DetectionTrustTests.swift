import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotSupport
import EarshotTools

/// Issue 13: one alarm is one alert, beeping that is not an alarm stays quiet, glass needs a shatter.
@Suite("Detection people can trust")
struct DetectionTrustTests {
    /// Feeds `samples` in 40 ms chunks; every 0.48 s (once the audio of a 0.96 s window is in) hands the detector
    /// a classifier window scoring `smoke` for "Smoke detector, smoke alarm" (nil: no windows). Returns every
    /// event, `finish()` included. `byIndex`: the detector is given the windows' labels and reads its classes by
    /// index (as the stage does), else it looks them up by name.
    private static func run(_ samples: [Float], sampleRate: Int, smoke: Float? = nil, byIndex: Bool = false,
                            configuration: AlarmDetector.Configuration = AlarmDetector.Configuration(),
                            window: Double = 0.96) -> [AlarmEvent] {
        let labels = ["Smoke detector, smoke alarm", "Music"]
        let detector = AlarmDetector(configuration: configuration, classLabels: byIndex ? labels : nil)
        var events: [AlarmEvent] = []
        let chunk = sampleRate / 25
        var position = 0
        var nextWindowEnd = window
        while position < samples.count {
            let end = min(samples.count, position + chunk)
            events += detector.process(samples: Array(samples[position..<end]), sampleRate: sampleRate, framePosition: Int64(position))
            position = end
            while let smoke, Double(position) / Double(sampleRate) >= nextWindowEnd {
                let result = ClassificationResult.scored(
                    timeRange: TimeRange(start: nextWindowEnd - window, duration: window), scores: [smoke, 0],
                    labels: labels, levelDBFS: -20)
                events += detector.observe(classification: result)
                nextWindowEnd += window / 2
            }
        }
        return events + detector.finish()
    }

    private static func onsets(_ events: [AlarmEvent], _ group: String = AlarmEvent.smokeAlarm) -> [AlarmEvent] {
        events.filter { $0.kind == .onset && $0.group == group }
    }

    /// The one `tone+classifier` smoke_alarm onset of `events`, whose tone started at 1 s (within 0.03 s), as the
    /// persistent-tone tests render it; a recorded issue and a thrown error otherwise.
    private static func toneOnset(_ events: [AlarmEvent], sourceLocation: SourceLocation = #_sourceLocation) throws -> AlarmEvent {
        let onsets = Self.onsets(events)
        #expect(onsets.count == 1, "\(onsets)", sourceLocation: sourceLocation)
        let onset = try #require(onsets.first, sourceLocation: sourceLocation)
        #expect(onset.source == .toneAndClassifier, sourceLocation: sourceLocation)
        #expect(abs(onset.start - 1.0) <= 0.03, "tone from \(onset.start) s", sourceLocation: sourceLocation)
        return onset
    }

    /// Beeps of `on` s every `on + off` s from `start` for `seconds`.
    private static func beeps(start: Double, seconds: Double, on: Double, off: Double, hz: Double) -> [AlarmSignals.Tone] {
        stride(from: start, to: start + seconds, by: on + off).map { AlarmSignals.Tone(start: $0, duration: on, frequencyHz: hz) }
    }

    @Test("a T3 alarm whose cycles grow irregular stays one smoke_alarm event until its last beep, then ends: pattern_stopped")
    func irregularAlarmIsOneEvent() throws {
        // Three regular cycles from 1 s (to 13 s), then the same sounder beeping 0.5 s with gaps that no longer
        // make a T3 (0.7 to 3 s), up to 60 s; silence after.
        var tones = AlarmSignals.t3(frequencyHz: 3100, cycles: 3, start: 1)
        let gaps = [0.7, 1.9, 0.4, 2.6, 1.1, 3.0]
        var time = 13.0
        var index = 0
        while time < 60 {
            tones.append(AlarmSignals.Tone(start: time, duration: 0.5, frequencyHz: 3100))
            time += 0.5 + gaps[index % gaps.count]
            index += 1
        }
        let lastBeepEnd = try #require(tones.last).start + 0.5
        let samples = AlarmSignals.render(tones, seconds: 80, sampleRate: 16_000, amplitude: 0.3)
        let events = Self.run(samples, sampleRate: 16_000)
        let onsets = Self.onsets(events)
        #expect(onsets.count == 1)
        let onset = try #require(onsets.first)
        #expect(abs(onset.start - 1.0) <= 0.03)
        #expect(onset.time >= 5.08 && onset.time <= 5.14)
        let ends = events.filter { $0.kind == .end }
        #expect(ends.count == 1)
        let end = try #require(ends.first)
        #expect(end.group == AlarmEvent.smokeAlarm)
        #expect(end.reason == .patternStopped)
        #expect(end.time >= lastBeepEnd - 0.06 && end.time <= lastBeepEnd)
        #expect(Self.onsets(events, AlarmEvent.coAlarm).isEmpty)
    }

    @Test("an alarm that stops for longer than the hold and sounds again is two events, each ending when it stopped")
    func holdSeparatesAlarms() throws {
        let tones = AlarmSignals.t3(frequencyHz: 3100, cycles: 3, start: 1) + AlarmSignals.t3(frequencyHz: 3100, cycles: 3, start: 40)
        let samples = AlarmSignals.render(tones, seconds: 70, sampleRate: 16_000, amplitude: 0.3)
        let events = Self.run(samples, sampleRate: 16_000)
        #expect(Self.onsets(events).map { ($0.start * 10).rounded() / 10 } == [1.0, 40.0])
        let ends = events.filter { $0.kind == .end }
        #expect(ends.map(\.reason) == [.patternStopped, .patternStopped])
        // Each ends at its last beep: 1 + 8 + 2.5 = 11.5 s and 40 + 8 + 2.5 = 50.5 s.
        #expect(ends.map { abs($0.time - 11.5) <= 0.06 || abs($0.time - 50.5) <= 0.06 } == [true, true])
    }

    @Test("end reasons are sent and stored as sent: pattern_stopped, stream_end; a chirp is stored as point_event; the stored class is the one sent, windows 0")
    func endReasonsAsSent() throws {
        let samples = AlarmSignals.render(AlarmSignals.t3(frequencyHz: 3100, cycles: 3, start: 1), seconds: 12,
                                          sampleRate: 16_000, amplitude: 0.3)
        let events = Self.run(samples, sampleRate: 16_000)
        let end = try #require(events.first { $0.kind == .end })
        // The file ends 0.5 s after the last beep, inside the hold: the end of the stream ends the event.
        #expect(end.reason == .streamEnd)
        let object = end.object(wallClock: Date(timeIntervalSince1970: 0))
        #expect(object["reason"] == .string("stream_end"))
        guard case .offset(let stored) = end.finishedEvent else { Issue.record("not an offset"); return }
        #expect(stored.reason == .streamEnd)
        #expect(stored.classLabel == "T3 pattern")
        #expect(stored.peakConfidence == end.confidence)
        #expect(stored.positiveWindows == 0)
        // With a classifier score the socket sends the classifier's class, and the history stores that class
        // (trial 5 #2: it stored "T3 pattern", and the cycles as windows).
        let heard = AlarmEvent(kind: .end, group: "smoke_alarm", source: .patternAndClassifier, pattern: .t3, cycles: 2,
                               toneHz: 3057, toneLevelDBFS: -8.3, classifierScore: 0.9908,
                               classifierClass: "Smoke detector, smoke alarm", start: 0.176, time: 11.52, reason: .streamEnd)
        #expect(heard.object(wallClock: Date(timeIntervalSince1970: 0))["class"] == .string("Smoke detector, smoke alarm"))
        guard case .offset(let heardStored) = heard.finishedEvent else { Issue.record("not an offset"); return }
        #expect(heardStored.classLabel == "Smoke detector, smoke alarm")
        #expect(heardStored.peakConfidence == heard.confidence && heardStored.meanConfidence == heard.confidence)
        #expect(heardStored.positiveWindows == 0)
        let chirp = AlarmEvent(kind: .onset, group: AlarmEvent.alarmChirp, source: .pattern, pattern: .chirp, cycles: 2,
                               toneHz: 3200, toneLevelDBFS: -30, classifierScore: nil, classifierClass: nil, start: 45, time: 45.5)
        guard case .offset(let point) = chirp.finishedEvent else { Issue.record("not an offset"); return }
        #expect(point.reason == .pointEvent)
        #expect(point.start == 45 && point.end == 45)
        #expect(DetectionEvent.EndReason.patternStopped.rawValue == "pattern_stopped")
    }

    @Test("every alarm event carries confidence: 1 - (1 - p)(1 - classifier score)")
    func confidence() {
        func event(_ source: AlarmEvent.Source, _ pattern: AlarmPattern?, cycles: Int, score: Float?) -> Float {
            AlarmEvent(kind: .onset, group: "smoke_alarm", source: source, pattern: pattern, cycles: cycles, toneHz: 3100,
                       toneLevelDBFS: -20, classifierScore: score, classifierClass: nil, start: 0, time: 4).confidence
        }
        #expect(abs(event(.pattern, .t3, cycles: 1, score: nil) - 0.8) < 1e-6)
        #expect(abs(event(.pattern, .t3, cycles: 2, score: 0.0) - 0.9) < 1e-6)
        #expect(abs(event(.patternAndClassifier, .t3, cycles: 1, score: 0.5) - 0.9) < 1e-6)
        #expect(abs(event(.toneAndClassifier, nil, cycles: 0, score: 0.9) - 0.97) < 1e-6)
        let line = JSONValue.object(AlarmEvent(
            kind: .end, group: "co_alarm", source: .pattern, pattern: .t4, cycles: 3, toneHz: 3100, toneLevelDBFS: -20,
            classifierScore: nil, classifierClass: nil, start: 1, time: 20, reason: .streamGap
        ).object(wallClock: Date(timeIntervalSince1970: 0))).encoded
        #expect(line == #"{"type":"detection_end","group":"co_alarm","source":"pattern","pattern":"T4","cycles":3,"tone_hz":3100,"tone_dbfs":-20.0,"confidence":0.9,"start":1.0,"end":20.0,"duration":19.0,"reason":"stream_gap","time":"1970-01-01T00:00:00.000Z"}"#)
    }

    @Test("fire_alarm is folded into smoke_alarm when the pattern detector runs, and stays a classifier group when it does not")
    func fireAlarmFolded() {
        let watch = ["smoke_alarm", "fire_alarm", "co_alarm", "baby_cry", "glass_break"]
        #expect(AlarmDetector.engineWatchList(watch, patternDetection: true) == ["baby_cry", "glass_break"])
        #expect(AlarmDetector.engineWatchList(watch, patternDetection: false) == watch)
        #expect(AlarmDetector.emittedGroups(watch: ["fire_alarm", "baby_cry"]) == ["smoke_alarm", "alarm_chirp"])
        #expect(AlarmDetector.extraGroups(watch: ["fire_alarm"], patternDetection: true) == ["alarm_chirp", "smoke_alarm"])
        #expect(AlarmDetector.emittedGroups(watch: ["baby_cry"]).isEmpty)
    }

    @Test("a 520 Hz square-wave T3 reports the fundamental as tone_hz, whichever harmonic the matcher heard first")
    func fundamental() throws {
        let samples = AlarmSignals.render(AlarmSignals.t3(frequencyHz: 520, cycles: 4, start: 1), seconds: 20,
                                          sampleRate: 48_000, waveform: .square, amplitude: 0.3)
        let events = Self.run(samples, sampleRate: 48_000)
        let onset = try #require(Self.onsets(events).first)
        #expect(abs(onset.toneHz - 520) <= 3)
        #expect(events.filter { $0.kind == .end }.allSatisfy { abs($0.toneHz - 520) <= 3 })
    }

    @Test("a non-T3 smoke alarm (0.26 s beeps, 0.07 s gaps at 3.4 kHz) with the classifier at 0.9 is a tone+classifier smoke_alarm")
    func persistentTone() throws {
        let tones = Self.beeps(start: 1, seconds: 30, on: 0.26, off: 0.07, hz: 3400)
        let samples = AlarmSignals.render(tones, seconds: 40, sampleRate: 16_000, amplitude: 0.3)
        let events = Self.run(samples, sampleRate: 16_000, smoke: 0.9)
        // The stage's way, classes read by index, gives the same events.
        #expect(Self.run(samples, sampleRate: 16_000, smoke: 0.9, byIndex: true) == events)
        let onset = try Self.toneOnset(events)
        #expect(onset.pattern == nil)
        // 8 s of tone are needed: the first window ending at or after 8.6 s that sees them (8.64 or 9.12 s).
        #expect(onset.time >= 8.6 && onset.time <= 9.13)
        #expect(abs(onset.toneHz - 3400) <= 10)
        #expect(abs(onset.confidence - 0.97) <= 0.001)
        // With 2 s windows every 1 s ([analysis] window = 2, as `train --window 2` suggests) the same: 7 such
        // windows fit in 8 s, and a count of 8 windows had refused every one (trial 8 #1).
        let long = Self.onsets(Self.run(samples, sampleRate: 16_000, smoke: 0.9, window: 2))
        #expect(long.count == 1)
        #expect(long.first?.source == .toneAndClassifier)
        #expect((long.first?.time ?? 0) >= 9 && (long.first?.time ?? 0) <= 10, "\(long)")
        // It lasts to the end of the last window that heard the tone with the classifier agreeing: the beeps stop
        // at 30.96 s; the window from 30.72 s ends at 31.68 s.
        let end = try #require(events.first { $0.kind == .end })
        #expect(abs(end.time - 31.68) <= 0.001)
        // The classifier alone at 0.9, on the same beeps at half duty or in short beeps: nothing.
        for (on, off) in [(0.25, 0.25), (0.5, 0.5), (0.1, 0.1), (1.0, 1.0)] {
            let beeping = AlarmSignals.render(Self.beeps(start: 1, seconds: 40, on: on, off: off, hz: 3150), seconds: 45,
                                              sampleRate: 16_000, amplitude: 0.3)
            let found = Self.run(beeping, sampleRate: 16_000, smoke: 0.9).filter { $0.group != AlarmEvent.alarmChirp }
            #expect(found.isEmpty, "\(on) s on, \(off) s off: \(found)")
        }
    }

    @Test("with the fast-beat check on, fast beeping merged into one tone is no tone+classifier smoke_alarm; off (the default), it is")
    func fastBeatMerged() throws {
        // An alarm clock's 0.15 s beeps 0.1 s apart at 3.2 kHz in a reverberant room (the tuning case, seed 35
        // `beep_alarm_clock_fast_0`, was one 8 s segment): here the gaps are filled by the tone 5 dB down (within the
        // tracker's 7 dB drop), so the tracker hears one tone whose level beats every 0.25 s.
        let loud = Self.beeps(start: 1, seconds: 30, on: 0.15, off: 0.1, hz: 3200)
        let quiet = Self.beeps(start: 1.15, seconds: 30, on: 0.1, off: 0.15, hz: 3200)
        var samples = AlarmSignals.render(loud, seconds: 35, sampleRate: 16_000, amplitude: 0.3)
        let fill = AlarmSignals.render(quiet, seconds: 35, sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -5.0 / 20)))
        for n in samples.indices { samples[n] += fill[n] }
        var on = AlarmDetector.Configuration()
        on.fastBeatPeriodicity = 0.5
        #expect(Self.onsets(Self.run(samples, sampleRate: 16_000, smoke: 0.9, configuration: on)).isEmpty)
        let onset = try #require(Self.onsets(Self.run(samples, sampleRate: 16_000, smoke: 0.9)).first)
        #expect(onset.source == .toneAndClassifier)
    }

    @Test("the envelope beat: 0.67 for a 15-on, 10-off square envelope, period 25 hops; about 0 for noise; 0 for a drift, a steady level or two periods")
    func envelopeBeat() {
        var square = EnvelopeModulation()
        for n in 0..<800 { square.add(n % 25 < 15 ? -10 : -20) }
        let beat = square.periodicity(minimumVariance: 0.25)
        // (r(25) - max(r(12), r(8))) / 2 for 15 hops on, 10 off: (1 - 0.34) / 2.
        #expect(abs(beat.score - 0.67) <= 0.01, "\(beat)")
        #expect(beat.periodHops == 25)
        var noise = EnvelopeModulation()
        var random = SplitMix64(seed: 5)
        for _ in 0..<800 { noise.add(Double(random.next() % 1000) / 100) }
        #expect(noise.periodicity(minimumVariance: 0.25).score <= 0.15)
        var drift = EnvelopeModulation()
        for n in 0..<800 { drift.add(Double(n) * 0.02) }
        #expect(drift.periodicity(minimumVariance: 0.25).score == 0)
        var steady = EnvelopeModulation()
        for n in 0..<800 { steady.add(n % 25 < 15 ? -10 : -10.2) }
        #expect(steady.periodicity(minimumVariance: 0.25).score == 0)
        var short = EnvelopeModulation()
        for n in 0..<60 { short.add(n % 25 < 15 ? -10 : -20) }
        #expect(short.periodicity(minimumVariance: 0.25).score == 0)
    }

    @Test("a non-T3 smoke alarm in a regular long-beep cadence (0.8 s on, 0.25 s off) needs the classifier at 0.3, not 0.6")
    func longBeepCadence() throws {
        // The tuning sets' non-T3 alarms in pink noise score 0.3-0.7 (smoke/fire, 8 s mean): 0.4 here.
        let tones = Self.beeps(start: 1, seconds: 30, on: 0.8, off: 0.25, hz: 3100)
        let samples = AlarmSignals.render(tones, seconds: 40, sampleRate: 16_000, amplitude: 0.3)
        let events = Self.run(samples, sampleRate: 16_000, smoke: 0.4)
        let onset = try Self.toneOnset(events)
        #expect(onset.time >= 8.6 && onset.time <= 9.7, "decided at \(onset.time)")
        #expect(abs(onset.toneHz - 3100) <= 10)
        // Without the cadence rule (its bar at the persistent rule's 0.6) the classifier at 0.4 is not enough.
        var off = AlarmDetector.Configuration()
        off.cadenceScore = off.persistentScore
        #expect(Self.onsets(Self.run(samples, sampleRate: 16_000, smoke: 0.4, configuration: off)).isEmpty)
        // Beeping at half duty or less, in short beeps, or in beeps of uneven length with 0.1 s dips (a fast clock's
        // beeps merged by a room's echo): nothing, with the classifier at 0.4.
        var uneven: [AlarmSignals.Tone] = []
        var time = 1.0
        for (index, length) in Array(repeating: [1.3, 0.4, 0.8, 2.1, 0.5], count: 6).joined().enumerated() {
            uneven.append(AlarmSignals.Tone(start: time, duration: length, frequencyHz: 3150))
            time += length + (index % 2 == 0 ? 0.1 : 0.12)
        }
        let cases = [(0.6, 0.4), (1.0, 1.0), (0.25, 0.07)].map {
            Self.beeps(start: 1, seconds: 35, on: $0.0, off: $0.1, hz: 3150)
        } + [uneven]
        // A kitchen timer's 0.6 s beeps, 0.4 s apart, with a room's tail: 0.17 s of the tone 5 dB down after each
        // (within the tracker's 7 dB drop), so that each beep measures 0.76 s and covers 76 % (tuning, seed 36
        // `beep_kitchen_timer_long_0`): under the cadence's shortest beep, 0.78 s.
        let timer = Self.beeps(start: 1, seconds: 35, on: 0.6, off: 0.4, hz: 2900)
        var tailed = AlarmSignals.render(timer, seconds: 45, sampleRate: 16_000, amplitude: 0.3)
        let tails = AlarmSignals.render(timer.map { AlarmSignals.Tone(start: $0.start + 0.595, duration: 0.175, frequencyHz: 2900) },
                                        seconds: 45, sampleRate: 16_000, amplitude: 0.3 * Float(pow(10, -5.0 / 20)))
        for n in tailed.indices { tailed[n] += tails[n] }
        let tailedFound = Self.run(tailed, sampleRate: 16_000, smoke: 0.4).filter { $0.group != AlarmEvent.alarmChirp }
        #expect(tailedFound.isEmpty, "a timer with a room's tail: \(tailedFound)")
        for beeping in cases {
            let audio = AlarmSignals.render(beeping, seconds: 45, sampleRate: 16_000, amplitude: 0.3)
            let found = Self.run(audio, sampleRate: 16_000, smoke: 0.4).filter { $0.group != AlarmEvent.alarmChirp }
            #expect(found.isEmpty, "\(beeping.prefix(3)): \(found)")
        }
    }

    @Test("an alarm still sounding when the stream ends ends at the end of its audio, not at its last window's padded end (trial 8 #6)")
    func endAtTheStreamEnd() throws {
        // Four T3 cycles from 1 s, cut at 14 s (mid-cycle); the last window, as a stream that ended pads it, runs to
        // 14.4 s and agrees.
        let samples = AlarmSignals.render(AlarmSignals.t3(frequencyHz: 3100, cycles: 4, start: 1), seconds: 14,
                                          sampleRate: 16_000, amplitude: 0.3)
        let labels = ["Smoke detector, smoke alarm", "Music"]
        let detector = AlarmDetector(classLabels: labels)
        var events = detector.process(samples: samples, sampleRate: 16_000, framePosition: 0)
        var end = 0.96
        while end <= 14.4 + 1e-9 {
            let window = ClassificationResult.scored(
                timeRange: TimeRange(start: end - 0.96, duration: 0.96), scores: [0.9, 0], labels: labels, levelDBFS: -20)
            events += detector.observe(classification: window)
            end += 0.48
        }
        events += detector.finish()
        #expect(Self.onsets(events).count == 1)
        let last = try #require(events.last)
        #expect(last.kind == .end && last.reason == .streamEnd)
        #expect(last.time <= 14 && last.time >= 13.9, "ended at \(last.time)")
    }

    @Test("a warbling alarm tone (2676, 2864, 2454 Hz in turn every 1.03 s) with the classifier at 0.9 is one tone+classifier smoke_alarm; at 0.4, or with the warble off, nothing")
    func warblingTone() throws {
        // The steps of `alarm-wpmonitor/Smoke_alarm.wav`'s loudest partial, each 0.04 s after the last ended:
        // 0.5 s at 2676 Hz, 0.1 s at 2864 Hz, 0.35 s at 2454 Hz. No one frequency covers 75 % of 8 s (2676 Hz: 49 %).
        var tones: [AlarmSignals.Tone] = []
        var time = 1.0
        while time < 31 {
            for (length, hz) in [(0.5, 2676.0), (0.1, 2864.0), (0.35, 2454.0)] {
                tones.append(AlarmSignals.Tone(start: time, duration: length, frequencyHz: hz))
                time += length + 0.04
            }
        }
        let samples = AlarmSignals.render(tones, seconds: 40, sampleRate: 16_000, amplitude: 0.3)
        let events = Self.run(samples, sampleRate: 16_000, smoke: 0.9)
        let onset = try Self.toneOnset(events)
        // 8 s of the tone are needed: the first window ending at or after 8.6 s (8.64 s) sees them.
        #expect(abs(onset.time - 8.64) <= 0.001, "decided at \(onset.time)")
        #expect(abs(onset.toneHz - 2676) <= 10)
        // One event to the end: the tone stops at 31.93 s; the window from 31.68 s ends at 32.64 s.
        let ends = events.filter { $0.kind == .end }
        #expect(ends.count == 1)
        #expect(abs((ends.first?.time ?? 0) - 32.64) <= 0.001, "\(ends)")
        // A warble is no cadence: the classifier at 0.4 is not enough.
        #expect(Self.onsets(Self.run(samples, sampleRate: 16_000, smoke: 0.4)).isEmpty)
        var off = AlarmDetector.Configuration()
        off.warbleTolerance = 0.03
        #expect(Self.onsets(Self.run(samples, sampleRate: 16_000, smoke: 0.9, configuration: off)).isEmpty)
        // Two beepers 7 % apart that each sound half the time, at half duty together (0.5 s on, 0.5 s off): nothing.
        let halfDuty = Self.beeps(start: 1, seconds: 30, on: 0.25, off: 0.75, hz: 3000)
            + Self.beeps(start: 1.25, seconds: 30, on: 0.25, off: 0.75, hz: 3210)
        let beepers = AlarmSignals.render(halfDuty.sorted { $0.start < $1.start }, seconds: 40, sampleRate: 16_000, amplitude: 0.3)
        let found = Self.run(beepers, sampleRate: 16_000, smoke: 0.9).filter { $0.group != AlarmEvent.alarmChirp }
        #expect(found.isEmpty, "\(found)")
    }

    @Test("a long-beep alarm whose beeps dip every 0.14 s (a warbling piezo in a room) is rejoined across gaps of exactly 0.05 s: one tone+classifier smoke_alarm")
    func dippingBeeps() throws {
        // 2 s beeps, 0.5 s pauses at 2.93 kHz, each beep 14 dB down for 0.05 s every 0.14 s but in its last 0.25 s
        // (where a room's tail fills the dips): the tracker ends a segment at each dip and starts the next 0.05 s
        // later, then one 0.32 s piece (the tuning case, seed 23 `smoke_other_2`: a piezo's 7 Hz wobble through a
        // room). Before the grid slack, some of those 0.05 s gaps measured 0.05000000000000071 and were not
        // bridged: a row of 0.1 s pieces, under 75 % coverage, no event.
        let tones = Self.beeps(start: 1, seconds: 30, on: 2.0, off: 0.5, hz: 2930)
        var samples = AlarmSignals.render(tones, seconds: 40, sampleRate: 16_000, amplitude: 0.3)
        for tone in tones {
            for n in Int(tone.start * 16_000)..<Int((tone.start + 1.75) * 16_000) {
                let phase = (Double(n) / 16_000 - tone.start).truncatingRemainder(dividingBy: 0.14)
                if phase >= 0.09 { samples[n] *= 0.2 }
            }
        }
        let onset = try Self.toneOnset(Self.run(samples, sampleRate: 16_000, smoke: 0.4))
        #expect(abs(onset.toneHz - 2930) <= 10)
        // 8 s of the tone are needed: the first window ending at or after 8.6 s (8.64 s) sees them.
        #expect(abs(onset.time - 8.64) <= 0.001, "decided at \(onset.time)")
    }

    @Test("a T3 whose beeps a codec broke into three pieces is detected through the rejoined segments, not without them")
    func codecFragments() throws {
        var tones: [AlarmSignals.Tone] = []
        for tone in AlarmSignals.t3(frequencyHz: 3100, cycles: 4, start: 1) {
            tones += [(0.0, 0.15), (0.18, 0.14), (0.35, 0.15)].map {
                AlarmSignals.Tone(start: tone.start + $0.0, duration: $0.1, frequencyHz: tone.frequencyHz)
            }
        }
        let samples = AlarmSignals.render(tones, seconds: 20, sampleRate: 8_000, amplitude: 0.3)
        let onset = try #require(Self.onsets(Self.run(samples, sampleRate: 8_000)).first)
        #expect(onset.pattern == .t3)
        #expect(abs(onset.start - 1.0) <= 0.03)
        // The rejoined third beep of the second cycle is complete at 5.5 s: decided within 0.2 s of it.
        #expect(onset.time >= 5.0 && onset.time <= 5.7)
        var noRejoin = AlarmDetector.Configuration()
        noRejoin.rejoinGapSeconds = 0
        noRejoin.t3RejoinGapSeconds = 0
        #expect(Self.onsets(Self.run(samples, sampleRate: 8_000, configuration: noRejoin)).isEmpty)
    }

    /// Seeded noise in -1...1 (SplitMix64).
    private static func noise(count: Int, seed: UInt64) -> [Float] {
        var random = SeededRandom(seed: seed)
        return (0..<count).map { _ in Float.random(in: -1...1, using: &random) }
    }

    private static func shatters(_ samples: [Float]) -> [ShatterOnsets.Onset] {
        let finder = ShatterOnsets()
        finder.keepCandidates = true
        samples.withUnsafeBufferPointer { finder.feed($0, firstIndex: 0) }
        return finder.measured.filter(\.isShatter)
    }

    @Test("a shatter (bright broadband crack with a decaying tail) is found at its onset; a beep, a click and a thud are not")
    func shatterOnsets() throws {
        let rate = 16_000
        let background = Self.noise(count: rate * 3, seed: 1).map { $0 * 0.0005 }
        // Glass: white noise, differenced (brighter), decaying with a 0.25 s time constant from 1.0 s.
        var glass = background
        let burst = Self.noise(count: rate, seed: 2)
        for n in 1..<rate { glass[rate + n] += 0.4 * (burst[n] - burst[n - 1]) * Float(exp(-Double(n) / (0.25 * Double(rate)))) }
        let found = Self.shatters(glass)
        #expect(found.count == 1)
        let onset = try #require(found.first)
        #expect(abs(onset.time - 1.0) <= 0.012)
        // A 3 kHz beep from 1.0 s (0.5 s), a 5 ms click, a 120 Hz thud decaying in 80 ms.
        var beep = background, click = background, thud = background
        for n in 0..<(rate / 2) { beep[rate + n] += 0.3 * Float(sin(2 * Double.pi * 3000 * Double(n) / Double(rate))) }
        for n in 0..<80 { click[rate + n] += 0.5 * burst[n] }
        for n in 0..<(rate / 2) {
            thud[rate + n] += 0.6 * Float(sin(2 * Double.pi * 120 * Double(n) / Double(rate)) * exp(-Double(n) / (0.08 * Double(rate))))
        }
        #expect(Self.shatters(beep).isEmpty)
        #expect(Self.shatters(click).isEmpty)
        #expect(Self.shatters(thud).isEmpty)
    }

    @Test("a hard cut into running water passes the onset and tail tests but not the late level: no shatter", .needsShared)
    func cutIntoWater() throws {
        // The 24-hour stream's false glass_break events were cuts from a quiet piece into running water: a bright
        // broadband onset whose level then stays. Quiet noise, then the shared recording from 1.0 s, then quiet.
        let water = try decodeMono16k(TestPaths.sharedFile("audio/debian-scratch/scratch/Media/Sounds/Effects/WaterRunning.mp3"))
        let quiet = Self.noise(count: 32_000, seed: 3).map { $0 * 0.0005 }
        let samples = Array(quiet.prefix(16_000)) + water + Array(quiet.suffix(16_000))
        let finder = ShatterOnsets()
        finder.keepCandidates = true
        samples.withUnsafeBufferPointer { finder.feed($0, firstIndex: 0) }
        #expect(finder.shatters.isEmpty)
        // The cut itself (the water's onset at 1.05 s): everything but the late level said shatter.
        let cut = try #require(finder.measured.first { abs($0.time - 1.05) <= 0.02 })
        #expect(cut.flatness >= 0.12 && cut.highShare >= 0.5 && cut.sustain >= 0.6 && cut.decayDB >= 5)
        #expect(cut.lateDropDB > 3 && cut.lateDropDB < 7)
        #expect(ShatterProbe.verdict(cut, ShatterOnsets.Parameters()) == "no: late drop")
    }

    @Test("eval manifests: group and onset columns are read, else the label names the group")
    func manifestItems() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-eval-\(getpid())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let withGroups = folder.appendingPathComponent("a.tsv")
        try "path\tsource\tlicense\tlabel\tduration_s\tsample_rate\tchannels\tcommittable\tgroup\tonset\nx.wav\ts\tl\tsmoke_alarm_t3\t1\t16000\t1\tno\tsmoke_alarm\t4.25\ny.wav\ts\tl\tconfuser_oven\t1\t16000\t1\tno\t-\t0\n"
            .write(to: withGroups, atomically: true, encoding: .utf8)
        let items = try GroupEvaluation.items(manifest: withGroups)
        #expect(items.map(\.group) == ["smoke_alarm", nil])
        #expect(items.map(\.onset) == [4.25, 0])
        #expect(items.first?.path == folder.appendingPathComponent("x.wav").path)
        let byLabel = folder.appendingPathComponent("b.tsv")
        try "path\tsource\tlicense\tlabel\nc.flac\ts\tl\tbaby_crying\nd.flac\ts\tl\tglass_breaking\ne.flac\ts\tl\tmusic\n"
            .write(to: byLabel, atomically: true, encoding: .utf8)
        #expect(try GroupEvaluation.items(manifest: byLabel).map(\.group) == ["baby_cry", "glass_break", nil])
        do throws(EarshotError) {
            _ = try GroupEvaluation.items(manifest: folder.appendingPathComponent("missing.tsv"))
            Issue.record("a missing manifest was read")
        } catch {
            #expect(error.message == "cannot read the manifest \(folder.path)/missing.tsv (check the path)")
            #expect(error.exitStatus == 66)
        }
    }

    @Test("eval manifests: a binary file or one with other columns is refused with the expected header (65), not read as empty", .needsEarshotBuilt)
    func notAManifest() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-eval-bad-\(getpid())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let binary = folder.appendingPathComponent("binary.tsv")
        try Data([0x1F, 0x8B, 0x08, 0x00, 0xFF, 0xFE, 0x00, 0x41]).write(to: binary)
        let columns = folder.appendingPathComponent("columns.tsv")
        try "file,label\nx.wav,smoke_alarm\n".write(to: columns, atomically: true, encoding: .utf8)
        let header = "the tab-separated header path, source, license, label, ..."
        let cases: [(URL, String)] = [
            (binary, "\(binary.path) is not a MANIFEST.tsv: it is not UTF-8 text (a manifest starts with \(header))"),
            (columns, "\(columns.path) is not a MANIFEST.tsv: its first line must be \(header) (found \"file,label\")"),
        ]
        for (manifest, message) in cases {
            let expected = EarshotError(.data, message)
            #expect(throws: expected) { _ = try GroupEvaluation.items(manifest: manifest) }
            var skipped: [String] = []
            #expect(throws: expected) { _ = try AlarmEvaluation.manifestCases(manifest: manifest, skipped: &skipped) }
            #expect(throws: expected) { _ = try ShatterProbe.files(manifest: manifest, only: nil) }
            let outcome = try #require(try EarshotCLI.run(["eval", "--onsets", "--manifest", manifest.path], in: folder, timeout: 60))
            #expect(outcome.status == 65)
            #expect(outcome.errorLines == ["earshot: " + message])
        }
    }

    @Test("the negative stream has the length asked for, is the same for a seed, and is not one clip looped")
    func negativeStream() {
        let clips: [[Float]] = [[Float](repeating: 0.1, count: 80_000), [Float](repeating: -0.2, count: 200_000), [Float](repeating: 0.05, count: 40_000)]
        func render(seed: UInt64) -> (samples: Int, pieces: [Int]) {
            var stream = GroupEvaluation.Stream(clips: clips, seconds: 600, seed: seed)
            var total = 0
            var chunk: [Float] = []
            while true {
                chunk.removeAll()
                let more = stream.next(&chunk)
                total += chunk.count
                if !more { break }
            }
            return (total, stream.pieces.map(\.clip))
        }
        let first = render(seed: 13), again = render(seed: 13), other = render(seed: 14)
        #expect(first.samples == 600 * 16_000)
        #expect(first.pieces == again.pieces)
        #expect(first.pieces != other.pieces)
        #expect(Set(first.pieces) == [0, 1, 2])
    }

    @Test("the negative stream's parts are 12 hours at most, set by its length alone (not by --threads)")
    func negativeStreamParts() {
        #expect(GroupEvaluation.streamParts(seconds: 0) == 1)
        #expect(GroupEvaluation.streamParts(seconds: 4 * 3600) == 1)
        #expect(GroupEvaluation.streamParts(seconds: 12 * 3600) == 1)
        #expect(GroupEvaluation.streamParts(seconds: 12 * 3600 + 1) == 2)
        #expect(GroupEvaluation.streamParts(seconds: 24 * 3600) == 2)
        #expect(GroupEvaluation.streamParts(seconds: 25 * 3600) == 3)
    }

    /// The default configuration's detection over a file: every onset's group.
    private static func onsetGroups(_ path: String) throws -> [String] {
        let detection = try FileDetection(configuration: DaemonConfiguration(), configPath: nil)
        var groups: [String] = []
        try detection.run(url: TestPaths.sharedFile(path)) { output in
            if let onset = GroupEvaluation.onset(of: output) { groups.append(onset.group) }
        }
        return groups
    }

    @Test("the four real T3 smoke alarms are one smoke_alarm each under the default watch list (no fire_alarm beside it)",
          .needsShared,
          arguments: ["alarm-ml-audio-classifier-example-for-pico/325367__moonlightshadow__fire-house-alarm.wav",
                      "alarm-ml-audio-classifier-example-for-pico/ALRMElec_Smoke_detector_alarm_(ID_0800)_BSB.wav",
                      "alarm-real-time-emergency-sound-detection-syst/fire_alarm_1.wav",
                      "alarm-firealarm-detector/Alarm_0.wav"])
    func realAlarmsOneEvent(path: String) throws {
        #expect(try Self.onsetGroups("audio/" + path) == ["smoke_alarm"])
    }

    @Test("the real warbling smoke alarm (`alarm-wpmonitor`, \"Fire alarm\" 0.94-1.0) is one smoke_alarm under the default watch list",
          .needsShared)
    func realWarblingAlarm() throws {
        #expect(try Self.onsetGroups("audio/alarm-wpmonitor/Smoke_alarm.wav") == ["smoke_alarm"])
    }

    @Test("breaking glass still raises glass_break; the freedesktop alarm clock and the Lomiri alarm clock raise nothing",
          .needsShared)
    func glassAndClocks() throws {
        #expect(try Self.onsetGroups("audio/debian-brainparty-data/games/brainparty/glass_break.wav") == ["glass_break"])
        #expect(try Self.onsetGroups("audio/debian-sound-theme-freedesktop/sounds/freedesktop/stereo/alarm-clock-elapsed.oga") == [])
        #expect(try Self.onsetGroups("audio/debian-lomiri-sounds/sounds/lomiri/ringtones/Alarm_clock.ogg") == [])
    }
}
