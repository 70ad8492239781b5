import EarshotSupport
import EarshotModel
import EarshotAnalysis
/// The temporal patterns of residential alarms that ``AlarmPatternMatcher`` recognises.
package enum AlarmPattern: String, Sendable, Equatable {
    /// Temporal-three (ISO 8201, ANSI S3.41, NFPA 72 smoke alarms): three 0.5 s tones 0.5 s apart, 1.5 s off.
    case t3 = "T3"
    /// Temporal-four (carbon monoxide alarms, NFPA 720 / UL 2034): four ~0.1 s tones ~0.1 s apart, ~5 s off.
    case t4 = "T4"
    /// A smoke or CO alarm's low-battery chirp: one short tone, repeating every ~30-60 s.
    case chirp = "chirp"
}

/// One recognised repetition of a pattern.
package struct PatternMatch: Sendable, Equatable {
    package var pattern: AlarmPattern
    /// Stream time (s) of the first tone of the matched cycle (T3, T4) or of the chirp.
    package var cycleStart: Double
    /// Stream time (s) the match was decided: when the next cycle's first tone was confirmed (T3, a few frames
    /// after its onset), at the end of the burst's quiet check (T4), or of the chirp's isolation check.
    package var decisionTime: Double
    /// Mean tone frequency of the cycle's tones, Hz.
    package var frequencyHz: Double
    /// Mean tone level of the cycle's tones, dBFS.
    package var levelDBFS: Double
    /// For T3 and T4: the cycles of this pattern seen in a row so far, this one included (1, 2, ...).
    /// For a chirp: the chirps in a row at a steady interval, this one included (2, 3, ...).
    package var count: Int
    /// For a chirp: seconds since the previous chirp; 0 otherwise.
    package var intervalSeconds: Double
    /// For T3: the cycle's three beeps; for T4: the beeps of the cycle's first burst; first to last "on" frame
    /// (stream seconds). Empty for a chirp.
    package var beeps: [ClosedRange<Double>] = []
    /// Stream time (s) the tone that closed the cycle's long pause started (T3: the next cycle's first beep; T4: the
    /// second burst's first beep); nil for a chirp.
    package var closingToneStart: Double?
    /// For T4: whether either burst of the cycle fit the grid only once repaired (a split beep joined, a tail or an
    /// echo dropped, a lengthened beep cut back; see `AlarmPatternMatcher.t4PieceGapsSeconds`); false otherwise.
    package var repaired = false
}

