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
/// Times: the session's clock is the daemon's one mapping from stream time to wall-clock time
/// (`EventLevelMeter.TimeLine`, the history's and the clips'): an event at stream time `t` sits at
/// `wallClock(t) - startDate` seconds, where `wallClock` is the mapping as it stands when the event is handed in (the
/// same `now` and latest window as the history's), so the report's clock times are the history's. With live capture
/// that is the wall clock: a stall of the input (or an outage of the capture device) is a stretch of the night with
/// no audio, and what comes after it sits at the time it was heard. The session's length runs from `startDate` to its
/// end on that clock, which never steps between two heartbeats of the daemon (`DaemonClock`): when the system clock
/// steps, ``clockStepped(by:)`` moves `startDate` with it, so the length is the time the session ran and a clock set
/// from 1970 to today during a session does not make it 56 years long; the audio it heard (``monitoredSeconds``, from the first window observed after the start to
/// the last one's end) is what the share snoring and the rates are over. An event that began before the session
/// (published because `snoring` is watched) is counted from the session's first window, with only the snores heard
/// from then on: the service tells the detector where the session's audio starts
/// (`SnoreDetector.countSnores(from:)`), so the snores, the loudness and the loudest snore of its summary leave out
/// the windows before; an event none of whose snores lies in the session is not counted. One still open at the stop
/// is counted up to its last positive window released by then (the detector holds the last snores while it waits
/// for the next snore).
///
/// - Important: A value type without locks: own it on the analysis queue.
package struct SleepSession: Sendable {
    /// The start, on the daemon's clock (the wall clock for live capture), moved by each step of that clock.
    package private(set) var startDate: Date
    private var events: [SnoreEvent] = []
    /// Stream time (s) of the first window's start, and of the latest window's end.
    private var streamStart: Double?
    private var streamEnd: Double?

    package init(startDate: Date) {
        self.startDate = startDate
    }

    /// The daemon's clock stepped by `seconds` (`clock_changed`): the start moves with it (the session began at
    /// that time on the new clock), so its length and its events' times (seconds from the start, the later ones mapped
    /// on the new clock) do not count the step.
    package mutating func clockStepped(by seconds: Double) {
        startDate.addTimeInterval(seconds)
    }

    /// One analysis window (gated ones too): the audio the session monitored.
    package mutating func observe(window: TimeRange) {
        if streamStart == nil { streamStart = window.start }
        streamEnd = max(streamEnd ?? window.start, window.end)
    }

    /// One decision of the stage's snore detector: a finished event is kept, moved to session time.
    /// - Parameter wallClock: stream time (s) to the daemon's clock, as it stands now.
    package mutating func observe(_ decision: SnoreDetector.Decision, wallClock: (Double) -> Date) {
        guard case .offset(_, let event) = decision, let kept = sessionEvent(event, wallClock: wallClock) else { return }
        events.append(kept)
    }

    /// Events found so far (finished ones), times in seconds from the session start.
    package var finishedEvents: [SnoreEvent] { events }

    /// Seconds of snoring in the finished events so far.
    package var snoringSecondsSoFar: Double { events.reduce(0) { $0 + $1.duration } }

    /// Snoring so far with the event still open in the stage (`openEvent`, as it stands, up to its last positive
    /// window released: what ``stop(openEvent:)`` would count now): seconds, events, and whether one is open.
    package func snoringSoFar(openEvent: SnoreEvent?, wallClock: (Double) -> Date) -> (seconds: Double, events: Int, open: Bool) {
        guard let openEvent, let kept = sessionEvent(openEvent, wallClock: wallClock) else {
            return (snoringSecondsSoFar, events.count, false)
        }
        return (snoringSecondsSoFar + kept.duration, events.count + 1, true)
    }

    /// Seconds of audio monitored so far.
    package var monitoredSeconds: Double { max(0, (streamEnd ?? 0) - (streamStart ?? 0)) }

    /// Ends the session at `end` (on the daemon's clock). `openEvent`: the snoring event still open in the stage, as
    /// it stands (`DetectionStage.openSnoreSummary(reason:)`), counted up to the session's end.
    /// - Returns: the report (start `startDate`, length `end - startDate`, over ``monitoredSeconds`` of audio).
    package mutating func stop(openEvent: SnoreEvent?, end: Date, wallClock: (Double) -> Date) -> SnoreReport {
        if let openEvent, let kept = sessionEvent(openEvent, wallClock: wallClock) { events.append(kept) }
        return SnoreReport(
            events: events, duration: max(0, end.timeIntervalSince(startDate)), audioSeconds: monitoredSeconds,
            source: "sleep session", startDate: startDate)
    }

    /// Whether a window has been observed (the session's time 0 is known).
    package var hasAudio: Bool { streamStart != nil }

    /// `event` cut to the session's audio and moved to session time (its times on the daemon's clock, less
    /// `startDate`); nil when none of it lies in the session, or none of its snores does (its summary counts the
    /// session's snores only).
    private func sessionEvent(_ event: SnoreEvent, wallClock: (Double) -> Date) -> SnoreEvent? {
        guard let origin = streamStart, let end = streamEnd, event.snores > 0 else { return nil }
        let start = max(event.start, origin), stop = min(event.end, end)
        guard stop > start else { return nil }
        func sessionTime(_ streamTime: Double) -> Double { wallClock(streamTime).timeIntervalSince(startDate) }
        var kept = event
        kept.start = sessionTime(start)
        kept.end = sessionTime(stop)
        kept.peakLevelTime = sessionTime(min(max(event.peakLevelTime, start), stop))
        return kept
    }
}
