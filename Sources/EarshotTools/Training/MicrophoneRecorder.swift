import Dispatch
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

/// Records takes from an ALSA capture device for `earshot enroll`: each take opens the device (``PCMCapture``),
/// captures a fixed duration through a ring buffer, and returns the audio mixed to mono and resampled to 16 kHz.
package final class MicrophoneRecorder {
    /// The device settings (device name, and for tests an ALSA configuration and pacing).
    package let configuration: CaptureConfiguration

    package init(configuration: CaptureConfiguration) {
        self.configuration = configuration
    }

    /// Opens and closes the device, so that a missing or busy device is reported before any countdown.
    /// - Throws: as ``PCMCapture/init(configuration:)``.
    package func probe() throws(EarshotError) {
        _ = try open()
    }

    private func open() throws(EarshotError) -> PCMCapture {
        do {
            return try PCMCapture(configuration: configuration)
        } catch let error as EarshotError {
            throw error
        } catch {
            throw EarshotError(.unavailable, "cannot open capture device \"\(configuration.device)\": \(error)")
        }
    }

    /// Records `seconds` of audio.
    ///
    /// - Parameters:
    ///   - seconds: duration, > 0.
    ///   - meter: called about every 50 ms on the calling thread with the RMS level in dBFS of the audio since the
    ///     last call and the seconds recorded so far (for a live level meter).
    /// - Returns: mono samples at 16 kHz, full scale ±1, `round(seconds * 16000)` of them.
    /// - Throws: ``EarshotError`` as ``PCMCapture/init(configuration:)`` (`.unavailable`: busy, missing, no
    ///   permission); `.unavailable` when the device stops delivering audio (unplugged), or delivers nothing for
    ///   5 seconds.
    package func record(seconds: Double, meter: (Float, Double) -> Void = { _, _ in }) throws(EarshotError) -> [Float] {
        let capture = try open()
        let rate = capture.format.sampleRate
        let wanted = Int((seconds * Double(rate)).rounded())
        let ring = SampleRingBuffer(minimumCapacity: max(rate * 4, 65_536), sampleRate: rate)
        let queue = DispatchQueue(label: "earshot.enroll.capture")
        do {
            try capture.start(into: ring, startingAt: 0, queue: queue, onEnd: { _ in })
        } catch {
            throw EarshotError(.unavailable, "cannot start capturing from \"\(configuration.device)\": \(error)")
        }
        defer { capture.stop(timeout: 2) }
        var samples: [Float] = []
        samples.reserveCapacity(wanted)
        var scratch = [Float](repeating: 0, count: 16_384)
        var lastAudio = Date()
        while samples.count < wanted {
            usleep(50_000)
            var meterSum = 0.0, meterCount = 0
            while samples.count < wanted {
                let chunk = scratch.withUnsafeMutableBufferPointer { ring.readChunk(into: $0) }
                if chunk.count == 0 { break }
                let take = min(chunk.count, wanted - samples.count)
                samples += scratch[0..<take]
                for value in scratch[0..<take] { meterSum += Double(value) * Double(value) }
                meterCount += take
            }
            if meterCount > 0 {
                lastAudio = Date()
                let rms = (meterSum / Double(meterCount)).squareRoot()
                let level = rms > 0 ? max(ClassificationResult.levelFloorDBFS, Float(20 * log10(rms))) : ClassificationResult.levelFloorDBFS
                meter(level, Double(samples.count) / Double(rate))
            } else if let end = capture.end, samples.count < wanted {
                let reason: String
                switch end {
                case .failed(let error): reason = error.message
                default: reason = "the capture ended"
                }
                throw EarshotError(.unavailable, "capture device \"\(configuration.device)\" stopped after \(String(cFormat: "%.1f", Double(samples.count) / Double(rate))) s: \(reason)")
            } else if Date().timeIntervalSince(lastAudio) > 5 {
                throw EarshotError(.unavailable, "capture device \"\(configuration.device)\" delivered no audio for 5 s (is it in use or muted? try another --device)")
            }
        }
        let resampler = try Resampler(inputRate: Double(rate), outputRate: Double(YAMNet.sampleRate))
        var output: [Float] = []
        try resampler.process(samples, appendingTo: &output)
        try resampler.flush(appendingTo: &output)
        let expected = Int((Double(wanted) * Double(YAMNet.sampleRate) / Double(rate)).rounded())
        if output.count > expected { output.removeLast(output.count - expected) }
        if output.count < expected { output += repeatElement(0, count: expected - output.count) }
        return output
    }
}
