import EarshotSupport
import EarshotModel
import EarshotAnalysis
/// What a label group's debouncer decided about the stream: a sound event began (`onset`) or ended (`offset`).
///
/// Pure values: the debouncer returns them, and the caller publishes them (socket, journal) outside any lock.
/// All times are stream time in seconds (the position in the analysed audio, counted from the stream's first sample),
/// not wall-clock time; the outputs add the wall clock when they publish.
package enum DetectionEvent: Sendable, Equatable {
    /// A group's sound started.
    case onset(Onset)
    /// A group's sound ended (its hold time passed with no positive window, the stream had a gap, or it ended).
    case offset(Offset)

    /// The start of a sound event.
    package struct Onset: Sendable, Equatable {
        /// The label group's name (`LabelGroup.name`).
        package var group: String
        /// The AudioSet class label that scored highest among the group's classes in the window of `confidence`.
        package var classLabel: String
        /// The highest group score (0...1) among the positive windows of the k-of-n run that raised the event.
        package var confidence: Float
        /// Stream time (s) the event starts: the start of the earliest positive window among the last n windows
        /// when the k-of-n rule was met.
        package var start: Double
        /// Stream time (s) the decision was made: the end of the window that completed the k-of-n run. The latency
        /// of the onset is `decisionTime - start`.
        package var decisionTime: Double

        package init(group: String, classLabel: String, confidence: Float, start: Double, decisionTime: Double) {
            self.group = group
            self.classLabel = classLabel
            self.confidence = confidence
            self.start = start
            self.decisionTime = decisionTime
        }
    }

    /// Why an event ended.
    package enum EndReason: String, Sendable, Equatable {
        /// `holdSeconds` of stream time passed with no positive window.
        case holdElapsed = "hold_elapsed"
        /// The stream had a gap (xrun, device lost, input restarted): windows never join audio across it.
        case streamGap = "stream_gap"
        /// The stream ended (end of an input file, daemon shutdown).
        case streamEnd = "stream_end"
        /// The daemon reloaded a configuration that changes the window, the gate, the groups or the models.
        case reload = "reload"
        /// A smoke or CO alarm event (`AlarmDetector`): no cycle of its pattern, no beep of its tone and no agreeing
        /// classifier window for the alarm's hold time (10 s smoke, 16 s CO).
        case patternStopped = "pattern_stopped"
        /// An onset-only event (`alarm_chirp`) as the history stores it: start = end, no end was sent.
        case pointEvent = "point_event"

        /// What ended the event in a few words, when it was not the sound stopping: `capture lost` (`stream_gap`),
        /// `monitoring stopped` (`stream_end`), `configuration reloaded` (`reload`); nil for `hold_elapsed`,
        /// `pattern_stopped` and `point_event`. The one table of these words: the ntfy titles (`kitchen: Smoke
        /// alarm: capture lost`), `earshot history` text and, through ``explanation``, the text lines of an end.
        package var words: String? {
            switch self {
            case .streamGap: "capture lost"
            case .streamEnd: "monitoring stopped"
            case .reload: "configuration reloaded"
            case .holdElapsed, .patternStopped, .pointEvent: nil
            }
        }

        /// ``words`` with what they mean for the sound, as the text lines of an end put it in parentheses
        /// (`smoke_alarm ended after 9.96 s (capture lost: the sound may still be going on): ...`); nil when the
        /// sound itself stopped.
        package var explanation: String? {
            guard let words else { return nil }
            switch self {
            case .streamGap: return "\(words): the sound may still be going on"
            case .streamEnd: return "\(words): earshotd stopped or its input ended"
            default: return words
            }
        }

        /// ` (EXPLANATION)` for a text line, or nothing when the sound itself stopped (``explanation``).
        package var parenthesized: String { explanation.map { " (\($0))" } ?? "" }
    }

    /// The end of a sound event, with its summary.
    package struct Offset: Sendable, Equatable {
        /// The label group's name.
        package var group: String
        /// The class label of the window with the highest group score in the event.
        package var classLabel: String
        /// Stream time (s) the event started (equal to its onset's `start`).
        package var start: Double
        /// Stream time (s) the event ended: the end of its last positive window.
        package var end: Double
        /// The highest group score (0...1) over the event's positive windows.
        package var peakConfidence: Float
        /// The mean group score (0...1) over the event's positive windows.
        package var meanConfidence: Float
        /// How many positive windows the event had (those of the onset run included).
        package var positiveWindows: Int
        /// Why the event ended.
        package var reason: EndReason

        /// Seconds from `start` to `end`.
        package var duration: Double { end - start }

        package init(
            group: String, classLabel: String, start: Double, end: Double, peakConfidence: Float,
            meanConfidence: Float, positiveWindows: Int, reason: EndReason
        ) {
            self.group = group
            self.classLabel = classLabel
            self.start = start
            self.end = end
            self.peakConfidence = peakConfidence
            self.meanConfidence = meanConfidence
            self.positiveWindows = positiveWindows
            self.reason = reason
        }
    }

    /// The label group the event belongs to.
    package var group: String {
        switch self {
        case .onset(let onset): onset.group
        case .offset(let offset): offset.group
        }
    }
}
