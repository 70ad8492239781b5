internal import CSoxr
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// A streaming sample-rate converter for mono float32 audio (libsoxr, "HQ" quality).
///
/// Quality: `soxr_quality_spec(SOXR_HQ, 0)` (20-bit, linear phase), the same setting as the reference's
/// `soxr.resample(x, sr, 16000, quality="HQ")` in python-soxr, so decoding + resampling a file reproduces the
/// goldens' `.wave16k.f32` input closely (see the decoding tests for the measured difference).
///
/// libsoxr compensates its filter delay: output sample `i` is the signal at time `i / outputRate` of the input,
/// whatever the chunk sizes, so chunked streaming gives the same samples as one call over the whole signal.
/// Equal input and output rates pass samples through unchanged (no filtering), as the reference does for 16 kHz files.
///
/// Streaming use: call ``process(_:appendingTo:)`` with each chunk, ``flush(appendingTo:)`` once at the end of a
/// continuous signal, then ``reset()`` before an unrelated signal (e.g. after a gap in a capture stream). After the
/// first chunks the calls do not allocate, as long as `output` has capacity.
///
/// - Important: Not thread-safe. The class owns the `soxr_t`, deleted in `deinit`.
public final class Resampler {
    /// Input sample rate in Hz.
    public let inputRate: Double
    /// Output sample rate in Hz.
    public let outputRate: Double
    /// True when the rates are equal and samples pass through unchanged.
    public let isPassthrough: Bool

    private let state: soxr_t?
    /// Output scratch for one `soxr_process` call (grows to the largest need, then reused).
    private var scratch: [Float] = []

