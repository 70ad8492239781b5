import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotService

/// The daemon's detection stage over a sound file, as fast as the CPU allows (`earshot detect`).
///
/// The file is decoded and mixed to mono at its own rate with libsndfile and handed to a `DetectionStage` in
/// periods of 0.2 s (`CaptureConfiguration.defaultPeriodDuration`), as `earshotd --input` hands it over from its
/// ring, with the plan (groups, heads, alarm patterns, gate, window) `earshotd` builds from the same configuration;
/// at the end the last window is scored and open events end (`stream_end`), as at the end of `--input`. So the
/// events are the daemon's, without waiting for the audio to play. What only a running daemon does (sleep
/// sessions, clips, the history) is left out: the snore detector's `snoring` events are handed on only when
/// `snoring` is watched.
package struct FileDetection {
    package let plan: DetectionPlan
    package let heads: HeadModelSet
    /// The `[sleep] model` head the snore detector adds to its evidence, or nil.
    package let snoreHead: SnoreDetector.HeadEvidence?

    /// - Throws: `EarshotError` `.config` for a bad configuration (as `earshotd --check-config` reports it),
    ///   `.noInput` when the model or a `[models] files` entry is missing.
    package init(configuration: DaemonConfiguration, configPath: String?) throws(EarshotError) {
        let model = try BuiltInClassifier.shared()
        heads = try configuration.loadHeadModels().set
        snoreHead = try configuration.loadSnoreHead()
        plan = try DetectionPlan(
            configuration: configuration, yamnetLabels: model.classLabels, heads: heads, configPath: configPath)
    }

    /// Runs the stage over `url`, handing each output to `body` as it comes (windows included), and the decoder's
    /// warning, if any (a file cut short, ``AudioFileDecoder/truncationWarning``), to `warning` at the end.
    /// - Returns: seconds of audio analysed.
    /// - Throws: ``EarshotError`` when the file cannot be opened or decoded (outputs already handed stay handed).
    @discardableResult
    package func run(
        url: URL, warning: (String) -> Void = { _ in }, _ body: (DetectionStage.Output) -> Void
    ) throws(EarshotError) -> Double {
        try run(url: url, warning: warning, timed: { output, _ in body(output) })
    }

    /// ``run(url:warning:_:)``, handing `body` each output with the moment `earshotd --input` would publish it, in
    /// seconds into the file: the end of the audio the stage had been given when the output came (the end of its
    /// 0.2 s period; the file's length for what its end produces). Reproducible, unlike the wall clock.
    @discardableResult
    package func run(
        url: URL, warning: (String) -> Void = { _ in }, timed body: (DetectionStage.Output, _ streamSeconds: Double) -> Void
    ) throws(EarshotError) -> Double {
        let decoder = try AudioFileDecoder(url: url)
        let stage = try DetectionStage(settings: plan.stageSettings, engine: plan.engine, heads: heads, snoreHead: snoreHead)
        let period = max(1, Int((Double(decoder.sampleRate) * CaptureConfiguration.defaultPeriodDuration).rounded()))
        var samples: [Float] = []
        samples.reserveCapacity(period)
        var position: Int64 = 0
        while true {
            samples.removeAll(keepingCapacity: true)
            let count = try decoder.readMono(maxFrames: period, appendingTo: &samples)
            if count == 0 { break }
            let outputs = samples.withUnsafeBufferPointer { buffer in
                stage.process(buffer, sampleRate: decoder.sampleRate, framePosition: position)
            }
            position += Int64(count)
            let seconds = Double(position) / Double(decoder.sampleRate)
            for output in outputs where publishes(output) { body(output, seconds) }
        }
        let end = Double(position) / Double(decoder.sampleRate)
        for output in stage.finishInput() where publishes(output) { body(output, end) }
        if let text = decoder.truncationWarning { warning(text) }
        return Double(position) / Double(decoder.sampleRate)
    }

    /// Runs the stage over audio that is not a file (an evaluation stream assembled in memory): `next` fills the
    /// buffer with the next samples at `sampleRate` (mono, -1...1) and returns false when the stream has ended;
    /// the samples are handed over in the same 0.2 s periods as a file's.
    /// - Returns: seconds of audio analysed.
    @discardableResult
    /// `settings`: the stage's settings instead of the plan's (to measure what one setting costs).
    package func run(sampleRate: Int, settings: DetectionStage.Settings? = nil, next: (inout [Float]) -> Bool,
                     _ body: (DetectionStage.Output) -> Void) throws(EarshotError) -> Double
    {
        let stage = try DetectionStage(
            settings: settings ?? plan.stageSettings, engine: plan.engine, heads: heads, snoreHead: snoreHead)
        let period = max(1, Int((Double(sampleRate) * CaptureConfiguration.defaultPeriodDuration).rounded()))
        var pending: [Float] = []
        var chunk: [Float] = []
        var position: Int64 = 0
        var more = true
        while more || !pending.isEmpty {
            while more && pending.count < period {
                chunk.removeAll(keepingCapacity: true)
                more = next(&chunk)
                pending += chunk
            }
            let count = min(period, pending.count)
            if count == 0 { break }
            let outputs = pending.withUnsafeBufferPointer { buffer in
                stage.process(UnsafeBufferPointer(rebasing: buffer[0..<count]), sampleRate: sampleRate, framePosition: position)
            }
            pending.removeFirst(count)
            for output in outputs where publishes(output) { body(output) }
            position += Int64(count)
        }
        for output in stage.finishInput() where publishes(output) { body(output) }
        return Double(position) / Double(sampleRate)
    }

    /// Whether `output` is one the daemon publishes without a sleep session.
    private func publishes(_ output: DetectionStage.Output) -> Bool {
        if case .snore = output { return plan.snoringWatched }
        return true
    }
}
