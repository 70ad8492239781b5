import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// `earshotd` saving clips as users run it: the real executable streaming a real recording (`--input`, in real
/// time), `[clips]` in a configuration file, clips in a temporary directory; the clips are compared with the
/// recording decoded and resampled by the project's own decoder (`decodeMono16k`).
@Suite("Clips: earshotd end to end", .serialized)
struct ClipDaemonTests {
    static let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")

    struct Run {
        var status: Int32
        var lines: [[String: Any]]
        var stderr: String

        func of(type: String) -> [[String: Any]] { lines.filter { $0["type"] as? String == type } }
    }

    /// Runs earshotd with `configuration` (written to a file in `scratch`) on `input` until the input ends.
    static func run(_ configuration: String, input: String, watch: String, in scratch: ClipScratch, seconds: Double = 90)
        throws -> Run
    {
        let config = scratch.directory.appendingPathComponent("earshotd.conf")
        try configuration.write(to: config, atomically: true, encoding: .utf8)
        let daemon = Process()
        daemon.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--config", config.path, "--foreground", "--socket", scratch.path + "/earshot.sock",
                            "--watch", watch, "--input", input]
        daemon.environment = DaemonEndToEndTests.environment(home: scratch.directory)
        let out = Pipe(), err = Pipe()
        daemon.standardOutput = out
        daemon.standardError = err
        try daemon.run()
        let watchdog = DispatchWorkItem { if daemon.isRunning { daemon.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: watchdog)
        // stderr is read beside stdout, so that neither pipe fills up.
        let errorText = LockedText()
        let reader = Thread { errorText.set(String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)) }
        reader.start()
        let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        daemon.waitUntilExit()
        watchdog.cancel()
        while !errorText.isSet { Thread.sleep(forTimeInterval: 0.01) }
        let lines = output.split(separator: "\n").map { DaemonEndToEndTests.parse(String($0)) }
        return Run(status: daemon.terminationStatus, lines: lines, stderr: errorText.value)
    }

    final class LockedText: @unchecked Sendable {
        private let lock = NSLock()
        private var text: String?
        func set(_ value: String) { lock.withLock { text = value } }
        var isSet: Bool { lock.withLock { text != nil } }
        var value: String { lock.withLock { text ?? "" } }
    }

    static func index(_ seconds: Double) -> Int { Int((seconds * 16_000).rounded()) }

    /// The timeline range a clip of the event `end` should cover: `pre` before the start to `post` after the end
    /// (the event cut at 60 s), inside the stream's `[0, total)`.
    static func expectedRange(_ end: [String: Any], pre: Double, post: Double, total: Int) -> Range<Int> {
        let start = end["start"] as? Double ?? -1
        let stop = end["end"] as? Double ?? -1
        return max(0, index(start - pre))..<min(total, index(min(stop, start + 60) + post))
    }

    /// The clip file's samples, as the decoder reads them (q / 32768).
    static func clipSamples(_ path: String) throws -> (rate: Int, samples: [Float]) {
        let decoder = try AudioFileDecoder(url: URL(fileURLWithPath: path))
        return (decoder.sampleRate, try decoder.readAllMono())
    }

    @Test("demo.flac: one clip per event, exact frame counts (cut at the stream's start and end), the input's samples, retention by count")
    func demoClips() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        let directory = scratch.path + "/clips"
        let run = try Self.run(
            "[clips]\nenabled = true\ndirectory = \(directory)\npre_seconds = 5\npost_seconds = 5\nmax_clips = 3\n[history]\nenabled = false\n",
            input: Self.demo.path, watch: "baby_cry,snoring,glass_break,doorbell_knock", in: scratch)
        #expect(run.status == 0, "\(run.stderr)")
        let ends = run.of(type: "detection_end")
        let saved = run.of(type: "clip_saved")
        #expect(ends.map { $0["group"] as? String ?? "" } == ["baby_cry", "snoring", "glass_break", "doorbell_knock"])
        #expect(saved.count == ends.count)
        #expect(run.of(type: "health").allSatisfy { $0["state"] as? String == "capture_live" })

        // demo.flac is 16-bit at 16 kHz: the analysis audio is its samples, unchanged.
        let input = try decodeMono16k(Self.demo)
        #expect(input.count == 510_495)
        for end in ends {
            let group = end["group"] as? String ?? ""
            let range = Self.expectedRange(end, pre: 5, post: 5, total: input.count)
            let clip = try #require(saved.first { $0["group"] as? String == group && $0["event_start"] as? Double == end["start"] as? Double })
            #expect(clip["frames"] as? Int == range.count, "\(group)")
            #expect(clip["start"] as? Double == (Double(range.lowerBound) / 16_000 * 1000).rounded() / 1000, "\(group)")
            #expect(clip["end"] as? Double == (Double(range.upperBound) / 16_000 * 1000).rounded() / 1000, "\(group)")
            #expect(clip["event_end"] as? Double == end["end"] as? Double && clip["capped"] as? Bool == false)
            #expect(clip["sample_rate"] as? Int == 16_000)
            let path = clip["path"] as? String ?? ""
            #expect(run.stderr.contains("earshotd: clip saved: \(path) (\(group), "), "\(run.stderr)")
            guard group != "baby_cry" else { continue }  // the oldest of four, deleted by max_clips = 3
            let file = try Self.clipSamples(path)
            #expect(file.rate == 16_000)
            #expect(file.samples.count == range.count, "\(group)")
            // Tolerance 0: 16-bit samples at 16 kHz pass the analysis unchanged and are written as they came.
            #expect(file.samples == Array(input[range]), "\(group): the clip's samples differ from the input's")
            var status = stat()
            #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o600)
        }
        // The first event's start is 2.40 s: its pre-roll is cut at the stream's start. The last ends 28.32 s in:
        // its post-roll is cut at the stream's end (31.906 s).
        #expect(Self.expectedRange(ends[0], pre: 5, post: 5, total: input.count).lowerBound == 0)
        #expect(Self.expectedRange(ends[3], pre: 5, post: 5, total: input.count).upperBound == input.count)
        // Retention: four clips were saved, the oldest beyond max_clips = 3 is gone; nothing half-written is left.
        let names = saved.compactMap { ($0["path"] as? String).map { ($0 as NSString).lastPathComponent } }
        #expect(scratch.names("clips") == names.dropFirst().sorted())
    }

    @Test("a 48 kHz smoke alarm (T3 pattern): the clip holds the resampled analysis audio", .needsShared)
    func resampledAlarmClip() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        let source = TestPaths.sharedFile("audio/alarm-ml-audio-classifier-example-for-pico/ALRMElec_Smoke_detector_alarm_(ID_0800)_BSB.wav")
        let run = try Self.run(
            "[clips]\nenabled = true\ndirectory = \(scratch.path)\npre_seconds = 2\npost_seconds = 1\n[history]\nenabled = false\n",
            input: source.path, watch: "smoke_alarm", in: scratch)
        #expect(run.status == 0, "\(run.stderr)")
        let end = try #require(run.of(type: "detection_end").first)
        #expect(end["pattern"] as? String == "T3")
        let clip = try #require(run.of(type: "clip_saved").first)
        let input = try decodeMono16k(source)
        #expect(input.count == 178_689)  // round(536066 * 16000 / 48000)
        let range = Self.expectedRange(end, pre: 2, post: 1, total: input.count)
        #expect(clip["frames"] as? Int == range.count)
        let file = try Self.clipSamples(clip["path"] as? String ?? "")
        #expect(file.samples.count == range.count)
        // Streamed in 20 ms chunks, soxr gives the whole file's samples (measured: identical; 1e-6 allowed for other
        // builds of libsoxr); 16-bit storage adds at most half a step (0.5 / 32768; measured: exactly that).
        let difference = zip(file.samples, input[range]).map { abs($0 - $1) }.max() ?? 1
        #expect(difference <= 0.5 / 32_768 + 1e-6, "max difference \(difference)")
    }

    /// `demo.flac` from 23.04 s (a multiple of the 0.48 s hop, so the windows are those of the whole file): glass
    /// breaking at 0.48 s and a knock at 3.84 s, 8.9 s in all. Written as 16-bit WAV with the clips' own writer.
    static func demoTail(to path: String) throws {
        let samples = try decodeMono16k(demo)[368_640...].map { ClipRing.quantize($0) }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        #expect(descriptor >= 0)
        defer { close(descriptor) }
        let writer = try WaveFileWriter(descriptor: descriptor, sampleRate: 16_000, path: path)
        try samples.withUnsafeBufferPointer { (buffer) throws(EarshotError) in try writer.write(buffer) }
        try writer.finish()
    }

    @Test("a clips directory that cannot be made: exactly one clips_unavailable health event, detection goes on, exit 0")
    func unwritableDirectory() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        let input = scratch.path + "/tail.wav"
        try Self.demoTail(to: input)
        // A regular file where a directory should be: even root cannot write there.
        let blocker = scratch.path + "/blocker"
        #expect(FileManager.default.createFile(atPath: blocker, contents: Data()))
        let run = try Self.run(
            "[clips]\nenabled = true\ndirectory = \(blocker)/clips\n[history]\nenabled = false\n",
            input: input, watch: "glass_break,doorbell_knock", in: scratch)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.of(type: "detection_end").map { $0["group"] as? String ?? "" } == ["glass_break", "doorbell_knock"])
        let problems = run.of(type: "health").filter { $0["state"] as? String == "clips_unavailable" }
        #expect(problems.count == 1, "\(run.lines)")
        #expect(problems.first?["message"] as? String
            == "clips cannot be saved: cannot use the clips directory \(blocker)/clips: Not a directory (a part of the path is not a directory: set [clips] directory); detection goes on without clips, and clips are tried as they come")
        #expect(run.of(type: "clip_saved").isEmpty)
        // The health event came at start (before any clip was due), and the daemon went on: the events follow it.
        let order = run.lines.map { ($0["type"] as? String ?? "") + ":" + ($0["state"] as? String ?? $0["group"] as? String ?? "") }
        let problemAt = try #require(order.firstIndex(of: "health:clips_unavailable"))
        let firstDetectionAt = try #require(order.firstIndex(of: "detection:glass_break"))
        #expect(problemAt < firstDetectionAt, "\(order)")
        #expect(run.stderr.contains("earshotd: stopped (end of input)\n"))
        // The start-up line does not claim that clips are being saved.
        #expect(!run.stderr.contains("earshotd: saving clips of"), "\(run.stderr)")
        #expect(run.stderr.contains("earshotd: not saving clips of every group for now: \(blocker)/clips cannot be written (see clips_unavailable); each clip is tried again when it is due\n"), "\(run.stderr)")
    }

    @Test("a [clips] value out of range stops earshotd with the exact line and status 78")
    func badConfiguration() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        let config = scratch.directory.appendingPathComponent("bad.conf")
        try "[clips]\nenabled = true\npost_seconds = 45\n".write(to: config, atomically: true, encoding: .utf8)
        let result = try DaemonEndToEndTests.runToExit(
            ["--config", config.path, "--socket", scratch.path + "/s.sock", "--input", Self.demo.path], home: scratch.directory)
        #expect(result.status == 78)
        #expect(result.stderr == "earshotd: \(config.path):3: [clips] post_seconds = 45: must be in [0, 30] seconds\n")
    }
}
