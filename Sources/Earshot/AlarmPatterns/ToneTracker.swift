internal import CFFTW
import Foundation

/// A persistent narrow-band tone heard by ``ToneTracker``: one "on" segment of a beep, from its onset to its offset.
public struct ToneSegment: Sendable, Equatable {
    /// Stream time (s) of the segment's first "on" frame (frame centre).
    public var start: Double
    /// Stream time (s) of its last "on" frame (frame centre); `end >= start`.
    public var end: Double
    /// Mean frequency of the tone in Hz (parabolic interpolation between FFT bins), within the tracker's band.
    public var frequencyHz: Double
    /// Mean level of the tone component in dBFS (RMS of the tone alone: a full-scale sine is -3 dBFS).
    public var levelDBFS: Double
    /// Highest frame level of the tone component in dBFS.
    public var peakLevelDBFS: Double

    /// `end - start` in seconds. A segment of one frame has duration 0; add one hop for the audible length.
    public var duration: Double { end - start }

    public init(start: Double, end: Double, frequencyHz: Double, levelDBFS: Double, peakLevelDBFS: Double) {
        self.start = start
        self.end = end
        self.frequencyHz = frequencyHz
        self.levelDBFS = levelDBFS
        self.peakLevelDBFS = peakLevelDBFS
    }
}

/// Finds persistent narrow spectral peaks (beeps of a smoke or CO alarm, a beeper, a clock) in mono audio at the
/// capture rate and reports them as on/off segments with frequency and level.
///
/// Method: a short-time Fourier transform (periodic Hann window of ``Parameters/frameSeconds``, hop
/// ``Parameters/hopSeconds``, FFT zero-padded to a power of two; at 48 kHz 1536 samples in a 2048-point FFT, 23.4 Hz
/// bins). In every frame the strongest bin between ``Parameters/minimumHz`` and ``Parameters/maximumHz`` is a
/// candidate tone; it counts as tonal when its main lobe holds at least ``Parameters/onsetRatio`` of the energy in
/// the band around it (300 Hz to 1.15 x the maximum) and stands ``Parameters/minimumProminenceDB`` above the bins
/// beside it. A segment starts after ``Parameters/onsetFrames`` tonal frames at one frequency (within
/// ``Parameters/frequencyTolerance``); it then follows the energy at that frequency and ends when that energy falls
/// ``Parameters/dropDB`` below the segment's peak or below ``Parameters/offRatio`` of the band (hysteresis: a
/// reverberant tail that keeps a few dB of tone does not hold the segment open, and the same tone only starts a new
/// segment after rising ``Parameters/riseDB`` above the trough that followed the last one).
///
/// Cost: one real FFT per hop (100 per second) over only the bins of the band; about 0.2 % of one core of a
/// desktop at 48 kHz (see `earshot eval --cpu`).
///
/// - Important: Not thread-safe: own an instance on one queue. Creating instances from several threads is safe
///   (FFTW planning is serialised under ``LogMelSpectrogram``'s plan lock, shared by every FFTW user here).
public final class ToneTracker {
    /// Tuning of the tracker. The defaults were chosen on the real alarm recordings in `../shared/audio` and on
    /// synthetic T3/T4 signals mixed with household noise and speech at 0 dB SNR.
    public struct Parameters: Sendable, Equatable {
        /// Lowest tone frequency searched, Hz (a 520 Hz low-frequency alarm must be inside).
        public var minimumHz: Double = 400
        /// Highest tone frequency searched, Hz (UL 217 piezo alarms sound at or below 3.5 kHz).
        public var maximumHz: Double = 4000
        /// STFT window length in seconds (32 ms: 62 Hz main-lobe half width, short enough for T4's 0.1 s beeps).
        public var frameSeconds: Double = 0.032
        /// STFT hop in seconds.
        public var hopSeconds: Double = 0.010
        /// Fraction (0...1) of the band's energy the peak's main lobe must hold for a frame to be tonal.
        public var onsetRatio: Double = 0.25
        /// Fraction of the band's energy below which a running segment's tone counts as gone.
        public var offRatio: Double = 0.08
        /// dB the peak's main lobe must stand above the mean of the bins beside it (per bin).
        public var minimumProminenceDB: Double = 12
        /// Consecutive tonal frames at one frequency that start a segment.
        public var onsetFrames: Int = 3
        /// Consecutive frames without the tone that end a segment.
        public var offsetFrames: Int = 2
        /// dB below the segment's peak at which the tone counts as off.
        public var dropDB: Double = 7
        /// dB above the trough after a segment that the same tone must rise to start a new one.
        public var riseDB: Double = 4
        /// Relative frequency tolerance within a segment (0.03 = 3 %), at least one FFT bin.
        public var frequencyTolerance: Double = 0.03
        /// Tones quieter than this (dBFS of the tone component) are ignored.
        public var floorDBFS: Double = -75

