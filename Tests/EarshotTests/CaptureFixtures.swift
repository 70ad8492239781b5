import Foundation
import Synchronization

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Real ALSA PCMs for capture tests: the `file` plugin reading a raw file (`infile`) as its capture data, over the
/// `null` plugin (which has no clock and writes nothing, so the file plugin's data is all there is). Defined in ALSA
/// configuration text loaded on top of the system configuration (``CaptureConfiguration/alsaConfiguration``).
/// Needs only libasound2 (no sound card, no PulseAudio).
enum CaptureFixtures {
    /// A fresh directory for this test process.
    static let directory: URL = {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-capture-tests-\(getpid())", isDirectory: true)
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        ProcessScratch.removeAtExit(url)
        return url
    }()

    /// Writes `bytes` to a new file in ``directory`` and returns its path.
    static func writeRaw(_ bytes: [UInt8], name: String) -> String {
        let url = directory.appendingPathComponent(name)
        FileManager.default.createFile(atPath: url.path, contents: Data(bytes))
        return url.path
    }

    /// Little-endian bytes of 16-bit samples.
    static func bytes(of samples: [Int16]) -> [UInt8] {
        samples.flatMap { [UInt8(truncatingIfNeeded: $0), UInt8(truncatingIfNeeded: $0 >> 8)] }
    }

    /// `pcm.NAME`: the file plugin with `infile` over `slave` (an inline PCM definition).
    static func filePCM(_ name: String, infile: String, slave: String = "{ type null }", output: String = "/dev/null")
        -> String
    {
        """
        pcm.\(name) {
            type file
            slave.pcm \(slave)
            file "\(output)"
            infile "\(infile)"
            format raw
        }
        """
    }

    /// A slave that offers only float formats: `lfloat` converts its client's float to the null PCM's S16_LE.
    static let floatOnlySlave = "{ type lfloat slave { pcm { type null } format S16_LE } }"

    /// A slave that offers exactly 2 channels: `multi` binds two channels of one null PCM.
    static let stereoOnlySlave = """
        { type multi slaves.a { pcm { type null } channels 2 } \
        bindings.0 { slave a channel 0 } bindings.1 { slave a channel 1 } }
        """

    /// The real recording the capture tests replay: the freedesktop sound theme's alarm-clock-elapsed.oga
    /// (48 kHz stereo, 6.128 s), decoded with libsndfile and rounded to 16-bit, as interleaved stereo samples.
    /// Nil when ../shared is absent.
    static let alarmClockStereo: [Int16]? = {
        guard TestPaths.sharedAvailable else { return nil }
        let url = TestPaths.sharedFile(
            "audio/debian-sound-theme-freedesktop/sounds/freedesktop/stereo/alarm-clock-elapsed.oga")
        guard let decoder = try? AudioFileDecoder(url: url), decoder.channelCount == 2 else { return nil }
        var interleaved: [Float] = []
        while let count = try? decoder.read(maxFrames: 65_536, appendingTo: &interleaved), count > 0 {}
        return interleaved.map { Int16(clamping: Int(($0 * 32_768).rounded())) }
    }()

    static let alarmClockRate = 48_000

    /// The recording's left channel, as mono samples.
    static let alarmClockMono: [Int16]? = alarmClockStereo.map { stereo in
        stride(from: 0, to: stereo.count, by: 2).map { stereo[$0] }
    }

    /// Calls `condition` every millisecond until it is true or `timeout` seconds passed; returns its last value.
    static func wait(timeout: Double, until condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            usleep(1_000)
        }
        return condition()
    }

    /// Reads chunks from `ring` until `frames` samples were read or `timeout` seconds passed.
    static func read(_ ring: SampleRingBuffer, frames: Int, timeout: Double = 10)
        -> (samples: [Float], chunks: [SampleRingBuffer.Chunk])
    {
        var samples: [Float] = []
        var chunks: [SampleRingBuffer.Chunk] = []
        var buffer = [Float](repeating: 0, count: 4096)
        _ = wait(timeout: timeout) {
            while samples.count < frames {
                let wanted = min(buffer.count, frames - samples.count)
                let chunk = buffer.withUnsafeMutableBufferPointer {
                    ring.readChunk(into: UnsafeMutableBufferPointer(rebasing: $0[0..<wanted]))
                }
                if chunk.count == 0 { break }
                chunks.append(chunk)
                samples.append(contentsOf: buffer[0..<chunk.count])
            }
            return samples.count >= frames
        }
        return (samples, chunks)
    }
}

/// Collects values from callbacks on any thread.
final class CaptureRecorder<Value: Sendable>: Sendable {
    private let storage = Mutex<[Value]>([])
    func append(_ value: Value) { storage.withLock { $0.append(value) } }
    var values: [Value] { storage.withLock { $0 } }
}
