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

/// Settings of `earshot train` beyond the trainer's hyper-parameters.
package struct TrainingConfiguration: Sendable, Equatable {
    /// The trainer's hyper-parameters (classifier kind, L2, seed, ...).
    package var options = HeadTrainingOptions()
    /// Fraction of each label's files held out for early stopping and the validation report, 0...0.9 (default
    /// 0.2). 0 trains on every file for as long as the training loss falls, with no validation report.
    package var validationFraction = 0.2
    /// K for K-fold cross-validation (2...50), or nil (default) for none.
    package var folds: Int? = nil
    /// Window length in seconds (default 0.96, one YAMNet patch).
    package var windowDuration = 0.96
    /// Window overlap in [0, 1) (default 0.5: a 0.48 s hop, the reference model's).
    package var overlapFactor = 0.5
    /// Cores used to compute embeddings (default: all active processors).
    package var threads = ProcessInfo.processInfo.activeProcessorCount
    /// Windows whose RMS level is below this many dBFS are left out of training and evaluation; nil (default) keeps
    /// every window. -50 matches the daemon's default level gate (`[analysis] gate_dbfs`), below which it never
    /// classifies a window: the pauses of a long recording then do not teach the head that quiet means the file's
    /// label. (On the sets of `scripts/eval-heads` it changed the accuracies by less than a point either way.)
    package var minimumLevelDBFS: Double? = nil

    package init() {}
}

/// What `earshot train` reports while it works.
package enum TrainingProgress: Sendable {
    /// Embeddings computed for `done` of `total` files (called from worker threads).
    case features(done: Int, total: Int)
    /// A file that could not be decoded was left out.
    case skipped(EarshotError)
    /// Cross-validation fold `index` (1-based) of `count` starts.
    case fold(index: Int, count: Int)
    /// The final model's training starts.
    case finalModel
    /// One epoch ended.
    case epoch(EpochReport)
    /// Training stopped after `epochs` epochs, keeping the weights of epoch `best`.
    case stopped(epochs: Int, best: Int)
}

/// The outcome of a training run.
package struct TrainingReport: Sendable {
    /// The trained head (metadata filled in: labels, backbone, metrics, thresholds).
    package let head: ClassifierHead
    /// Files used per label, in label order.
    package let filesPerLabel: [Int]
    /// Training windows per label (all files), in label order.
    package let windowsPerLabel: [Int]
    /// Files left out because they could not be decoded.
    package let skipped: [EarshotError]

    /// The fewest windows a label should have: 20 (about 10 s of the sound at the 0.48 s hop). Below that the 20 %
    /// of files held out for validation holds 4 windows or fewer, one window moves a recall by a quarter or more,
    /// and neither the figures nor the suggested threshold mean much (trial 4: 4 windows of `dog` gave precision
    /// 0.015).
    package static let minimumWindows = 20
    /// The lowest precision and recall (cross-validation, else validation) at which a label is ready for the
    /// daemon: 0.5, at least every other detection right and every other window of the sound found.
    package static let minimumScore = 0.5

    /// Why the model is not ready for earshotd, one line each (empty when it is): a target label (not the
    /// background) with fewer than ``minimumWindows`` windows, or whose cross-validation (else validation)
    /// precision or recall is below ``minimumScore``; or no background label (trial 5 #4): the head's scores sum
    /// to 1 over the labels, so without a "none of these" label every window, whatever its sound, scores high for
    /// one of them.
    package var readinessProblems: [String] {
        let metadata = head.metadata
        var problems: [String] = []
        if metadata.backgroundLabel == nil {
            problems.append("no \(LabelledFolders.backgroundLabel) folder: every sound would be scored as one of \(metadata.labels.joined(separator: ", ")), so it would fire on any sound (add a folder named \(LabelledFolders.backgroundLabel) with the room's usual sounds)")
        }
        let summary = metadata.metrics.crossValidation ?? metadata.metrics.validation
        let check = metadata.metrics.crossValidation.map { "\($0.folds ?? 0)-fold cross-validation" } ?? "validation"
        for (index, label) in metadata.labels.enumerated() where label != metadata.backgroundLabel {
            let windows = index < windowsPerLabel.count ? windowsPerLabel[index] : 0
            if windows < Self.minimumWindows {
                // 20 windows at the model's hop: about 10 s of the sound at 0.96 s windows, 20 s at 2 s (trial 8 #9).
                let hop = metadata.windowDuration * (1 - metadata.overlapFactor)
                let seconds = SettingRules.format((Double(Self.minimumWindows) * hop).rounded())
                problems.append("\(label) has \(windows) window\(windows == 1 ? "" : "s"), fewer than \(Self.minimumWindows) (about \(seconds) s of the sound): add recordings of it")
            }
            if let metric = summary?.perLabel.first(where: { $0.label == label }),
               metric.precision < Self.minimumScore || metric.recall < Self.minimumScore
            {
                problems.append("\(label): \(check) precision " + String(cFormat: "%.3f", metric.precision) + ", recall "
                                + String(cFormat: "%.3f", metric.recall) + " (below " + String(cFormat: "%.1f", Self.minimumScore)
                                + "): it would miss the sound or fire on others")
            }
        }
        if summary == nil { problems.append("no validation: too few files to hold any out, so nothing says the model works") }
        return problems
    }

    /// The lines a person reads: the validation report and the cross-validation figures.
    package func formatted() -> [String] {
        let metadata = head.metadata
        var lines: [String] = []
        let counts = metadata.labels.indices.map { "\(metadata.labels[$0]) \(filesPerLabel[$0]) files/\(windowsPerLabel[$0]) windows" }
        lines.append("data: " + counts.joined(separator: ", "))
        let training = metadata.training
        lines.append("classifier: \(metadata.classifier.rawValue)\(metadata.hiddenUnits.map { " (\($0) hidden units)" } ?? ""), L2 \(training.l2), seed \(training.seed); stopped after \(training.epochs) epochs, kept epoch \(training.bestEpoch)")
        if let validation = metadata.metrics.validation {
            lines.append("validation (\(Int((training.validationFraction * 100).rounded()))% of each label's files, split by file):")
            lines += validation.formatted()
        } else {
            lines.append("validation: none (no held-out files)")
        }
        if let cross = metadata.metrics.crossValidation {
            lines.append("\(cross.folds ?? 0)-fold cross-validation (every file held out once, split by file):")
            lines += cross.formatted()
        }
        let thresholds = metadata.suggestedThresholds.sorted { $0.key < $1.key }
            .map { "\($0.key) \(String(cFormat: "%.2f", $0.value))" }.joined(separator: ", ")
        if !thresholds.isEmpty { lines.append("suggested thresholds: \(thresholds)") }
        return lines
    }
}

