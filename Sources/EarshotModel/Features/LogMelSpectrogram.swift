internal import CFFTW
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport

/// The YAMNet reference front end: 16 kHz mono samples to a log-mel spectrogram.
///
/// Every constant is the reference model's (tensorflow/models `research/audioset/yamnet/params.py` and
/// `features.py`): a 25 ms periodic Hann window (400 samples), a 10 ms hop (160 samples), a 512-point FFT (the next
/// power of two), the magnitude spectrum (257 bins), 64 HTK mel bands from 125 Hz to 7500 Hz built like
/// `tf.signal.linear_to_mel_weight_matrix` (DC bin zeroed), and `log(mel + 0.001)`. Frames start every 160 samples and
/// only whole 400-sample frames are produced (`tf.signal.stft` with `pad_end=False`).
///
/// - Important: An instance owns FFTW buffers and a plan and is not thread-safe; make one per thread or queue.
///   Creating instances from several threads at once is safe (FFTW planning is serialised).
public final class LogMelSpectrogram {
    /// Input sample rate in Hz.
    public static let sampleRate = 16_000
    /// STFT window length in samples (25 ms at 16 kHz).
    public static let windowSamples = 400
    /// STFT hop in samples (10 ms at 16 kHz).
    public static let hopSamples = 160
    /// FFT length: the next power of two above the window.
    public static let fftSize = 512
    /// Number of mel bands.
    public static let melBands = 64
    /// Lowest mel band edge in Hz.
    public static let melMinHz: Double = 125
    /// Highest mel band edge in Hz.
    public static let melMaxHz: Double = 7500
    /// Added to the mel energies before the natural log.
    public static let logOffset: Float = 0.001
    /// Samples a 96-frame patch needs: 0.96 s + 25 ms - 10 ms = 15600 (the reference's minimum waveform).
    public static let patchSamples = 15_600
    /// Samples between successive patches: 48 frames of 160 samples (0.48 s).
    public static let patchHopSamples = 7_680

    private static let bins = fftSize / 2 + 1
    private static let planLock = Mutex(())

    /// Runs `body` holding the lock every FFTW plan of the process is made and destroyed under (FFTW's planner is
    /// not thread-safe; `ToneTracker` plans through here too).
    package static func withPlanner<T>(_ body: () -> T) -> T {
        planLock.withLock { _ in PlannerResult(value: body()) }.value
    }

    private struct PlannerResult<T>: @unchecked Sendable { let value: T }

    private let window: [Float]
    /// Per mel band: the first FFT bin with a non-zero weight and the weights from there on.
    private let bandStart: [Int]
    private let bandWeights: [[Float]]
    private let input: UnsafeMutablePointer<Float>
    private let output: OpaquePointer
    private let plan: fftwf_plan
    private let magnitude: UnsafeMutablePointer<Float>

    public init() {
        window = (0..<Self.windowSamples).map { n in
            Float(0.5 - 0.5 * cos(2 * Double.pi * Double(n) / Double(Self.windowSamples)))
        }
        let matrix = Self.melWeightMatrix()
        var starts: [Int] = []
        var weights: [[Float]] = []
        for band in 0..<Self.melBands {
            let column = (0..<Self.bins).map { matrix[$0 * Self.melBands + band] }
            let first = column.firstIndex { $0 > 0 } ?? 0
            let last = column.lastIndex { $0 > 0 } ?? 0
            starts.append(first)
            weights.append(Array(column[first...last]))
        }
        bandStart = starts
        bandWeights = weights
        let input = fftwf_alloc_real(Self.fftSize)!
        let output = fftwf_alloc_complex(Self.bins)!
        self.input = input
        self.output = OpaquePointer(output)
        magnitude = .allocate(capacity: Self.bins)
        plan = Self.makePlan(input: input, output: output)
        input.initialize(repeating: 0, count: Self.fftSize)
    }

    /// The 512-point real FFT's plan, never chosen by timing: with `FFTW_MEASURE` the algorithm, and so the last
    /// bits of every log-mel value, depended on how fast each candidate ran when the process started, and analysing
    /// one file twice could print different digits (or order classes whose scores tie at the printed precision
    /// differently). The plan comes from `measuredWisdom` where it applies; elsewhere from FFTW's estimate, which is
    /// deterministic too but 2.5x slower here (985 against 388 ns per FFT).
    ///
    /// The wisdom is forgotten right after, so that no other plan of the process (`ToneTracker`'s) depends on it or
    /// on the order in which plans were made.
    private static func makePlan(input: UnsafeMutablePointer<Float>, output: UnsafeMutablePointer<fftwf_complex>) -> fftwf_plan {
        withPlanner {
            var plan: fftwf_plan?
            if fftwf_import_wisdom_from_string(measuredWisdom) != 0 {
                plan = fftwf_plan_dft_r2c_1d(Int32(fftSize), input, output, UInt32(FFTW_MEASURE | FFTW_WISDOM_ONLY))
            }
            fftwf_forget_wisdom()
            return plan ?? fftwf_plan_dft_r2c_1d(Int32(fftSize), input, output, UInt32(FFTW_ESTIMATE))!
        }
    }

