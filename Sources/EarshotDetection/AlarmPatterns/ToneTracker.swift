internal import CFFTW
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotModel
import EarshotAnalysis

/// A persistent narrow-band tone heard by ``ToneTracker``: one "on" segment of a beep, from its onset to its offset.
package struct ToneSegment: Sendable, Equatable {
    /// Stream time (s) of the segment's first "on" frame (frame centre).
    package var start: Double
    /// Stream time (s) of its last "on" frame (frame centre); `end >= start`.
    package var end: Double
    /// Mean frequency of the tone in Hz (parabolic interpolation between FFT bins), within the tracker's band.
    package var frequencyHz: Double
    /// Mean level of the tone component in dBFS (RMS of the tone alone: a full-scale sine is -3 dBFS).
    package var levelDBFS: Double
    /// Highest frame level of the tone component in dBFS.
    package var peakLevelDBFS: Double
    /// How far the tone rose above the noise floor of its frequency: the highest frame's main-lobe power over that
    /// floor, dB (0 when no floor was known yet: the stream's first 0.1 s; at most 99).
    package var peakSNRDB: Double
    /// Standard deviation of the spectral peak's frequency over the frames where it was seen, Hz: a few Hz for a
    /// sounder, tens of Hz for a voice's harmonic or a bit of noise.
    package var frequencySpreadHz: Double
    /// How strongly the tone's frame level rises and falls with a period of 0.20-0.60 s (0...1, see
    /// ``EnvelopeModulation``): a fast beeper whose beeps a room's echo merged into one segment. 0 for segments
    /// shorter than four such periods (0.8 s), whose level hardly moves (variance under 0.25 dB squared), or from a
    /// tracker that does not measure it (``ToneTracker/Parameters/tracksEnvelopeBeat``).
    package var envelopePeriodicity: Double
    /// Stream times (s, frame centres) of the dips in the tone's level during its first
    /// ``ToneTracker/levelDipWindowSeconds``: frames ``ToneTracker/levelDipDB`` or more below the highest frame
    /// before them (since the previous dip) with the level rising that much again after them (at most
    /// ``ToneTracker/maximumLevelDips``). A T4 burst whose beeps a very reverberant room merged into one tone keeps
    /// its 0.2 s beat here; ``AlarmPatternMatcher`` reads it only for bursts whose tones fit no grid of four.
    package var levelDips: [Double] = []
    /// The loudest frame of the band from 300 Hz to 1.15 x ``ToneTracker/Parameters/maximumHz`` (all of its power;
    /// lower sound, a thump or mains hum, does not count) in the second before the tone's first frame, in dBFS on the scale of ``peakLevelDBFS``: a ringing
    /// resonance in the tail of an impulsive sound (breaking glass: 37 dB above the tone) comes after a much louder
    /// sound, a detector's chirp out of the room's sound. -infinity before the stream's second frame, and for
    /// segments made without a tracker.
    package var precedingPeakDBFS: Double = -.infinity

    /// `end - start` in seconds. A segment of one frame has duration 0; add one hop for the audible length.
    package var duration: Double { end - start }

    package init(start: Double, end: Double, frequencyHz: Double, levelDBFS: Double, peakLevelDBFS: Double,
                peakSNRDB: Double = 0, frequencySpreadHz: Double = 0, envelopePeriodicity: Double = 0,
                levelDips: [Double] = [], precedingPeakDBFS: Double = -.infinity) {
        self.start = start
        self.end = end
        self.frequencyHz = frequencyHz
        self.levelDBFS = levelDBFS
        self.peakLevelDBFS = peakLevelDBFS
        self.peakSNRDB = peakSNRDB
        self.frequencySpreadHz = frequencySpreadHz
        self.envelopePeriodicity = envelopePeriodicity
        self.levelDips = levelDips
        self.precedingPeakDBFS = precedingPeakDBFS
    }

    /// `pieces` (one tone's, in start order) with each that starts at most `gap` seconds (frame centre to frame
    /// centre) after the previous one ends joined to it: the joined segment keeps the first piece's start, frequency,
    /// levels and preceding peak, ends where the last ends, and takes the highest peak level and peak SNR.
    package static func joined(_ pieces: [ToneSegment], gap: Double) -> [ToneSegment] {
        var joined: [ToneSegment] = []
        for piece in pieces {
            if var last = joined.last, piece.start - last.end <= gap {
                last.end = max(last.end, piece.end)
                last.levelDips += piece.levelDips
                last.peakLevelDBFS = max(last.peakLevelDBFS, piece.peakLevelDBFS)
                last.peakSNRDB = max(last.peakSNRDB, piece.peakSNRDB)
                joined[joined.count - 1] = last
            } else {
                joined.append(piece)
            }
        }
        return joined
    }
}

