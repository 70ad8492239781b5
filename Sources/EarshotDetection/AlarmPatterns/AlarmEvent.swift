import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis

/// A smoke alarm, CO alarm or low-battery chirp decided by ``AlarmDetector``, with its evidence.
package struct AlarmEvent: Sendable, Equatable {
    /// Onset (`"detection"`) or end (`"detection_end"`).
    package enum Kind: String, Sendable, Equatable {
        case onset
        case end
    }

    /// What the decision rests on (at the onset: the evidence seen so far; at the end: over the whole event, so a
    /// `tone+classifier` alarm whose T3 cycles came later ends as `pattern+classifier`).
    package enum Source: String, Sendable, Equatable {
        /// A temporal pattern (T3, T4, chirp) of a tone.
        case pattern
        /// A persistent alarm tone (one frequency in 400 Hz-4 kHz sounding most of the time, in long beeps, for
        /// `AlarmDetector.Configuration.persistentSeconds`) while the classifier's smoke/fire score stayed high:
        /// a smoke alarm whose cadence is not T3.
        case toneAndClassifier = "tone+classifier"
        /// A pattern, with the classifier agreeing (its alarm score at or above the fusion threshold).
        case patternAndClassifier = "pattern+classifier"
    }

    /// Group names of the events.
    package static let smokeAlarm = "smoke_alarm"
    package static let coAlarm = "co_alarm"
    package static let alarmChirp = "alarm_chirp"

    package var kind: Kind
    /// `smoke_alarm`, `co_alarm` or `alarm_chirp`.
    package var group: String
    package var source: Source
    /// The pattern seen, or nil for a classifier-only decision.
    package var pattern: AlarmPattern?
    /// Complete cycles seen (T3, T4; at the end: over the whole event), chirps in a row (chirp), or 0 (classifier).
    package var cycles: Int
    /// Mean tone frequency in Hz.
    package var toneHz: Double
    /// Mean tone level in dBFS.
    package var toneLevelDBFS: Double
    /// The highest classifier alarm score (0...1) over the windows that overlap the evidence, nil when no window
    /// was classified (gated, classifier off).
    package var classifierScore: Float?
    /// The class label of ``classifierScore``.
    package var classifierClass: String?
    /// Stream time (s) the alarm started: the first tone of the first cycle.
    package var start: Double
    /// Stream time (s) of the decision (onset) or of the last evidence (end).
    package var time: Double
    /// For a chirp: seconds between the last two chirps; 0 otherwise.
    package var intervalSeconds: Double
    /// For an end: why it ended (`pattern_stopped`: the hold passed with no cycle, beep or agreeing window;
    /// `stream_gap`, `stream_end`, `reload` as for classifier events).
    package var reason: DetectionEvent.EndReason

    /// How sure the decision is, 0...1: `1 - (1 - p) (1 - c)`, with p = 0.8 for one cycle of a pattern, 0.9 for two
    /// or more (0.7 for a persistent tone), and c the classifier score (0 when no window was classified). A
    /// heuristic ranking (a T3 heard twice with the classifier at 0.8 gives 0.98), not a calibrated probability.
    package var confidence: Float {
        let p: Float = source == .toneAndClassifier && cycles == 0 ? 0.7 : cycles >= 2 ? 0.9 : 0.8
        let c = min(max(classifierScore ?? 0, 0), 1)
        return 1 - (1 - p) * (1 - c)
    }

    package init(
        kind: Kind, group: String, source: Source, pattern: AlarmPattern?, cycles: Int, toneHz: Double,
        toneLevelDBFS: Double, classifierScore: Float?, classifierClass: String?, start: Double, time: Double,
        intervalSeconds: Double = 0, reason: DetectionEvent.EndReason = .patternStopped
    ) {
        self.reason = reason
        self.kind = kind
        self.group = group
        self.source = source
        self.pattern = pattern
        self.cycles = cycles
        self.toneHz = toneHz
        self.toneLevelDBFS = toneLevelDBFS
        self.classifierScore = classifierScore
        self.classifierClass = classifierClass
        self.start = start
        self.time = time
        self.intervalSeconds = intervalSeconds
    }

    /// Latency of an onset: `time - start` (s).
    package var latency: Double { time - start }

    /// The socket's JSON object, e.g.
    /// `{"type":"detection","group":"smoke_alarm","source":"pattern","pattern":"T3","cycles":1,"tone_hz":3150,
    /// "tone_dbfs":-21.3,"confidence":0.9620,"classifier_score":0.81,"class":"Smoke detector, smoke alarm",
    /// "stream_time":12.01,"decision_time":16.02,"time":"2026-11-30T16:45:12.345Z"}`; an end is `"detection_end"`
    /// with `start`, `end`, `duration` and its `reason`. Frequencies are rounded to 1 Hz, levels to 0.1 dB.
    package func object(wallClock: Date) -> JSONObject {
        var object: JSONObject = [
            "type": .string(kind == .onset ? "detection" : "detection_end"),
            "group": .string(group),
            "source": .string(source.rawValue),
        ]
        if let pattern { object["pattern"] = .string(pattern.rawValue) }
        object["cycles"] = .int(cycles)
        object["tone_hz"] = .int(Int(toneHz.rounded()))
        object["tone_dbfs"] = .number(toneLevelDBFS, decimals: 1)
        if pattern == .chirp { object["interval"] = .number(intervalSeconds, decimals: 1) }
        object["confidence"] = .number(Double(confidence), decimals: EventJSON.confidenceDecimals)
        if let classifierScore {
            object["classifier_score"] = .number(Double(classifierScore), decimals: EventJSON.confidenceDecimals)
            if let classifierClass { object["class"] = .string(classifierClass) }
        }
        switch kind {
        case .onset:
            object["stream_time"] = .number(start, decimals: EventJSON.timeDecimals)
            object["decision_time"] = .number(time, decimals: EventJSON.timeDecimals)
        case .end:
            object["start"] = .number(start, decimals: EventJSON.timeDecimals)
            object["end"] = .number(time, decimals: EventJSON.timeDecimals)
            object["duration"] = .number(time - start, decimals: EventJSON.timeDecimals)
            object["reason"] = .string(reason.rawValue)
        }
        object["time"] = .string(EventJSON.timestamp(wallClock))
        return object
    }


    /// The same event as a plain ``DetectionEvent`` (for consumers that only know those, such as an event store),
    /// as the socket sends it: class label the `class` sent (the classifier's, ``classifierClass``), or, when none
    /// was sent (no window classified), `"T3 pattern"`, `"T4 pattern"`, `"chirp pattern"` or `"alarm tone"` (a
    /// persistent tone); peak and mean confidence ``confidence`` (the end's is over the whole event); 0 positive
    /// windows (an alarm is decided by its tone pattern, not by counting classifier windows; its cycles are in the
    /// socket's `cycles`); an end's reason as sent.
    package var detectionEvent: DetectionEvent {
        let label = (classifierScore != nil ? classifierClass : nil) ?? pattern.map { "\($0.rawValue) pattern" } ?? "alarm tone"
        let confidence = self.confidence
        switch kind {
        case .onset:
            return .onset(.init(group: group, classLabel: label, confidence: confidence, start: start, decisionTime: time))
        case .end:
            return .offset(.init(
                group: group, classLabel: label, start: start, end: time, peakConfidence: confidence,
                meanConfidence: confidence, positiveWindows: 0, reason: reason))
        }
    }

    /// The event as a finished ``DetectionEvent/offset(_:)`` for an event store: an end as itself, an onset as a
    /// point event (start = end = its start; how a chirp, which has no end, is stored). Class label, confidence and
    /// window count (0) as in ``detectionEvent``; an end's reason as sent, `point_event`
    /// for an onset.
    package var finishedEvent: DetectionEvent {
        guard kind == .onset else { return detectionEvent }
        var point = self
        point.kind = .end
        point.time = start
        point.reason = .pointEvent
        return point.detectionEvent
    }

    /// The journal `MESSAGE`, e.g. `smoke_alarm detected: T3 pattern at 3150 Hz (1 cycle, classifier 0.81) at
    /// stream time 12.01 s` or `smoke_alarm ended: T3 pattern at 3150 Hz from 12.01 s to 40.02 s (7 cycles)`; an end
    /// the sound did not make says what did (`smoke_alarm ended (capture lost: the sound may still be going on): ...`,
    /// ``DetectionEvent/EndReason/parenthesized``).
    package var message: String {
        let what: String
        switch pattern {
        case .some(let pattern): what = "\(pattern.rawValue) pattern at \(Int(toneHz.rounded())) Hz"
        case nil: what = "alarm tone at \(Int(toneHz.rounded())) Hz"
        }
        let unit = pattern == .chirp ? "chirp" : "cycle"
        let count = "\(cycles) \(unit)\(cycles == 1 ? "" : "s")"
        switch kind {
        case .onset:
            let score = classifierScore.map { ", classifier \(JSONValue.format(Double($0), decimals: 2))" } ?? ""
            return "\(group) detected: \(what) (\(count)\(score)) at stream time \(JSONValue.format(start, decimals: 2)) s"
        case .end:
            return "\(group) ended\(reason.parenthesized): \(what) from \(JSONValue.format(start, decimals: 2)) s to \(JSONValue.format(time, decimals: 2)) s (\(count))"
        }
    }
}