/// Recognises T3 and T4 cycles and low-battery chirps in the tone segments of a ``ToneTracker``.
///
/// The decisions rest on where tones start and end on the pattern's grid, not on clean on/off runs: reverberation
/// lengthens tones and fills gaps, noise masks the start or the end of a beep, a phone's automatic gain control chops
/// them. The tones of one pattern come from one sounder, so they agree in frequency and level.
/// - T3: three tones whose onsets are d apart (0.6 s <= d <= 1.5 s, the two intervals within 20 %), each 0.08 to
///   1.2 s long, two of them at least d / 4 (a beep lasts half the period; noise cuts one at most), none much longer
///   than the others, frequencies within 2 % and peak levels within 8 dB; then the next tone 1.7 d to 2.6 d after
///   the third (the standard's 2 d; and at least 0.4 s more than d): the long pause. That next tone is the sounder's
///   next beep: within 2 % of the cycle's frequency, within -20/+12 dB of its levels and 6 dB above its noise floor,
///   so far. A first cycle (no run of cycles before it) whose next tone starts more than 12 dB below the cycle's
///   quietest beep is decided when that tone ends, and only if it ended within 12 dB or lasted d / 4: an appliance's
///   three beeps and then a blip of the noise bed are no T3 (a real beep whose start noise masked rises to its
///   level). One beep whose start noise masked may
///   count from its end (its onset = its end less the longest beep). The off phases hold no other tone of the
///   frequency (within 4 %, 12 dB of the loudest, 0.08 s or longer), and the tone before the first (if any within
///   5 s) is a long pause away, so that a steady 1 s beeper (a reversing truck) that loses one beep is not a T3;
///   nor is one whose lost beep left a piece (any length, within 2 % and 4 dB of the beeps) starting on their start
///   grid or ending on their end grid (within 0.05 s) one period after the third.
///   Decided when the next tone opens: about 4 s after the alarm starts.
/// - T4: a burst of tones (each starting at most 0.45 s after the previous one's start, or 0.35 s after its end)
///   closed by 0.9 s without another tone of that frequency (one that started in them and still sounds is waited
///   for); its tones must cover the slots of a grid of four
///   (step 0.15 to 0.3 s; the standard is 0.2 s, beeps of half a step): starts on the start grid or ends on the end
///   grid (one beep cut at either side keeps the other), a tone as long as two or three beeps and their gaps covers
///   two or three slots, two tones at least are single beeps; frequencies within 2 %, peak levels within 8 dB. Four
///   slots (from three tones or more) is a full burst, three is a burst that lost a beep. A cycle is two such bursts 3 to 9 s apart, at least one full; decided when the second closes (about 7.2 s
///   after the alarm starts). An echo of the fourth beep 6 dB down is dropped; a burst followed by another tone of
///   its frequency within 0.9 s is not T4.
/// - Chirp: a tone of at most 0.35 s at 2 kHz or more (the detector's piezo), 20 dB or more above its noise floor,
///   steady (frequency spread <= 10 Hz, or <= 1 % when nothing in the second before it was louder: a room's echo
///   moves the pitch), no more than ``chirpMaximumPrecedingDB`` (20 dB) below the loudest sound of the second before
///   it (``ToneSegment/precedingPeakDBFS``: a glass's ringing after its shatter), with no other beep of its frequency
///   (within 2 % and 10 dB) within 2.5 s on either side (its pieces, ``chirpPieces(of:in:)``, and its echo,
///   ``chirpEchoSeconds``, are not other beeps), and not the harmonic of a louder tone sounding with it
///   (``chirpHarmonicTolerance``); a match when the previous such chirp of this detector (within 0.5 %, 4 dB and
///   0.05 s of it) was 15 to 120 s before. ``PatternMatch/count`` is the chirps of the series at a steady interval: a chirp whose
///   interval differs from the series' previous interval by more than ``chirpIntervalTolerance`` starts a new series
///   of two (a detector's timer repeats itself within a second; household clicks that happen to match a tone twice
///   do not keep time).
/// "Same frequency" (the tones a pattern is looked for in) is within 5 %. Tones more than 20 dB below the loudest tone
/// of their frequency in the last 10 s (echoes, tails) are ignored.
///
/// - Important: A value type; feed it on one queue, segments in order of their end (the tracker's order).
package struct AlarmPatternMatcher: Sendable {
    /// Relative frequency tolerance between tones of one pattern.
    package static let frequencyTolerance = 0.05
    /// Shortest off time (s) between a T3 cycle's three beeps, each end to the next start. T3's is 0.5 s; the
    /// tuning alarms' shortest, in a room and through a GSM call, 0.20 s. A steady beeper's beep that noise split
    /// leaves 0.05-0.08 s between its pieces, which must not count as two beeps (tuning: `beep_fridge_door` in
    /// household noise, seeds 28, 31, 37).
    package static let minimumOffSeconds = 0.12
    /// How long (s, ``ToneSegment/duration``) the tone that closes a first T3 cycle's long pause must have sounded
    /// before the cycle is decided (a decision 0.08 s later than at its onset).
    package static let firstClosingToneSeconds = 0.08

    /// dB above its noise floor a chirp must rise (``ToneSegment/peakSNRDB``).
    package static let chirpMinimumSNRDB = 20.0
    /// Lowest chirp frequency, Hz: low-battery chirps come from the detector's piezo (2-4 kHz).
    package static let chirpMinimumHz = 2000.0
    /// How far (dB) the loudest sound of the second before a chirp (``ToneSegment/precedingPeakDBFS``) may stand
    /// above the chirp's peak: a chirp is a short tone out of the room's sound, not one resonance ringing on in the
    /// tail of an impulsive broadband sound. Tuning (the tuning twin's chirps and `earshot eval`'s, in speech and
    /// household noise at 0 dB): chirps at most 14 dB below it; a breaking glass's resonances 25-37 dB below it.
    package static let chirpMaximumPrecedingDB = 20.0
    /// How far (s) a chirp's interval may differ from the previous interval of its series and still continue it:
    /// the larger of 1 s and 3 % of the previous interval (a detector's timer keeps its period to well under a
    /// second; the chirp's measured start moves by a frame or two).
    package static func chirpIntervalTolerance(previous: Double) -> Double { max(1, 0.03 * previous) }
    /// Largest frequency spread (``ToneSegment/frequencySpreadHz``, Hz) of a chirp in any case: a piezo holds its
    /// pitch (tuning: dry chirps 0.1-0.3 %, 3-9 Hz); a voice's harmonic glides by several percent.
    package static let chirpSteadySpreadHz = 10.0
    /// Largest frequency spread of a chirp that stands above everything of the second before it
    /// (``ToneSegment/precedingPeakDBFS`` at most its peak), as a fraction of its frequency. In a reverberant room
    /// the echo that builds up over a chirp's first tenths of a second moves the measured peak (tuning: chirps in
    /// rooms of 0.6 s RT60 spread 0.3-0.84 %, 10-26 Hz); the resonances of a shatter spread as much, but come out of
    /// the shatter itself (a glass's 2625 Hz, 0.64 %, 1.8 dB below the second before it).
    package static let chirpMaximumSpread = 0.01
    /// How close (fraction of the chirp's frequency) a chirp must be to 2, 3 or 4 times a louder tone sounding with
    /// it to be that tone's harmonic (tuning: a door's click 0.2-1.9 % off; the tracker's estimates of short tones
    /// move by a bin's fraction).
    package static let chirpHarmonicTolerance = 0.02
    /// Longest gap (s) between pieces of one chirp: the dips of a reverberant room's echo (tuning: 0.02-0.07 s).
    package static let chirpPieceGapSeconds = 0.08
    /// Longest span (s) of one chirp's pieces: the chirp (at most 0.35 s) and the echo that carries it on.
    package static let chirpMaximumSpanSeconds = 0.45
    /// How long after a chirp's start (s) a weaker tone of its frequency is its echo rather than another beep: the
    /// louder part of a room's echo (tuning: echo pieces 0.2-0.25 s after the start, after gaps of up to 0.15 s,
    /// 6-10 dB down, in rooms of 0.6 s RT60).
    package static let chirpEchoSeconds = 0.5
    /// How far (dB) below the chirp's peak such an echo stands at least. A sounder's next beep is about as loud as
    /// the last (the beepers of the tuning sets, within 3 dB).
    package static let chirpEchoBelowDB = 3.0

    private var tones: [ToneSegment] = []
    private var openOnsets: [(start: Double, frequencyHz: Double)] = []
    /// Open tones that would close a first T3 cycle but started weak: matched again, complete, when they end.
    private var weakNextOnsets: [(start: Double, frequencyHz: Double)] = []
    /// Open tones that would close a first T3 cycle but have not yet sounded ``firstClosingToneSeconds``: matched
    /// again by ``recheck(open:now:)`` once they have, or when they end.
    private var shortNextOnsets: [(start: Double, frequencyHz: Double)] = []
    private var t3Run: (count: Int, last: Double, frequencyHz: Double)?
    private var pendingBursts: [Burst] = []
    private var t4Bursts: [(burst: Burst, run: Int, complete: Bool, repaired: Bool)] = []
    private var chirpCandidates: [ToneSegment] = []
    /// Isolated chirps of the last 120 s: the chirp (``joined(_:)``), the span of its pieces (s), the chirps of its
    /// series and the interval to the chirp before it (nil for a first chirp).
    private var recentChirps: [(tone: ToneSegment, span: Double, count: Int, interval: Double?)] = []

    private struct Burst: Sendable {
        var tones: [ToneSegment]
        /// Another tone of the burst's frequency came 0.45 to 0.9 s after its last onset: not a T4 burst, which is
        /// followed by a long pause.
        var interrupted = false
        var frequencyHz: Double { tones.map(\.frequencyHz).reduce(0, +) / Double(tones.count) }
        var start: Double { tones[0].start }
        var lastStart: Double { tones[tones.count - 1].start }
    }

    /// Shortest tone (s) that closes a T3 cycle's long pause, for a matcher fed only finished segments (the
    /// rejoining matchers: a rejoined beep is whole; a 0.03 s click of noise after an appliance's three beeps is no
    /// beep). 0 for the first matcher, which decides on a tone as it opens.
    package let minimumClosingToneSeconds: Double

    package init(minimumClosingToneSeconds: Double = 0) {
        self.minimumClosingToneSeconds = minimumClosingToneSeconds
    }

    /// Forgets everything (a gap in the stream: patterns never join across it).
    package mutating func reset() { self = AlarmPatternMatcher(minimumClosingToneSeconds: minimumClosingToneSeconds) }

    private static func same(_ a: Double, _ b: Double) -> Bool {
        abs(a - b) <= frequencyTolerance * max(a, b)
    }

    /// Whether a remembered onset (start, frequency) is `tone`'s: the same start, the same frequency.
    private static func isOnset(_ onset: (start: Double, frequencyHz: Double), of tone: ToneSegment) -> Bool {
        onset.start == tone.start && same(onset.frequencyHz, tone.frequencyHz)
    }

    /// A tone has started: `tone` is its segment, still open, as it stands (its level so far), and the tracker has
    /// analysed audio up to `now`. Decides T3 cycles, whose last interval ends at the next cycle's first onset.
    /// Call once per new open segment.
    package mutating func toneStarted(_ tone: ToneSegment, now: Double) -> [PatternMatch] {
        if openOnsets.contains(where: { Self.isOnset($0, of: tone) }) { return [] }
        openOnsets.append((tone.start, tone.frequencyHz))
        return matchT3(next: tone, now: now)
    }

    /// The open tones as they stand at `now`: a parked closing tone of a first T3 cycle that has now sounded
    /// ``firstClosingToneSeconds`` is matched again. Call once per block, after ``toneStarted(_:now:)``.
    package mutating func recheck(open: [ToneSegment], now: Double) -> [PatternMatch] {
        guard !shortNextOnsets.isEmpty else { return [] }
        var matches: [PatternMatch] = []
        for tone in open where tone.duration >= Self.firstClosingToneSeconds {
            guard let index = shortNextOnsets.firstIndex(where: { Self.isOnset($0, of: tone) }) else { continue }
            shortNextOnsets.remove(at: index)
            matches += matchT3(next: tone, now: now)
        }
        return matches
    }

    /// A tone segment has ended (the tracker has analysed audio up to `now`). Returns matches it completes (T4
    /// bursts are decided later, in ``advance(to:)``).
    package mutating func add(_ tone: ToneSegment, now: Double) -> [PatternMatch] {
        var matches: [PatternMatch] = []
        let announced = { (onset: (start: Double, frequencyHz: Double)) in Self.isOnset(onset, of: tone) }
        // Matched now, as a finished tone (a weak first-cycle closing tone judged on its final level and length):
        // one never seen open (the rejoining matchers see only finished segments; a tone that opened and ended in
        // one block), or one parked at its start as a weak closing tone. A tone seen open and not parked was
        // matched when it started.
        if !openOnsets.contains(where: announced) || weakNextOnsets.contains(where: announced)
            || shortNextOnsets.contains(where: announced) {
            matches += matchT3(next: tone, now: now, complete: true)
        }
        openOnsets.removeAll { announced($0) || $0.start < tone.start - 30 }
        weakNextOnsets.removeAll { announced($0) || $0.start < tone.start - 30 }
        shortNextOnsets.removeAll { announced($0) || $0.start < tone.start - 30 }
        // Tones of different frequencies end in any order; keep them in order of their start.
        let position = tones.lastIndex { $0.start <= tone.start }.map { $0 + 1 } ?? 0
        tones.insert(tone, at: position)
        tones.removeAll { $0.start < tone.start - 30 }
        if isStrong(tone) {
            addToBursts(tone)
            // A chirp is a detector's piezo sounding 20 dB or more above the noise of its band (a bit of noise is
            // not, usually), at 2 kHz or more,
            // steady in frequency (a voice's harmonics glide), and not the ringing tail of a much louder sound.
            if tone.duration <= 0.35, tone.peakSNRDB >= Self.chirpMinimumSNRDB, tone.frequencyHz >= Self.chirpMinimumHz,
               tone.frequencySpreadHz <= Self.chirpSteadySpreadHz
                || (tone.frequencySpreadHz <= Self.chirpMaximumSpread * tone.frequencyHz
                    && tone.precedingPeakDBFS <= tone.peakLevelDBFS),
               tone.precedingPeakDBFS - tone.peakLevelDBFS <= Self.chirpMaximumPrecedingDB {
                chirpCandidates.append(tone)
            }
        }
        return matches
    }

    /// Stream time has reached `time` (s): closes T4 bursts and chirp isolation checks that are due.
    package mutating func advance(to time: Double) -> [PatternMatch] {
        var matches: [PatternMatch] = []
        // T4 bursts close after 0.9 s without another tone of their frequency.
        var open: [Burst] = []
        for burst in pendingBursts {
            // A tone of the burst's frequency that started within those 0.9 s and sounds still (a reverberant
            // beep is longer than the matcher's wait) is heard before the burst closes: it extends or
            // interrupts it when it ends. Waited for up to 2 s after the last start (a tone the tracker drops
            // unended must not hold a burst open).
            let sounding = openOnsets.contains {
                $0.start > burst.lastStart && $0.start - burst.lastStart < 0.9 && Self.same($0.frequencyHz, burst.frequencyHz)
            }
            if time - burst.lastStart >= 0.9 && !(sounding && time - burst.lastStart < 2.0) {
                if let match = closeBurst(burst, at: sounding ? time : burst.lastStart + 0.9) { matches.append(match) }
            } else {
                open.append(burst)
            }
        }
        pendingBursts = open
        // Chirps are decided 2.5 s after they start, when no neighbour came.
        var waiting: [ToneSegment] = []
        for candidate in chirpCandidates {
            guard time - candidate.start >= 2.5 else {
                waiting.append(candidate)
                continue
            }
            // In a room, the chirp's echo carries it on for a few tenths of a second, and its dips split it into
            // pieces; they are one chirp, and one of them decides it.
            let pieces = Self.chirpPieces(of: candidate, in: tones)
            let chirp = Self.joined(pieces)
            let span = (pieces.map(\.end).max() ?? chirp.end) - chirp.start
            guard !recentChirps.contains(where: { $0.tone.start == chirp.start && $0.tone.frequencyHz == chirp.frequencyHz })
            else { continue }
            // A neighbour is another beep of the same sounder: within 2 % and 10 dB of the chirp (bits of noise near
            // the frequency are weaker or off it), and neither a piece of the chirp nor its echo (a weaker tone of its
            // frequency that starts within ``chirpEchoSeconds`` after it).
            let isolated = !tones.contains { tone in
                !pieces.contains { $0.start == tone.start && $0.frequencyHz == tone.frequencyHz }
                    && !(tone.start > chirp.start && tone.start - chirp.start <= Self.chirpEchoSeconds
                         && tone.peakLevelDBFS <= chirp.peakLevelDBFS - Self.chirpEchoBelowDB)
                    && abs(tone.start - chirp.start) < 2.5
                    && abs(tone.frequencyHz - chirp.frequencyHz) <= 0.02 * chirp.frequencyHz
                    && tone.peakLevelDBFS > chirp.peakLevelDBFS - 10
            }
            guard isolated else { continue }
            // A piezo's chirp is its lowest tone: a tone at two to four times the frequency of a louder one sounding
            // with it is that sound's harmonic (a door's click: 2891 Hz over 1439 Hz, 3751 Hz over 1253 Hz).
            let harmonic = tones.contains { tone in
                tone.peakLevelDBFS >= chirp.peakLevelDBFS && tone.start <= chirp.end && tone.end >= chirp.start
                    && (2...4).contains {
                        abs(chirp.frequencyHz - Double($0) * tone.frequencyHz) <= Self.chirpHarmonicTolerance * chirp.frequencyHz
                    }
            }
            guard !harmonic else { continue }
            // The previous chirp of this detector: the last isolated tone like it (a piezo repeats itself: frequency
            // within 0.5 %, peak level within 4 dB, length within 0.05 s: its first piece's, or in a room, where
            // the echo's dips fall differently on each chirp, the span of its pieces) 15 to 120 s before. Isolated
            // bits of noise at other frequencies come in between and do not break the series.
            recentChirps.removeAll { chirp.start - $0.tone.start > 120 }
            let previous = recentChirps.last {
                abs($0.tone.frequencyHz - chirp.frequencyHz) <= 0.005 * chirp.frequencyHz
                    && abs($0.tone.peakLevelDBFS - chirp.peakLevelDBFS) <= 4
                    && (abs($0.tone.duration - chirp.duration) <= 0.05 || abs($0.span - span) <= 0.05)
            }
            if let previous, chirp.start - previous.tone.start >= 15 {
                let interval = chirp.start - previous.tone.start
                // The series goes on when the interval keeps time with the previous one; otherwise the previous
                // chirp and this one start a new series.
                let steady = previous.interval.map {
                    abs(interval - $0) <= Self.chirpIntervalTolerance(previous: $0)
                } ?? true
                let count = steady ? previous.count + 1 : 2
                matches.append(PatternMatch(
                    pattern: .chirp, cycleStart: chirp.start, decisionTime: candidate.start + 2.5,
                    frequencyHz: chirp.frequencyHz, levelDBFS: chirp.levelDBFS, count: count,
                    intervalSeconds: interval))
                recentChirps.append((chirp, span, count, interval))
            } else {
                recentChirps.append((chirp, span, 1, nil))
            }
        }
        chirpCandidates = waiting
        return matches
    }

    /// The pieces of the chirp `candidate` belongs to, in order of start: the tones within
    /// ``chirpMaximumSpread`` of its frequency and 10 dB of its peak that join it, each starting at most
    /// ``chirpPieceGapSeconds`` after the end of the pieces before it (or ending that close before their start), all
    /// within ``chirpMaximumSpanSeconds``. (Tuning: a room's pieces of one chirp lie within 0.4 % of each other;
    /// a bit of noise 2 % off and 24 dB down, 0.04 s before a chirp, must not become its start.)
    static func chirpPieces(of candidate: ToneSegment, in tones: [ToneSegment]) -> [ToneSegment] {
        let near = tones.filter {
            abs($0.start - candidate.start) <= chirpMaximumSpanSeconds
                && abs($0.frequencyHz - candidate.frequencyHz) <= chirpMaximumSpread * candidate.frequencyHz
                && $0.peakLevelDBFS > candidate.peakLevelDBFS - 10
        }
        var pieces = [candidate], start = candidate.start, end = candidate.end
        var joined = true
        while joined {
            joined = false
            for tone in near where !pieces.contains(where: { $0.start == tone.start && $0.frequencyHz == tone.frequencyHz }) {
                guard tone.start <= end + chirpPieceGapSeconds, tone.end >= start - chirpPieceGapSeconds,
                      max(end, tone.end) - min(start, tone.start) <= chirpMaximumSpanSeconds else { continue }
                pieces.append(tone)
                start = min(start, tone.start)
                end = max(end, tone.end)
                joined = true
            }
        }
        return pieces.sorted { $0.start < $1.start }
    }

    /// One chirp from its pieces: the frequency, levels and SNR of the loudest piece, with the first piece's start,
    /// end and preceding peak. The first piece is the chirp as it reaches the microphone, until the echo's first
    /// dip; it mostly lasts the same at every chirp of a detector while the echo's later pieces come and go with
    /// the room's noise (tuning: one chirp 0.19 s alone, 0.29 s with a 0.04 s piece 0.05 s after it). Where the dip
    /// falls elsewhere (a first piece of 0.12 s, then 0.05 s), the span of the pieces stays: a series compares
    /// either.
    static func joined(_ pieces: [ToneSegment]) -> ToneSegment {
        guard var chirp = pieces.max(by: { $0.peakLevelDBFS < $1.peakLevelDBFS }), let first = pieces.first else {
            preconditionFailure("a chirp has at least one piece")
        }
        chirp.start = first.start
        chirp.end = first.end
        chirp.precedingPeakDBFS = first.precedingPeakDBFS
        return chirp
    }

    /// Whether `tone` is within `withinDB` of the loudest tone of its frequency in the 10 s before it.
    private func isStrong(_ tone: ToneSegment, withinDB: Double = 20) -> Bool {
        let loudest = tones.lazy
            .filter { tone.start - $0.start <= 10 && Self.same($0.frequencyHz, tone.frequencyHz) }
            .map(\.peakLevelDBFS).max() ?? tone.peakLevelDBFS
        return tone.peakLevelDBFS >= loudest - withinDB
    }

    /// `complete`: `next` has ended (its level and duration are final); otherwise it is an open segment as it stands.
    private mutating func matchT3(next: ToneSegment, now: Double, complete: Bool = false) -> [PatternMatch] {
        let nextStart = next.start, frequencyHz = next.frequencyHz
        // Fragments (short bits of a tail or of a second component) are not T3 tones and must not split them.
        let sameTones = tones.filter {
            nextStart - $0.start <= 12 && $0.start < nextStart && $0.duration >= 0.08
                && Self.same($0.frequencyHz, frequencyHz) && isStrong($0, withinDB: 12)
        }
        guard sameTones.count >= 3 else { return [] }
        let a = sameTones[sameTones.count - 3], b = sameTones[sameTones.count - 2], c = sameTones[sameTones.count - 1]
        // The beeps of one sounder last the same: noise may cut one short, nothing makes one much longer.
        let durations = [a.duration, b.duration, c.duration].sorted()
        guard durations[2] <= 1.5 * durations[1] + 0.1 else { return [] }
        // A beep whose start was masked by noise keeps its end: the onset of one beep may also be its end less the
        // longest of the three. The intervals are checked on the onsets taken either way.
        let longest = durations[2]
        func onsets(_ tone: ToneSegment) -> [Double] {
            tone.duration < longest - 0.05 ? [tone.start, tone.end - longest] : [tone.start]
        }
        var period: Double?
        var onsetOfC = c.start
        search: for onsetA in onsets(a) {
            for onsetB in onsets(b) {
                for onsetC in onsets(c) {
                    let moved = (onsetA != a.start ? 1 : 0) + (onsetB != b.start ? 1 : 0) + (onsetC != c.start ? 1 : 0)
                    guard moved <= 1 else { continue }
                    let i1 = onsetB - onsetA, i2 = onsetC - onsetB, i3 = nextStart - onsetC
                    let d = (i1 + i2) / 2
                    if (0.6...1.5).contains(i1), (0.6...1.5).contains(i2), abs(i1 - i2) <= 0.2 * max(i1, i2) + 0.03,
                       i3 >= 1.7 * d, i3 <= 2.6 * d, i3 - d >= 0.4 {
                        period = d
                        onsetOfC = onsetC
                        break search
                    }
                }
            }
        }
        guard let d = period,
              [a, b, c].allSatisfy({ (0.08...1.2).contains($0.duration) }),
              // A T3 beep lasts half the period: two of the three must last at least a quarter of it (noise cuts
              // one at most; tonal bits of voices, cries and noise are shorter).
              [a, b, c].filter({ $0.duration >= 0.25 * d }).count >= 2,
              nextStart - c.end >= 0.5,
              b.start - a.end >= Self.minimumOffSeconds, c.start - b.end >= Self.minimumOffSeconds,
              Self.consistent([a, b, c], frequency: 0.02, durations: false)
        else { return [] }
        // The off phases are quiet at this frequency (a noisy band of short tonal bits is not a pattern).
        let offPhases = [(a.end, b.start), (b.end, c.start), (c.end, nextStart)]
        let loudest = max(a.peakLevelDBFS, b.peakLevelDBFS, c.peakLevelDBFS)
        let cycleFrequency = (a.frequencyHz + b.frequencyHz + c.frequencyHz) / 3
        // The tone that closes the long pause is the sounder's next beep: its frequency and level (so far) agree with
        // the cycle's, and it rises 6 dB above the noise floor of its band (a blip of noise near the frequency, or a
        // sound that has filled the band for seconds, does not close it).
        let quietest = min(a.peakLevelDBFS, b.peakLevelDBFS, c.peakLevelDBFS)
        guard abs(next.frequencyHz - cycleFrequency) <= 0.02 * cycleFrequency, next.peakSNRDB >= 6,
              next.duration >= minimumClosingToneSeconds,
              next.peakLevelDBFS >= quietest - 20, next.peakLevelDBFS <= loudest + 12
        else { return [] }
        // (Bits shorter than 0.08 s are no beeps: a click or a clatter of noise at the frequency.)
        for tone in tones where abs(tone.frequencyHz - cycleFrequency) <= 0.04 * cycleFrequency
            && tone.peakLevelDBFS >= loudest - 12 && tone.duration >= 0.08 {
            if offPhases.contains(where: { tone.start > $0.0 + 0.02 && tone.start < $0.1 - 0.02 }) { return [] }
        }
        // A steady beeper that loses a beep in noise often keeps a bit of it: a piece at the beeps' level that starts
        // on their start grid or ends on their end grid one period after the third beep (tuning: an alarm clock's
        // square wave in speech at 0 dB, the lost beep's last 0.07 s at its level, 0.015 s off the end grid). A
        // T3's long pause is silent there. (Longer pieces are refused by the off-phase test above.)
        let endStep = (c.end - a.end) / 2
        for tone in tones where abs(tone.frequencyHz - cycleFrequency) <= 0.02 * cycleFrequency
            && tone.start > c.end && tone.end < nextStart
            && tone.peakLevelDBFS >= quietest - 4 && tone.peakLevelDBFS <= loudest + 4
            && (abs(tone.start - (onsetOfC + d)) <= 0.05 || abs(tone.end - (c.end + endStep)) <= 0.05) {
            return []
        }
        if sameTones.count >= 4 {
            let before = sameTones[sameTones.count - 4]
            if a.start - before.start < 1.45 * d, a.start - before.start <= 5 { return [] }
        }
        let frequency = cycleFrequency
        let count: Int
        if let run = t3Run, Self.same(run.frequencyHz, frequency), a.start - run.last <= 3.5 * d + 1 {
            count = run.count + 1
        } else {
            count = 1
        }
        // A first cycle's next tone that starts 12 dB below the cycle's quietest beep may be a blip of the noise
        // bed after an appliance's three beeps (tuning: an oven's end, the blip 15.5 dB down and 0.08 s long):
        // judged again when it ends, it must have risen to within 12 dB or lasted a quarter period.
        if count == 1 && next.peakLevelDBFS < quietest - 12 {
            if !complete {
                weakNextOnsets.append((next.start, next.frequencyHz))
                return []
            }
            guard next.duration >= 0.25 * d else { return [] }
        }
        // A first cycle's closing tone must sound for a beep's worth (0.08 s) before it decides: an appliance's three
        // beeps and then a 0.02-0.03 s blip of speech or noise at the frequency 2 s later are no T3 (tuning: seeds
        // 28, 31, 38, `beep_oven_end`). Parked until it has, judged again then or when it ends.
        if count == 1 && next.duration < Self.firstClosingToneSeconds {
            if !complete {
                shortNextOnsets.append((next.start, next.frequencyHz))
            }
            return []
        }
        t3Run = (count, nextStart, frequency)
        return [PatternMatch(
            pattern: .t3, cycleStart: a.start, decisionTime: max(now, nextStart), frequencyHz: frequency,
            levelDBFS: (a.levelDBFS + b.levelDBFS + c.levelDBFS) / 3, count: count, intervalSeconds: 0,
            beeps: [a.start...a.end, b.start...b.end, c.start...c.end], closingToneStart: nextStart)]
    }

    /// Whether the tones of one cycle agree: frequencies within `frequency` (relative), durations within a factor
    /// of 2 (when `durations`; a T3 tone that decays in a room may be cut early), peak levels within 8 dB (a
    /// sounder repeats itself; noise does not).
    private static func consistent(_ tones: [ToneSegment], frequency: Double, durations checkDurations: Bool = true) -> Bool {
        let frequencies = tones.map(\.frequencyHz), durations = tones.map(\.duration), levels = tones.map(\.peakLevelDBFS)
        guard let fLow = frequencies.min(), let fHigh = frequencies.max(), let dLow = durations.min(),
              let dHigh = durations.max(), let lLow = levels.min(), let lHigh = levels.max()
        else { return false }
        return fHigh - fLow <= frequency * fHigh && (!checkDurations || dHigh <= 2 * max(dLow, 0.03)) && lHigh - lLow <= 8
    }

    /// How many slots of a T4 grid `tones` cover: 4 for a full burst, 3 when one beep was lost, 0 when they do not
    /// fit. The grid has four slots of step d (0.15 to 0.3 s; 0.2 s in the standard); a beep of length `on` (0.25 d
    /// to 0.75 d) starts at each. Noise and rooms change single tones in three ways, all allowed: a beep's start or
    /// end is cut (it still has the other on the grid: starts on the start grid within 0.1 d + 0.02 s, ends on the
    /// end grid; it covers one slot and is no longer than `on`), and the gap between beeps is filled (one tone covers
    /// two or three slots: its length is `on` plus whole steps, and both its ends are on the grid). One tone of a
    /// burst at most may be cut.
    /// The tones must be consistent (frequencies within 2 %, peak levels within 8 dB), cover distinct slots, and two
    /// of them at least must be single beeps.
    private static func t4Slots(_ tones: [ToneSegment]) -> Int {
        guard (2...5).contains(tones.count), consistent(tones, frequency: 0.02, durations: false) else { return 0 }
        let starts = tones.map(\.start), ends = tones.map(\.end)
        // Candidate steps: differences between two starts or two ends over 1, 2 or 3 steps.
        var steps: [Double] = []
        for anchors in [starts, ends] {
            for i in anchors.indices {
                for j in anchors.indices where j > i {
                    for k in 1...3 {
                        let d = (anchors[j] - anchors[i]) / Double(k)
                        if d >= 0.15, d <= 0.3 { steps.append(d) }
                    }
                }
            }
        }
        var best = 0
        for d in steps {
            // Tight: a beep's edges sit on the grid within 0.04 s at the standard step (a start that noise delays
            // more is taken from the beep's end).
            let tolerance = 0.1 * d + 0.02
            func slot(_ time: Double, from origin: Double) -> Int? {
                let position = (time - origin) / d
                let nearest = position.rounded()
                return abs(position - nearest) * d <= tolerance ? Int(nearest) : nil
            }
            // The start grid's origin is one of the starts, the end grid's one of the ends; the beep length `on`
            // ties them: a beep in slot k ends at startOrigin + k d + on.
            for startOrigin in starts {
                for endOrigin in ends {
                    var on = (endOrigin - startOrigin).truncatingRemainder(dividingBy: d)
                    if on < 0 { on += d }
                    guard on >= 0.25 * d, on <= 0.75 * d else { continue }
                    let endShift = Int(((endOrigin - startOrigin - on) / d).rounded())
                    var covered = Set<Int>()
                    var singles = 0
                    var cut = 0
                    var fits = true
                    for index in tones.indices {
                        let first = slot(starts[index], from: startOrigin)
                        let last = slot(ends[index], from: endOrigin).map { $0 + endShift }
                        let range: ClosedRange<Int>
                        // A tone covering slots first...last lasts (last - first) steps plus one beep.
                        var spanFits = false
                        if let first, let last {
                            spanFits = abs(tones[index].duration - (Double(last - first) * d + on)) <= tolerance
                        }
                        switch (first, last) {
                        case let (first?, last?) where last >= first && spanFits: range = first...last
                        case let (first?, _?) where tones[index].duration <= on + tolerance:
                            // Both ends on the grid, but not whole steps plus one beep apart: only the start counts.
                            range = first...first
                            cut += 1
                        case let (first?, nil) where tones[index].duration <= on + tolerance:
                            // A beep whose end was cut (only its start is on the grid): one slot. A cut beep is
                            // not longer than a whole one.
                            range = first...first
                            cut += 1
                        case let (nil, last?) where tones[index].duration <= on + tolerance:
                            range = last...last
                            cut += 1
                        default:
                            fits = false
                            range = 0...0
                        }
                        guard fits, covered.isDisjoint(with: range) else {
                            fits = false
                            break
                        }
                        covered.formUnion(range)
                        if range.count == 1 { singles += 1 }
                    }
                    // Filled gaps are the exception: two tones at least are single beeps (a bell's rings, a
                    // note's, are long).
                    // And noise cuts one beep of a burst, not more.
                    guard fits, singles >= 2, cut <= 1, let low = covered.min(), let high = covered.max(), high - low <= 3
                    else { continue }
                    // All four slots need three tones at least (one merged pair); three slots, two.
                    let count = covered.count == 4 && tones.count < 3 ? 3 : covered.count
                    best = max(best, count)
                    if best == 4 { return 4 }
                }
            }
        }
        return best >= 3 ? best : 0
    }

    /// Longest gaps (s, frame centre to frame centre) between two pieces of one T4 beep, each tried in turn: two and
    /// three frames missing at the tracker's 10 ms hop, with a fifth of a hop for the rounding of segment times. A
    /// T4's own gaps are 0.1 s; a room's tail shortens them to 0.04-0.1 s (tuning sets), so two whole beeps may be
    /// this close too: the joins are tried only where the tones as they are fit no grid, and the shorter first (a
    /// burst whose beeps a room left 0.04 s apart fits with its pieces 0.02 s apart joined, and is one tone with
    /// those gaps joined too: seed 105, `t4_4`). The tuning cases: a piezo's first beep of each burst split 0.02 s
    /// apart (brown noise at 0 dB in a room, seed 43, `t4_4`) and 0.04 s apart (seed 53, `t4_4`), which left five
    /// tones that fit no grid.
    static let t4PieceGapsSeconds = [0.032, 0.042]

    /// dB every tone of a burst must rise above its noise floor (``ToneSegment/peakSNRDB``) for the burst to be
    /// repaired: a room damages a sounder's beeps, which stand 40-70 dB above their floor in the tuning cases, while
    /// tones 3-6 dB above the floor are shaped by the noise itself (validation seed 75: a 942 Hz product of an Opus
    /// phone call, 4-6 dB above its floor in a T3's pauses, fell into T4's grid once repaired).
    static let t4RepairMinimumSNRDB = 20.0

    /// A piece that trails a longer beep of the burst is taken for the beep's decay in a room, not a beep, when it
    /// lasts at most `seconds` (first to last frame; a T4 beep is 0.1 s, about 0.09 s first to last frame when
    /// clean), starts at most `gap` after the beep ends (four hops, with a fifth of a hop for rounding) and peaks
    /// `belowDB` or more below it. The tuning case: a 0.03 s piece 0.04 s after each burst's fourth beep, 5.8 dB
    /// down (household noise at +10 dB in a room, seed 44, `t4_2`), just short of the 6 dB echo rule.
    static let t4Tail = (seconds: 0.05, gap: 0.042, belowDB: 3.0)

    /// dB below a burst's fourth-loudest tone at or beyond which a tone shorter than the burst's median tone is a
    /// room's piece, not a beep (``withoutWeakPieces(_:)``). A T4's four beeps come from one sounder at one level;
    /// what a room adds around them is weaker and shorter. The tuning cases (seeds 37, 48, 52 and 55, rooms in
    /// noise): onsets heard apart from the rest of their beep, 2.4 dB below it, and tails and echoes 3.6-7.5 dB down.
    static let t4WeakPieceBelowDB = 2.0

    /// `tones` (one burst's, five or more: four beeps and a room's pieces) without the pieces that peak
    /// ``t4WeakPieceBelowDB`` or more below its fourth-loudest tone and are shorter than its median tone.
    private static func withoutWeakPieces(_ tones: [ToneSegment]) -> [ToneSegment] {
        guard tones.count > 4 else { return tones }
        let fourth = tones.map(\.peakLevelDBFS).sorted(by: >)[3]
        let median = tones.map(\.duration).sorted()[tones.count / 2]
        return tones.filter { !($0.peakLevelDBFS <= fourth - t4WeakPieceBelowDB && $0.duration < median) }
    }

    /// A T4 burst whose beeps a very reverberant room merged into one to three long tones: the steps (s) its
    /// level's beat may have (a T4 beep and gap, 0.1 s each, within 15 %), how far its steps may differ from one
    /// another (s), and the tones' largest frequency spread as a share of their frequency (a sounder's pitch holds; a
    /// singer's vibrato, which also beats about every 0.2 s, moves it by several percent). The tuning cases (seeds
    /// 22, 34 and 50, household noise at +10 dB or brown noise in a room): one 0.83-0.85 s tone, or two of 0.37-0.39
    /// s 0.42 s apart, whose level dips 5-10 dB every 0.2 s, with a frequency spread of 0.1-0.2 %.
    /// Where a dip went below the tracker's threshold for one to four frames, the tone was cut there instead: pieces
    /// of one tone at most `pieceGap` s apart (frame centre to frame centre) are one tone whose dip is the middle of
    /// the gap, and a burst may come in up to `maximumPieces` of them (a 10 Hz beeper's eight beeps in 0.8 s are
    /// more). The traced cases, rooms whose tail fills 0.14-0.18 s of each 0.2 s step: tuning seed 60 `t4_2`, five
    /// pieces 0.02-0.03 s apart; validation seeds 126 and 129 `t4_4`, five pieces 0.04-0.05 s apart, cut every
    /// 0.2 s. Where the level dips twice per beep (at a cut after its onset and where its tail meets the next
    /// onset: seed 60; fresh seeds 146 and 147), every other dip keeps the beat. A burst read with its cuts lasts at
    /// most three steps and `cutTail` s (a beep and its tail: the traced cases last 0.79-0.82 s; five beeps 0.2 s
    /// apart, cut apart, last 0.92 s).
    static let t4MergedBeat = (steps: 0.17...0.23, spread: 0.03, largestFrequencySpread: 0.01, pieceGap: 0.055,
                               maximumPieces: 6, cutTail: 0.25)

    /// 4 when `tones` (one burst's, consistent) are a T4 burst a room merged (``t4MergedBeat``): joined where they
    /// are pieces of one tone (`pieceGap`), one to three tones; the dips of their level (``ToneSegment/levelDips``,
    /// and the middle of each gap joined) inside the burst, all of them or all but the first or the last, three or
    /// more, follow one another at one step (a kitchen timer's 0.15 s beat, a fridge alarm's or a patient monitor's
    /// uneven ripples do not), the tones start on that step from the first, and the burst lasts four beeps (three
    /// steps and a beep at least, with a room's tail of up to 0.35 s); otherwise 0.
    private static func mergedBurstSlots(_ pieces: [ToneSegment]) -> Int {
        guard (1...t4MergedBeat.maximumPieces).contains(pieces.count), consistent(pieces, frequency: 0.02, durations: false),
              pieces.allSatisfy({ $0.frequencySpreadHz <= t4MergedBeat.largestFrequencySpread * $0.frequencyHz })
        else { return 0 }
        let byStart = pieces.sorted { $0.start < $1.start }
        var gapDips: [Double] = []
        var reach = byStart[0].end
        for piece in byStart.dropFirst() {
            if piece.start > reach, piece.start - reach <= t4MergedBeat.pieceGap { gapDips.append((reach + piece.start) / 2) }
            reach = max(reach, piece.end)
        }
        let tones = ToneSegment.joined(byStart, gap: t4MergedBeat.pieceGap)
        guard (1...3).contains(tones.count) else { return 0 }
        let first = tones.map(\.start).min() ?? 0, last = tones.map(\.end).max() ?? 0
        /// `times` inside the burst, in order, with a dip a frame or two from the previous one left out.
        func dipsInside(_ times: [Double]) -> [Double] {
            var dips: [Double] = []
            for dip in times.filter({ $0 > first && $0 < last }).sorted() where dips.last.map({ dip - $0 > 0.05 }) ?? true {
                dips.append(dip)
            }
            return dips
        }
        /// The step of `times` when they follow one another at one step (within `spread`), else nil.
        func evenStep(_ times: [Double]) -> Double? {
            let steps = zip(times.dropFirst(), times).map { $0 - $1 }
            guard let shortest = steps.min(), let longest = steps.max(), longest - shortest <= t4MergedBeat.spread
            else { return nil }
            return (times.last! - times.first!) / Double(steps.count)
        }
        let levelDips = tones.flatMap(\.levelDips)
        // The level's dips alone (a cut may sit between a beep's two dips: seed 50), then with the cuts.
        for (dips, withCuts) in [(dipsInside(levelDips), false), (dipsInside(levelDips + gapDips), true)] where dips.count >= 3 {
            // Candidate beats: an even run of the dips (all, all but the first or the last), its step and origin.
            var beats: [(step: Double, origin: Double)] = []
            for run in [Array(dips), Array(dips.dropFirst()), Array(dips.dropLast())] where run.count >= 3 {
                if let d = evenStep(run) { beats.append((d, run[0])) }
                // Two dips per beep (at a cut after its onset and where its tail meets the next onset): every other
                // dip keeps the beat, and so do the ones between.
                let every = run.indices.filter { $0 % 2 == 0 }.map { run[$0] }
                let between = run.indices.filter { $0 % 2 == 1 }.map { run[$0] }
                if every.count >= 3, between.count >= 2, let d = evenStep(every), let e = evenStep(between),
                   abs(d - e) <= t4MergedBeat.spread {
                    beats.append((d, every[0]))
                }
            }
            for (d, origin) in beats {
                guard t4MergedBeat.steps.contains(d), (3 * d + 0.05...4 * d + 0.35).contains(last - first) else { continue }
                // Cut into pieces, a burst lasts four beeps and a short tail (`cutTail`): five beeps on the step, cut
                // apart, last a step longer.
                guard !withCuts || last - first <= 3 * d + t4MergedBeat.cutTail else { continue }
                let tolerance = 0.1 * d + 0.02
                func onGrid(_ time: Double, from origin: Double) -> Bool {
                    let position = (time - origin) / d
                    return abs(position - position.rounded()) * d <= tolerance
                }
                // Four beeps: at most four dips on the beat (a patient monitor's six beeps 0.175 s apart, cut apart
                // by 0.05 s gaps, have five: tuning seed 50, `beep_monitor_medium_1`).
                guard dips.filter({ onGrid($0, from: origin) }).count <= 4 else { continue }
                if tones.allSatisfy({ onGrid($0.start, from: first) }) { return 4 }
            }
        }
        return 0
    }

    /// `tones` (one burst's) without the pieces that trail a beep (``t4Tail``).
    private static func withoutTails(_ tones: [ToneSegment]) -> [ToneSegment] {
        let sorted = tones.sorted { $0.start < $1.start }
        return sorted.enumerated().filter { index, tone in
            guard index > 0, tone.duration <= t4Tail.seconds else { return true }
            let previous = sorted[index - 1]
            return !(previous.duration > tone.duration && tone.start - previous.end <= t4Tail.gap
                && tone.peakLevelDBFS <= previous.peakLevelDBFS - t4Tail.belowDB)
        }.map(\.element)
    }

    /// A first beep that a room's tail lengthened by less than half a T4 beep-and-gap: `longer` s (less a twentieth
    /// of a hop for rounding) up to `longerBelow` s longer (first to last frame) than the burst's median tone. The
    /// tuning cases, warbling piezos in a room in household noise at +10 dB: each burst's first beep 0.17 s against
    /// 0.09 s for the other three (seed 27, `t4_2`), 0.14 s against 0.10 s (seed 34); beeps whose gap the tail filled
    /// are 0.2 s or more longer and are counted as two slots by ``t4Slots(_:)``. Only the first: cutting back any
    /// tone made a noise recording's chirps at 1279 Hz a T4 (the 24-hour stream of `earshot eval --groups`, its
    /// second and third tones 0.12 s against 0.07 s).
    static let t4LongTail = (longer: 0.0395, longerBelow: 0.1)

    /// `tones` (one burst's, five) without the last when it peaks 6 dB or more below the others' median peak: a
    /// room's echo of the fourth beep (the first rule, in `closeBurst`, compares with the quietest beep, which a
    /// masked onset can make quiet too; tuning seed 34, `t4_2`: an echo 0.12 s after the fourth beep, 8.3 dB below
    /// the median and 4.8 dB below the first beep).
    private static func withoutEcho(_ tones: [ToneSegment]) -> [ToneSegment] {
        guard tones.count == 5 else { return tones }
        let sorted = tones.sorted { $0.start < $1.start }
        let peaks = sorted.dropLast().map(\.peakLevelDBFS).sorted()
        let median = (peaks[1] + peaks[2]) / 2
        return sorted[4].peakLevelDBFS <= median - 6 ? Array(sorted.dropLast()) : sorted
    }

    /// `tones` (one burst's) with the first beep, when a tail lengthened it (``t4LongTail``), cut back to the median
    /// length, its start kept (three tones or more; otherwise unchanged).
    private static func trimmedTails(_ tones: [ToneSegment]) -> [ToneSegment] {
        guard tones.count >= 3 else { return tones }
        var trimmed = tones.sorted { $0.start < $1.start }
        let median = trimmed.map(\.duration).sorted()[trimmed.count / 2]
        let excess = trimmed[0].duration - median
        if excess >= t4LongTail.longer, excess < t4LongTail.longerBelow {
            trimmed[0].end = trimmed[0].start + median
        }
        return trimmed
    }

    private mutating func addToBursts(_ tone: ToneSegment) {
        if let index = pendingBursts.lastIndex(where: { Self.same($0.frequencyHz, tone.frequencyHz) }) {
            // The next beep, or the one after a lost beep (its start perhaps cut too).
            let burst = pendingBursts[index]
            if tone.start - burst.lastStart <= 0.45 || tone.start - burst.tones[burst.tones.count - 1].end <= 0.35 {
                pendingBursts[index].tones.append(tone)
                return
            }
            if tone.start - pendingBursts[index].lastStart < 0.9 { pendingBursts[index].interrupted = true }
        }
        pendingBursts.append(Burst(tones: [tone]))
    }

    /// A burst is complete: is it a T4 burst, and does it complete a cycle with the previous one?
    private mutating func closeBurst(_ heard: Burst, at time: Double) -> PatternMatch? {
        // Echoes and tails well below the burst's loudest tone are not tones of the burst, nor is a last tone 6 dB
        // below the others (a room's echo of the fourth beep).
        let loudest = heard.tones.map(\.peakLevelDBFS).max() ?? 0
        var kept = heard.tones.filter { $0.peakLevelDBFS >= loudest - 12 }
        if kept.count == 5, let last = kept.last,
           last.peakLevelDBFS <= (kept.dropLast().map(\.peakLevelDBFS).min() ?? 0) - 6 {
            kept.removeLast()
        }
        let burst = Burst(tones: kept)
        // A burst that lost one beep in noise still fits the grid of four (3 slots). Where the tones as they are do
        // not fit, they are tried with the pieces of a beep that a room or noise split joined (two, then three frames
        // missing: ``t4PieceGapsSeconds``); then cleaned, as they are and so joined: without the short pieces that
        // trail a beep (``t4Tail``) and a last echo 6 dB below the median beep, with a first beep a tail lengthened
        // cut back (``t4LongTail``); cleaning the joined tones too is for beeps both split and echoed. Last, without
        // a room's weak pieces (``withoutWeakPieces(_:)``: onsets heard apart from their beep, tails, echoes) and then
        // a last echo (tuning seed 37, `t4_2`: a piece after every beep and an echo 7.5 dB down). Only tones 20 dB
        // or more above their floor are repaired (``t4RepairMinimumSNRDB``).
        var slots = heard.interrupted ? 0 : Self.t4Slots(burst.tones)
        let unrepaired = slots
        if slots < 4, !heard.interrupted, burst.tones.allSatisfy({ $0.peakSNRDB >= Self.t4RepairMinimumSNRDB }) {
            func cleaned(_ tones: [ToneSegment]) -> [ToneSegment] {
                Self.trimmedTails(Self.withoutEcho(Self.withoutTails(tones)))
            }
            let byStart = burst.tones.sorted { $0.start < $1.start }
            let joins = Self.t4PieceGapsSeconds.map { ToneSegment.joined(byStart, gap: $0) }
            let beepsOnly = Self.withoutEcho(Self.withoutWeakPieces(burst.tones))
            for repaired in joins + [cleaned(burst.tones)] + joins.map(cleaned) + [beepsOnly]
            where slots < 4 && repaired != burst.tones {
                slots = max(slots, Self.t4Slots(repaired))
            }
            if slots < 4 { slots = max(slots, Self.mergedBurstSlots(burst.tones)) }
        }
        let complete = slots == 4
        let isT4 = slots >= 3
        let repaired = slots > unrepaired
        // T4 bursts are remembered per frequency (a square wave's harmonics, or two alarms, make bursts of their own).
        t4Bursts.removeAll { time - $0.burst.start > 10 }
        // A burst of this frequency that is not T4, and about as loud as a remembered T4 burst, breaks its run
        // (a single tone does not: a bit of noise or speech at the frequency).
        guard isT4 else {
            guard heard.tones.count >= 2 else { return nil }
            t4Bursts.removeAll {
                Self.same($0.burst.frequencyHz, burst.frequencyHz)
                    && loudest >= ($0.burst.tones.map(\.peakLevelDBFS).max() ?? 0) - 6
            }
            return nil
        }
        // A cycle needs two bursts 3 to 9 s apart, at least one of them with all four beeps.
        let previous = t4Bursts.last {
            Self.same($0.burst.frequencyHz, burst.frequencyHz) && (3.0...9.0).contains(burst.start - $0.burst.start)
                && (complete || $0.complete)
        }
        let run = (previous?.run ?? 0) + 1
        t4Bursts.append((burst, run, complete, repaired))
        guard let previous else { return nil }
        let levels = burst.tones.map(\.levelDBFS)
        return PatternMatch(
            pattern: .t4, cycleStart: previous.burst.start, decisionTime: time, frequencyHz: burst.frequencyHz,
            levelDBFS: levels.reduce(0, +) / Double(levels.count), count: run - 1, intervalSeconds: 0,
            beeps: previous.burst.tones.map { $0.start...$0.end }, closingToneStart: burst.start,
            repaired: repaired || previous.repaired)
    }
}
