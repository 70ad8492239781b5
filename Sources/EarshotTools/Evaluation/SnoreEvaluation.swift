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

/// Measures the snore detector on labelled clips (`earshot eval-snore`), two ways, both through the daemon's
/// detection stage (``FileDetection`` watching `snoring`, so gated windows have evidence 0 as in `earshotd`):
///
/// - **Isolated clips**: each file analysed alone. A clip counts as flagged when any of its windows reaches the
///   strong threshold: by the "Snoring" class alone (the baseline the issue quotes), and by the snore evidence.
///   (The detector itself never calls one isolated sound snoring: it needs two snores within its hold time.)
/// - **In a breathing sequence**: the clips of a set concatenated in name order, each followed by a pause of
///   `pauseSeconds` (seeded uniform draw) of quiet room noise (white noise at -60 dBFS RMS), so that a snore recurs
///   every 2-4 s as in sleep; the detector runs over the whole sequence. A clip counts as flagged when a positive
///   window overlaps it by at least half a hop's worth of audio (0.48 s). Events are the detector's events.
///
/// For a positive set the flagged share is the detection rate; for a negative set it is the false rate.
package enum SnoreEvaluation {
    /// Figures for one set of clips.
    package struct Figures: Sendable, Equatable {
        package var clips = 0
        /// Clips whose "Snoring" score reached `strongThreshold` in some window.
        package var snoringClassFlagged = 0
        /// Clips whose evidence reached `strongThreshold` in some window.
        package var evidenceFlagged = 0
        /// Clips the detector flagged inside the breathing sequence.
        package var sequenceFlagged = 0
        /// Detector events in the sequence.
        package var sequenceEvents = 0
        /// The sequence's length in seconds.
        package var sequenceSeconds = 0.0
        /// Seconds of snoring the detector reported in the sequence.
        package var sequenceSnoringSeconds = 0.0

        package init() {}
    }

    /// Runs both measurements on `files` (sorted by name by the caller).
    ///
    /// - Parameters:
    ///   - sequencePath: where the concatenated sequence is written (a float WAV; removed afterwards).
    ///   - progress: called after each clip with (done, total).
    /// - Throws: ``EarshotError`` when a clip cannot be decoded or the sequence cannot be written.
    ///   - configuration: the daemon configuration whose `[analysis]` and `[sleep]` keys apply (the snore
    ///     detector's thresholds and model).
    package static func measure(
        files: [URL], configuration: DaemonConfiguration = DaemonConfiguration(),
        pauseSeconds: ClosedRange<Double> = 1...3, seed: UInt64 = 1, sequencePath: String,
        progress: ((Int, Int) -> Void)? = nil
    ) throws(EarshotError) -> Figures {
        let settings = SnoreFileAnalysis.snoringOnly(configuration)
        let detection = try FileDetection(configuration: settings, configPath: nil)
        let model = try BuiltInClassifier.shared()
        // A second detector fed the stage's windows decides exactly as the stage's does, and says which windows
        // it called snoring.
        let detectorSettings = settings.sleep.detectorConfiguration
        let strong = detectorSettings.strongThreshold
        let probe = try SnoreDetector(classLabels: model.classLabels, configuration: detectorSettings, head: detection.snoreHead)
        let snoringIndex = model.classLabels.firstIndex(of: SnoreDetector.classLabel) ?? 0
        var figures = Figures()
        var sequence: [Float] = []
        var spans: [(start: Double, end: Double)] = []
        var random = SplitMix64(seed: seed)
        let rate = Double(YAMNet.sampleRate)
        for (index, file) in files.enumerated() {
            var snoring: Float = 0, evidence: Float = 0
            try detection.run(url: file) { output in
                guard case .window(let result) = output, !result.isGated else { return }
                snoring = max(snoring, snoringIndex < result.scores.count ? result.scores[snoringIndex] : 0)
                evidence = max(evidence, probe.evidence(scores: result.scores, embedding: result.embedding))
            }
            figures.clips += 1
            if snoring >= strong { figures.snoringClassFlagged += 1 }
            if evidence >= strong { figures.evidenceFlagged += 1 }

            let samples = try decodeMono16k(file)
            let start = Double(sequence.count) / rate
            sequence += samples
            spans.append((start, Double(sequence.count) / rate))
            let pause = pauseSeconds.lowerBound + (pauseSeconds.upperBound - pauseSeconds.lowerBound) * random.nextUnit()
            // White noise at -60 dBFS RMS: uniform in [-a, a] has RMS a / sqrt(3).
            let amplitude = Float(0.001 * 3.0.squareRoot())
            for _ in 0..<Int(pause * rate) { sequence.append(amplitude * Float(2 * random.nextUnit() - 1)) }
            progress?(index + 1, files.count)
        }
        guard !sequence.isEmpty else { return figures }
        try FloatWAV.write(sequence, sampleRate: YAMNet.sampleRate, to: sequencePath)
        defer { unlink(sequencePath) }
        var detector = probe
        detector.recordsPositiveWindows = true
        var events: [SnoreEvent] = []
        let seconds = try detection.run(url: URL(fileURLWithPath: sequencePath)) { output in
            switch output {
            case .window(let result):
                _ = detector.process(result)
            case .snore(.offset(_, let event)):
                events.append(event)
            default:
                break
            }
        }
        _ = detector.finish()
        let starts = detector.positiveWindowStarts
        let window = 0.96, needed = 0.48
        var cursor = 0
        for span in spans {
            while cursor < starts.count, starts[cursor] + window < span.start + needed { cursor += 1 }
            var probe = cursor
            var hit = false
            while probe < starts.count, starts[probe] <= span.end - needed {
                if min(span.end, starts[probe] + window) - max(span.start, starts[probe]) >= needed - 1e-9 {
                    hit = true
                    break
                }
                probe += 1
            }
            if hit { figures.sequenceFlagged += 1 }
        }
        figures.sequenceEvents = events.count
        figures.sequenceSeconds = seconds
        figures.sequenceSnoringSeconds = events.reduce(0) { $0 + $1.duration }
        return figures
    }
}

