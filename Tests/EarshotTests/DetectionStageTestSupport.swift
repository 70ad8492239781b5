import Foundation
import EarshotAudio
import EarshotDetection
import EarshotService
import EarshotTools

/// A ``DetectionStage`` driven over samples/demo.flac, its outputs as lines, for the tests that compare runs of it
/// (``ReloadStageTests``, ``InputSpeedTests``).
enum DemoStageRun {
    static let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")

    /// A stage built from `text` (a configuration file's text) over samples/demo.flac at 16 kHz, as lines: a window
    /// as "window START" (with `windowLevelAndGate`, "window START LEVEL GATED"), a detection, alarm or snore decision
    /// in full, a health event as "health STATE" (with `healthMessage`, "health STATE MESSAGE").
    ///
    /// - Parameters:
    ///   - chunkFrames: the frames handed over in the chunk of this index (0, 1, …); the last chunk is cut to what
    ///     is left.
    ///   - reload: asked before each chunk with its first frame; when it reconfigures the stage it returns what
    ///     reconfiguring produced, kept as lines and followed by the line "reload"; otherwise nil.
    static func lines(
        _ text: String, windowLevelAndGate: Bool = false, healthMessage: Bool = false,
        chunkFrames: (_ chunk: Int) -> Int = { _ in 3_200 },
        reload: (_ framePosition: Int, _ stage: DetectionStage) throws -> [DetectionStage.Output]? = { _, _ in nil }
    ) throws -> [String] {
        let detection = try FileDetection(configuration: try DaemonConfiguration.parse(text, source: "test"), configPath: nil)
        let stage = try DetectionStage(
            settings: detection.plan.stageSettings, engine: detection.plan.engine, heads: detection.heads,
            snoreHead: detection.snoreHead)
        let samples = try AudioFileDecoder(url: demo).readAllMono()
        var lines: [String] = []
        func keep(_ outputs: [DetectionStage.Output]) {
            for output in outputs {
                switch output {
                case .window(let result):
                    lines.append(windowLevelAndGate
                        ? "window \(result.timeRange.start) \(result.levelDBFS) \(result.isGated)"
                        : "window \(result.timeRange.start)")
                case .detection(let event): lines.append("detection \(event)")
                case .alarm(let event): lines.append("alarm \(event)")
                case .snore(let decision): lines.append("snore \(decision)")
                case .health(let event):
                    lines.append(healthMessage ? "health \(event.state) \(event.message)" : "health \(event.state)")
                }
            }
        }
        var position = 0, chunk = 0
        while position < samples.count {
            if let reloaded = try reload(position, stage) {
                keep(reloaded)
                lines.append("reload")
            }
            let count = min(chunkFrames(chunk), samples.count - position)
            keep(samples.withUnsafeBufferPointer { all in
                stage.process(UnsafeBufferPointer(rebasing: all[position..<(position + count)]), sampleRate: 16_000,
                              framePosition: Int64(position))
            })
            position += count
            chunk += 1
        }
        keep(stage.finishInput())
        return lines
    }
}
