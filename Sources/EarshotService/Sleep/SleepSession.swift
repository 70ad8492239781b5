import FoundationEssentials
import EarshotSupport
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// One sleep session: gathers the snoring that the detection stage's snore detector (`SnoreDetector`, the one that
/// decides group `snoring`) finds from `start` to `stop`, and turns it into a ``SnoreReport``. The session runs no
/// detector of its own, so the daemon's `snoring` events, the session's report and `earshot report --snore` on the
/// same audio agree.
///
/// Times: the session's clock is the audio it monitored. Its time 0 is the start of the first window observed
/// after `start`, its length runs to the end of the last window observed, and events sit at their stream time minus
/// that start. With live capture that is wall-clock time; an outage of the capture device (no audio) is not counted,
/// and a file streamed faster than real time is reported on its own time line. The report's `startDate` is the
/// wall-clock time the session started. An event that began before the session (published because `snoring` is
/// watched) is counted from the session's time 0, with only the snores heard from then on: the service tells the
/// detector where the session's audio starts (`SnoreDetector.countSnores(from:)`), so the snores, the loudness and
/// the loudest snore of its summary leave out the windows before; an event none of whose snores lies in the
/// session is not counted. One still open at the stop is counted up to its last positive window released by then
/// (the detector holds the last snores while it waits for the next snore).
///
/// - Important: A value type without locks: own it on the analysis queue.
package struct SleepSession: Sendable {
    /// Wall-clock start.
    package let startDate: Date
    private var events: [SnoreEvent] = []
    /// Stream time (s) of the first window's start, and of the latest window's end.
    private var streamStart: Double?
    private var streamEnd: Double?

    package init(startDate: Date) {
        self.startDate = startDate
    }

    /// One analysis window (gated ones too): the audio the session monitored.
    package mutating func observe(window: TimeRange) {
        if streamStart == nil { streamStart = window.start }
        streamEnd = max(streamEnd ?? window.start, window.end)
    }

    /// One decision of the stage's snore detector: a finished event is kept, moved to session time.
    package mutating func observe(_ decision: SnoreDetector.Decision) {
        guard case .offset(_, let event) = decision, let kept = sessionEvent(event) else { return }
        events.append(kept)
    }

    /// Events found so far (finished ones), times in seconds from the session start.
    package var finishedEvents: [SnoreEvent] { events }

    /// Seconds of snoring in the finished events so far.
    package var snoringSecondsSoFar: Double { events.reduce(0) { $0 + $1.duration } }

    /// Snoring so far with the event still open in the stage (`openEvent`, as it stands, up to its last positive
    /// window released: what ``stop(openEvent:)`` would count now): seconds, events, and whether one is open.
    package func snoringSoFar(openEvent: SnoreEvent?) -> (seconds: Double, events: Int, open: Bool) {
        guard let openEvent, let kept = sessionEvent(openEvent) else {
            return (snoringSecondsSoFar, events.count, false)
        }
        return (snoringSecondsSoFar + kept.duration, events.count + 1, true)
    }

    /// Seconds of audio monitored so far.
    package var monitoredSeconds: Double { max(0, (streamEnd ?? 0) - (streamStart ?? 0)) }

    /// Ends the session. `openEvent`: the snoring event still open in the stage, as it stands
    /// (`DetectionStage.openSnoreSummary(reason:)`), counted up to the session's end.
    /// - Returns: the report (wall-clock start `startDate`, length ``monitoredSeconds``).
    package mutating func stop(openEvent: SnoreEvent?) -> SnoreReport {
        if let openEvent, let kept = sessionEvent(openEvent) { events.append(kept) }
        return SnoreReport(events: events, duration: monitoredSeconds, source: "sleep session", startDate: startDate)
    }

    /// Whether a window has been observed (the session's time 0 is known).
    package var hasAudio: Bool { streamStart != nil }

    /// `event` cut to the session's audio and moved to session time; nil when none of it lies in the session, or
    /// none of its snores does (its summary counts the session's snores only).
    private func sessionEvent(_ event: SnoreEvent) -> SnoreEvent? {
        guard let origin = streamStart, let end = streamEnd, event.snores > 0 else { return nil }
        var kept = event
        kept.start = max(event.start, origin)
        kept.end = min(event.end, end)
        guard kept.end > kept.start else { return nil }
        kept.start -= origin
        kept.end -= origin
        kept.peakLevelTime = min(max(event.peakLevelTime, origin), end) - origin
        return kept
    }
}
