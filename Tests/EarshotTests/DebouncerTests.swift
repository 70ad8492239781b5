import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Exact window sequences into one debouncer, exact event times out. Windows are YAMNet's: 0.96 s long, one every
/// 0.48 s, window i starting at 0.48 * i.
@Suite("Debouncer")
struct DebouncerTests {
    static let hop = 0.48
    static let duration = 0.96

    /// Feeds `scores` as windows `first...` and returns every event with the index of the window that caused it.
    static func run(
        _ debouncer: inout Debouncer, _ scores: [Float?], first: Int = 0, topClass: String = "Class"
    ) -> [(window: Int, event: DetectionEvent)] {
        var out: [(Int, DetectionEvent)] = []
        for (offset, score) in scores.enumerated() {
            let index = first + offset
            for event in debouncer.process(
                windowStart: Double(index) * hop, windowDuration: duration, score: score, topClass: topClass)
            {
                out.append((index, event))
            }
        }
        return out
    }

    static func group(
        threshold: Float = 0.5, k: Int = 2, n: Int = 3, hold: Double = 2.0, minInterval: Double = 0
    ) -> LabelGroup {
        LabelGroup(
            name: "test_group", classLabels: ["Class"], threshold: threshold, onsetWindows: k, onsetOf: n,
            holdSeconds: hold, minIntervalSeconds: minInterval)
    }

    static func onset(_ event: DetectionEvent) -> DetectionEvent.Onset? {
        if case .onset(let onset) = event { return onset }
        return nil
    }

    static func offset(_ event: DetectionEvent) -> DetectionEvent.Offset? {
        if case .offset(let offset) = event { return offset }
        return nil
    }

    static func close(_ a: Double, _ b: Double) -> Bool { abs(a - b) < 1e-9 }

