import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// The daemon's link to the event history: measures each event's loudness from the analysis windows
/// (``EventLevelMeter``) and hands finished events to an ``EventHistoryWriter``.
///
/// - Important: ``observe(_:)`` and ``record(_:)`` must be called on the analysis queue (they return at once; the
///   writer stores on its own queue). ``close()`` may be called from any queue, once, at shutdown.
package final class HistoryRecorder: @unchecked Sendable {
    // @unchecked: `meter` is touched only on the analysis queue; the writer is Sendable.
    package let writer: EventHistoryWriter
    private var meter: EventLevelMeter

    /// - Parameters:
    ///   - settings: `[history]` (path and retention; `enabled` is the caller's business).
    ///   - timeLine: how stream times become wall-clock times (``EventLevelMeter/TimeLine``; `.stream(origin:)` for input
    ///     replayed at another speed than real time).
    ///   - report: told when storing starts failing and when it works again (on the writer's queue).
    package init(
        settings: HistorySettings, timeLine: EventLevelMeter.TimeLine = .live,
        report: @escaping @Sendable (EventHistoryWriter.Report) -> Void
    ) {
        meter = EventLevelMeter(timeLine: timeLine)
        writer = EventHistoryWriter(path: settings.path, retentionDays: settings.retentionDays,
                                     checkIntervalSeconds: HistorySettings.checkIntervalSeconds, report: report)
    }

    /// One analysis window (gated ones too).
    package func observe(_ result: ClassificationResult) {
        meter.observe(windowStart: result.timeRange.start, windowDuration: result.timeRange.duration,
                      levelDBFS: result.levelDBFS)
    }

    /// One detection event, right after the window that produced it: an offset is stored.
    package func record(_ event: DetectionEvent, now: Date = Date()) {
        if let finished = meter.finish(event, now: now) { writer.append(finished) }
    }

    /// A finished event that does not come as a `DetectionEvent` (e.g. a smoke/CO pattern alarm's end): times in
    /// stream seconds, stored like an offset (levels from the windows inside `[start, end]` still held: the last
    /// ``EventLevelMeter/recentWindowLimit`` windows, about a minute). Analysis queue, right after the window that
    /// ended it.
    package func recordFinished(
        group: String, classLabel: String, start: Double, end: Double, peakConfidence: Float, meanConfidence: Float,
        windows: Int, endReason: DetectionEvent.EndReason, now: Date = Date()
    ) {
        record(.offset(.init(group: group, classLabel: classLabel, start: start, end: end, peakConfidence: peakConfidence,
                             meanConfidence: meanConfidence, positiveWindows: windows, reason: endReason)), now: now)
    }

    /// The daemon's clock stepped by `seconds` (`clock_changed`; analysis order: after the events mapped before the
    /// step): later events are mapped on the shifted time line, and the events stored or held so far move by it
    /// (``EventHistoryWriter/clockStepped(by:)``).
    package func clockStepped(by seconds: Double) {
        meter.clockStepped(by: seconds)
        writer.clockStepped(by: seconds)
    }

    /// Stores what is pending and closes the database.
    package func close() {
        writer.close()
    }
}
