import Foundation
import Testing
import EarshotDetection
import EarshotService
import EarshotTools

/// The same audio gives the same events however fast it is replayed and however it is cut into chunks: at
/// `--input-speed max` the analysis queue reads several seconds from the ring at once, and a glass-break check that
/// looked at "the audio delivered so far" (and kept only its last 3.5 s) lost the demo's shatter at 24.00 s.
@Suite("Events do not depend on the input speed or the chunking")
struct InputSpeedTests {
    /// The detection stage's outputs over samples/demo.flac handed over in chunks of `chunkFrames` (cycled), as
    /// lines: every window's start, level and gate, every event in full.
    static func stageOutputs(chunkFrames: [Int]) throws -> [String] {
        try DemoStageRun.lines(DetectCommandTests.configText, windowLevelAndGate: true, healthMessage: true,
                               chunkFrames: { chunkFrames[$0 % chunkFrames.count] })
    }

    @Test("the detection stage over demo.flac: the same windows and events in 0.2 s periods, in the 6 s reads of a ring that fell behind, and in uneven reads")
    func stageIgnoresChunking() throws {
        let periods = try Self.stageOutputs(chunkFrames: [3_200])
        let events = periods.filter { !$0.hasPrefix("window") }
        #expect(events.count == 8, "\(events)")
        #expect(events.contains { $0.hasPrefix("detection onset(") && $0.contains(#"classLabel: "Shatter""#)
                    && $0.contains("start: 24.0, decisionTime: 24.96)") }, "\(events)")
        // `AnalysisPipeline` reads up to 96 000 frames at once.
        let behind = try Self.stageOutputs(chunkFrames: [96_000])
        #expect(behind == periods, "\(behind.filter { !$0.hasPrefix("window") }) vs \(periods.filter { !$0.hasPrefix("window") })")
        let uneven = try Self.stageOutputs(chunkFrames: [1_234, 7_000, 333, 50_000, 3_200, 17])
        #expect(uneven == periods, "\(uneven.filter { !$0.hasPrefix("window") }) vs \(periods.filter { !$0.hasPrefix("window") })")
    }

    /// `earshotd --foreground --input samples/demo.flac --input-speed SPEED`: its standard output's event lines
    /// (detections and their ends) without the wall-clock `time`.
    static func daemonLines(speed: String) throws -> [String] {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-speed-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("earshotd.conf").path
        try DetectCommandTests.configText.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess([
            "--config", config, "--foreground", "--input", "samples/demo.flac", "--input-speed", speed,
            "--socket", directory.appendingPathComponent("d.sock").path, "--no-journal",
        ], environment: DaemonEndToEndTests.environment(home: directory))
        #expect(daemon.wait(seconds: 120) == 0, "\(daemon.errorText)")
        return daemon.lines.map(\.line)
            .filter { $0.hasPrefix(#"{"type":"detection"#) }
            .map { $0.replacingOccurrences(of: #","time":"[^"]*""#, with: "", options: .regularExpression) }
    }

    @Test("earshotd --input samples/demo.flac publishes the same event lines at --input-speed max and 1000 as at 20, the glass break at 24.00 s included",
          .needsEarshotdBuilt)
    func daemonIgnoresSpeed() throws {
        let reference = try Self.daemonLines(speed: "20")
        #expect(reference.count == 8, "\(reference)")
        #expect(reference.contains { $0.hasPrefix(#"{"type":"detection","group":"glass_break","class":"Shatter","confidence":0.909,"stream_time":24.0"#) },
                "\(reference)")
        for speed in ["max", "1000"] {
            #expect(try Self.daemonLines(speed: speed) == reference, "--input-speed \(speed)")
        }
    }
}