/// Writes mono 32-bit float WAV files (WAVE_FORMAT_IEEE_FLOAT), for evaluation sequences and test fixtures.
package enum FloatWAV {
    /// - Throws: `EarshotError(.cannotCreate)` when the file cannot be written or is too large for a RIFF header.
    package static func write(_ samples: [Float], sampleRate: Int, to path: String) throws(EarshotError) {
        let dataBytes = samples.count * 4
        guard dataBytes <= Int(UInt32.max) - 64 else {
            throw EarshotError(.cannotCreate, "cannot write \(path): \(samples.count) samples do not fit a WAV file (4 GiB)")
        }
        var header = Data()
        func u32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { header.append(contentsOf: $0) } }
        func u16(_ value: UInt16) { withUnsafeBytes(of: value.littleEndian) { header.append(contentsOf: $0) } }
        header.append(contentsOf: Array("RIFF".utf8))
        u32(UInt32(36 + dataBytes))
        header.append(contentsOf: Array("WAVEfmt ".utf8))
        u32(16)
        u16(3)  // IEEE float
        u16(1)
        u32(UInt32(sampleRate))
        u32(UInt32(sampleRate * 4))
        u16(4)
        u16(32)
        header.append(contentsOf: Array("data".utf8))
        u32(UInt32(dataBytes))
        var data = header
        #if _endian(little)
        samples.withUnsafeBytes { data.append(contentsOf: $0) }
        #else
        for value in samples { withUnsafeBytes(of: value.bitPattern.littleEndian) { data.append(contentsOf: $0) } }
        #endif
        do {
            try data.write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw EarshotError(.cannotCreate, "cannot write \(path): \(errorText(error))")
        }
    }
}
