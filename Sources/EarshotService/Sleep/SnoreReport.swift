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

/// A night's snoring summarised: how long and how loud, episode by episode, and in 5-minute bins.
///
/// Built from the ``SnoreEvent``s of a session (or a recording) whose times are seconds from the session's start.
/// - **Snoring time**: the union of the events' spans, clipped to `[0, duration]`.
/// - **Episodes**: events in time order, merged while the pause from one event's end to the next one's start is
///   shorter than `mergeGapSeconds` (120 s: "events closer than 2 minutes merge").
/// - **Episode loudness**: the energy mean of its events' levels weighted by event duration,
///   `10 log10(sum(d_i 10^(L_i/10)) / sum(d_i))`, and the highest event peak.
/// - **Loudest moments**: the `loudestCount` events with the loudest peak window (one moment per event), loudest
///   first (ties: earlier first).
/// - **Bins**: `binSeconds` (300 s) from the start; the last bin may be shorter. Each holds the snoring seconds
///   inside it.
/// - **Rates**: events and snores per hour of audio heard (the share snoring too): a session's stretch without audio
///   (an input stall, the capture device gone) is in its timeline but not counted.
package struct SnoreReport: Sendable, Equatable {
    /// A run of snoring events with pauses under the merge gap.
    package struct Episode: Sendable, Equatable {
        /// Seconds from the session start to the first event's start.
        package var start: Double
        /// Seconds from the session start to the last event's end.
        package var end: Double
        /// Events merged into the episode.
        package var events: Int
        /// Snores (breaths) in those events.
        package var snores: Int
        /// Seconds of snoring (the events' spans, pauses between them not counted).
        package var snoringSeconds: Double
        /// Duration-weighted energy mean of the events' levels, dBFS.
        package var levelDBFS: Float
        /// The loudest event peak, dBFS.
        package var peakLevelDBFS: Float

        package init(start: Double, end: Double, events: Int, snores: Int, snoringSeconds: Double, levelDBFS: Float,
                    peakLevelDBFS: Float) {
            self.start = start
            self.end = end
            self.events = events
            self.snores = snores
            self.snoringSeconds = snoringSeconds
            self.levelDBFS = levelDBFS
            self.peakLevelDBFS = peakLevelDBFS
        }
    }

    /// One of the loudest moments.
    package struct Moment: Sendable, Equatable {
        /// Seconds from the session start to the loudest window's start.
        package var time: Double
        /// That window's RMS level, dBFS.
        package var levelDBFS: Float

        package init(time: Double, levelDBFS: Float) {
            self.time = time
            self.levelDBFS = levelDBFS
        }
    }

    /// One bin of the timeline.
    package struct Bin: Sendable, Equatable {
        /// Seconds from the session start to the bin's start.
        package var start: Double
        /// The bin's length in seconds (`binSeconds`, less for the last bin).
        package var length: Double
        /// Seconds of snoring inside the bin.
        package var snoringSeconds: Double

        /// `snoringSeconds / length`, 0...1.
        package var fraction: Double { length > 0 ? snoringSeconds / length : 0 }

        package init(start: Double, length: Double, snoringSeconds: Double) {
            self.start = start
            self.length = length
            self.snoringSeconds = snoringSeconds
        }
    }

    /// What was analysed: a file path, or "sleep session".
    package var source: String
    /// Wall-clock time of the session's start, or nil for a recording (times are then offsets into it).
    package var startDate: Date?
    /// The session's length in seconds.
    package var duration: Double
    /// Seconds of audio heard in it (`duration` for a recording; less for a session with a stretch without audio).
    package var audioSeconds: Double
    /// The events, times in seconds from the session start, in time order.
    package var events: [SnoreEvent]
    package var episodes: [Episode]
    package var loudest: [Moment]
    /// Seconds per bin (300).
    package var binSeconds: Double
    package var bins: [Bin]
    /// Seconds of snoring (union of the events' spans).
    package var snoringSeconds: Double
    /// Snores (accepted bursts) over all events.
    package var snores: Int

    /// Wall-clock end (`startDate + duration`), or nil.
    package var endDate: Date? { startDate?.addingTimeInterval(duration) }
    /// Minutes of snoring.
    package var snoringMinutes: Double { snoringSeconds / 60 }
    /// Percent of the audio heard spent snoring, 0...100.
    package var snoringPercent: Double { audioSeconds > 0 ? min(100, 100 * snoringSeconds / audioSeconds) : 0 }
    /// Events per hour of audio heard.
    package var eventsPerHour: Double { audioSeconds > 0 ? Double(events.count) * 3600 / audioSeconds : 0 }
    /// Snores per hour of audio heard.
    package var snoresPerHour: Double { audioSeconds > 0 ? Double(snores) * 3600 / audioSeconds : 0 }

    /// Pauses shorter than this (seconds) merge events into one episode.
    package static let defaultMergeGapSeconds: Double = 120
    /// The timeline's bin length in seconds.
    package static let defaultBinSeconds: Double = 300

    /// Builds the report.
    ///
    /// - Parameters:
    ///   - events: snoring events with times in seconds from the session start (any order; events outside
    ///     `[0, duration]` are clipped to it, and dropped when nothing is left).
    ///   - duration: the session's length in seconds (negative or non-finite counts as 0).
    ///   - audioSeconds: the seconds of audio heard in it (nil: `duration`; at most `duration`).
    ///   - source: what was analysed, for the header.
    ///   - startDate: the wall-clock start, or nil for a recording.
    package init(
        events: [SnoreEvent], duration: Double, audioSeconds: Double? = nil, source: String, startDate: Date? = nil,
        mergeGapSeconds: Double = SnoreReport.defaultMergeGapSeconds,
        binSeconds: Double = SnoreReport.defaultBinSeconds, loudestCount: Int = 5
    ) {
        let length = duration.isFinite ? max(0, duration) : 0
        self.source = source
        self.startDate = startDate
        self.duration = length
        self.audioSeconds = audioSeconds.map { $0.isFinite ? min(length, max(0, $0)) : length } ?? length
        self.binSeconds = binSeconds > 0 && binSeconds.isFinite ? binSeconds : Self.defaultBinSeconds

        var clipped: [SnoreEvent] = []
        for var event in events where event.start.isFinite && event.end.isFinite {
            event.start = max(0, event.start)
            event.end = min(length, event.end)
            guard event.end > event.start else { continue }
            event.peakLevelTime = min(max(event.peakLevelTime, event.start), event.end)
            clipped.append(event)
        }
        clipped.sort { ($0.start, $0.end) < ($1.start, $1.end) }
        self.events = clipped
        snores = clipped.reduce(0) { $0 + $1.snores }

        // The union of the spans: events never overlap when they come from one detector, but may from a merge.
        var union: [(start: Double, end: Double)] = []
        for event in clipped {
            if let last = union.last, event.start <= last.end {
                union[union.count - 1].end = max(last.end, event.end)
            } else {
                union.append((event.start, event.end))
            }
        }
        snoringSeconds = union.reduce(0) { $0 + ($1.end - $1.start) }

        var episodes: [Episode] = []
        var members: [SnoreEvent] = []
        func closeEpisode() {
            guard let first = members.first else { return }
            let end = members.map(\.end).max() ?? first.end
            var weighted = 0.0
            var weights = 0.0
            for event in members {
                weighted += event.duration * pow(10, Double(event.levelDBFS) / 10)
                weights += event.duration
            }
            let level = weights > 0 ? Float(10 * log10(weighted / weights)) : first.levelDBFS
            episodes.append(Episode(
                start: first.start, end: end, events: members.count, snores: members.reduce(0) { $0 + $1.snores },
                snoringSeconds: Self.unionLength(members), levelDBFS: max(ClassificationResult.levelFloorDBFS, level),
                peakLevelDBFS: members.map(\.peakLevelDBFS).max() ?? first.peakLevelDBFS))
            members.removeAll()
        }
        for event in clipped {
            if let lastEnd = members.map(\.end).max(), event.start - lastEnd >= mergeGapSeconds { closeEpisode() }
            members.append(event)
        }
        closeEpisode()
        self.episodes = episodes

        loudest = clipped
            .sorted { ($0.peakLevelDBFS, -$0.peakLevelTime) > ($1.peakLevelDBFS, -$1.peakLevelTime) }
            .prefix(max(0, loudestCount))
            .map { Moment(time: $0.peakLevelTime, levelDBFS: $0.peakLevelDBFS) }

        let step = self.binSeconds
        let count = max(1, Int((length / step - 1e-9).rounded(.up)))
        bins = (0..<count).map { index in
            let start = Double(index) * step
            let end = min(length, start + step)
            let inside = union.reduce(0.0) { $0 + max(0, min(end, $1.end) - max(start, $1.start)) }
            return Bin(start: start, length: max(0, end - start), snoringSeconds: inside)
        }
    }

    private static func unionLength(_ events: [SnoreEvent]) -> Double {
        var total = 0.0
        var reach = -Double.infinity
        for event in events.sorted(by: { $0.start < $1.start }) {
            let start = max(event.start, reach)
            if event.end > start { total += event.end - start }
            reach = max(reach, event.end)
        }
        return total
    }
}