        public init() {}
    }

    /// Input sample rate in Hz.
    public let sampleRate: Int
    public let parameters: Parameters
    /// Samples per STFT window.
    public let windowSamples: Int
    /// Samples per hop.
    public let hopSamples: Int
    /// FFT length (power of two >= windowSamples).
    public let fftSize: Int
    /// Hz per FFT bin.
    public let binHz: Double

    private let window: [Float]
    /// Converts main-lobe power to the tone's mean square: 2 / (N * sum w^2).
    private let powerScale: Double
    private let searchLow: Int, searchHigh: Int
    private let bandLow: Int, bandHigh: Int
    private let lobe: Int
    private let input: UnsafeMutablePointer<Float>
    private let output: UnsafeMutablePointer<fftwf_complex>
    private let plan: fftwf_plan
    private var power: [Double]
    private var side: [Double]

    // Streaming state.
    private var pending: [Float] = []
    private var pendingStart: Int64 = 0  // absolute frame of pending[0]
    private var nextFrameStart: Int64 = 0  // absolute sample position of the next STFT frame
    private var expectedPosition: Int64?
    private var state = State()

    private struct Candidate {
        var bin: Double
        var startTime: Double
        var count: Int
    }

    private struct Running {
        var bin: Double  // current centre (fractional bin)
        var start: Double
        var lastOn: Double
        var peakPower: Double
        var sumDB: Double = 0
        var sumBin: Double = 0
        var frames = 0
        var misses = 0
    }

    private struct State {
        var candidate: Candidate?
        var running: Running?
        /// The last segment's bin and the lowest power seen there since it ended (for the rise rule).
        var lastBin: Double?
        var lastEnd: Double = -.infinity
        var trough: Double = .infinity
    }

