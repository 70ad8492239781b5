internal import CSndFile
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
import EarshotService

/// The inputs `earshot bench` measures with, written to temporary files: real recordings looped to length (so
/// decoding, resampling and the gate see real audio), or quiet noise.
package enum BenchmarkRecording {
    /// How a generated file is encoded.
    package enum Encoding: Sendable {
        /// FLAC, 16-bit: what a user's long recordings often are; decoding it costs real time.
        case flac16
        /// WAV, 16-bit PCM.
        case wav16

        package var format: Int32 {
            switch self {
            case .flac16: Int32(SF_FORMAT_FLAC | SF_FORMAT_PCM_16)
            case .wav16: Int32(SF_FORMAT_WAV | SF_FORMAT_PCM_16)
            }
        }
    }

    /// `source` (any file the decoder reads) mixed to mono and resampled to `sampleRate`, looped to `seconds`, written
    /// to `url` with `channels` identical channels.
    /// - Throws: ``EarshotError`` when `source` cannot be decoded or `url` cannot be written.
    package static func writeLooped(
        source: URL, seconds: Double, sampleRate: Int, channels: Int, encoding: Encoding, to url: URL
    ) throws(EarshotError) {
        let decoder = try AudioFileDecoder(url: source)
        let original = try decoder.readAllMono()
        var clip: [Float] = []
        let resampler = try Resampler(inputRate: Double(decoder.sampleRate), outputRate: Double(sampleRate))
        try resampler.process(original, appendingTo: &clip)
        try resampler.flush(appendingTo: &clip)
        guard !clip.isEmpty else {
            throw EarshotError(.data, "benchmark source \(source.path) holds no audio (pass another file with --audio)")
        }
        let total = Int(seconds * Double(sampleRate))
        try write(to: url, sampleRate: sampleRate, channels: channels, encoding: encoding, frames: total) { start, count, out in
            for index in 0..<count { out[index] = clip[(start + index) % clip.count] }
        }
    }

    /// White noise at an RMS level of `levelDBFS` (e.g. -60: below the daemon's default -50 dBFS gate), mono.
    /// - Throws: ``EarshotError`` when `url` cannot be written.
    package static func writeNoise(levelDBFS: Double, seconds: Double, sampleRate: Int, to url: URL) throws(EarshotError) {
        // Uniform noise in [-a, a] has RMS a / sqrt(3).
        let amplitude = Float(pow(10, levelDBFS / 20) * 3.0.squareRoot())
        var generator = SplitMix64(seed: 0x5EED)
        try write(to: url, sampleRate: sampleRate, channels: 1, encoding: .wav16, frames: Int(seconds * Double(sampleRate))) { _, count, out in
            for index in 0..<count { out[index] = amplitude * (Float(generator.next() >> 40) / Float(1 << 23) * 2 - 1) }
        }
    }

    /// Writes `frames` frames; `fill(start, count, buffer)` gives the mono samples `start ..< start + count`, copied to
    /// every channel.
    private static func write(
        to url: URL, sampleRate: Int, channels: Int, encoding: Encoding, frames: Int,
        fill: (Int, Int, UnsafeMutablePointer<Float>) -> Void
    ) throws(EarshotError) {
        let file = try SoundFileWriter(path: url.path, sampleRate: sampleRate, channels: channels, format: encoding.format)
        let chunk = 16_384
        let mono = UnsafeMutablePointer<Float>.allocate(capacity: chunk)
        let interleaved = UnsafeMutablePointer<Float>.allocate(capacity: chunk * channels)
        defer {
            mono.deallocate()
            interleaved.deallocate()
        }
        var written = 0
        while written < frames {
            let count = min(chunk, frames - written)
            fill(written, count, mono)
            for frame in 0..<count {
                for channel in 0..<channels { interleaved[frame * channels + channel] = mono[frame] }
            }
            try file.write(interleaved, frames: count)
            written += count
        }
        try file.close()
    }
}

/// A libsndfile file open for writing; closed in `deinit` if `close()` was not called.
package final class SoundFileWriter {
    package let path: String
    private var handle: OpaquePointer?
    private let channels: Int

    /// The corresponding C function is `sf_open`.
    /// - Throws: `EarshotError(.cannotCreate)` when the file cannot be created.
    package init(path: String, sampleRate: Int, channels: Int, format: Int32) throws(EarshotError) {
        self.path = path
        self.channels = channels
        var info = SF_INFO()
        info.samplerate = Int32(sampleRate)
        info.channels = Int32(channels)
        info.format = format
        switch SndFileOpening.open({ sf_open(path, Int32(SFM_WRITE), &info) }) {
        case .success(let handle):
            self.handle = handle
        case .failure(let failure):
            let cause = failure.text
            throw EarshotError(.cannotCreate, "cannot create benchmark file \(path): \(cause) (is the temporary directory writable?)", cause: cause)
        }
        // Resampled loud audio can overshoot full scale; clip it rather than let the integer conversion wrap.
        _ = sf_command(handle, Int32(SFC_SET_CLIPPING), nil, Int32(SF_TRUE))
    }

    /// Writes `frames` interleaved frames. The corresponding C function is `sf_writef_float`.
    /// - Throws: `EarshotError(.io)` on a short write (e.g. a full disk).
    package func write(_ samples: UnsafePointer<Float>, frames: Int) throws(EarshotError) {
        guard let handle else { return }
        let done = sf_writef_float(handle, samples, sf_count_t(frames))
        guard done == sf_count_t(frames) else {
            let cause = String(cString: sf_strerror(handle))
            throw EarshotError(.io, "cannot write benchmark file \(path): \(done) of \(frames) frames written: \(cause) (is the disk full?)", cause: cause)
        }
    }

    /// Flushes and closes the file. The corresponding C function is `sf_close`.
    /// - Throws: `EarshotError(.io)` when libsndfile reports an error on closing.
    package func close() throws(EarshotError) {
        guard let handle else { return }
        self.handle = nil
        let status = sf_close(handle)
        guard status == 0 else {
            throw EarshotError(.io, "cannot finish benchmark file \(path): \(String(cString: sf_error_number(status)))")
        }
    }

    deinit {
        if let handle { sf_close(handle) }
    }
}

