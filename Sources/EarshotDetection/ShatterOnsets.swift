internal import CFFTW
import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotModel

/// Finds the onsets of breaking glass in the 16 kHz audio the classifier hears: an impulsive broadband onset
/// followed by a decaying, still broadband shatter. `glass_break` windows count only where one was found
/// (`DetectionStage` runs it over the last seconds of audio of each window the classifier scores as glass), so a
/// beep, a tone, a click or speech the classifier calls "Glass" raises nothing.
///
/// Per 10 ms hop (16 ms Hann frames) the level of the samples after a 125 Hz one-pole high-pass. An onset is a
/// frame ``Parameters/riseDB`` above the background (the 0.2 quantile of the last 0.5 s, refreshed every 0.1 s)
/// and ``Parameters/fastRiseDB`` above the frame 20 ms before. From there a 256-point FFT gives each frame's
/// spectral flatness over 1-8 kHz (geometric over arithmetic mean of the bins' power: about 0.01 for a tone, 0.5
/// for white noise) and its share of energy above 2 kHz. It is a shatter when its broadest frame in the first 30 ms
/// reaches ``Parameters/onsetFlatness`` and its brightest ``Parameters/highShare``, and over the
/// ``Parameters/tailSeconds`` after that the tail stays broadband (``Parameters/tailFlatness``), lasts
/// (``Parameters/sustain`` of its frames within 15 dB of the peak), does not collapse (its first half at most
/// ``Parameters/firstHalfDropDB`` below the peak) and decays (its last third ``Parameters/decayDB`` below it).
/// An onset that passes these is *provisional* until its late level is known: the mean power of its frames
/// ``Parameters/lateFrom``-``Parameters/lateTo`` s after the onset must be ``Parameters/lateDropDB`` below the peak
/// (glass has settled by then; a hard cut into running water, applause or noise stays at its level).
///
/// Cost: a windowed sum of squares per 10 ms, the FFT only for the 0.38 s after an onset; 155 us per second of
/// audio when run over everything (`earshot eval --groups --cost`).
///
/// - Important: Not thread-safe: one owner (the stage).
package final class ShatterOnsets {
    package struct Parameters: Sendable, Equatable {
        /// dB above the background (0.2 quantile of the last 0.5 s) at the onset.
        package var riseDB = 18.0
        /// dB above the frame 20 ms before (impulsive: a beep's or a voice's rise is slower or narrowband).
        package var fastRiseDB = 9.0
        /// Spectral flatness (1-8 kHz) the onset's broadest frame in its first 30 ms must reach.
        package var onsetFlatness = 0.12
        /// Share of the onset's brightest frame energy above 2 kHz (a door's or a knock's thud is low).
        package var highShare = 0.5
        /// Seconds of tail measured after the onset's first 30 ms.
        package var tailSeconds = 0.35
        /// Mean flatness of the tail (a shatter stays broadband; a ringing tone does not).
        package var tailFlatness = 0.1
        /// Fraction of tail frames within 15 dB of the onset's peak (the shatter lasts; a click or a thud dies).
        package var sustain = 0.6
        /// dB the tail's last third is below the peak at least (it decays; typing or noise goes on).
        package var decayDB = 5.0
        /// dB the tail's first half may be below the peak at most (a thud collapses at once).
        package var firstHalfDropDB = 10.0
        /// Start and end (s after the onset) of the late level. Source (`earshot eval --onsets`): the 6 breaks of
        /// the synthetic tuning set are 14.1-41.0 dB below their peak here, the 2 of ../shared 31.9 and 45.7 dB; a
        /// cut from room tone into ../shared's running water (which passes every other test, as the 24-hour
        /// stream's false events did) 4.9 dB.
        package var lateFrom = 0.6
        package var lateTo = 1.0
        /// dB the mean power over `lateFrom...lateTo` must be below the onset's peak at least.
        package var lateDropDB = 9.0
        package init() {}
    }

    /// A candidate onset and its measured features (for tuning and tests).
    package struct Onset: Sendable, Equatable {
        package var time: Double
        package var riseDB: Double
        package var flatness: Double
        package var highShare: Double
        /// Filled when the tail has been measured.
        package var tailFlatness: Double = 0
        package var sustain: Double = 0
        package var firstHalfDropDB: Double = 0
        package var decayDB: Double = 0
        /// Filled when the late level has been measured (``Parameters/lateTo`` s after the onset).
        package var lateDropDB: Double = 0
        /// Passed the onset and tail tests; waiting for the late level.
        package var isProvisional = false
        package var isShatter = false
        /// The onset's peak frame level (dB, full scale 0 dB for a 256-sample frame of ones).
        package var peakDB: Double = 0
    }

    package let parameters: Parameters
    private static let size = 256
    private static let hop = 160
    private let window: [Float]
    private let input: UnsafeMutablePointer<Float>
    private let output: UnsafeMutablePointer<fftwf_complex>
    private let plan: fftwf_plan
    private var pending: [Float] = []
    private var highPassed: Float = 0
    private var previousSample: Float = 0
    /// Timeline index (16 kHz) of `pending[0]`.
    private var pendingStart: Int64?
    /// Per-frame level (dB) and flatness of the recent frames, with their time.
    private var frames: [(time: Double, level: Double, flatness: Double, high: Double)] = []
    private var candidates: [Onset] = []
    /// Onsets that proved to be shatters, most recent last (the last 10 s).
    package private(set) var shatters: [Onset] = []
    /// Every candidate measured (kept only when `keepCandidates`).
    package private(set) var measured: [Onset] = []
    package var keepCandidates = false

    package init(parameters: Parameters = Parameters()) {
        self.parameters = parameters
        window = (0..<Self.size).map { Float(0.5 - 0.5 * cos(2 * Double.pi * Double($0) / Double(Self.size))) }
        let input = fftwf_alloc_real(Self.size)!
        let output = fftwf_alloc_complex(Self.size / 2 + 1)!
        self.input = input
        self.output = output
        plan = LogMelSpectrogram.withPlanner {
            fftwf_plan_dft_r2c_1d(Int32(Self.size), input, output, UInt32(FFTW_ESTIMATE))!
        }
    }

    deinit {
        LogMelSpectrogram.withPlanner { fftwf_destroy_plan(plan) }
        fftwf_free(input)
        fftwf_free(UnsafeMutableRawPointer(output))
    }

    /// Whether a shatter started within [start, end] (stream seconds).
    package func hasShatter(from start: Double, to end: Double) -> Bool {
        shatters.contains { $0.time >= start && $0.time <= end }
    }

    /// Whether an onset within [start, end] passed the onset and tail tests and waits for its late level (the
    /// audio fed so far ends less than ``Parameters/lateTo`` s after it).
    package func hasProvisional(from start: Double, to end: Double) -> Bool {
        candidates.contains { $0.isProvisional && $0.time >= start && $0.time <= end }
    }

    /// Forgets the audio and the onsets found (a gap, or a new excerpt: the next samples start afresh).
    package func reset() {
        shatters.removeAll()
        frames.removeAll()
        frameCount = 0
        background = -.infinity
        pending.removeAll()
        highPassed = 0
        previousSample = 0
        pendingStart = nil
        frames.removeAll()
        candidates.removeAll()
    }

    /// Takes 16 kHz samples whose first is timeline index `firstIndex` (stream time `index / 16000`).
    package func feed(_ samples: UnsafeBufferPointer<Float>, firstIndex: Int64) {
        if let start = pendingStart, start + Int64(pending.count) != firstIndex { reset() }
        if pendingStart == nil { pendingStart = firstIndex }
        // One-pole high-pass at 125 Hz (rumble and hum are not part of a shatter's level).
        pending.reserveCapacity(pending.count + samples.count)
        for sample in samples {
            highPassed = 0.952 * (highPassed + sample - previousSample)
            previousSample = sample
            pending.append(highPassed)
        }
        while pending.count >= Self.size, let start = pendingStart {
            analyseFrame(time: Double(start + Int64(Self.size / 2)) / 16_000)
            pending.removeFirst(Self.hop)
            pendingStart = start + Int64(Self.hop)
        }
    }

    private func analyseFrame(time: Double) {
        // The level from the (high-passed) samples; the spectrum only where an onset is measured (its first
        // 30 ms and its tail), which is rare: most frames cost one windowed sum of squares.
        var energy: Float = 0
        for index in 0..<Self.size {
            let value = pending[index] * window[index]
            input[index] = value
            energy += value * value
        }
        let level = 10 * log10(Double(energy) + 1e-12)
        frameCount += 1
        if frames.count < 10 || frameCount % 10 == 0 { background = backgroundLevel() }
        // A sound that starts with the stream (or after a gap) rises from silence.
        let reference = frames.isEmpty ? level - parameters.riseDB : background
        let earlier = frames.count >= 2 ? frames[frames.count - 2].level : frames.isEmpty ? level - parameters.fastRiseDB : frames[0].level
        let triggers = level - reference >= parameters.riseDB && level - earlier >= parameters.fastRiseDB
            && !candidates.contains(where: { time - $0.time < 0.25 })
            && !shatters.contains(where: { time - $0.time < 0.25 && time >= $0.time })
        var flatness = 0.0, highShare = 0.0
        if triggers || candidates.contains(where: { !$0.isProvisional }) {
            fftwf_execute(plan)
            var total = 0.0, high = 0.0, logSum = 0.0, linearSum = 0.0
            var product = 1.0
            for bin in 2..<128 {
                let re = Double(output[bin].0), im = Double(output[bin].1)
                let power = re * re + im * im + 1e-20
                total += power
                if bin >= 32 { high += power }
                if bin >= 16 {
                    // The log of a product of 8 (powers 1e-20...1e6 stay inside a Double): 14 logs, not 112.
                    product *= power
                    if (bin - 16) % 8 == 7 {
                        logSum += log(product)
                        product = 1
                    }
                    linearSum += power
                }
            }
            let flatCount = Double(128 - 16)
            flatness = exp(logSum / flatCount) / (linearSum / flatCount)
            highShare = high / total
        }
        frames.append((time, level, flatness, highShare))
        if frames.count > Self.keptFrames { frames.removeFirst(frames.count - Self.keptFrames) }
        measureCandidates(now: time)
        if triggers { candidates.append(Onset(time: time, riseDB: level - reference, flatness: 0, highShare: 0)) }
        if shatters.first.map({ $0.time < time - 10 }) ?? false { shatters.removeAll { $0.time < time - 10 } }
    }

    /// The background level, refreshed every 0.1 s: the 0.2 quantile of the last 0.5 s of frame levels.
    private var background = -Double.infinity
    private var frameCount = 0
    /// Frames kept: the background's 0.5 s and an onset's late level, 1.0 s after it (10 ms hops).
    private static let keptFrames = 120

    private func backgroundLevel() -> Double {
        guard !frames.isEmpty else { return -.infinity }
        let levels = frames.suffix(50).map(\.level).sorted()
        return levels[levels.count / 5]
    }

    private func measureCandidates(now: Double) {
        var kept: [Onset] = []
        for var candidate in candidates {
            if candidate.isProvisional {
                guard now - candidate.time >= parameters.lateTo else { kept.append(candidate); continue }
                let late = frames.filter { $0.time >= candidate.time + parameters.lateFrom && $0.time <= candidate.time + parameters.lateTo }
                let power = late.map { pow(10, $0.level / 10) }.reduce(0, +) / Double(max(late.count, 1))
                candidate.lateDropDB = late.isEmpty ? 0 : candidate.peakDB - 10 * log10(power)
                candidate.isProvisional = false
                candidate.isShatter = candidate.lateDropDB >= parameters.lateDropDB
                if candidate.isShatter { shatters.append(candidate) }
                if keepCandidates { measured.append(candidate) }
                continue
            }
            guard now - candidate.time >= parameters.tailSeconds + 0.03 else { kept.append(candidate); continue }
            let head = frames.filter { $0.time >= candidate.time && $0.time <= candidate.time + 0.03 }
            let tail = frames.filter { $0.time > candidate.time + 0.03 && $0.time <= candidate.time + 0.03 + parameters.tailSeconds }
            guard let peak = head.map(\.level).max(), !tail.isEmpty else { continue }
            candidate.peakDB = peak
            // The onset's spectrum: its broadest and brightest frame in the first 30 ms (a crack's first frame
            // may still be mostly its low body).
            candidate.flatness = head.map(\.flatness).max() ?? 0
            candidate.highShare = head.map(\.high).max() ?? 0
            candidate.sustain = Double(tail.filter { $0.level >= peak - 15 }.count) / Double(tail.count)
            let firstHalf = tail.prefix(max(1, tail.count / 2))
            candidate.firstHalfDropDB = peak - firstHalf.map(\.level).reduce(0, +) / Double(firstHalf.count)
            candidate.tailFlatness = tail.map(\.flatness).reduce(0, +) / Double(tail.count)
            let last = tail.suffix(max(1, tail.count / 3))
            candidate.decayDB = peak - last.map(\.level).reduce(0, +) / Double(last.count)
            candidate.isProvisional = candidate.flatness >= parameters.onsetFlatness && candidate.highShare >= parameters.highShare
                && candidate.tailFlatness >= parameters.tailFlatness && candidate.sustain >= parameters.sustain
                && candidate.decayDB >= parameters.decayDB && candidate.firstHalfDropDB <= parameters.firstHalfDropDB
            if candidate.isProvisional { kept.append(candidate) } else if keepCandidates { measured.append(candidate) }
        }
        candidates = kept
    }
}
