import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// Measures the loudness of detection events from the analysis windows' RMS levels, and turns finished events
/// (stream time) into ``HistoryEvent``s (wall-clock time).
///
/// Feed it every analysis window (``observe(windowStart:windowDuration:levelDBFS:)``, gated windows included) and
/// every detection event right after the window that produced it (``finish(_:now:)``). An event's level is taken
/// over the windows that lie inside `[start, end]` of its offset: the energy mean
/// `10 log10(mean(10^(L/10)))` and the maximum. An onset may start up to ``recentWindowLimit`` windows back (the
/// k-of-n rule looks back n windows), so the last windows are kept.
///
/// Wall clock (``TimeLine``): with real-time input the latest window's end is "now" in stream time, so an event
/// time `t` is `now - (latestWindowEnd - t)` seconds (``TimeLine/live``: follows the system clock, no drift between
/// the audio's clock and it). Input replayed faster or slower (`--input-speed`) uses ``TimeLine/stream(origin:)``:
/// `t` seconds after the origin (the daemon's start), so events stay in order, none starts before the daemon did,
/// and the times agree with a sleep session started with the daemon (whose report is its start plus stream
/// seconds) to within the daemon's start-up time.
///
/// - Important: A value type without locks: own it on the analysis queue.
package struct EventLevelMeter: Sendable {
    /// Windows kept for onsets that start in the past: 100 (the largest n of a k-of-n rule) plus a margin.
    package static let recentWindowLimit = 128

    /// How stream seconds become wall-clock times.
    package enum TimeLine: Sendable, Equatable {
        /// Real-time input: the latest window ends now.
        case live
        /// Replayed input: stream time 0 is `origin` (the daemon's start).
        case stream(origin: Date)

        /// The wall-clock time of stream time `streamTime` (s), when the latest window observed ends at stream time
        /// `latestWindowEnd` and the wall clock reads `now`: `now - (latestWindowEnd - streamTime)` (``live``), or
        /// `origin + streamTime` (``stream(origin:)``). The one mapping of the history, the clips' names and the
        /// sleep reports: handed the same `now` and latest window, they give the same time for the same event.
        package func date(of streamTime: Double, latestWindowEnd: Double, now: Date) -> Date {
            switch self {
            case .live: now.addingTimeInterval(streamTime - latestWindowEnd)
            case .stream(let origin): origin.addingTimeInterval(streamTime)
            }
        }

        /// The time line after the daemon's clock stepped by `seconds` (``DaemonClock``, `clock_changed`): a
        /// replayed stream's origin moves with the clock, so that later events carry the new time as live ones do
        /// (``live`` takes the daemon's clock as `now` and needs nothing).
        package func shifted(by seconds: Double) -> TimeLine {
            switch self {
            case .live: .live
            case .stream(let origin): .stream(origin: origin.addingTimeInterval(seconds))
            }
        }
    }

    package struct Window: Sendable, Equatable {
        package var start: Double
        package var end: Double
        package var levelDBFS: Float
    }

    private var recent: [Window] = []
    private var open: [String: [Window]] = [:]
    /// Stream time (s) of the end of the latest window observed.
    package private(set) var latestWindowEnd: Double = 0
    package private(set) var timeLine: TimeLine

    package init(timeLine: TimeLine = .live) {
        self.timeLine = timeLine
    }

    /// The daemon's clock stepped by `seconds`: later events are mapped on the shifted time line
    /// (``TimeLine/shifted(by:)``).
    package mutating func clockStepped(by seconds: Double) {
        timeLine = timeLine.shifted(by: seconds)
    }

    /// One analysis window: start and duration in stream seconds, RMS level in dBFS.
    package mutating func observe(windowStart: Double, windowDuration: Double, levelDBFS: Float) {
        let window = Window(start: windowStart, end: windowStart + windowDuration, levelDBFS: levelDBFS)
        latestWindowEnd = max(latestWindowEnd, window.end)
        recent.append(window)
        if recent.count > Self.recentWindowLimit { recent.removeFirst(recent.count - Self.recentWindowLimit) }
        for group in open.keys { open[group]?.append(window) }
    }

    /// Takes an event: an onset starts collecting windows for its group; an offset returns the finished event with
    /// its levels and wall-clock times (nil for an onset).
    ///
    /// - Parameter now: the wall-clock time of the latest observed window's end (``TimeLine/live``).
    package mutating func finish(_ event: DetectionEvent, now: Date) -> HistoryEvent? {
        switch event {
        case .onset(let onset):
            open[onset.group] = recent.filter { $0.start >= onset.start - 1e-6 }
            return nil
        case .offset(let offset):
            let windows = (open.removeValue(forKey: offset.group) ?? recent)
                .filter { $0.start >= offset.start - 1e-6 && $0.end <= offset.end + 1e-6 }
            let (mean, peak) = Self.levels(windows.map(\.levelDBFS))
            let latest = latestWindowEnd
            let timeLine = timeLine
            let wallClock = { (streamTime: Double) -> Date in timeLine.date(of: streamTime, latestWindowEnd: latest, now: now) }
            return HistoryEvent(
                group: offset.group, classLabel: offset.classLabel, start: wallClock(offset.start),
                end: wallClock(offset.end), peakConfidence: offset.peakConfidence, meanConfidence: offset.meanConfidence,
                levelDBFS: mean, peakLevelDBFS: peak, windows: offset.positiveWindows, endReason: offset.reason.rawValue)
        }
    }

    /// Energy mean and maximum of levels in dBFS; both the floor (-120) for no levels (``LevelStatistics``).
    package static func levels(_ values: [Float]) -> (mean: Float, peak: Float) { LevelStatistics.levels(values) }
}