/// Trains classifier heads from labelled folders (`earshot train`).
package enum HeadTraining {
    /// Scans `folder` (see ``LabelledFolders``), computes YAMNet embeddings of every file's windows, optionally runs
    /// K-fold cross-validation, then trains the head on the training split with early stopping on the validation
    /// split and evaluates it there.
    ///
    /// - Parameter progress: called on the calling thread, and from worker threads for `.features`.
    /// - Throws: ``EarshotError``: as ``LabelledFolders/scan(_:)``; `.usage` for settings out of range; `.data` when a
    ///   label has no decodable file left; as `BuiltInClassifier.shared()` and `BackboneIdentity.builtIn()`.
    package static func train(
        folder: URL, configuration: TrainingConfiguration, progress: @escaping @Sendable (TrainingProgress) -> Void = { _ in }
    ) throws(EarshotError) -> TrainingReport {
        try validate(configuration)
        let folders = try LabelledFolders.scan(folder)
        let extractor = try EmbeddingExtractor(
            windowDuration: configuration.windowDuration, overlapFactor: configuration.overlapFactor)
        let backbone = try BackboneIdentity.builtIn()
        let results = extractor.embeddings(
            ofFiles: folders.files.map(\.url), threads: configuration.threads,
            minimumLevelDBFS: configuration.minimumLevelDBFS.map { Float($0) }
        ) { done, total in
            progress(.features(done: done, total: total))
        }
        var perFile: [(embeddings: [Float], label: Int)] = []
        var skipped: [EarshotError] = []
        for (file, result) in zip(folders.files, results) {
            switch result {
            case .success(let embeddings) where embeddings.isEmpty:
                let quiet = EarshotError(
                    .data, "\(file.url.relativePath): every window is below \(SettingRules.format(configuration.minimumLevelDBFS ?? 0)) dBFS (left out, as the daemon's level gate would)")
                skipped.append(quiet)
                progress(.skipped(quiet))
            case .success(let embeddings): perFile.append((embeddings, file.label))
            case .failure(let error):
                skipped.append(error)
                progress(.skipped(error))
            }
        }
        for (index, label) in folders.labels.enumerated() where !perFile.contains(where: { $0.label == index }) {
            throw EarshotError(.data, "label \"\(label)\" has no recording that could be decoded and is loud enough (see the lines above); add audio files to \(folder.appendingPathComponent(label).relativePath)")
        }
        return try train(
            perFile: perFile, labels: folders.labels, backbone: backbone, configuration: configuration,
            method: "train", skipped: skipped, progress: progress)
    }

    /// Trains and evaluates from per-file embeddings (`[windows, columns]` each, with a label index).
    package static func train(
        perFile: [(embeddings: [Float], label: Int)], labels: [String], backbone: BackboneIdentity,
        configuration: TrainingConfiguration, method: String, skipped: [EarshotError] = [],
        fixedEpochs: Int? = nil, suggestedThresholds: [String: Double]? = nil,
        progress: @Sendable (TrainingProgress) -> Void = { _ in }
    ) throws(EarshotError) -> TrainingReport {
        try validate(configuration)
        let columns = backbone.embeddingSize
        var all = FeatureMatrix(columns: columns)
        for (index, file) in perFile.enumerated() { all.append(file.embeddings, label: file.label, file: index) }
        let fileLabels = perFile.map(\.label)
        let options = configuration.options
        if let folds = configuration.folds, folds > perFile.count {
            throw EarshotError(.usage, "--folds \(folds) needs at least \(folds) recordings, there are \(perFile.count) (use fewer folds)")
        }
        try OpenBLAS.require(for: "training a head")
        let trainer = HeadTrainer(options: options, classCount: labels.count)

        var crossValidation: EvaluationSummary?
        if let k = configuration.folds {
            let folds = FileSplit.folds(fileLabels: fileLabels, folds: k, seed: options.seed)
            var windows = ConfusionMatrix(labels: labels), files = ConfusionMatrix(labels: labels)
            for (index, held) in folds.enumerated() {
                progress(.fold(index: index + 1, count: k))
                let rest = folds.enumerated().filter { $0.offset != index }.flatMap(\.element)
                let inner = FileSplit.stratified(
                    fileLabels: rest.map { fileLabels[$0] }, fraction: configuration.validationFraction,
                    seed: options.seed &+ UInt64(index + 1))
                let trainingFiles = Set(inner.training.map { rest[$0] })
                let validationFiles = Set(inner.validation.map { rest[$0] })
                let outcome = trainer.train(
                    all.subset(files: trainingFiles), validation: all.subset(files: validationFiles), fixedEpochs: fixedEpochs,
                    progress: { progress(.epoch($0)) })
                progress(.stopped(epochs: outcome.epochs, best: outcome.bestEpoch))
                let evaluation = evaluate(outcome.parameters, all.subset(files: Set(held)), labels: labels)
                windows.merge(evaluation.summary.windows)
                files.merge(evaluation.summary.files)
            }
            crossValidation = EvaluationSummary(windows: windows, files: files, folds: k)
        }

        progress(.finalModel)
        let split = FileSplit.stratified(fileLabels: fileLabels, fraction: configuration.validationFraction, seed: options.seed)
        let validationData = all.subset(files: Set(split.validation))
        let outcome = trainer.train(
            all.subset(files: Set(split.training)), validation: validationData, fixedEpochs: fixedEpochs,
            progress: { progress(.epoch($0)) })
        progress(.stopped(epochs: outcome.epochs, best: outcome.bestEpoch))
        var validation: EvaluationSummary?
        var thresholds: [String: Double] = [:]
        let background = labels.contains(LabelledFolders.backgroundLabel) ? LabelledFolders.backgroundLabel : nil
        if validationData.rows > 0 {
            let evaluation = evaluate(outcome.parameters, validationData, labels: labels)
            validation = evaluation.summary
            for (index, label) in labels.enumerated() where label != background {
                thresholds[label] = bestThreshold(
                    scores: (0..<validationData.rows).map { evaluation.probabilities[$0 * labels.count + index] },
                    positives: validationData.labels.map { $0 == index })
            }
        } else {
            for label in labels where label != background { thresholds[label] = 0.5 }
        }
        if let suggestedThresholds { thresholds = suggestedThresholds }

        var filesPerLabel = [Int](repeating: 0, count: labels.count)
        var windowsPerLabel = [Int](repeating: 0, count: labels.count)
        for file in perFile {
            filesPerLabel[file.label] += 1
            windowsPerLabel[file.label] += file.embeddings.count / columns
        }
        let record = TrainingRecord(
            method: method,
            filesPerLabel: Dictionary(uniqueKeysWithValues: zip(labels, filesPerLabel)),
            windowsPerLabel: Dictionary(uniqueKeysWithValues: zip(labels, windowsPerLabel)),
            seed: options.seed, validationFraction: configuration.validationFraction, l2: options.l2,
            learningRate: options.learningRate, epochs: outcome.epochs, bestEpoch: outcome.bestEpoch)
        let metadata = HeadMetadata(
            labels: labels, backgroundLabel: background, classifier: options.classifier,
            hiddenUnits: options.classifier == .mlp ? options.hiddenUnits : nil, backbone: backbone,
            windowDuration: configuration.windowDuration, overlapFactor: configuration.overlapFactor, trainedAt: Date(),
            training: record, metrics: HeadMetrics(validation: validation, crossValidation: crossValidation),
            suggestedThresholds: thresholds)
        return TrainingReport(
            head: ClassifierHead(metadata: metadata, parameters: outcome.parameters), filesPerLabel: filesPerLabel,
            windowsPerLabel: windowsPerLabel, skipped: skipped)
    }

    /// Window and file confusion matrices of `parameters` on `data`, and the window probabilities
    /// `[rows, labels.count]`. A file's prediction is the label with the highest mean probability over its windows.
    package static func evaluate(_ parameters: HeadParameters, _ data: FeatureMatrix, labels: [String])
        -> (summary: EvaluationSummary, probabilities: [Float])
    {
        let classes = labels.count
        guard data.rows > 0 else {
            return (EvaluationSummary(windows: ConfusionMatrix(labels: labels), files: ConfusionMatrix(labels: labels)), [])
        }
        let probabilities = data.values.withUnsafeBufferPointer {
            parameters.probabilities(embeddings: $0.baseAddress!, rows: data.rows)
        }
        var windows = ConfusionMatrix(labels: labels), files = ConfusionMatrix(labels: labels)
        var fileSums: [Int: [Double]] = [:]
        var fileTruth: [Int: Int] = [:]
        for row in 0..<data.rows {
            windows.add(truth: data.labels[row], predicted: HeadTrainer.argmax(probabilities, row: row, columns: classes))
            var sums = fileSums[data.files[row]] ?? [Double](repeating: 0, count: classes)
            for column in 0..<classes { sums[column] += Double(probabilities[row * classes + column]) }
            fileSums[data.files[row]] = sums
            fileTruth[data.files[row]] = data.labels[row]
        }
        for (file, sums) in fileSums.sorted(by: { $0.key < $1.key }) {
            var best = 0
            for column in 1..<classes where sums[column] > sums[best] { best = column }
            files.add(truth: fileTruth[file] ?? 0, predicted: best)
        }
        return (EvaluationSummary(windows: windows, files: files), probabilities)
    }

    /// The probability threshold that best separates `positives` from the rest by F1, among 0.05, 0.10, ..., 0.95:
    /// the middle of the thresholds that reach the best F1 (a plateau when the classes separate cleanly). 0.5 when
    /// there is no positive.
    package static func bestThreshold(scores: [Float], positives: [Bool]) -> Double {
        guard positives.contains(true) else { return 0.5 }
        let candidates = stride(from: 5, through: 95, by: 5).map { Double($0) / 100 }
        var f1s: [Double] = []
        for threshold in candidates {
            var truePositive = 0, falsePositive = 0, falseNegative = 0
            for (score, positive) in zip(scores, positives) {
                let predicted = Double(score) >= threshold
                if predicted && positive { truePositive += 1 }
                if predicted && !positive { falsePositive += 1 }
                if !predicted && positive { falseNegative += 1 }
            }
            let denominator = 2 * truePositive + falsePositive + falseNegative
            f1s.append(denominator == 0 ? 0 : 2 * Double(truePositive) / Double(denominator))
        }
        let best = f1s.max() ?? 0
        let reaching = candidates.indices.filter { f1s[$0] >= best - 1e-9 }.map { candidates[$0] }
        return reaching[reaching.count / 2]
    }

    /// - Throws: `EarshotError(.usage)` naming the setting and its range.
    package static func validate(_ configuration: TrainingConfiguration) throws(EarshotError) {
        let options = configuration.options
        guard configuration.validationFraction >= 0, configuration.validationFraction <= 0.9 else {
            throw EarshotError(.usage, "--validation \(configuration.validationFraction) is out of range (allowed: 0 to 0.9)")
        }
        if let folds = configuration.folds, !(2...50).contains(folds) {
            throw EarshotError(.usage, "--folds \(folds) is out of range (allowed: 2 to 50)")
        }
        guard (1...4096).contains(options.hiddenUnits) else {
            throw EarshotError(.usage, "--hidden \(options.hiddenUnits) is out of range (allowed: 1 to 4096)")
        }
        guard options.l2.isFinite, options.l2 >= 0, options.l2 <= 10 else {
            throw EarshotError(.usage, "--l2 \(options.l2) is out of range (allowed: 0 to 10)")
        }
        guard options.learningRate.isFinite, options.learningRate > 0, options.learningRate <= 1 else {
            throw EarshotError(.usage, "learning rate \(options.learningRate) is out of range (allowed: > 0 to 1)")
        }
        guard (1...100_000).contains(options.maximumEpochs) else {
            throw EarshotError(.usage, "--epochs \(options.maximumEpochs) is out of range (allowed: 1 to 100000)")
        }
        if let level = configuration.minimumLevelDBFS, !(level.isFinite && level >= -120 && level <= 0) {
            throw EarshotError(.usage, "--gate-dbfs \(level) is out of range (allowed: -120 to 0)")
        }
        guard options.batchSize >= 1, options.patience >= 1 else {
            throw EarshotError(.usage, "batch size and patience must be at least 1")
        }
    }
}