/// Finds persistent narrow spectral peaks (beeps of a smoke or CO alarm, a beeper, a clock) in mono audio at the
/// capture rate and reports them as on/off segments with frequency and level. Several tones may sound at once (a
/// square wave's harmonics, an alarm over music or speech): each has a segment of its own.
///
/// Method: a short-time Fourier transform (periodic Hann window of ``Parameters/frameSeconds``, hop
/// ``Parameters/hopSeconds``, FFT zero-padded to a power of two; at 48 kHz 1536 samples in a 2048-point FFT, 23.4 Hz
/// bins). For every bin between ``Parameters/minimumHz`` and ``Parameters/maximumHz`` the tracker keeps the power of
/// a main lobe centred there and a noise floor: the ``Parameters/noiseFloorQuantile`` quantile of that power's
/// 0.1 s means over the last ``Parameters/noiseFloorSeconds`` (a tone that sounds less than 70 % of the time, as
/// alarm beeps do, does not raise it). A tone 0 dB below broadband noise is still 15-25 dB above the floor of its own
/// bins. A peak is tonal when its main lobe stands ``Parameters/minimumProminenceDB`` above the bins beside it and
/// either ``Parameters/onsetSNRDB`` above its floor or, as the strongest peak, holds ``Parameters/onsetRatio`` of the
/// band's energy (the only way a tone that has sounded for seconds, or since the stream began, is heard). Up to
/// ``Parameters/maximumTones`` peaks per frame, strongest first, at least three main lobes apart and within 30 dB of
/// the strongest. A segment starts
/// after ``Parameters/onsetFrames`` tonal frames at one frequency (within ``Parameters/frequencyTolerance``); it then
/// follows the energy at that frequency and ends after ``Parameters/offsetFrames`` frames in which that energy is
/// less than ``Parameters/offsetSNRDB`` above the floor (and below ``Parameters/offRatio`` of the band), or
/// ``Parameters/dropDB`` below the segment's peak (hysteresis: a reverberant tail that keeps a few dB of tone does not
/// hold the segment open, and within 1 s the same tone only starts a new segment after rising ``Parameters/riseDB``
/// above the trough that followed the last one, and to within ``Parameters/dropDB`` + 3 dB of its peak).
///
/// Cost: one real FFT per hop (100 per second) and a few operations per bin of the band; about 0.03-0.07 % of one
/// core at 16-48 kHz (see `earshot eval`).
///
/// - Important: Not thread-safe: own an instance on one queue. Creating instances from several threads is safe
///   (FFTW planning is serialised under ``LogMelSpectrogram``'s plan lock, shared by every FFTW user here).
package final class ToneTracker {
    /// Tuning of the tracker. The defaults were chosen on the real alarm recordings in `../shared/audio` and on
    /// synthetic T3/T4 signals mixed with household noise and speech at 0 dB SNR.
    package struct Parameters: Sendable, Equatable {
        /// Lowest tone frequency searched, Hz (a 520 Hz low-frequency alarm must be inside).
        package var minimumHz: Double = 400
        /// Highest tone frequency searched, Hz (UL 217 piezo alarms sound at or below 3.5 kHz).
        package var maximumHz: Double = 4000
        /// STFT window length in seconds (32 ms: 62 Hz main-lobe half width, short enough for T4's 0.1 s beeps).
        package var frameSeconds: Double = 0.032
        /// STFT hop in seconds.
        package var hopSeconds: Double = 0.010
        /// Seconds of history for each bin's noise floor.
        package var noiseFloorSeconds: Double = 3.0
        /// Quantile (0...1) of the 0.1 s means of a bin's main-lobe power that is its noise floor.
        package var noiseFloorQuantile: Double = 0.3
        /// dB above its noise floor a peak's main lobe must stand for a frame to be tonal.
        package var onsetSNRDB: Double = 10
        /// dB above the noise floor below which a running segment's tone counts as gone (with ``offRatio``).
        package var offsetSNRDB: Double = 5
        /// Fraction (0...1) of the band's energy the strongest peak's main lobe must hold to be tonal without
        /// standing above its floor.
        package var onsetRatio: Double = 0.25
        /// Fraction of the band's energy below which a running segment's tone counts as gone (with ``offsetSNRDB``).
        package var offRatio: Double = 0.08
        /// dB the peak's main lobe must stand above the median of the bins beside it (per bin).
        package var minimumProminenceDB: Double = 12
        /// Tonal peaks considered per frame, and segments open at once.
        package var maximumTones: Int = 4
        /// Consecutive tonal frames at one frequency that start a segment.
        package var onsetFrames: Int = 3
        /// Consecutive frames without the tone that end a segment.
        package var offsetFrames: Int = 2
        /// dB below the segment's peak at which the tone counts as off.
        package var dropDB: Double = 7
        /// dB above the trough after a segment that the same tone must rise to start a new one.
        package var riseDB: Double = 4
        /// Relative frequency tolerance within a segment (0.03 = 3 %), at least one FFT bin.
        package var frequencyTolerance: Double = 0.03
        /// Tones quieter than this (dBFS of the tone component) are ignored.
        package var floorDBFS: Double = -75
        /// Whether each segment's ``ToneSegment/envelopePeriodicity`` is measured (55 multiply-adds per open tone per
        /// hop, and two small buffers per segment); off, it is 0. Only ``AlarmDetector``'s fast-beat check, off by
        /// default, reads it.
        package var tracksEnvelopeBeat = false

        package init() {}
    }

    /// Input sample rate in Hz.
    package let sampleRate: Int
    package let parameters: Parameters
    /// Samples per STFT window.
    package let windowSamples: Int
    /// Samples per hop.
    package let hopSamples: Int
    /// FFT length (power of two >= windowSamples).
    package let fftSize: Int
    /// Hz per FFT bin.
    package let binHz: Double

    private let window: [Float]
    /// Converts main-lobe power to the tone's mean square: 2 / (N * sum w^2).
    private let powerScale: Double
    private let searchLow: Int, searchHigh: Int
    private let bandLow: Int, bandHigh: Int
    /// First bin of the band ``ToneSegment/precedingPeakDBFS`` is measured in: 300 Hz (rounded up to a bin), so that
    /// a thump, footsteps or mains hum do not count (the onset band, from `bandLow`, reaches down to the first bin).
    private let precedingLow: Int
    private let lobe: Int
    private let input: UnsafeMutablePointer<Float>
    private let output: UnsafeMutablePointer<fftwf_complex>
    private let plan: fftwf_plan
    // Work buffers, allocated once (no copy-on-write or exclusivity checks in the per-bin loops), freed in deinit.
    private let power: UnsafeMutableBufferPointer<Double>
    /// Main-lobe power centred on each bin (valid from searchLow to searchHigh).
    private let lobes: UnsafeMutableBufferPointer<Double>
    private let side: UnsafeMutableBufferPointer<Double>
    private let onsetSNR: Double, offsetSNR: Double, prominence: Double, drop: Double, rise: Double, floorPower: Double

    // Noise floor: per bin, a ring of 0.1 s means of the main-lobe power, the same values kept sorted, and their
    // quantile.
    private let blockFrames: Int
    private let blockCount: Int
    private let blockSums: UnsafeMutableBufferPointer<Double>  // per bin (k - searchLow)
    private let blockRing: UnsafeMutableBufferPointer<Double>  // [slot * bins + (k - searchLow)]
    private let sortedBlocks: UnsafeMutableBufferPointer<Double>  // [(k - searchLow) * blockCount + rank]
    private let floors: UnsafeMutableBufferPointer<Double>  // per bin (k - searchLow); +infinity until the first block
    private var framesInBlock = 0
    private var blocksFilled = 0
    private var nextSlot = 0

    // Streaming state.
    private var pending: [Float] = []
    private var pendingStart: Int64 = 0  // absolute frame of pending[0]
    private var nextFrameStart: Int64 = 0  // absolute sample position of the next STFT frame
    private var expectedPosition: Int64?
    private var candidates: [Candidate] = []
    private var running: [Running] = []
    /// The level envelope of each running segment (same order as `running`; kept apart so that it is updated in
    /// place); empty unless ``Parameters/tracksEnvelopeBeat``.
    private var envelopes: [EnvelopeModulation] = []
    private var ended: [Ended] = []
    /// The power from 300 Hz up (`precedingLow`) of the last ``precedingFrames`` frames (a ring; `bandRingNext` is
    /// the oldest), this one included once ``step(bandEnergy:precedingBandEnergy:time:finished:)`` has stored it.
    private var bandRing: [Double] = []
    private var bandRingNext = 0
    private var peaks: [(bin: Int, fractional: Double, level: Double)] = []
    private var claimed: [Bool] = []

    private struct Candidate {
        var bin: Double
        var startTime: Double
        var count: Int
        var seen: Bool
        var peakSum: Double
        var peakSquares: Double
    }

    private struct Running {
        var bin: Double  // current centre (fractional bin)
        var start: Double
        var lastOn: Double
        var peakPower: Double
        var peakSNR: Double
        /// The loudest band power of the frames before the segment's first (``ToneSegment/precedingPeakDBFS``).
        var precedingPeak: Double
        var sumDB: Double = 0
        var sumBin: Double = 0
        var frames = 0
        var misses = 0
        /// Sum, sum of squares and count of the peak's fractional bin in the frames where it was seen.
        var peakSum: Double
        var peakSquares: Double
        var peaks: Int
        /// The level-dip search (``ToneSegment/levelDips``): the highest level (dB) since the last dip, the lowest
        /// since it fell ``levelDipDB`` below that (nil: not falling) and when, and the dips found.
        var dipHigh = -Double.infinity
        var dipLow: (level: Double, time: Double)?
        var dips: [Double] = []

        /// Follows the level (dB) of the frame at `time` for ``ToneSegment/levelDips``.
        mutating func followLevel(_ level: Double, at time: Double) {
            guard time - start <= ToneTracker.levelDipWindowSeconds, dips.count < ToneTracker.maximumLevelDips else {
                return
            }
            if let low = dipLow {
                if level < low.level {
                    dipLow = (level, time)
                } else if level >= low.level + ToneTracker.levelDipDB {
                    dips.append(low.time)
                    dipLow = nil
                    dipHigh = level
                }
            } else if level <= dipHigh - ToneTracker.levelDipDB {
                dipLow = (level, time)
            } else {
                dipHigh = max(dipHigh, level)
            }
        }
    }

    /// dB a tone's level must fall below its highest frame since the previous dip, and rise again, for a dip
    /// (``ToneSegment/levelDips``). The tuning cases (T4 bursts a very reverberant room merged into one 0.8 s tone,
    /// seeds 22, 34 and 50): dips 5-10 dB deep every 0.2 s; 4 dB leaves out the 3 dB ripples between them.
    package static let levelDipDB = 4.0
    /// Seconds from a segment's start in which its level dips are looked for: a T4 burst (0.7 s) and a room's tail.
    package static let levelDipWindowSeconds = 1.2
    /// Most dips kept per segment.
    package static let maximumLevelDips = 8

    /// Frames of band power kept for ``ToneSegment/precedingPeakDBFS``: 1 s at the 10 ms hop.
    private let precedingFrames: Int

    /// The highest band power in the ring but the last `frames` + 1 stored (the frames a starting segment was a
    /// candidate in, and one before them: its onset's splatter); 0 when there is none.
    private func precedingBandPeak(excludingLast frames: Int) -> Double {
        let count = bandRing.count
        var peak = 0.0
        let skip = min(count, frames + 1)
        for back in skip..<count {
            // The n-th newest is at bandRingNext - 1 - n (mod count) once full; before, at count - 1 - n.
            let index = count < precedingFrames ? count - 1 - back : (bandRingNext - 1 - back + 2 * count) % count
            peak = max(peak, bandRing[index])
        }
        return peak
    }

    /// A segment that ended less than 1 s ago: its bin, peak power and the lowest power seen there since (for the
    /// rise rule).
    private struct Ended {
        var bin: Double
        var end: Double
        var peakPower: Double
        var trough: Double
    }

    /// - Parameters:
    ///   - sampleRate: Hz, 8000...384000; must be above twice ``Parameters/maximumHz``.
    /// - Throws: `EarshotError(.usage)` when the rate cannot hold the band, or the parameters are out of range.
    package init(sampleRate: Int, parameters: Parameters = Parameters()) throws(EarshotError) {
        guard (8000...384_000).contains(sampleRate), Double(sampleRate) / 2 > parameters.maximumHz * 1.05 else {
            throw EarshotError(.usage, "tone tracker: sample rate \(sampleRate) Hz cannot hold tones up to \(Int(parameters.maximumHz)) Hz (use 8000...384000 Hz, above twice the highest tone)")
        }
        guard parameters.minimumHz > 0, parameters.minimumHz < parameters.maximumHz,
              parameters.frameSeconds > 0, parameters.hopSeconds > 0, parameters.onsetFrames >= 1,
              parameters.offsetFrames >= 1, parameters.maximumTones >= 1, parameters.noiseFloorSeconds >= 0.1,
              (0...1).contains(parameters.noiseFloorQuantile)
        else {
            throw EarshotError(.usage, "tone tracker: parameters out of range (need 0 < minimumHz < maximumHz, positive frame and hop, onset/offset frames and maximum tones >= 1, noise floor over >= 0.1 s at a quantile in 0...1)")
        }
        self.sampleRate = sampleRate
        self.parameters = parameters
        let windowLength = max(16, Int((parameters.frameSeconds * Double(sampleRate)).rounded()))
        windowSamples = windowLength
        hopSamples = max(1, Int((parameters.hopSeconds * Double(sampleRate)).rounded()))
        var size = 16
        while size < windowLength { size *= 2 }
        fftSize = size
        binHz = Double(sampleRate) / Double(size)
        let hann = (0..<windowLength).map { n in
            Float(0.5 - 0.5 * cos(2 * Double.pi * Double(n) / Double(windowLength)))
        }
        window = hann
        powerScale = 2 / (Double(size) * hann.reduce(0) { $0 + Double($1) * Double($1) })
        // Hann main lobe: +-2 bins of a window-length FFT, wider in bins when zero-padded.
        let lobeBins = Int((2 * Double(size) / Double(windowLength)).rounded(.up))
        lobe = lobeBins
        let nyquistBin = size / 2
        let hzPerBin = Double(sampleRate) / Double(size)
        let low = max(lobeBins + 1, Int((parameters.minimumHz / hzPerBin).rounded(.down)))
        let high = min(nyquistBin - lobeBins - 1, Int((parameters.maximumHz / hzPerBin).rounded(.up)))
        searchLow = low
        searchHigh = high
        bandLow = max(1, min(low - 6 * lobeBins, Int(300 / hzPerBin)))
        bandHigh = min(nyquistBin, max(high + 6 * lobeBins, Int(parameters.maximumHz * 1.15 / hzPerBin)))
        precedingLow = min(max(bandLow, Int((300 / hzPerBin).rounded(.up))), bandHigh + 1)
        func buffer(_ count: Int, _ value: Double = 0) -> UnsafeMutableBufferPointer<Double> {
            let buffer = UnsafeMutableBufferPointer<Double>.allocate(capacity: count)
            buffer.initialize(repeating: value)
            return buffer
        }
        power = buffer(nyquistBin + 1)
        lobes = buffer(nyquistBin + 1)
        side = buffer(2 * (4 * lobeBins + 2))
        onsetSNR = pow(10, parameters.onsetSNRDB / 10)
        offsetSNR = pow(10, parameters.offsetSNRDB / 10)
        prominence = pow(10, parameters.minimumProminenceDB / 10)
        drop = pow(10, -parameters.dropDB / 10)
        rise = pow(10, parameters.riseDB / 10)
        floorPower = pow(10, parameters.floorDBFS / 10) / powerScale
        blockFrames = max(1, Int((0.1 / parameters.hopSeconds).rounded()))
        precedingFrames = max(1, Int((1.0 / parameters.hopSeconds).rounded()))
        blockCount = max(1, Int((parameters.noiseFloorSeconds / (Double(max(1, Int((0.1 / parameters.hopSeconds).rounded()))) * parameters.hopSeconds)).rounded()))
        let bins = high - low + 1
        blockSums = buffer(bins)
        blockRing = buffer(bins * blockCount)
        sortedBlocks = buffer(bins * blockCount)
        floors = buffer(bins, .infinity)
        guard let input = fftwf_alloc_real(size), let output = fftwf_alloc_complex(size / 2 + 1) else {
            for work in [power, lobes, side, blockSums, blockRing, sortedBlocks, floors] { work.deallocate() }
            throw EarshotError(.system, "tone tracker: cannot allocate FFT buffers of \(size) points (out of memory)")
        }
        self.input = input
        self.output = output
        let plan = LogMelSpectrogram.withPlanner {
            fftwf_plan_dft_r2c_1d(Int32(size), input, output, UInt32(FFTW_ESTIMATE))
        }
        guard let plan else {
            fftwf_free(input)
            fftwf_free(UnsafeMutableRawPointer(output))
            for work in [power, lobes, side, blockSums, blockRing, sortedBlocks, floors] { work.deallocate() }
            throw EarshotError(.system, "tone tracker: FFTW could not plan a \(size)-point FFT (out of memory?)")
        }
        self.plan = plan
        input.initialize(repeating: 0, count: size)
        pending.reserveCapacity(windowSamples + 96_000)
        peaks.reserveCapacity(parameters.maximumTones + 1)
        claimed = [Bool](repeating: false, count: parameters.maximumTones + 1)
    }

    deinit {
        LogMelSpectrogram.withPlanner { fftwf_destroy_plan(plan) }
        fftwf_free(input)
        fftwf_free(UnsafeMutableRawPointer(output))
        for work in [power, lobes, side, blockSums, blockRing, sortedBlocks, floors] { work.deallocate() }
    }

    /// Analyses `samples` (mono, full scale -1...1, at ``sampleRate``) whose first frame is at absolute position
    /// `framePosition` (stream time = position / sampleRate), and returns the segments that ended in them, in order
    /// of their start.
    ///
    /// A `framePosition` other than the end of the previous call is a gap: open segments are dropped (a beep is
    /// never joined across missing audio), the noise floor is forgotten and analysis restarts at the new position.
    package func process(_ samples: UnsafeBufferPointer<Float>, framePosition: Int64) -> [ToneSegment] {
        var finished: [ToneSegment] = []
        if expectedPosition != framePosition {
            resetStream(at: framePosition)
        }
        expectedPosition = framePosition + Int64(samples.count)
        pending.append(contentsOf: samples)
        var consumedUpTo = 0
        while true {
            let offset = Int(nextFrameStart - pendingStart)
            if offset + windowSamples > pending.count { break }
            let centre = (Double(nextFrameStart) + Double(windowSamples) / 2) / Double(sampleRate)
            pending.withUnsafeBufferPointer { buffer in
                analyseFrame(buffer.baseAddress! + offset, time: centre, finished: &finished)
            }
            nextFrameStart += Int64(hopSamples)
            consumedUpTo = Int(nextFrameStart - pendingStart)
        }
        if consumedUpTo > 0 {
            let drop = min(consumedUpTo, pending.count)
            pending.removeFirst(drop)
            pendingStart += Int64(drop)
        }
        if finished.count > 1 { finished.sort { $0.start < $1.start } }
        return finished
    }

    /// Convenience for arrays; see ``process(_:framePosition:)``.
    package func process(_ samples: [Float], framePosition: Int64) -> [ToneSegment] {
        samples.withUnsafeBufferPointer { process($0, framePosition: framePosition) }
    }

    /// Ends the stream: returns the open segments, if any (ended at their last "on" frame), and resets.
    package func finish() -> [ToneSegment] {
        let result = running.indices.map(segment(at:)).sorted { $0.start < $1.start }
        resetState()
        pending.removeAll(keepingCapacity: true)
        expectedPosition = nil
        return result
    }

    /// The segments open now, as they stand (for "tone present" queries while a long beep sounds), in order of
    /// their start.
    package var openSegments: [ToneSegment] { running.indices.map(segment(at:)).sorted { $0.start < $1.start } }

    /// Stream time (s) up to which frames have been analysed.
    package var analysedTime: Double {
        (Double(nextFrameStart) + Double(windowSamples) / 2) / Double(sampleRate) - parameters.hopSeconds
    }

    private func resetState() {
        candidates.removeAll(keepingCapacity: true)
        running.removeAll(keepingCapacity: true)
        envelopes.removeAll(keepingCapacity: true)
        ended.removeAll(keepingCapacity: true)
        bandRing.removeAll(keepingCapacity: true)
        bandRingNext = 0
        floors.update(repeating: .infinity)
        blockSums.update(repeating: 0)
        framesInBlock = 0
        blocksFilled = 0
        nextSlot = 0
    }

    private func resetStream(at position: Int64) {
        resetState()
        pending.removeAll(keepingCapacity: true)
        pendingStart = position
        nextFrameStart = position
    }

    private func segment(at index: Int) -> ToneSegment {
        let running = running[index]
        let frames = Double(max(running.frames, 1))
        return ToneSegment(
            start: running.start, end: running.lastOn, frequencyHz: running.sumBin / frames * binHz,
            levelDBFS: running.sumDB / frames, peakLevelDBFS: dbfs(running.peakPower),
            peakSNRDB: running.peakSNR > 0 ? min(99, 10 * log10(running.peakSNR)) : 0,
            frequencySpreadHz: binHz * max(0, running.peakSquares / Double(max(running.peaks, 1))
                - pow(running.peakSum / Double(max(running.peaks, 1)), 2)).squareRoot(),
            envelopePeriodicity: envelopes.isEmpty ? 0 : envelopes[index].periodicity(minimumVariance: 0.25).score,
            levelDips: running.dips, precedingPeakDBFS: running.precedingPeak > 0 ? dbfs(running.precedingPeak) : -.infinity)
    }

    private func dbfs(_ lobePower: Double) -> Double { 10 * log10(max(lobePower * powerScale, 1e-20)) }

    /// Noise floor of the main lobe centred on `bin` (+infinity before the first 0.1 s).
    private func floor(at bin: Int) -> Double { floors[min(max(bin, searchLow), searchHigh) - searchLow] }

    /// `level` over the noise floor at `bin` (0 before the first floor; large over a silent floor).
    private func snr(_ level: Double, at bin: Int) -> Double {
        let noise = floor(at: bin)
        guard noise.isFinite else { return 0 }
        return level / max(noise, 1e-30)
    }

    /// The searched bin nearest to a fractional bin.
    private func nearest(_ bin: Double) -> Int { min(max(Int(bin.rounded()), searchLow), searchHigh) }

    /// The least power per bin beside the main lobe (the bins of ``sidePower(at:)``).
    private func sideMinimum(at bin: Int) -> Double {
        var least = Double.infinity
        for distance in (lobe + lobe / 2 + 1)...(4 * lobe + 2) {
            if bin - distance >= bandLow { least = min(least, power[bin - distance]) }
            if bin + distance <= bandHigh { least = min(least, power[bin + distance]) }
        }
        return least.isFinite ? least : 0
    }

    /// Median power per bin beside the main lobe (from 1.5 to 4 lobe widths away on both sides): the median, so
    /// that a second tone beside the first (a two-tone or modulated sounder) does not hide it.
    private func sidePower(at bin: Int) -> Double {
        var count = 0
        func add(_ k: Int) {
            guard k >= bandLow, k <= bandHigh else { return }
            // Insertion into the sorted list of at most 2 * (2.5 lobes + 1) values.
            let value = power[k]
            var position = count
            while position > 0 && side[position - 1] > value {
                side[position] = side[position - 1]
                position -= 1
            }
            side[position] = value
            count += 1
        }
        for distance in (lobe + lobe / 2 + 1)...(4 * lobe + 2) {
            add(bin - distance)
            add(bin + distance)
        }
        return count > 0 ? side[count / 2] : 0
    }

    /// Adds this frame's main-lobe powers to the current 0.1 s block; at the end of a block, stores its means and
    /// updates each bin's floor (the quantile of the stored means, kept sorted: the oldest value out, the new one in).
    private func updateNoiseFloor() {
        let bins = searchHigh - searchLow + 1
        let sums = blockSums.baseAddress!, frameLobes = lobes.baseAddress! + searchLow
        for index in 0..<bins { sums[index] += frameLobes[index] }
        framesInBlock += 1
        guard framesInBlock == blockFrames else { return }
        let base = nextSlot * bins
        let scale = 1 / Double(blockFrames)
        let full = blocksFilled == blockCount
        let filled = full ? blockCount : blocksFilled + 1
        let rank = min(filled - 1, Int((parameters.noiseFloorQuantile * Double(filled - 1)).rounded()))
        let count = blockCount, filledBefore = blocksFilled
        let ring = blockRing.baseAddress! + base, sorted = sortedBlocks.baseAddress!, binFloors = floors.baseAddress!
        for index in 0..<bins {
            let value = sums[index] * scale
            sums[index] = 0
            let row = sorted + index * count
            if full {
                // The value leaving the ring is an exact copy of one in the sorted row: find the first copy (binary
                // search), put the new value in its place and move it to its rank. Only the values between the old
                // and the new rank move; the floor changes slowly, so that is a few, not the whole row.
                let old = ring[index]
                var low = 0, high = count - 1
                while low < high {
                    let middle = (low + high) / 2
                    if row[middle] < old { low = middle + 1 } else { high = middle }
                }
                var position = low
                if value >= old {
                    // After any equal values, as an insertion from the end would place it.
                    while position + 1 < count && row[position + 1] <= value {
                        row[position] = row[position + 1]
                        position += 1
                    }
                } else {
                    while position > 0 && row[position - 1] > value {
                        row[position] = row[position - 1]
                        position -= 1
                    }
                }
                row[position] = value
            } else {
                var position = filledBefore
                while position > 0 && row[position - 1] > value {
                    row[position] = row[position - 1]
                    position -= 1
                }
                row[position] = value
            }
            ring[index] = value
            binFloors[index] = row[rank]
        }
        framesInBlock = 0
        nextSlot = (nextSlot + 1) % blockCount
        blocksFilled = filled
    }

    private func analyseFrame(_ frame: UnsafePointer<Float>, time: Double, finished: inout [ToneSegment]) {
        window.withUnsafeBufferPointer { w in
            for n in 0..<windowSamples { input[n] = frame[n] * w[n] }
        }
        fftwf_execute(plan)
        let spectrum = UnsafeRawPointer(output).assumingMemoryBound(to: Float.self)
        let power = self.power.baseAddress!, lobes = self.lobes.baseAddress!
        let lobe = self.lobe, searchLow = self.searchLow, searchHigh = self.searchHigh
        // One sum in bin order (the band's power, for onsets and offsets), read off where the preceding-peak band
        // (300 Hz up) starts.
        var bandEnergy = 0.0
        for k in bandLow..<precedingLow {
            let re = Double(spectrum[2 &* k]), im = Double(spectrum[2 &* k &+ 1])
            let p = re * re + im * im
            power[k] = p
            bandEnergy += p
        }
        let belowPrecedingBand = bandEnergy
        for k in precedingLow..<(bandHigh + 1) {
            let re = Double(spectrum[2 &* k]), im = Double(spectrum[2 &* k &+ 1])
            let p = re * re + im * im
            power[k] = p
            bandEnergy += p
        }
        // Main-lobe power centred on every searched bin (a running sum).
        var sum = 0.0
        for k in (searchLow - lobe)..<(searchLow + lobe + 1) { sum += power[k] }
        lobes[searchLow] = sum
        if searchLow < searchHigh {
            for k in (searchLow + 1)..<(searchHigh + 1) {
                sum += power[k &+ lobe] - power[k &- lobe &- 1]
                lobes[k] = max(sum, 0)
            }
        }
        findPeaks(bandEnergy: bandEnergy)
        step(bandEnergy: bandEnergy, precedingBandEnergy: max(bandEnergy - belowPrecedingBand, 0), time: time,
             finished: &finished)
        // The floor is updated after the decisions, so that a frame is judged against the noise before it.
        updateNoiseFloor()
    }

    /// The tonal peaks of this frame, strongest first, at most ``Parameters/maximumTones``, at least three main
    /// lobes apart.
    private func findPeaks(bandEnergy: Double) {
        peaks.removeAll(keepingCapacity: true)
        guard bandEnergy > 0 else { return }
        let power = self.power.baseAddress!, lobes = self.lobes.baseAddress!, floors = self.floors.baseAddress!
        let searchLow = self.searchLow, searchHigh = self.searchHigh, onsetSNR = self.onsetSNR
        var strongest = searchLow
        for k in searchLow..<(searchHigh + 1) where power[k] > power[strongest] { strongest = k }
        let limit = parameters.maximumTones
        // Peaks 30 dB below the strongest are its window's sidelobes or the splatter of its onset, not tones.
        let least = max(floorPower, lobes[strongest] * 1e-3)
        for k in searchLow..<(searchHigh + 1) {
            let p = power[k]
            guard p > power[k &- 1], p >= power[k &+ 1] else { continue }
            let level = lobes[k]
            guard level >= least else { continue }
            let aboveFloor = level >= onsetSNR * floors[k &- searchLow]
            let dominant = k == strongest && level >= parameters.onsetRatio * bandEnergy
            guard aboveFloor || dominant else { continue }
            // Cheap test before the side median: the peak must beat the weakest kept peak.
            if peaks.count == limit, let weakest = peaks.last, level <= weakest.level { continue }
            let needed = prominence * Double(2 * lobe + 1)
            // The median beside the peak is at least their minimum: a cheap test first.
            guard level >= needed * sideMinimum(at: k) else { continue }
            let sidePerBin = sidePower(at: k)
            guard sidePerBin <= 0 || level >= needed * sidePerBin else { continue }
            // Parabolic interpolation on log power for the fractional peak position.
            var fractional = Double(k)
            let a = log(max(power[k - 1], 1e-30)), b = log(max(p, 1e-30)), c = log(max(power[k + 1], 1e-30))
            let denominator = a - 2 * b + c
            if denominator < 0 { fractional += max(-0.5, min(0.5, 0.5 * (a - c) / denominator)) }
            // A stronger peak within three lobes masks this one (and is kept instead of it).
            if let near = peaks.firstIndex(where: { abs($0.bin - k) <= 3 * lobe }) {
                if peaks[near].level >= level { continue }
                peaks.remove(at: near)
            }
            let entry = (bin: k, fractional: fractional, level: level)
            let position = peaks.firstIndex { $0.level < level } ?? peaks.count
            peaks.insert(entry, at: position)
            if peaks.count > limit { peaks.removeLast() }
        }
    }

    private func tolerance(bin: Double) -> Double { max(1.0, bin * parameters.frequencyTolerance) }

    /// `precedingBandEnergy`: this frame's power from 300 Hz up (``precedingLow``), kept for
    /// ``ToneSegment/precedingPeakDBFS``.
    private func step(bandEnergy: Double, precedingBandEnergy: Double, time: Double, finished: inout [ToneSegment]) {
        for p in claimed.indices { claimed[p] = false }
        if bandRing.count < precedingFrames {
            bandRing.append(precedingBandEnergy)
        } else {
            bandRing[bandRingNext] = precedingBandEnergy
            bandRingNext = (bandRingNext + 1) % bandRing.count
        }
        // Running segments follow the energy at their frequency.
        var index = 0
        while index < running.count {
            var tone = running[index]
            let centre = nearest(tone.bin)
            let level = lobes[centre]
            let stillOn = level >= floorPower && bandEnergy > 0 && level >= tone.peakPower * drop
                && (level >= offsetSNR * floor(at: centre) || level >= parameters.offRatio * bandEnergy)
            if let near = peaks.indices.first(where: { !claimed[$0] && abs(peaks[$0].fractional - tone.bin) <= tolerance(bin: tone.bin) + Double(lobe) }) {
                claimed[near] = true
                if stillOn, abs(peaks[near].fractional - tone.bin) <= tolerance(bin: tone.bin) {
                    tone.bin += 0.2 * (peaks[near].fractional - tone.bin)
                    tone.peakSum += peaks[near].fractional
                    tone.peakSquares += peaks[near].fractional * peaks[near].fractional
                    tone.peaks += 1
                }
            }
            if stillOn {
                tone.misses = 0
                tone.lastOn = time
                tone.peakPower = max(tone.peakPower, level)
                tone.peakSNR = max(tone.peakSNR, snr(level, at: centre))
                let levelDB = dbfs(level)
                tone.sumDB += levelDB
                tone.frames += 1
                tone.sumBin += tone.bin
                tone.followLevel(levelDB, at: time)
                running[index] = tone
                if parameters.tracksEnvelopeBeat { envelopes[index].add(levelDB) }
                index += 1
                continue
            }
            tone.misses += 1
            // A frame or two below the offset rule inside a tone is part of its level's dips.
            tone.followLevel(dbfs(level), at: time)
            if tone.misses >= parameters.offsetFrames {
                running[index] = tone
                finished.append(segment(at: index))
                ended.append(Ended(bin: tone.bin, end: tone.lastOn, peakPower: tone.peakPower, trough: level))
                running.remove(at: index)
                if parameters.tracksEnvelopeBeat { envelopes.remove(at: index) }
            } else {
                running[index] = tone
                index += 1
            }
        }

        // After a segment: follow the trough at its frequency for 1 s (the rise rule).
        ended.removeAll { time - $0.end >= 1.0 }
        for e in ended.indices { ended[e].trough = min(ended[e].trough, lobes[nearest(ended[e].bin)]) }

        // Other peaks are onset candidates; a candidate not seen in this frame is dropped.
        for c in candidates.indices { candidates[c].seen = false }
        for (p, peak) in peaks.enumerated() where !claimed[p] {
            let recent = ended.last { abs(peak.fractional - $0.bin) <= tolerance(bin: $0.bin) + Double(lobe) }
            // Within 1 s of a segment, its frequency starts again only by rising above the trough since, and to
            // within dropDB + 3 dB of that segment's peak (a room's late echoes of a beep are not beeps).
            if let recent, peak.level < recent.trough * rise || peak.level < recent.peakPower * drop * 0.5 { continue }
            if let c = candidates.firstIndex(where: { !$0.seen && abs(peak.fractional - $0.bin) <= tolerance(bin: $0.bin) }) {
                candidates[c].count += 1
                candidates[c].bin += (peak.fractional - candidates[c].bin) / Double(candidates[c].count)
                candidates[c].seen = true
                candidates[c].peakSum += peak.fractional
                candidates[c].peakSquares += peak.fractional * peak.fractional
            } else {
                candidates.append(Candidate(
                    bin: peak.fractional, startTime: time, count: 1, seen: true, peakSum: peak.fractional,
                    peakSquares: peak.fractional * peak.fractional))
            }
        }
        candidates.removeAll { !$0.seen }
        var c = 0
        while c < candidates.count {
            let candidate = candidates[c]
            guard candidate.count >= parameters.onsetFrames, running.count < parameters.maximumTones else {
                c += 1
                continue
            }
            let level = lobes[nearest(candidate.bin)]
            if parameters.tracksEnvelopeBeat { envelopes.append(EnvelopeModulation()) }
            running.append(Running(
                bin: candidate.bin, start: candidate.startTime, lastOn: time, peakPower: level,
                peakSNR: snr(level, at: nearest(candidate.bin)),
                precedingPeak: precedingBandPeak(excludingLast: candidate.count),
                sumDB: dbfs(level) * Double(candidate.count), sumBin: candidate.bin * Double(candidate.count),
                frames: candidate.count, peakSum: candidate.peakSum, peakSquares: candidate.peakSquares,
                peaks: candidate.count))
            ended.removeAll { abs(candidate.bin - $0.bin) <= tolerance(bin: $0.bin) + Double(lobe) }
            candidates.remove(at: c)
        }
    }
}