    /// - Parameters:
    ///   - sampleRate: Hz, 8000...384000; must be above twice ``Parameters/maximumHz``.
    /// - Throws: `EarshotError(.usage)` when the rate cannot hold the band, or the parameters are out of range.
    public init(sampleRate: Int, parameters: Parameters = Parameters()) throws(EarshotError) {
        guard (8000...384_000).contains(sampleRate), Double(sampleRate) / 2 > parameters.maximumHz * 1.05 else {
            throw EarshotError(.usage, "tone tracker: sample rate \(sampleRate) Hz cannot hold tones up to \(Int(parameters.maximumHz)) Hz (use 8000...384000 Hz, above twice the highest tone)")
        }
        guard parameters.minimumHz > 0, parameters.minimumHz < parameters.maximumHz,
              parameters.frameSeconds > 0, parameters.hopSeconds > 0, parameters.onsetFrames >= 1,
              parameters.offsetFrames >= 1
        else {
            throw EarshotError(.usage, "tone tracker: parameters out of range (need 0 < minimumHz < maximumHz, positive frame and hop, onset/offset frames >= 1)")
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
        power = [Double](repeating: 0, count: nyquistBin + 1)
        side = [Double](repeating: 0, count: 2 * (4 * lobeBins + 2))
        guard let input = fftwf_alloc_real(size), let output = fftwf_alloc_complex(size / 2 + 1) else {
            throw EarshotError(.system, "tone tracker: cannot allocate FFT buffers of \(size) points (out of memory)")
        }
        self.input = input
        self.output = output
        let plan = LogMelSpectrogram.planLock.withLock {
            fftwf_plan_dft_r2c_1d(Int32(size), input, output, UInt32(FFTW_ESTIMATE))
        }
        guard let plan else {
            fftwf_free(input)
            fftwf_free(UnsafeMutableRawPointer(output))
            throw EarshotError(.system, "tone tracker: FFTW could not plan a \(size)-point FFT (out of memory?)")
        }
        self.plan = plan
        input.initialize(repeating: 0, count: size)
        pending.reserveCapacity(windowSamples + 96_000)
    }

    deinit {
        LogMelSpectrogram.planLock.withLock { fftwf_destroy_plan(plan) }
        fftwf_free(input)
        fftwf_free(UnsafeMutableRawPointer(output))
    }

    /// Analyses `samples` (mono, full scale -1...1, at ``sampleRate``) whose first frame is at absolute position
    /// `framePosition` (stream time = position / sampleRate), and returns the segments that ended in them.
    ///
    /// A `framePosition` other than the end of the previous call is a gap: the open segment is dropped (a beep is
    /// never joined across missing audio) and analysis restarts at the new position.
    public func process(_ samples: UnsafeBufferPointer<Float>, framePosition: Int64) -> [ToneSegment] {
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
        return finished
    }

    /// Convenience for arrays; see ``process(_:framePosition:)``.
    public func process(_ samples: [Float], framePosition: Int64) -> [ToneSegment] {
        samples.withUnsafeBufferPointer { process($0, framePosition: framePosition) }
    }

    /// Ends the stream: returns the open segment, if any (ended at its last "on" frame), and resets.
    public func finish() -> [ToneSegment] {
        var result: [ToneSegment] = []
        if let running = state.running { result.append(segment(from: running)) }
        state = State()
        pending.removeAll(keepingCapacity: true)
        expectedPosition = nil
        return result
    }

    /// The segment open now, if any, as it stands (for "tone present" queries while a long beep sounds).
    public var openSegment: ToneSegment? { state.running.map(segment(from:)) }

    /// Stream time (s) up to which frames have been analysed.
    public var analysedTime: Double {
        (Double(nextFrameStart) + Double(windowSamples) / 2) / Double(sampleRate) - parameters.hopSeconds
    }

    private func resetStream(at position: Int64) {
        state = State()
        pending.removeAll(keepingCapacity: true)
        pendingStart = position
        nextFrameStart = position
    }

    private func segment(from running: Running) -> ToneSegment {
        let frames = Double(max(running.frames, 1))
        return ToneSegment(
            start: running.start, end: running.lastOn, frequencyHz: running.sumBin / frames * binHz,
            levelDBFS: running.sumDB / frames, peakLevelDBFS: dbfs(running.peakPower))
    }

    private func dbfs(_ lobePower: Double) -> Double { 10 * log10(max(lobePower * powerScale, 1e-20)) }

    private func lobePower(at bin: Int) -> Double {
        var sum = 0.0
        for k in (bin - lobe)...(bin + lobe) { sum += power[k] }
        return sum
    }

    /// Median power per bin beside the main lobe (from 1.5 to 4 lobe widths away on both sides): the median, so
    /// that a second tone beside the first (a two-tone or modulated sounder) does not hide it.
    private func sidePower(at bin: Int) -> Double {
        var count = 0
        for distance in (lobe + lobe / 2 + 1)...(4 * lobe + 2) {
            for k in [bin - distance, bin + distance] where k >= bandLow && k <= bandHigh {
                side[count] = power[k]
                count += 1
            }
        }
        guard count > 0 else { return 0 }
        side[0..<count].sort()
        return side[count / 2]
    }

    private func analyseFrame(_ frame: UnsafePointer<Float>, time: Double, finished: inout [ToneSegment]) {
        window.withUnsafeBufferPointer { w in
            for n in 0..<windowSamples { input[n] = frame[n] * w[n] }
        }
        fftwf_execute(plan)
        let spectrum = UnsafeRawPointer(output).assumingMemoryBound(to: Float.self)
        var bandEnergy = 0.0
        for k in bandLow...bandHigh {
            let re = Double(spectrum[2 * k]), im = Double(spectrum[2 * k + 1])
            let p = re * re + im * im
            power[k] = p
            bandEnergy += p
        }
        guard bandEnergy > 0 else {
            step(peakBin: nil, peakLobe: 0, tonal: false, bandEnergy: 0, time: time, finished: &finished)
            return
        }
        var peak = searchLow
        for k in searchLow...searchHigh where power[k] > power[peak] { peak = k }
        let peakLobe = lobePower(at: peak)
        let side = sidePower(at: peak)
        let prominent = side <= 0 || peakLobe / (Double(2 * lobe + 1) * side) >= pow(10, parameters.minimumProminenceDB / 10)
        let tonal = prominent && peakLobe / bandEnergy >= parameters.onsetRatio
            && dbfs(peakLobe) >= parameters.floorDBFS
        // Parabolic interpolation on log power for the fractional peak position.
        var fractional = Double(peak)
        let a = log(max(power[peak - 1], 1e-30)), b = log(max(power[peak], 1e-30)), c = log(max(power[peak + 1], 1e-30))
        let denominator = a - 2 * b + c
        if denominator < 0 { fractional += max(-0.5, min(0.5, 0.5 * (a - c) / denominator)) }
        step(peakBin: fractional, peakLobe: peakLobe, tonal: tonal, bandEnergy: bandEnergy, time: time, finished: &finished)
    }

    private func tolerance(bin: Double) -> Double { max(1.0, bin * parameters.frequencyTolerance) }

    private func step(
        peakBin: Double?, peakLobe: Double, tonal: Bool, bandEnergy: Double, time: Double,
        finished: inout [ToneSegment]
    ) {
        if var running = state.running {
            let centre = Int(running.bin.rounded())
            let level = lobePower(at: centre)
            let stillOn = level >= parameters.floorPower(scale: powerScale)
                && bandEnergy > 0
                && level >= running.peakPower * pow(10, -parameters.dropDB / 10)
                && level / bandEnergy >= parameters.offRatio
            if stillOn {
                running.misses = 0
                running.lastOn = time
                running.peakPower = max(running.peakPower, level)
                running.sumDB += dbfs(level)
                running.frames += 1
                if let peakBin, tonal, abs(peakBin - running.bin) <= tolerance(bin: running.bin) {
                    running.bin += 0.2 * (peakBin - running.bin)
                }
                running.sumBin += running.bin
                state.running = running
            } else {
                running.misses += 1
                if running.misses >= parameters.offsetFrames {
                    finished.append(segment(from: running))
                    state.running = nil
                    state.lastBin = running.bin
                    state.lastEnd = running.lastOn
                    state.trough = level
                    state.candidate = nil
                } else {
                    state.running = running
                }
            }
            return
        }

        // Idle: follow the trough after the last segment, then look for a new onset.
        var eligible = tonal
        if let lastBin = state.lastBin, time - state.lastEnd < 1.0 {
            let level = lobePower(at: Int(lastBin.rounded()))
            state.trough = min(state.trough, level)
            if let peakBin, abs(peakBin - lastBin) <= tolerance(bin: lastBin) + Double(lobe),
               peakLobe < state.trough * pow(10, parameters.riseDB / 10) {
                eligible = false
            }
        }
        guard eligible, let peakBin else {
            state.candidate = nil
            return
        }
        if var candidate = state.candidate, abs(peakBin - candidate.bin) <= tolerance(bin: candidate.bin) {
            candidate.count += 1
            candidate.bin += (peakBin - candidate.bin) / Double(candidate.count)
            state.candidate = candidate
        } else {
            state.candidate = Candidate(bin: peakBin, startTime: time, count: 1)
        }
        if let candidate = state.candidate, candidate.count >= parameters.onsetFrames {
            let level = lobePower(at: Int(candidate.bin.rounded()))
            state.running = Running(
                bin: candidate.bin, start: candidate.startTime, lastOn: time, peakPower: level,
                sumDB: dbfs(level) * Double(candidate.count), sumBin: candidate.bin * Double(candidate.count),
                frames: candidate.count)
            state.candidate = nil
            state.lastBin = nil
        }
    }
}

extension ToneTracker.Parameters {
    /// ``floorDBFS`` as main-lobe power for a tracker whose power-to-mean-square factor is `scale`.
    fileprivate func floorPower(scale: Double) -> Double { pow(10, floorDBFS / 10) / scale }
}