    /// FFTW wisdom for this 512-point real-to-complex FFT (64-byte-aligned buffers): the plan `FFTW_MEASURE` chose
    /// on the build machine (AMD EPYC, Zen 4; Debian 12's FFTW 3.3.10), exported with `fftwf_export_wisdom_to_string`:
    /// a radix-8 split with FFTW's AVX 64-point codelet, 388 ns per FFT there. FFTW refuses it where it does not
    /// apply (another FFTW version, a CPU without AVX), and the estimate is used instead.
    package static let measuredWisdom = """
        (fftw-3.3.10 fftwf_wisdom #x9e7d4dee #xdb14fed1 #x34bf76a4 #xeb6e8fdf
          (fftwf_codelet_r2cfII_8 2 #x11bdd #x11bdd #x0 #x76fa2a50 #xf4668261 #xbf8b003e #xbfa64206)
          (fftwf_codelet_r2cf_8 2 #x11bdd #x11bdd #x0 #xe75b944c #x09ac1906 #x449b29ce #x7b6666b0)
          (fftwf_codelet_n2fv_64_avx 0 #x11bdd #x11bdd #x0 #x03406dff #xc8fa0a2c #x62a9a61e #xa394d874)
          (fftwf_codelet_hc2cfdftv_8_sse2 0 #x11bdd #x11bdd #x0 #x85773c49 #x9a968ccc #xbd37e819 #xac77e6a4)
        )
        """

    /// A description of the FFT plan in use (`fftwf_sprint_plan`), for tests and diagnostics.
    package var planDescription: String {
        guard let text = fftwf_sprint_plan(plan) else { return "" }
        defer { free(text) }
        return String(cString: text)
    }

    deinit {
        Self.withPlanner { fftwf_destroy_plan(plan) }
        fftwf_free(input)
        fftwf_free(UnsafeMutableRawPointer(output))
        magnitude.deallocate()
    }

    /// Number of whole STFT frames in `sampleCount` samples: `max(0, 1 + (n - 400) / 160)`.
    public static func frameCount(sampleCount: Int) -> Int {
        sampleCount < windowSamples ? 0 : 1 + (sampleCount - windowSamples) / hopSamples
    }

    /// The length the reference pads a waveform to (`pad_waveform` in yamnet `features.py`): at least 15600 samples
    /// (one 0.96 s patch), then up to a whole number of 7680-sample (0.48 s) hops after the first patch.
    public static func referencePaddedLength(sampleCount: Int) -> Int {
        let base = max(sampleCount, patchSamples)
        let extra = base - patchSamples
        let hops = (extra + patchHopSamples - 1) / patchHopSamples
        return patchSamples + hops * patchHopSamples
    }

    /// Log-mel spectrogram of `samples` (16 kHz mono, full scale ±1): shape `[frames, 64]` row-major, natural log.
    public func compute(_ samples: [Float]) -> [Float] {
        let frames = Self.frameCount(sampleCount: samples.count)
        var result = [Float](repeating: 0, count: frames * Self.melBands)
        samples.withUnsafeBufferPointer { source in
            result.withUnsafeMutableBufferPointer { destination in
                compute(source, frames: frames, into: destination.baseAddress!)
            }
        }
        return result
    }

    /// Writes `frames` log-mel frames of `samples` to `destination` (`frames * 64` floats).
    /// - Precondition: `samples.count >= 400 + 160 * (frames - 1)`.
    package func compute(_ samples: UnsafeBufferPointer<Float>, frames: Int, into destination: UnsafeMutablePointer<Float>) {
        guard frames > 0, let base = samples.baseAddress else { return }
        precondition(samples.count >= Self.windowSamples + Self.hopSamples * (frames - 1))
        let spectrum = UnsafeMutablePointer<Float>(output)  // interleaved (re, im)
        window.withUnsafeBufferPointer { window in
            for frame in 0..<frames {
                let start = base + frame * Self.hopSamples
                for n in 0..<Self.windowSamples { input[n] = start[n] * window[n] }
                fftwf_execute(plan)
                for k in 0..<Self.bins {
                    let re = spectrum[2 * k], im = spectrum[2 * k + 1]
                    magnitude[k] = (re * re + im * im).squareRoot()
                }
                let row = destination + frame * Self.melBands
                for band in 0..<Self.melBands {
                    var energy: Float = 0
                    let first = bandStart[band]
                    bandWeights[band].withUnsafeBufferPointer { weights in
                        for j in 0..<weights.count { energy += magnitude[first + j] * weights[j] }
                    }
                    row[band] = logf(energy + Self.logOffset)
                }
            }
        }
    }

    /// The `[257, 64]` HTK mel weight matrix exactly as `tf.signal.linear_to_mel_weight_matrix` builds it:
    /// bin frequencies `linspace(0, 8000, 257)`, band edges evenly spaced in mel = 1127 ln(1 + f / 700), triangular
    /// weights computed in mel space, DC row zero.
    package static func melWeightMatrix() -> [Float] {
        func mel(_ hz: Double) -> Double { 1127.0 * log(1.0 + hz / 700.0) }
        let nyquist = Double(sampleRate) / 2
        let lowMel = mel(melMinHz), highMel = mel(melMaxHz)
        let edges = (0..<(melBands + 2)).map { lowMel + (highMel - lowMel) * Double($0) / Double(melBands + 1) }
        var matrix = [Float](repeating: 0, count: bins * melBands)
        for bin in 1..<bins {
            let binMel = mel(nyquist * Double(bin) / Double(bins - 1))
            for band in 0..<melBands {
                let lower = (binMel - edges[band]) / (edges[band + 1] - edges[band])
                let upper = (edges[band + 2] - binMel) / (edges[band + 2] - edges[band + 1])
                matrix[bin * melBands + band] = Float(max(0, min(lower, upper)))
            }
        }
        return matrix
    }
}