    @Test("2 of 3: onset at the first positive window of the run, offset 2 s after the last positive window")
    func kOfNOnsetAndHoldOffset() throws {
        var debouncer = Debouncer(group: Self.group())
        let scores: [Float?] = [0.1, 0.6, 0.2, 0.7, 0.8, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
        let events = Self.run(&debouncer, scores)
        #expect(events.count == 2)

        // Window 3 completes 2 of the last 3 (windows 1 and 3): the event starts where window 1 starts.
        #expect(events[0].window == 3)
        let onset = try #require(Self.onset(events[0].event))
        #expect(onset.group == "test_group")
        #expect(onset.classLabel == "Class")
        #expect(Self.close(onset.start, 0.48))
        #expect(Self.close(onset.decisionTime, 1.44 + 0.96))
        #expect(onset.confidence == 0.7)

        // The last positive window (4) ends at 2.88; window 9 is the first negative one ending >= 2.88 + 2.0.
        #expect(events[1].window == 9)
        let offset = try #require(Self.offset(events[1].event))
        #expect(Self.close(offset.start, 0.48))
        #expect(Self.close(offset.end, 2.88))
        #expect(Self.close(offset.duration, 2.40))
        #expect(offset.peakConfidence == 0.8)
        #expect(abs(offset.meanConfidence - 0.7) < 1e-6)
        #expect(offset.positiveWindows == 3)
        #expect(offset.reason == .holdElapsed)
        #expect(!debouncer.isActive)
    }

    @Test("A positive window that falls out of the last n before the k-th one never raises an event")
    func strayWindowsDoNotRaise() {
        var debouncer = Debouncer(group: Self.group())
        #expect(Self.run(&debouncer, [0.9, 0.1, 0.1, 0.9, 0.1, 0.1, 0.9, 0.0, 0.0]).isEmpty)

        // The same pattern with n = 4 keeps window 0 in view: onset at window 3, starting at window 0.
        var wider = Debouncer(group: Self.group(n: 4))
        let events = Self.run(&wider, [0.9, 0.1, 0.1, 0.9])
        #expect(events.count == 1)
        #expect(events.first?.window == 3)
        #expect(Self.onset(events[0].event).map { Self.close($0.start, 0) } == true)
    }

    @Test("1 of 1: the first positive window is the onset; a score equal to the threshold is positive")
    func singleWindowRule() throws {
        var debouncer = Debouncer(group: Self.group(k: 1, n: 1, hold: 1.0))
        let events = Self.run(&debouncer, [0.2, 0.5, 0.1, 0.1, 0.1])
        // Window 1 ends at 1.44; windows 2 and 3 end 0.48 and 0.96 s later (< 1.0 s hold); window 4 ends 1.44 s later.
        #expect(events.map(\.window) == [1, 4])
        let onset = try #require(Self.onset(events[0].event))
        #expect(Self.close(onset.start, 0.48))
        #expect(Self.close(onset.decisionTime, 1.44))
        #expect(onset.confidence == 0.5)
        let offset = try #require(Self.offset(events[1].event))
        #expect(Self.close(offset.end, 1.44))
        #expect(offset.positiveWindows == 1)
    }

    @Test("Gated (nil) windows count as negative and advance stream time during the hold")
    func gatedWindowsDuringHold() throws {
        var gated = Debouncer(group: Self.group())
        let withGate = Self.run(&gated, [0.9, 0.9, nil, nil, 0.9, nil, nil, nil, nil, nil, nil])
        var quiet = Debouncer(group: Self.group())
        let withZeros = Self.run(&quiet, [0.9, 0.9, 0.0, 0.0, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        #expect(withGate.map(\.window) == [1, 9])
        #expect(withGate.map(\.event) == withZeros.map(\.event))

        let onset = try #require(Self.onset(withGate[0].event))
        #expect(Self.close(onset.start, 0))
        #expect(Self.close(onset.decisionTime, 1.44))
        // Gated windows 2 and 3 (ending 2.40 and 2.88) are within 2 s of 1.44: the event goes on through window 4.
        let offset = try #require(Self.offset(withGate[1].event))
        #expect(Self.close(offset.start, 0))
        #expect(Self.close(offset.end, 2.88))
        #expect(offset.positiveWindows == 3)
        #expect(offset.peakConfidence == 0.9)
        #expect(offset.meanConfidence == 0.9)
    }

    @Test("Minimum interval: positive windows starting before end + interval do not count toward a new onset")
    func minimumInterval() throws {
        var debouncer = Debouncer(group: Self.group(k: 1, n: 1, hold: 0.5, minInterval: 5))
        // Window 0 raises; window 2 (ending 1.92 >= 0.96 + 0.5) ends it at 0.96. Windows 3...12 start before
        // 0.96 + 5 = 5.96 and are ignored; window 13 starts at 6.24 and raises the next event.
        let scores: [Float?] = [0.9, 0.0, 0.0] + Array(repeating: 0.9, count: 11)
        let events = Self.run(&debouncer, scores)
        #expect(events.map(\.window) == [0, 2, 13])
        let first = try #require(Self.offset(events[1].event))
        #expect(Self.close(first.end, 0.96))
        let second = try #require(Self.onset(events[2].event))
        #expect(Self.close(second.start, 6.24))

        // With k = 2 of 3 the run must be made of eligible windows only. The event of windows 0-1 ends at 1.44 (found
        // at window 3), so windows must start at or after 6.44: windows 12 (5.76) and 13 (6.24) are positive but do
        // not count; windows 14 (6.72) and 15 make the run, and the event starts at window 14.
        var kOfN = Debouncer(group: Self.group(k: 2, n: 3, hold: 0.5, minInterval: 5))
        let moreEvents = Self.run(&kOfN, [0.9, 0.9, 0.0, 0.0] + Array(repeating: 0.9, count: 13))
        #expect(moreEvents.map(\.window) == [1, 3, 15])
        #expect(Self.offset(moreEvents[1].event).map { Self.close($0.end, 1.44) } == true)
        #expect(Self.onset(moreEvents[2].event).map { Self.close($0.start, 6.72) } == true)
    }

    @Test("reset(at:) ends an open event at its last positive window and clears the k-of-n history")
    func gapReset() throws {
        var debouncer = Debouncer(group: Self.group())
        let before = Self.run(&debouncer, [0.6, 0.8, 0.0])
        #expect(before.map(\.window) == [1])
        let gap = debouncer.reset(at: 1.92)
        #expect(gap.count == 1)
        let offset = try #require(gap.first.flatMap(Self.offset))
        #expect(Self.close(offset.start, 0))
        #expect(Self.close(offset.end, 1.44))
        #expect(offset.reason == .streamGap)
        #expect(offset.peakConfidence == 0.8)
        #expect(abs(offset.meanConfidence - 0.7) < 1e-6)
        #expect(debouncer.reset(at: 2.0).isEmpty)

        // After the gap, one positive window before it and one after never combine; two after it do.
        var again = Debouncer(group: Self.group())
        #expect(Self.run(&again, [0.0, 0.9]).isEmpty)
        #expect(again.reset(at: 1.44).isEmpty)
        let after = Self.run(&again, [0.9, 0.9], first: 10)
        #expect(after.map(\.window) == [11])
        #expect(Self.onset(after[0].event).map { Self.close($0.start, 4.8) } == true)
    }

    @Test("A window that does not follow the previous one is a gap: the open event ends there")
    func discontinuityEndsEvent() throws {
        var debouncer = Debouncer(group: Self.group(hold: 10))
        #expect(Self.run(&debouncer, [0.9, 0.9, 0.9]).map(\.window) == [1])
        // Window 3 would start at 1.44; the next one starts at 20.0, after window 2's end (1.92): audio is missing.
        let events = debouncer.process(windowStart: 20.0, windowDuration: 0.96, score: 0.9, topClass: "Class")
        #expect(events.count == 1)
        let offset = try #require(events.first.flatMap(Self.offset))
        #expect(Self.close(offset.end, 1.92))
        #expect(offset.reason == .streamGap)
        #expect(offset.positiveWindows == 3)
        #expect(!debouncer.isActive)
    }

    @Test("Peak and mean confidence over every positive window, onset run included; class of the peak window")
    func peakAndMean() throws {
        var debouncer = Debouncer(group: Self.group(k: 2, n: 2))
        var events: [DetectionEvent] = []
        let windows: [(Float, String)] = [(0.5, "A"), (0.9, "B"), (0.6, "C"), (0.4, "D"), (0.7, "E")]
        for (index, window) in windows.enumerated() {
            events += debouncer.process(
                windowStart: Double(index) * Self.hop, windowDuration: Self.duration, score: window.0, topClass: window.1)
        }
        events += debouncer.finish()
        #expect(events.count == 2)
        let onset = try #require(Self.onset(events[0]))
        #expect(onset.confidence == 0.9)
        #expect(onset.classLabel == "B")
        let offset = try #require(Self.offset(events[1]))
        #expect(offset.classLabel == "B")
        #expect(offset.peakConfidence == 0.9)
        #expect(abs(offset.meanConfidence - 0.675) < 1e-6)  // (0.5 + 0.9 + 0.6 + 0.7) / 4: 0.4 is not positive
        #expect(offset.positiveWindows == 4)
        #expect(Self.close(offset.end, 1.92 + 0.96))
        #expect(offset.reason == .streamEnd)
        #expect(debouncer.finish().isEmpty)
    }

    @Test("NaN scores are negative; a bad window is ignored; out-of-range rules are clamped")
    func badValues() {
        var debouncer = Debouncer(group: Self.group(k: 1, n: 1))
        #expect(Self.run(&debouncer, [.nan, .nan]).isEmpty)
        #expect(debouncer.process(windowStart: .nan, windowDuration: 0.96, score: 1, topClass: nil).isEmpty)
        #expect(debouncer.process(windowStart: 1, windowDuration: -1, score: 1, topClass: nil).isEmpty)

        var clamped = Debouncer(group: Self.group(k: 5, n: 0, hold: -3))
        let events = Self.run(&clamped, [0.9, 0.0])
        #expect(events.map(\.window) == [0, 1])
        // With no top class the group name stands in.
        #expect(Self.onset(events[0].event)?.classLabel == "Class")
        var unnamed = Debouncer(group: Self.group(k: 1, n: 1))
        let unnamedEvents = unnamed.process(windowStart: 0, windowDuration: 0.96, score: 0.9, topClass: nil)
        #expect(unnamedEvents.first.flatMap(Self.onset)?.classLabel == "test_group")
    }

    @Test("A stream clock that restarts after a reset forgets the minimum interval")
    func clockRestart() {
        var debouncer = Debouncer(group: Self.group(k: 1, n: 1, hold: 0.5, minInterval: 60))
        #expect(Self.run(&debouncer, [0.9, 0.0, 0.0], first: 100).map(\.window) == [100, 102])
        #expect(debouncer.reset(at: 49.92).isEmpty)
        // The input restarted from 0: a positive window at 0.48 raises an event although 60 s have not passed.
        #expect(Self.run(&debouncer, [0.0, 0.9]).map(\.window) == [1])
    }
}
