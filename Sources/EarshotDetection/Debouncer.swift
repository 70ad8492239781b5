import EarshotSupport
import EarshotModel
import EarshotAnalysis
/// Turns one label group's per-window scores into onset and offset events: a pure state machine, fed one analysis
/// window at a time in stream order.
///
/// Rules (all times are stream time in seconds, so they hold whether or not the level gate let a window through):
/// - A window is *positive* when its group score is `>= group.threshold`. A gated (quiet) window has no score and
///   counts as negative; it still advances stream time. A NaN score counts as negative.
/// - **Onset**: when, with no event open, at least `onsetWindows` (k) of the last `onsetOf` (n) windows are positive.
///   The onset's `start` is the start of the *earliest positive window among those last n windows*, so the event
///   covers the sound from its first positive window, not from the window that completed the run; `decisionTime` is
///   the end of the window that completed it. Its `confidence` is the highest score among those positive windows.
/// - **Offset**: when a negative window ends `holdSeconds` or more after the end of the event's last positive window.
///   The offset's `end` is the end of the last positive window (not the time the hold ran out).
/// - **Minimum interval**: after an event ends at time `e`, a window counts toward a new onset only if it starts at
///   or after `e + minIntervalSeconds`; earlier positive windows count as negative.
/// - **Gaps**: `reset(at:)`, or a window that starts after the previous window's end or before the previous window's
///   start (a discontinuity), ends an open event at its last positive window (reason `.streamGap`) and clears the
///   k-of-n history, so a run never joins windows across a gap. A stream clock that goes backwards also forgets the
///   minimum interval.
/// - Peak and mean confidence are taken over all positive windows of the event, those of the onset run included.
///
/// Times are compared with a tolerance of 1 µs so that sums of 0.48 s hops do not miss a boundary by rounding.
///
/// - Important: A value type with no locks: use one per group from one queue (the analysis queue). It performs no
///   side effects; publish the returned events outside.
package struct Debouncer: Sendable {
    /// The group whose rules this debouncer applies. Out-of-range values are clamped at init (n >= 1,
    /// 1 <= k <= n, hold and minimum interval >= 0); `DetectionEngine` rejects them with a config error first.
    /// Only its threshold may change afterwards (``setThreshold(_:)``).
    package private(set) var group: LabelGroup

    private let k: Int
    private let n: Int
    private let holdSeconds: Double
    private let minIntervalSeconds: Double
    /// Tolerance for comparing stream times (seconds).
    private static let epsilon = 1e-6

    /// One window while no event is open (the last n are kept).
    private struct Window {
        var start: Double
        var end: Double
        var score: Float
        var classLabel: String
        /// Positive and allowed to count toward an onset (outside the minimum interval).
        var counts: Bool
    }

    private struct OpenEvent {
        var start: Double
        var lastPositiveEnd: Double
        var peak: Float
        var peakClass: String
        var scoreSum: Double
        var positiveWindows: Int
    }

    private var history: [Window] = []
    private var open: OpenEvent?
    /// End of the previous event, for the minimum interval.
    private var lastEventEnd: Double?
    /// The previous window, for discontinuity checks (nil after a reset).
    private var previousWindow: (start: Double, end: Double)?
    /// Where the stream had its last reported gap (nil when none).
    private var resetTime: Double?

    /// - Parameter group: the rules; its `classLabels` are not used here (the caller computes the group score).
    package init(group: LabelGroup) {
        self.group = group
        n = max(1, group.onsetOf)
        k = min(max(1, group.onsetWindows), n)
        holdSeconds = group.holdSeconds.isFinite ? max(0, group.holdSeconds) : 0
        minIntervalSeconds = group.minIntervalSeconds.isFinite ? max(0, group.minIntervalSeconds) : 0
    }

    /// A new threshold (a reload that changed only this): it decides from the next window on; an open event, the
    /// k-of-n history (whether its windows counted) and the minimum interval go on.
    package mutating func setThreshold(_ threshold: Float) {
        group.threshold = threshold
    }

    /// Whether an event is open (an onset was returned and its offset not yet).
    package var isActive: Bool { open != nil }

    /// Feeds the next window.
    ///
    /// - Parameters:
    ///   - windowStart: stream time (s) of the window's first sample; windows come in increasing order.
    ///   - windowDuration: the window's length (s), e.g. 0.96 for YAMNet; must be finite and >= 0.
    ///   - score: the group score in 0...1, or nil for a gated (quiet) window, which counts as negative.
    ///   - topClass: the class label that gave `score`; used as the event's class (the group name when nil).
    /// - Returns: the events this window caused, in order: at most an offset (gap or hold) and an onset. A window
    ///   with a non-finite start or a bad duration is ignored and returns no event.
    package mutating func process(
        windowStart: Double, windowDuration: Double, score: Float?, topClass: String?
    ) -> [DetectionEvent] {
        guard windowStart.isFinite, windowDuration.isFinite, windowDuration >= 0 else { return [] }
        let eps = Self.epsilon
        let windowEnd = windowStart + windowDuration
        var events: [DetectionEvent] = []

        if let previous = previousWindow,
            windowStart > previous.end + eps || windowStart < previous.start - eps
        {
            if windowStart < previous.start - eps { lastEventEnd = nil }
            if let offset = close(reason: .streamGap) { events.append(offset) }
            history.removeAll()
        } else if previousWindow == nil, let gapAt = resetTime, windowStart < gapAt - eps {
            lastEventEnd = nil  // the stream clock restarted after the gap
        }
        previousWindow = (windowStart, windowEnd)
        resetTime = nil

        let value = score ?? 0
        let positive = score != nil && value >= group.threshold  // false for NaN
        let label = topClass ?? group.name

        if var event = open {
            if positive {
                event.lastPositiveEnd = windowEnd
                if value > event.peak {
                    event.peak = value
                    event.peakClass = label
                }
                event.scoreSum += Double(value)
                event.positiveWindows += 1
                open = event
                return events
            }
            if windowEnd - event.lastPositiveEnd >= holdSeconds - eps {
                if let offset = close(reason: .holdElapsed) { events.append(offset) }
            } else {
                return events
            }
        }

        let eligible = positive && (lastEventEnd.map { windowStart >= $0 + minIntervalSeconds - eps } ?? true)
        history.append(Window(start: windowStart, end: windowEnd, score: value, classLabel: label, counts: eligible))
        if history.count > n { history.removeFirst(history.count - n) }

        let run = history.filter(\.counts)
        if run.count >= k, let first = run.first {
            var peak = first
            var sum = 0.0
            for window in run {
                if window.score > peak.score { peak = window }
                sum += Double(window.score)
            }
            open = OpenEvent(
                start: first.start, lastPositiveEnd: windowEnd, peak: peak.score, peakClass: peak.classLabel,
                scoreSum: sum, positiveWindows: run.count)
            history.removeAll()
            events.append(
                .onset(
                    .init(
                        group: group.name, classLabel: peak.classLabel, confidence: peak.score, start: first.start,
                        decisionTime: windowEnd)))
        }
        return events
    }

    /// Reports a gap in the stream at stream time `streamTime` (an xrun, a lost device, a restarted input): ends an
    /// open event at its last positive window and clears the k-of-n history. The next window is not checked for a
    /// discontinuity; if it starts before `streamTime`, the stream clock restarted and the minimum interval is
    /// forgotten.
    ///
    /// - Returns: the offset (reason `.streamGap`) when an event was open, else nothing.
    package mutating func reset(at streamTime: Double) -> [DetectionEvent] {
        let events = close(reason: .streamGap).map { [$0] } ?? []
        history.removeAll()
        previousWindow = nil
        resetTime = streamTime.isFinite ? streamTime : nil
        return events
    }

    /// The stream ended (or, with `reason` `.reload`, the analysis changed): ends an open event at its last
    /// positive window (reason `reason`, default `.streamEnd`) and clears the history.
    package mutating func finish(reason: DetectionEvent.EndReason = .streamEnd) -> [DetectionEvent] {
        let events = close(reason: reason).map { [$0] } ?? []
        history.removeAll()
        previousWindow = nil
        resetTime = nil
        return events
    }

    private mutating func close(reason: DetectionEvent.EndReason) -> DetectionEvent? {
        guard let event = open else { return nil }
        open = nil
        lastEventEnd = event.lastPositiveEnd
        let mean = event.positiveWindows > 0 ? Float(event.scoreSum / Double(event.positiveWindows)) : event.peak
        return .offset(
            .init(
                group: group.name, classLabel: event.peakClass, start: event.start, end: event.lastPositiveEnd,
                peakConfidence: event.peak, meanConfidence: mean, positiveWindows: event.positiveWindows,
                reason: reason))
    }
}
