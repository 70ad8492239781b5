import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// One sleep session: runs the ``SnoreDetector`` over the daemon's windows from `start` to `stop`, and turns the
/// snoring it found into a ``SnoreReport``.
///
/// Times: the session's clock is the audio it monitored. Its time 0 is the start of the first window observed
/// after `start`, its length runs to the end of the last window observed, and events sit at their stream time minus
/// that start. With live capture that is wall-clock time; an outage of the capture device (no audio) is not counted,
/// and a file streamed faster than real time is reported on its own time line. The report's `startDate` is the
/// wall-clock time the session started.
///
/// - Important: A value type without locks: own it on the analysis queue.
package struct SleepSession: Sendable {
    /// Wall-clock start.
    package let startDate: Date
    private var detector: SnoreDetector
    private var events: [SnoreEvent] = []
    /// Stream time (s) of the first window's start, and of the latest window's end.
    private var streamStart: Double?
    private var streamEnd: Double?

    /// - Parameter head: a custom head adding to the snore evidence (see ``SnoreDetector``), or nil.
    /// - Throws: `EarshotError(.config)` when `classLabels` lacks "Snoring" (see ``SnoreDetector``).
    package init(
        startDate: Date, classLabels: [String], configuration: SnoreDetector.Configuration,
        head: SnoreDetector.HeadEvidence? = nil
    ) throws(EarshotError) {
        self.startDate = startDate
        detector = try SnoreDetector(classLabels: classLabels, configuration: configuration, head: head)
    }

    /// Feeds one window; returns the snoring events to publish (group "snoring"), in order.
    package mutating func observe(
        windowStart: Double, windowDuration: Double, levelDBFS: Float, scores: [Float]?, embedding: [Float] = []
    ) -> [DetectionEvent] {
        if streamStart == nil { streamStart = windowStart }
        streamEnd = max(streamEnd ?? windowStart, windowStart + windowDuration)
        let decisions = detector.process(
            windowStart: windowStart, windowDuration: windowDuration, levelDBFS: levelDBFS, scores: scores,
            embedding: embedding)
        return take(decisions)
    }

    /// Events found so far (finished ones), times in seconds from the session start.
    package var finishedEvents: [SnoreEvent] { events }

    /// Seconds of snoring in the finished events so far.
    package var snoringSecondsSoFar: Double { events.reduce(0) { $0 + $1.duration } }

    /// Seconds of audio monitored so far.
    package var monitoredSeconds: Double { max(0, (streamEnd ?? 0) - (streamStart ?? 0)) }

    /// Ends the session: the detector decides its held windows and an open event ends (reason `stream_end`).
    /// - Returns: the report (wall-clock start `startDate`, length ``monitoredSeconds``) and the last events to
    ///   publish.
    package mutating func stop() -> (report: SnoreReport, events: [DetectionEvent]) {
        let last = take(detector.finish())
        let report = SnoreReport(events: events, duration: monitoredSeconds, source: "sleep session", startDate: startDate)
        return (report, last)
    }

    /// Keeps the finished events (moved to session time) and returns every decision as a detection event.
    private mutating func take(_ decisions: [SnoreDetector.Decision]) -> [DetectionEvent] {
        let origin = streamStart ?? 0
        for decision in decisions {
            guard case .offset(_, var event) = decision else { continue }
            event.start -= origin
            event.end -= origin
            event.peakLevelTime -= origin
            events.append(event)
        }
        return decisions.map(\.event)
    }
}