    /// Creates a converter from `inputRate` to `outputRate` (Hz).
    ///
    /// - Throws: ``EarshotError`` `.data` when a rate is not a finite number > 0 or libsoxr refuses the ratio.
    ///   The corresponding C function is `soxr_create`.
    public init(inputRate: Double, outputRate: Double = 16_000) throws(EarshotError) {
        guard inputRate.isFinite, inputRate > 0, outputRate.isFinite, outputRate > 0 else {
            throw EarshotError(.data, "cannot resample from \(inputRate) Hz to \(outputRate) Hz (sample rates must be > 0)")
        }
        self.inputRate = inputRate
        self.outputRate = outputRate
        isPassthrough = inputRate == outputRate
        if isPassthrough {
            state = nil
            return
        }
        var error: soxr_error_t? = nil
        var io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I)
        var quality = soxr_quality_spec(UInt(SOXR_HQ), 0)
        var runtime = soxr_runtime_spec(1)
        let created = soxr_create(inputRate, outputRate, 1, &error, &io, &quality, &runtime)
        guard let created, error == nil else {
            let text = error.map { String(cString: $0) } ?? "soxr_create returned no state"
            if let created { soxr_delete(created) }
            throw EarshotError(.data, "cannot resample from \(inputRate) Hz to \(outputRate) Hz (soxr: \(text))", cause: text)
        }
        state = created
    }

    deinit {
        if let state { soxr_delete(state) }
    }

    /// Converts a chunk of input samples and appends the output produced so far to `output`.
    ///
    /// Output lags the input by the filter length (libsoxr holds back samples it cannot compute yet); ``flush(appendingTo:)``
    /// releases them. Over a whole signal, output count = round(input count * outputRate / inputRate) (+/- 1).
    /// - Throws: ``EarshotError`` `.system` when libsoxr reports an error. The corresponding C function is `soxr_process`.
    public func process(_ input: UnsafeBufferPointer<Float>, appendingTo output: inout [Float]) throws(EarshotError) {
        guard let state else {
            output.append(contentsOf: input)
            return
        }
        guard input.count > 0, let base = input.baseAddress else { return }
        ensureScratch(inputCount: input.count)
        var consumed = 0
        while consumed < input.count {
            var inputDone = 0
            var outputDone = 0
            let capacity = scratch.count
            let error = scratch.withUnsafeMutableBufferPointer { out in
                soxr_process(state, base + consumed, input.count - consumed, &inputDone,
                             out.baseAddress, capacity, &outputDone)
            }
            if let error {
                let text = String(cString: error)
                throw EarshotError(.system, "resampling \(inputRate) Hz to \(outputRate) Hz failed (soxr: \(text))", cause: text)
            }
            output.append(contentsOf: scratch[0..<outputDone])
            consumed += inputDone
            if inputDone == 0 && outputDone == 0 { break }
        }
    }

    /// Converts an array chunk; see ``process(_:appendingTo:)``.
    public func process(_ input: [Float], appendingTo output: inout [Float]) throws(EarshotError) {
        try input.withUnsafeBufferPointer { buffer throws(EarshotError) in
            try process(buffer, appendingTo: &output)
        }
    }

    /// Ends the signal: appends the samples libsoxr still holds. Call once at the end of a continuous signal, then
    /// ``reset()`` before feeding an unrelated one.
    /// - Throws: ``EarshotError`` `.system` when libsoxr reports an error. The corresponding C function is
    ///   `soxr_process` with no input.
    public func flush(appendingTo output: inout [Float]) throws(EarshotError) {
        guard let state else { return }
        ensureScratch(inputCount: 4_096)
        // Bounded: libsoxr's tail is one filter length; the cap guards against a library that never says "done".
        for _ in 0..<1_000 {
            var outputDone = 0
            let capacity = scratch.count
            let error = scratch.withUnsafeMutableBufferPointer { out in
                soxr_process(state, nil, 0, nil, out.baseAddress, capacity, &outputDone)
            }
            if let error {
                let text = String(cString: error)
                throw EarshotError(.system, "resampling \(inputRate) Hz to \(outputRate) Hz failed at the end (soxr: \(text))", cause: text)
            }
            if outputDone == 0 { return }
            output.append(contentsOf: scratch[0..<outputDone])
        }
    }

    /// Forgets all input so far, ready for a fresh signal with the same rates. The corresponding C function is
    /// `soxr_clear`.
    /// - Throws: ``EarshotError`` `.system` when libsoxr reports an error.
    public func reset() throws(EarshotError) {
        guard let state else { return }
        if let error = soxr_clear(state) {
            let text = String(cString: error)
            throw EarshotError(.system, "resetting the \(inputRate) Hz to \(outputRate) Hz resampler failed (soxr: \(text))", cause: text)
        }
    }

    /// Output samples the converter holds back (its current delay), in output samples. The corresponding C function
    /// is `soxr_delay`.
    public var delay: Double {
        guard let state else { return 0 }
        return soxr_delay(state)
    }

    private func ensureScratch(inputCount: Int) {
        let needed = Int((Double(inputCount) * outputRate / inputRate).rounded(.up)) + 1_024
        if scratch.count < needed {
            scratch = [Float](repeating: 0, count: needed)
        }
    }
}

/// Decodes an audio file, mixes it to mono and resamples it to 16 kHz, as the reference does before YAMNet
/// (`soundfile.read` -> `mean(axis=1)` -> `soxr.resample(..., 16000, quality="HQ")` when the rate differs).
///
/// - Parameter url: an audio file libsndfile reads (see ``AudioFileDecoder``).
/// - Returns: `[samples]` mono float32 at 16 kHz; samples = round(frames * 16000 / fileRate) (the reference's length).
/// - Throws: ``EarshotError`` as ``AudioFileDecoder/init(url:)`` and ``AudioFileDecoder/read(maxFrames:appendingTo:)``.
public func decodeMono16k(_ url: URL) throws(EarshotError) -> [Float] {
    let decoder = try AudioFileDecoder(url: url)
    return try decodeMono16k(decoder)
}

