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

/// Settings of `earshot enroll`.
package struct EnrollmentConfiguration: Sendable, Equatable {
    /// The sound's name: the head's label (not `background`; no `:`, `|` or control characters).
    package var label: String
    /// Seed for augmentation, shuffling and initial weights (default 1).
    package var seed: UInt64 = 1
    /// Cores used to compute embeddings (default: all active processors).
    package var threads = ProcessInfo.processInfo.activeProcessorCount

    package init(label: String) {
        self.label = label
    }
}

/// Whether a take can be used.
package enum TakeQuality: Sendable, Equatable {
    /// Usable; `peakDBFS` is the loudest 100 ms.
    case good(peakDBFS: Float)
    /// Its loudest 100 ms is below ``Enrollment/quietThresholdDBFS``: nothing was recorded.
    case tooQuiet(peakDBFS: Float)
    /// More than ``Enrollment/clippedFraction`` of its samples are at full scale: the recording is distorted.
    case clipped(fraction: Double)

    /// One line for the user: `ok (peak -12.3 dBFS)`, `too quiet (...)`, `clipped (...)`.
    package var description: String {
        switch self {
        case .good(let peak):
            "ok (peak \(String(cFormat: "%.1f", peak)) dBFS)"
        case .tooQuiet(let peak):
            "too quiet (peak \(String(cFormat: "%.1f", peak)) dBFS, below \(Int(Enrollment.quietThresholdDBFS)) dBFS; make the sound closer to the microphone or raise the capture level in alsamixer)"
        case .clipped(let fraction):
            "clipped (\(String(cFormat: "%.2f", fraction * 100))% of samples at full scale; move the microphone away or lower the capture level in alsamixer)"
        }
    }

    package var isGood: Bool {
        if case .good = self { return true }
        return false
    }
}

/// What enrollment produced and how well the takes separate from the background.
package struct EnrollmentReport: Sendable {
    /// The trained head (labels `background` and the sound's name).
    package let head: ClassifierHead
    /// Per take, its probability of being the sound when the head was trained without it (leave one take out):
    /// the highest over the take's windows where the sound is.
    package let takeScores: [Float]
    /// Held-out background windows scored (each fold holds out one part of every background recording).
    package let backgroundWindowCount: Int
    /// The highest held-out background probability of being the sound.
    package let backgroundHighest: Float
    /// Held-out background windows at or above ``threshold``.
    package let backgroundAboveThreshold: Int
    /// The suggested detection threshold (also in the head's metadata).
    package let threshold: Double
    /// The lowest, over takes, of a held-out take's best cosine similarity to the other takes (raw embeddings).
    package let takeSimilarity: Float
    /// The tenth percentile of the same for takes mixed with background (0 to 10 dB SNR).
    package let noisyTakeSimilarity: Float
    /// The highest similarity of a held-out background window to the takes.
    package let backgroundSimilarity: Float
    /// The similarity gate's threshold (see the head's `prototype.gate`).
    package let gateThreshold: Float

    /// True when every held-out take scores above every held-out background window.
    package var isSeparated: Bool { (takeScores.min() ?? 0) > backgroundHighest }

    /// Why the model is not ready for earshotd, one line each (empty when it is): takes not separated from the
    /// background.
    package var readinessProblems: [String] {
        guard !isSeparated else { return [] }
        return ["the takes are not separated from the background (lowest take " + String(cFormat: "%.3f", takeScores.min() ?? 0)
                + " <= highest background " + String(cFormat: "%.3f", backgroundHighest)
                + "): it would fire on the room's usual sounds"]
    }

    /// `--from` files named more than once (by their resolved path), each once, in order: a take given twice
    /// counts twice and makes the separation check look better than it is.
    package static func duplicateTakes(_ paths: [String]) -> [String] {
        var seen: Set<String> = [], reported: Set<String> = [], duplicates: [String] = []
        for path in paths {
            var resolved = path
            if let real = realpath(path, nil) {
                resolved = String(cString: real)
                free(real)
            }
            if !seen.insert(resolved).inserted, reported.insert(resolved).inserted { duplicates.append(path) }
        }
        return duplicates
    }

    /// The lines a person reads.
    package func formatted(takeNames: [String]) -> [String] {
        var lines = ["separation (each take left out of training in turn, with a part of the background):"]
        for (index, score) in takeScores.enumerated() {
            let name = index < takeNames.count ? takeNames[index] : "take \(index + 1)"
            lines.append("  \(name): " + String(cFormat: "%.3f", score) + (Double(score) >= threshold ? "" : "  (below the threshold)"))
        }
        lines.append("  background: \(backgroundWindowCount) windows, highest " + String(cFormat: "%.3f", backgroundHighest)
                     + ", \(backgroundAboveThreshold) at or above the threshold")
        lines.append("  similarity to the other takes: takes at least " + String(cFormat: "%.3f", takeSimilarity)
                     + " (in noise " + String(cFormat: "%.3f", noisyTakeSimilarity) + "), background at most "
                     + String(cFormat: "%.3f", backgroundSimilarity) + "; windows below about "
                     + String(cFormat: "%.3f", gateThreshold) + " are not the sound")
        let lowest = takeScores.min() ?? 0
        if isSeparated {
            lines.append("  separated: lowest take " + String(cFormat: "%.3f", lowest) + " > highest background "
                         + String(cFormat: "%.3f", backgroundHighest) + "; suggested threshold " + String(cFormat: "%.2f", threshold))
        } else {
            lines.append("  not separated: lowest take " + String(cFormat: "%.3f", lowest) + " <= highest background "
                         + String(cFormat: "%.3f", backgroundHighest) + "; record more takes, or the background with the room's usual sounds (threshold " + String(cFormat: "%.2f", threshold) + ")")
        }
        return lines
    }
}

