import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// One clip cut from the analysis audio, ready to be written: 16 kHz mono 16-bit samples around one event.
package struct ClipAudio: Sendable, Equatable {
    /// The event's group, e.g. `smoke_alarm`.
    package var group: String
    /// Stream time (s) the event started.
    package var eventStart: Double
    /// Stream time (s) the event ended; nil when it was still going when the clip was cut (``capped``).
    package var eventEnd: Double?
    /// Timeline index (16 kHz samples from the stream's start) of the first sample.
    package var startIndex: Int64
    /// `[frames]` 16-bit samples (full scale ±32767) at ``sampleRate``.
    package var samples: [Int16]
    /// True when the event lasted longer than ``ClipRecorder/maximumEventSeconds``: the clip ends that long after
    /// the event's start, plus the post-roll.
    package var capped: Bool
    /// The wall-clock time of the event's start (names the file).
    package var wallClockStart: Date

    /// Samples per second: the analysis rate, 16000 Hz.
    package static let sampleRate = YAMNet.sampleRate
    /// Stream time (s) of the first sample.
    package var start: Double { Double(startIndex) / Double(Self.sampleRate) }
    /// Stream time (s) after the last sample.
    package var end: Double { Double(startIndex + Int64(samples.count)) / Double(Self.sampleRate) }

    package init(
        group: String, eventStart: Double, eventEnd: Double?, startIndex: Int64, samples: [Int16], capped: Bool,
        wallClockStart: Date
    ) {
        self.group = group
        self.eventStart = eventStart
        self.eventEnd = eventEnd
        self.startIndex = startIndex
        self.samples = samples
        self.capped = capped
        self.wallClockStart = wallClockStart
    }
}