/// Reads the rest of an open decoder as mono 16 kHz; see ``decodeMono16k(_:)-(URL)``.
public func decodeMono16k(_ decoder: AudioFileDecoder) throws(EarshotError) -> [Float] {
    let mono = try decoder.readAllMono()
    let rate = Double(decoder.sampleRate)
    let resampler = try Resampler(inputRate: rate, outputRate: 16_000)
    if resampler.isPassthrough { return mono }
    let expected = Int((Double(mono.count) * 16_000 / rate).rounded(.toNearestOrAwayFromZero))
    var output: [Float] = []
    output.reserveCapacity(expected + 1_024)
    try resampler.process(mono, appendingTo: &output)
    try resampler.flush(appendingTo: &output)
    if output.count > expected {
        output.removeLast(output.count - expected)
    } else if output.count < expected {
        output.append(contentsOf: repeatElement(0, count: expected - output.count))
    }
    return output
}

/// The most 16 kHz samples ``decodeMono16kBlocks(_:maxBlockSamples:isCancelled:deliver:)`` hands over at once by
/// default (32768, 2.05 s).
public let mono16kBlockSamples = 32_768

/// Decodes the rest of an open decoder to 16 kHz mono in blocks, the streaming form of ``decodeMono16k(_:)-(URL)``:
/// reads blocks of frames (at most 65536, and at most `maxBlockSamples` of 16 kHz output, so that a low input
/// rate does not make blocks grow with the upsampling ratio), mixes each to mono, resamples it with one
/// ``Resampler`` (soxr HQ) and hands the output to `deliver`, then the resampler's tail. Memory: one block, whatever
/// the file's length.
///
/// The blocks joined, cut or padded with zeros to the returned length, are ``decodeMono16k(_:)-(URL)``'s samples
/// bit for bit (libsoxr's output does not depend on how its input is split; the decoding tests check it on real
/// files).
///
/// - Parameters:
///   - maxBlockSamples: the most 16 kHz samples per block before the resampler's rounding (>= 1; default
///     ``mono16kBlockSamples``).
///   - isCancelled: checked before each block; once true, decoding stops at that block boundary (the length
///     returned is then meaningless).
///   - deliver: gets each non-empty block, `[samples]` at 16 kHz, in order.
/// - Returns: the waveform's length as the reference computes it, `round(frames * 16000 / rate)`; soxr's blocks
///   may add up to one sample more or fewer.
/// - Throws: the decoder's and the resampler's ``EarshotError``s, after delivering what decoded before a decoding
///   failure (the frames of the failing read and the resampler's tail).
public func decodeMono16kBlocks(
    _ decoder: AudioFileDecoder, maxBlockSamples: Int = mono16kBlockSamples, isCancelled: () -> Bool = { false },
    deliver: ([Float]) -> Void
) throws(EarshotError) -> Int {
    let resampler = try Resampler(inputRate: Double(decoder.sampleRate), outputRate: 16_000)
    let blockFrames = max(256, min(65_536, max(1, maxBlockSamples) * decoder.sampleRate / 16_000))
    var mono: [Float] = []
    mono.reserveCapacity(blockFrames)
    var output: [Float] = []
    while !isCancelled() {
        mono.removeAll(keepingCapacity: true)
        let got: Int
        do {
            got = try decoder.readMono(maxFrames: blockFrames, appendingTo: &mono)
        } catch {
            // The frames this read decoded before the failure, and the resampler's tail, are still delivered.
            output.removeAll(keepingCapacity: true)
            try resampler.process(mono, appendingTo: &output)
            try resampler.flush(appendingTo: &output)
            if !output.isEmpty { deliver(output) }
            throw error
        }
        guard got > 0 else { break }
        output.removeAll(keepingCapacity: true)
        try resampler.process(mono, appendingTo: &output)
        if !output.isEmpty { deliver(output) }
    }
    output.removeAll(keepingCapacity: true)
    try resampler.flush(appendingTo: &output)
    if !output.isEmpty { deliver(output) }
    return resampler.isPassthrough ? Int(decoder.framesRead)
        : Int((Double(decoder.framesRead) * 16_000 / Double(decoder.sampleRate)).rounded(.toNearestOrAwayFromZero))
}