/// Teaches Earshot one sound from a few takes (`earshot enroll`): checks the takes, augments them, trains a
/// two-class head (`background` and the sound) on YAMNet embeddings and measures how well held-out takes separate
/// from held-out background.
///
/// Augmentation, per take: the take; gains of -12, -6 and +6 dB (at most 0.99 peak); the take shifted by 0.1-0.4 s
/// inside background; the take mixed with background at 10, 5 and 0 dB signal-to-noise ratio. Only windows where the
/// take is within 12 dB of its loudest window count as the sound; windows where it is 25 dB or more below count as
/// background; the windows between are left out. Negatives: every window of the background recordings at their
/// level and at -10 and +6 dB, plus digital silence and synthetic white and pink noise from -90 to -35 dBFS (so
/// quiet and steady noise never look like the sound).
package enum Enrollment {
    /// A take whose loudest 100 ms is below this level (dBFS) is refused as silent.
    package static let quietThresholdDBFS: Float = -45
    /// A sample at or above this magnitude counts as clipped.
    package static let clipLevel: Float = 0.999
    /// A take with more than this fraction of clipped samples (0.1%) is refused.
    package static let clippedFraction = 0.001
    /// The fewest takes enrollment accepts.
    package static let minimumTakes = 2
    /// Training epochs (fixed, with the default L2 of ``HeadTrainingOptions``: with a handful of takes there is no
    /// validation set to stop on; logistic regression on a few hundred windows has settled by then).
    package static let epochs = 100
    /// How far below the least similar positive the similarity gate sits (cosine similarity of raw YAMNet
    /// embeddings). Chosen on `scripts/eval-heads`: an alarm take mixed into speech and household noise kept a
    /// similarity of 0.69-0.76 to the clean takes while the mix's other windows stayed below 0.58, against 0.79 for
    /// the least similar clean take.
    package static let gateMargin: Float = 0.15
    /// Levels (dBFS) of the synthetic white and pink noise among the negatives: from dither to a loud fan.
    package static let syntheticNoiseLevels: [Double] = [-90, -70, -55, -45, -35]

    /// Checks a take (mono, 16 kHz, full scale ±1).
    package static func check(_ take: [Float]) -> TakeQuality {
        guard !take.isEmpty else { return .tooQuiet(peakDBFS: ClassificationResult.levelFloorDBFS) }
        let clipped = take.reduce(0) { $0 + (abs($1) >= clipLevel ? 1 : 0) }
        let fraction = Double(clipped) / Double(take.count)
        if fraction > clippedFraction { return .clipped(fraction: fraction) }
        let peak = peakLevel(take)
        return peak < quietThresholdDBFS ? .tooQuiet(peakDBFS: peak) : .good(peakDBFS: peak)
    }

    /// The highest RMS level in dBFS over 100 ms frames (1600 samples, hop 800).
    package static func peakLevel(_ samples: [Float]) -> Float {
        let frame = 1_600
        var best = ClassificationResult.levelFloorDBFS
        samples.withUnsafeBufferPointer { all in
            var start = 0
            repeat {
                let end = min(all.count, start + frame)
                best = max(best, ClassificationResult.level(of: UnsafeBufferPointer(rebasing: all[start..<end])))
                start += frame / 2
            } while start + frame / 2 < all.count
        }
        return best
    }

    /// Checks `--label` before anything is recorded or trained.
    /// - Throws: `EarshotError(.usage)` (64): `--label: a label cannot be empty (...)`, `--label: "a|b" cannot be a
    ///   label: ...`, or `--label background is the name of the negative class; name the sound itself`.
    package static func checkLabel(_ label: String) throws(EarshotError) {
        if let problem = LabelledFolders.labelProblem(label) {
            throw EarshotError(.usage, "--label: \(problem)")
        }
        guard label != LabelledFolders.backgroundLabel else {
            throw EarshotError(.usage, "--label background is the name of the negative class; name the sound itself")
        }
    }

    /// Trains the head.
    /// - Parameters:
    ///   - takes: the sound, 2 or more recordings (mono, 16 kHz), already checked.
    ///   - background: recordings of the room without the sound (1 or more); may be empty, when only the synthetic
    ///     noise is the negative class (the head then tells the sound from quiet only).
    ///   - progress: called with lines for standard error.
    /// - Throws: ``EarshotError`` `.usage` for a label that cannot be one (``checkLabel(_:)``) or fewer than 2 takes; as
    ///   `BuiltInClassifier.shared()` and `BackboneIdentity.builtIn()`.
    package static func train(
        takes: [[Float]], background: [[Float]], configuration: EnrollmentConfiguration,
        progress: (String) -> Void = { _ in }
    ) throws(EarshotError) -> EnrollmentReport {
        let label = configuration.label
        try checkLabel(label)
        guard takes.count >= minimumTakes else {
            throw EarshotError(.usage, "enroll needs at least \(minimumTakes) takes of the sound, got \(takes.count)")
        }
        let extractor = try EmbeddingExtractor()
        let backbone = try BackboneIdentity.builtIn()
        let folds = takes.count
        var random = SeededRandom(seed: configuration.seed)

        // Each background recording is cut into `folds` parts; part k is held out with take k.
        var backgroundParts = [[Float]](repeating: [], count: folds)
        for recording in background {
            for fold in 0..<folds {
                let from = recording.count * fold / folds, to = recording.count * (fold + 1) / folds
                if to > from { backgroundParts[fold] += recording[from..<to] }
            }
        }
        var items: [Item] = []
        for (fold, take) in takes.enumerated() {
            items.append(Item(waveform: take, reference: take, fold: fold, isHeldOut: true))
            for variant in variants(of: take, background: backgroundParts[fold], random: &random) {
                items.append(Item(waveform: variant.mixed, reference: variant.clean, fold: fold, isHeldOut: false))
            }
        }
        for (fold, part) in backgroundParts.enumerated() where !part.isEmpty {
            items.append(Item(waveform: part, reference: nil, fold: fold, isHeldOut: true))
            for gain in [-10.0, 6.0] {
                items.append(Item(waveform: scaled(part, decibels: gain), reference: nil, fold: fold, isHeldOut: false))
            }
        }
        for level in syntheticNoiseLevels {
            for pink in [false, true] {
                items.append(Item(waveform: noise(seconds: 2, levelDBFS: level, pink: pink, random: &random), reference: nil,
                                  fold: -1, isHeldOut: false))
            }
        }
        items.append(Item(waveform: [Float](repeating: 0, count: YAMNet.sampleRate), reference: nil, fold: -1, isHeldOut: false))

        progress("embeddings of \(items.count) recordings (takes, augmented takes, background)")
        let embeddings = extractor.embeddings(ofWaveforms: items.map(\.waveform), threads: configuration.threads)
        // Window labels: 1 where the take sounds, 0 for background, -1 left out.
        let windowLabels: [[Int]] = items.map { item in
            guard let reference = item.reference else { return Array(repeating: 0, count: extractor.windowLevels(of: item.waveform).count) }
            let levels = extractor.windowLevels(of: reference)
            let loudest = levels.max() ?? ClassificationResult.levelFloorDBFS
            return levels.map { $0 >= loudest - 12 ? 1 : $0 <= loudest - 25 ? 0 : -1 }
        }

        let labels = [LabelledFolders.backgroundLabel, label]
        var options = HeadTrainingOptions()
        options.seed = configuration.seed
        let epochs = Self.epochs
        try OpenBLAS.require(for: "enrolling a sound")
        let trainer = HeadTrainer(options: options, classCount: 2)
        func matrix(_ include: (Int, Item) -> Bool) -> FeatureMatrix {
            var result = FeatureMatrix(columns: backbone.embeddingSize)
            for (index, item) in items.enumerated() where include(index, item) {
                for (window, windowLabel) in windowLabels[index].enumerated() where windowLabel >= 0 {
                    let row = embeddings[index][(window * backbone.embeddingSize)..<((window + 1) * backbone.embeddingSize)]
                    result.append(Array(row), label: windowLabel, file: index)
                }
            }
            return result
        }

        // Leave one take (and one part of the background) out: per held-out window, the head's probability of the
        // sound and the embedding's similarity to the other takes.
        struct HeldOutWindow {
            var item: Int
            var label: Int
            var probability: Float
            var similarity: Float
        }
        var heldOutWindows: [HeldOutWindow] = []
        var noisySimilarities: [Float] = []
        func takeWindows(_ include: (Int, Item) -> Bool) -> [Float] {
            var rows: [Float] = []
            for (index, item) in items.enumerated() where item.reference != nil && include(index, item) {
                for (window, windowLabel) in windowLabels[index].enumerated() where windowLabel == 1 {
                    rows += embeddings[index][(window * backbone.embeddingSize)..<((window + 1) * backbone.embeddingSize)]
                }
            }
            return rows
        }
        for fold in 0..<folds {
            progress("leave-one-out \(fold + 1)/\(folds)")
            let training = matrix { _, item in item.fold != fold }
            let heldOut = matrix { _, item in item.fold == fold && item.isHeldOut }
            // A fixed number of epochs: the held-out take must not choose when to stop.
            var parameters = trainer.train(training, validation: nil, fixedEpochs: epochs).parameters
            parameters.prototypes = HeadParameters.unitRows(
                takeWindows { _, item in item.fold != fold && item.isHeldOut }, columns: backbone.embeddingSize)
            let standardized = HeadTrainer.standardized(heldOut, parameters)
            let probabilities = parameters.probabilities(standardized: standardized, rows: heldOut.rows)
            let similarities = heldOut.values.withUnsafeBufferPointer { parameters.similarities(embeddings: $0.baseAddress!, rows: heldOut.rows) }
            for row in 0..<heldOut.rows {
                heldOutWindows.append(HeldOutWindow(item: heldOut.files[row], label: heldOut.labels[row],
                                                    probability: probabilities[row * 2 + 1], similarity: similarities[row]))
            }
            // The held-out take mixed with background: how similar a take in noise stays.
            for (index, item) in items.enumerated() where item.fold == fold && !item.isHeldOut && item.reference != nil {
                let rows = takeWindows { candidate, _ in candidate == index }
                let best = rows.withUnsafeBufferPointer { parameters.similarities(embeddings: $0.baseAddress!, rows: rows.count / backbone.embeddingSize) }.max()
                if let best { noisySimilarities.append(best) }
            }
        }

        // The similarity gate: a margin below the least similar positives (a take's best window, or the tenth
        // percentile of takes in noise). It only removes windows clearly unlike every take; telling the sound from
        // similar background is the dense layer's work.
        let cleanTakes = (0..<folds).map { fold in
            heldOutWindows.filter { $0.label == 1 && items[$0.item].fold == fold }.map(\.similarity).max() ?? 0
        }
        let backgroundSimilarity = heldOutWindows.filter { items[$0.item].reference == nil }.map(\.similarity).max() ?? 0
        let noisyLow = noisySimilarities.sorted().dropFirst(noisySimilarities.count / 10).first ?? (cleanTakes.min() ?? 0)
        let lowPositive = min(cleanTakes.min() ?? 0, noisyLow)
        let gateThreshold = lowPositive - Self.gateMargin
        func gated(_ window: HeldOutWindow) -> Float {
            window.probability / (1 + expf(-(window.similarity - gateThreshold) / HeadParameters.defaultGateWidth))
        }

        var takeScores: [Float] = []
        var backgroundScores: [Float] = []
        var windows = ConfusionMatrix(labels: labels), files = ConfusionMatrix(labels: labels)
        var fileSums: [Int: (sum: Float, count: Int, label: Int)] = [:]
        for window in heldOutWindows {
            let score = gated(window)
            windows.add(truth: window.label, predicted: score >= 0.5 ? 1 : 0)
            let entry = fileSums[window.item] ?? (0, 0, items[window.item].reference == nil ? 0 : 1)
            fileSums[window.item] = (entry.sum + score, entry.count + 1, entry.label)
            if items[window.item].reference == nil { backgroundScores.append(score) }
        }
        for (_, entry) in fileSums.sorted(by: { $0.key < $1.key }) {
            files.add(truth: entry.label, predicted: entry.sum / Float(entry.count) >= 0.5 ? 1 : 0)
        }
        for fold in 0..<folds {
            takeScores.append(heldOutWindows.filter { $0.label == 1 && items[$0.item].fold == fold }.map(gated).max() ?? 0)
        }
        let highest = backgroundScores.max() ?? 0
        let lowestTake = takeScores.min() ?? 0
        let threshold = lowestTake > highest ? min(0.9, max(0.3, Double(lowestTake + highest) / 2)) : 0.5

        progress("training on every take")
        let outcome = trainer.train(matrix { _, _ in true }, validation: nil, fixedEpochs: epochs)
        var parameters = outcome.parameters
        parameters.prototypes = HeadParameters.unitRows(takeWindows { _, item in item.isHeldOut }, columns: backbone.embeddingSize)
        parameters.gateThreshold = gateThreshold
        let all = matrix { _, _ in true }
        let record = TrainingRecord(
            method: "enroll",
            filesPerLabel: [LabelledFolders.backgroundLabel: background.count, label: takes.count],
            windowsPerLabel: [LabelledFolders.backgroundLabel: all.labels.filter { $0 == 0 }.count,
                              label: all.labels.filter { $0 == 1 }.count],
            seed: configuration.seed, validationFraction: 0, l2: options.l2,
            learningRate: options.learningRate, epochs: outcome.epochs, bestEpoch: outcome.bestEpoch)
        let metadata = HeadMetadata(
            labels: labels, backgroundLabel: LabelledFolders.backgroundLabel, classifier: options.classifier,
            hiddenUnits: nil, backbone: backbone, windowDuration: extractor.windowDuration,
            overlapFactor: extractor.overlapFactor, trainedAt: Date(), training: record,
            metrics: HeadMetrics(crossValidation: EvaluationSummary(windows: windows, files: files, folds: folds)),
            suggestedThresholds: [label: threshold])
        return EnrollmentReport(
            head: ClassifierHead(metadata: metadata, parameters: parameters), takeScores: takeScores,
            backgroundWindowCount: backgroundScores.count, backgroundHighest: highest,
            backgroundAboveThreshold: backgroundScores.filter { Double($0) >= threshold }.count, threshold: threshold,
            takeSimilarity: cleanTakes.min() ?? 0, noisyTakeSimilarity: noisyLow, backgroundSimilarity: backgroundSimilarity,
            gateThreshold: gateThreshold)
    }

    /// One recording to embed: `reference` is the take alone, aligned with `waveform` (nil for background).
    private struct Item {
        var waveform: [Float]
        var reference: [Float]?
        /// The take (and background part) this belongs to; -1 for synthetic noise, always trained on.
        var fold: Int
        /// The unaugmented recording, evaluated when its fold is held out.
        var isHeldOut: Bool
    }

    /// The augmented versions of `take` as (mixed waveform, the take alone at the same place).
    package static func variants(of take: [Float], background: [Float], random: inout SeededRandom)
        -> [(mixed: [Float], clean: [Float])]
    {
        var result: [(mixed: [Float], clean: [Float])] = []
        for gain in [-12.0, -6.0, 6.0] {
            let variant = scaled(take, decibels: gain)
            result.append((variant, variant))
        }
        let rate = Double(YAMNet.sampleRate)
        let activeRMS = rms(loudestPart(of: take))
        // Shifted inside background (or low noise when there is none).
        let before = Int(random.uniform(0.1...0.4) * rate), after = Int(random.uniform(0.1...0.4) * rate)
        let quietFill = noise(seconds: 0.5, levelDBFS: -60, pink: true, random: &random)
        func backgroundSegment(_ count: Int) -> [Float] {
            let source = background.isEmpty ? quietFill : background
            let start = source.count > count ? Int(random.unit() * Double(source.count - count)) : 0
            var segment = [Float](repeating: 0, count: count)
            for index in 0..<count where !source.isEmpty { segment[index] = source[(start + index) % source.count] }
            return segment
        }
        let shiftedClean = [Float](repeating: 0, count: before) + take + [Float](repeating: 0, count: after)
        let fill = backgroundSegment(shiftedClean.count)
        result.append((zip(shiftedClean, fill).map { $0 + $1 }, shiftedClean))
        // Mixed with background at 10, 5 and 0 dB SNR.
        for snr in [10.0, 5.0, 0.0] {
            let shift = Int(random.uniform(0...0.24) * rate)
            let clean = [Float](repeating: 0, count: shift) + take
            var noiseSegment = backgroundSegment(clean.count)
            let noiseRMS = rms(noiseSegment)
            if noiseRMS > 0, activeRMS > 0 {
                let gain = Float(activeRMS / noiseRMS / pow(10, snr / 20))
                for index in noiseSegment.indices { noiseSegment[index] *= gain }
            }
            let mixed = zip(clean, noiseSegment).map { $0 + $1 }
            let peak = mixed.map(abs).max() ?? 0
            let limit: Float = peak > 0.99 ? 0.99 / peak : 1
            result.append((mixed.map { $0 * limit }, clean.map { $0 * limit }))
        }
        return result
    }

    /// `samples` scaled by `decibels`, then limited to a 0.99 peak.
    package static func scaled(_ samples: [Float], decibels: Double) -> [Float] {
        var gain = Float(pow(10, decibels / 20))
        let peak = samples.map(abs).max() ?? 0
        if peak * gain > 0.99 { gain = 0.99 / max(peak, 1e-9) }
        return samples.map { $0 * gain }
    }

    /// White or pink noise (Paul Kellet's economy filter) at an RMS level of `levelDBFS`.
    package static func noise(seconds: Double, levelDBFS: Double, pink: Bool, random: inout SeededRandom) -> [Float] {
        let count = Int(seconds * Double(YAMNet.sampleRate))
        var samples = [Float](repeating: 0, count: count)
        var b0 = 0.0, b1 = 0.0, b2 = 0.0
        for index in 0..<count {
            let white = random.uniform(-1...1)
            if pink {
                b0 = 0.99765 * b0 + white * 0.0990460
                b1 = 0.96300 * b1 + white * 0.2965164
                b2 = 0.57000 * b2 + white * 1.0526913
                samples[index] = Float(b0 + b1 + b2 + white * 0.1848)
            } else {
                samples[index] = Float(white)
            }
        }
        let current = rms(samples)
        let gain = current > 0 ? Float(pow(10, levelDBFS / 20) / current) : 0
        return samples.map { $0 * gain }
    }

    package static func rms(_ samples: [Float]) -> Double {
        guard !samples.isEmpty else { return 0 }
        return (samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(samples.count)).squareRoot()
    }

    /// The samples of the 100 ms frames within 12 dB of the loudest one.
    package static func loudestPart(of samples: [Float]) -> [Float] {
        let frame = 1_600
        guard samples.count > frame else { return samples }
        let frames = stride(from: 0, to: samples.count - frame + 1, by: frame).map { Array(samples[$0..<($0 + frame)]) }
        let levels = frames.map { rms($0) }
        let loudest = levels.max() ?? 0
        return zip(frames, levels).filter { $0.1 >= loudest / 4 }.flatMap(\.0)
    }
}