/// Keeps the last seconds of the analysis audio and cuts one clip per detection event: from `preSeconds` before the
/// event's start to `postSeconds` after its end (an event longer than ``maximumEventSeconds`` is cut there), and
/// hands each clip to `deliver` as soon as its last sample has arrived.
///
/// Audio: the 16 kHz mono samples the classifier hears (``AudioStreamAnalyzer/onResampledAudio``), kept in a
/// ``ClipRing`` of `preSeconds + maximumEventSeconds + postSeconds` (+1 s) allocated once: 2.2 MB with the default
/// 5 s + 60 s + 5 s. Nothing is allocated per block; each clip allocates its own samples when it is cut.
///
/// Limits, by design:
/// - A clip starts no earlier than the stream (or the last gap) and ends no later than the stream's end, a gap or a
///   shutdown: clips, like windows, never join audio across a gap (an xrun, a device reopened). Holes of at most
///   ``bridgeableSamples`` (a resampler restarted at a reload loses its filter tail) are filled with silence.
/// - Events of the same group may overlap clips (a new event within the previous one's post-roll): each gets its own.
///
/// - Important: Own it on the analysis queue: every method must be called there. `deliver` is called there too and
///   must return at once (the writer works on its own queue).
package final class ClipRecorder {
    /// The longest part of an event a clip holds, in seconds; longer events are cut there (``ClipAudio/capped``).
    package static let maximumEventSeconds: Double = 60
    /// The largest hole in the timeline filled with silence instead of being treated as a gap (50 ms).
    package static let bridgeableSamples: Int64 = 800

    private struct Pending {
        var group: String
        var eventStart: Double
        var eventEnd: Double?
        /// Timeline index of the clip's first sample (may precede what the ring holds: the clip starts later).
        var from: Int64
        /// Timeline index after the clip's last sample.
        var target: Int64
        var wallClockStart: Date
    }

    package let settings: ClipSettings
    private var ring: ClipRing
    private var pending: [Pending] = []
    private var started = false
    private let deliver: (ClipAudio) -> Void
    private let now: () -> Date
    /// How an event's stream time becomes the wall-clock second its clip is named by: as the history's
    /// (``EventLevelMeter/TimeLine``).
    private var timeLine: EventLevelMeter.TimeLine
    private let preSamples: Int64
    private let postSamples: Int64
    private let capSamples: Int64
    private static let rate = Double(ClipAudio.sampleRate)

    /// - Parameters:
    ///   - settings: `[clips]` (pre and post seconds, groups; the caller decides `enabled`).
    ///   - now: the wall clock (tests pass a fixed one).
    ///   - timeLine: `.live` (real-time input: the latest audio is now), or `.stream(origin:)` for input replayed at
    ///     another speed (stream time 0 is the daemon's start), so that a clip is named by its event's start as the
    ///     history stores it.
    ///   - deliver: gets each finished clip, on the caller's queue.
    package init(settings: ClipSettings, now: @escaping () -> Date = { Date() }, timeLine: EventLevelMeter.TimeLine = .live,
         deliver: @escaping (ClipAudio) -> Void) {
        self.settings = settings
        self.timeLine = timeLine
        self.deliver = deliver
        self.now = now
        preSamples = Self.index(settings.preSeconds)
        postSamples = Self.index(settings.postSeconds)
        capSamples = Self.index(Self.maximumEventSeconds)
        ring = ClipRing(capacity: Int(preSamples + capSamples + postSamples) + ClipAudio.sampleRate)
    }

    /// The daemon's clock stepped by `seconds` (`clock_changed`): clips of events that start from now on are named
    /// on the shifted time line (``EventLevelMeter/TimeLine/shifted(by:)``); names already given stay.
    package func clockStepped(by seconds: Double) {
        timeLine = timeLine.shifted(by: seconds)
    }

    /// Bytes of the audio ring (allocated at init).
    package var ringBytes: Int { ring.storageBytes }

    /// Clips waiting for their last samples.
    package var pendingCount: Int { pending.count }

    private static func index(_ seconds: Double) -> Int64 {
        Int64((seconds * rate).rounded(.toNearestOrAwayFromZero))
    }

    // MARK: Audio

    /// Takes analysis samples whose first is at timeline index `index` (see ``ClipRing``); cuts the clips they
    /// complete. Does not allocate, except for the clips it cuts.
    package func append(_ samples: UnsafeBufferPointer<Float>, at index: Int64) {
        if !started {
            started = true
            ring.restart(at: index)
        } else if index != ring.endIndex {
            let hole = index - ring.endIndex
            if hole > 0 && hole <= Self.bridgeableSamples {
                ring.appendSilence(Int(hole))
                cutFinished()
            } else {
                // A gap: the clips waiting end here, with what they have.
                cutAll()
                ring.restart(at: index)
            }
        }
        var offset = 0
        while offset < samples.count {
            // Stop at the next clip's end, so that a long block cannot push a waiting clip's start out of the ring.
            var room = samples.count - offset
            for clip in pending where clip.target > ring.endIndex {
                room = min(room, Int(clip.target - ring.endIndex))
            }
            ring.append(UnsafeBufferPointer(rebasing: samples[offset..<(offset + room)]))
            offset += room
            cutFinished()
        }
    }

    // MARK: Events

    /// A detection event started at stream time `start` (s).
    package func eventStarted(group: String, start: Double) {
        guard settings.saves(group: group) else { return }
        let startIndex = Self.index(start)
        let wallClockStart = timeLine.date(of: start, latestWindowEnd: Double(ring.endIndex) / Self.rate, now: now())
        pending.append(Pending(
            group: group, eventStart: start, eventEnd: nil, from: startIndex - preSamples,
            target: startIndex + capSamples + postSamples, wallClockStart: wallClockStart))
    }

    /// The open event of `group` ended at stream time `end` (s). Nothing happens when its clip was already cut (an
    /// event longer than the cap) or none was started.
    package func eventEnded(group: String, end: Double) {
        guard let position = pending.lastIndex(where: { $0.group == group && $0.eventEnd == nil }) else { return }
        let clip = pending[position]
        pending[position].eventEnd = end
        pending[position].target = Self.index(min(end, clip.eventStart + Self.maximumEventSeconds)) + postSamples
        cutFinished()
    }

    /// An event with no duration (a smoke detector's low-battery chirp) at stream time `time` (s).
    package func pointEvent(group: String, time: Double) {
        eventStarted(group: group, start: time)
        eventEnded(group: group, end: time)
    }

    /// Takes a daemon event: onsets start clips, ends finish them.
    package func observe(_ event: DetectionEvent) {
        switch event {
        case .onset(let onset): eventStarted(group: onset.group, start: onset.start)
        case .offset(let offset): eventEnded(group: offset.group, end: offset.end)
        }
    }

    /// Takes a smoke/CO pattern alarm: onsets and ends as for detections; a chirp (onset only) is a point event.
    package func observe(_ alarm: AlarmEvent) {
        switch alarm.kind {
        case .onset where alarm.group == AlarmEvent.alarmChirp: pointEvent(group: alarm.group, time: alarm.start)
        case .onset: eventStarted(group: alarm.group, start: alarm.start)
        case .end: eventEnded(group: alarm.group, end: alarm.time)
        }
    }

    /// The stream ended or the daemon stops: every waiting clip is cut with the audio there is.
    package func finish() {
        cutAll()
    }

    // MARK: Cutting

    private func cutFinished() {
        var position = 0
        while position < pending.count {
            if pending[position].target <= ring.endIndex {
                cut(pending.remove(at: position), reachedEnd: true)
            } else {
                position += 1
            }
        }
    }

    private func cutAll() {
        let waiting = pending
        pending.removeAll(keepingCapacity: true)
        for clip in waiting { cut(clip, reachedEnd: clip.target <= ring.endIndex) }
    }

    private func cut(_ clip: Pending, reachedEnd: Bool) {
        let (first, samples) = ring.copy(from: clip.from, to: clip.target)
        guard !samples.isEmpty else { return }
        let capped = clip.eventEnd.map { $0 > clip.eventStart + Self.maximumEventSeconds } ?? reachedEnd
        deliver(ClipAudio(
            group: clip.group, eventStart: clip.eventStart, eventEnd: clip.eventEnd, startIndex: first,
            samples: samples, capped: capped, wallClockStart: clip.wallClockStart))
    }
}
