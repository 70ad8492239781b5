import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("HeadTraining")
struct HeadTrainingTests {
    /// Two Gaussian classes in `columns` dimensions with unit variance whose means are `distance` apart along the
    /// first axis; one window per file.
    static func gaussianFiles(perClass: Int, columns: Int, distance: Double, seed: UInt64) -> [(embeddings: [Float], label: Int)] {
        var random = SeededRandom(seed: seed)
        var files: [(embeddings: [Float], label: Int)] = []
        for index in 0..<(2 * perClass) {
            let label = index % 2
            var row = (0..<columns).map { _ in Float(random.gaussian()) }
            row[0] += Float(label == 1 ? distance / 2 : -distance / 2)
            files.append((row, label))
        }
        return files
    }

    static func configuration(_ kind: HeadClassifierKind = .logistic, validation: Double = 0.5) -> TrainingConfiguration {
        var configuration = TrainingConfiguration()
        configuration.options.classifier = kind
        configuration.options.hiddenUnits = 16
        configuration.validationFraction = validation
        return configuration
    }

    static let backbone16 = BackboneIdentity(name: "yamnet", weightsSHA256: String(repeating: "cd", count: 32), embeddingSize: 16)

    @Test("separable synthetic classes: 100% on held-out files; overlapping ones: the Bayes accuracy Phi(1) = 84.1%")
    func syntheticTwoClass() throws {
        let separable = try HeadTraining.train(
            perFile: Self.gaussianFiles(perClass: 200, columns: 16, distance: 8, seed: 1), labels: ["background", "tone"],
            backbone: Self.backbone16, configuration: Self.configuration(), method: "train")
        let clean = try #require(separable.head.metadata.metrics.validation)
        #expect(clean.windowAccuracy == 1)
        #expect(clean.windowCount == 200)
        #expect(clean.windows.counts == [[100, 0], [0, 100]])
        #expect(clean.perLabel.map(\.f1) == [1, 1])
        // Every threshold from 0.05 to 0.95 separates the classes: the middle one is suggested.
        #expect(separable.head.metadata.suggestedThresholds == ["tone": 0.5])

        // Means 2 apart, unit variance: the best possible accuracy is Phi(1) = 0.8413.
        let overlapping = try HeadTraining.train(
            perFile: Self.gaussianFiles(perClass: 1_000, columns: 16, distance: 2, seed: 2), labels: ["background", "tone"],
            backbone: Self.backbone16, configuration: Self.configuration(), method: "train")
        let noisy = try #require(overlapping.head.metadata.metrics.validation)
        #expect(noisy.windowCount == 1_000)
        #expect(abs(noisy.windowAccuracy - 0.8413) < 0.03, "accuracy \(noisy.windowAccuracy)")
    }

    @Test("an MLP learns XOR, which logistic regression cannot")
    func mlpLearnsXor() throws {
        var random = SeededRandom(seed: 5)
        var files: [(embeddings: [Float], label: Int)] = []
        for _ in 0..<600 {
            var row = (0..<16).map { _ in Float(random.gaussian() * 0.3) }
            let a = random.unit() < 0.5, b = random.unit() < 0.5
            row[0] += a ? 1 : -1
            row[1] += b ? 1 : -1
            files.append((row, a != b ? 1 : 0))
        }
        let mlp = try HeadTraining.train(perFile: files, labels: ["even", "odd"], backbone: Self.backbone16,
                                         configuration: Self.configuration(.mlp), method: "train")
        let logistic = try HeadTraining.train(perFile: files, labels: ["even", "odd"], backbone: Self.backbone16,
                                              configuration: Self.configuration(.logistic), method: "train")
        let mlpAccuracy = try #require(mlp.head.metadata.metrics.validation).windowAccuracy
        let logisticAccuracy = try #require(logistic.head.metadata.metrics.validation).windowAccuracy
        #expect(mlpAccuracy > 0.95, "mlp \(mlpAccuracy)")
        #expect(logisticAccuracy < 0.7, "logistic \(logisticAccuracy)")
        #expect(mlp.head.metadata.hiddenUnits == 16)
        #expect(mlp.head.parameters.hiddenWeights.count == 16 * 16)
    }

    @Test("the same seed gives the same weights; K-fold holds every file out once")
    func determinismAndFolds() throws {
        let files = Self.gaussianFiles(perClass: 60, columns: 16, distance: 3, seed: 9)
        var configuration = Self.configuration(validation: 0.2)
        configuration.folds = 5
        let first = try HeadTraining.train(perFile: files, labels: ["a", "b"], backbone: Self.backbone16,
                                           configuration: configuration, method: "train")
        let second = try HeadTraining.train(perFile: files, labels: ["a", "b"], backbone: Self.backbone16,
                                            configuration: configuration, method: "train")
        #expect(first.head.parameters == second.head.parameters)
        let cross = try #require(first.head.metadata.metrics.crossValidation)
        #expect(cross.folds == 5)
        #expect(cross.windowCount == 120)
        #expect(cross.fileCount == 120)
        #expect(cross.windows.support(0) == 60)
        #expect(first.head.metadata.metrics.validation?.windowCount == 24)
        #expect(first.filesPerLabel == [60, 60])
    }

    @Test("more folds than recordings is a usage error; a fold may hold no file of a label")
    func tooManyFolds() throws {
        var configuration = Self.configuration(validation: 0.2)
        configuration.folds = 7
        let files = Self.gaussianFiles(perClass: 3, columns: 16, distance: 8, seed: 4)
        let error = AudioTestFiles.error { () throws(EarshotError) in
            _ = try HeadTraining.train(perFile: files, labels: ["a", "b"], backbone: Self.backbone16, configuration: configuration, method: "train")
        }
        #expect(error?.message == "--folds 7 needs at least 7 recordings, there are 6 (use fewer folds)")
        configuration.folds = 6
        let report = try HeadTraining.train(perFile: files, labels: ["a", "b"], backbone: Self.backbone16,
                                            configuration: configuration, method: "train")
        #expect(report.head.metadata.metrics.crossValidation?.windowCount == 6)
    }

    @Test("file splits are stratified, disjoint and reproducible")
    func splits() {
        let labels = Array(repeating: 0, count: 10) + Array(repeating: 1, count: 5) + [2]
        let split = FileSplit.stratified(fileLabels: labels, fraction: 0.2, seed: 3)
        #expect(split.validation.map { labels[$0] }.sorted() == [0, 0, 1])
        #expect(Set(split.training).isDisjoint(with: split.validation))
        #expect(split.training.count + split.validation.count == 16)
        #expect(split.training.contains(15))  // a label's only file stays in training
        #expect(FileSplit.stratified(fileLabels: labels, fraction: 0.2, seed: 3) == split)
        #expect(FileSplit.stratified(fileLabels: labels, fraction: 0.2, seed: 4) != split)
        let folds = FileSplit.folds(fileLabels: labels, folds: 4, seed: 3)
        #expect(folds.flatMap { $0 }.sorted() == Array(0..<16))
        #expect(folds.map(\.count) == [4, 4, 4, 4])
        #expect(folds.map { $0.filter { labels[$0] == 0 }.count }.sorted() == [2, 2, 3, 3])
    }

    @Test("the best threshold is the middle of the F1 plateau")
    func thresholds() {
        let scores: [Float] = [0.1, 0.2, 0.35, 0.8, 0.9, 0.95]
        let positives = [false, false, false, true, true, true]
        // F1 = 1 for thresholds 0.40 ... 0.80: the middle is 0.60.
        #expect(HeadTraining.bestThreshold(scores: scores, positives: positives) == 0.6)
        #expect(HeadTraining.bestThreshold(scores: scores, positives: positives.map { _ in false }) == 0.5)
    }

    @Test("a training folder is checked with exact messages")
    func folderErrors() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let d = directory.path
        func scan() -> String? {
            AudioTestFiles.error { () throws(EarshotError) in _ = try LabelledFolders.scan(directory) }?.message
        }
        #expect(AudioTestFiles.error { () throws(EarshotError) in _ = try LabelledFolders.scan(directory.appendingPathComponent("none")) }?.message
            == "cannot read training folder \(d)/none: No such file or directory")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("tone"), withIntermediateDirectories: false)
        #expect(scan() == "training folder \(d) has 1 label folder; it needs at least 2 (one sub-folder of recordings per label, e.g. doorbell/ and background/)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("background/nested"), withIntermediateDirectories: true)
        try AudioTestFiles.write([1], to: directory.appendingPathComponent("background/nested/a.wav"))
        try AudioTestFiles.write([1], to: directory.appendingPathComponent("background/.hidden.wav"))
        #expect(scan() == "label folder \(d)/tone holds no files (add recordings of \"tone\" or remove the folder)")
        try AudioTestFiles.write([1], to: directory.appendingPathComponent("tone/b.wav"))
        let folders = try LabelledFolders.scan(directory)
        #expect(folders.labels == ["background", "tone"])
        #expect(folders.files.map(\.url.lastPathComponent) == ["a.wav", "b.wav"])
        #expect(folders.files.map(\.label) == [0, 1])
        // A link back to the label folder itself is followed once, not forever.
        try FileManager.default.createSymbolicLink(atPath: directory.appendingPathComponent("tone/loop").path, withDestinationPath: "\(d)/tone")
        #expect(try LabelledFolders.scan(directory).files.count == 2)
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("door:bell"), withIntermediateDirectories: false)
        #expect(scan() == "label folder \(d)/door:bell: \"door:bell\" cannot be a label: ':' and '|' separate model and class names in the daemon's configuration (rename the folder)")
    }

    /// Writes `count` files of `make(index)` samples (16 kHz) into `directory/label/`.
    static func writeFiles(_ directory: URL, label: String, count: Int, make: (Int) -> [Float]) throws {
        let folder = directory.appendingPathComponent(label)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for index in 0..<count {
            try AnalysisTestSupport.writeFloatWAV(make(index), sampleRate: 16_000, to: folder.appendingPathComponent("\(label)-\(index).wav"))
        }
    }

    /// White noise at an RMS level of `dbfs`.
    static func noise(count: Int, dbfs: Double, seed: UInt64) -> [Float] {
        var random = SeededRandom(seed: seed)
        let amplitude = 3.0.squareRoot() * pow(10, dbfs / 20)
        return (0..<count).map { _ in Float(random.uniform(-1...1) * amplitude) }
    }

    @Test("train from folders of generated audio, save, load, and analyze files and streams with the model")
    func endToEndOnAudio() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let data = directory.appendingPathComponent("data")
        // tone: 1.2 s whistles of 1-3 kHz over faint noise; background: noise at -30 to -20 dBFS.
        try Self.writeFiles(data, label: "tone", count: 6) { index in
            let tone = AnalysisTestSupport.sine(frequency: 1_000 + 350 * Double(index), dbfs: -20, sampleRate: 16_000, count: 19_200)
            return zip(tone, Self.noise(count: 19_200, dbfs: -45, seed: UInt64(index))).map { $0 + $1 }
        }
        try Self.writeFiles(data, label: "background", count: 6) { index in
            Self.noise(count: 19_200, dbfs: -30 + 2 * Double(index), seed: UInt64(100 + index))
        }
        var configuration = TrainingConfiguration()
        configuration.validationFraction = 0.34
        configuration.folds = 3
        configuration.threads = 2
        let report = try HeadTraining.train(folder: data, configuration: configuration)
        #expect(report.filesPerLabel == [6, 6])
        #expect(report.windowsPerLabel == [12, 12])  // 1.2 s: windows at 0 and 0.48 s (0.96 s would be mostly padding)
        let validation = try #require(report.head.metadata.metrics.validation)
        #expect(validation.windowAccuracy == 1)
        #expect(validation.fileCount == 4)
        // Cross-validation trains on 6 files per fold: at most one of the 24 windows may go wrong.
        #expect((report.head.metadata.metrics.crossValidation?.windowAccuracy ?? 0) >= 23.0 / 24)
        #expect(report.head.metadata.backbone == (try BackboneIdentity.builtIn()))
        #expect(report.head.metadata.labels == ["background", "tone"])
        #expect(report.head.metadata.backgroundLabel == "background")
        #expect(report.formatted().contains("  accuracy: 100.0% of 8 windows, 100.0% of 4 files"))

        let model = directory.appendingPathComponent("tone.earshot")
        try report.head.write(to: model)
        // A new recording: silence, a 2 kHz whistle from 1.0 to 2.5 s, silence; 3.5 s.
        var samples = Self.noise(count: 56_000, dbfs: -45, seed: 555)
        let whistle = AnalysisTestSupport.sine(frequency: 2_100, dbfs: -20, sampleRate: 16_000, count: 24_000)
        for index in whistle.indices { samples[16_000 + index] += whistle[index] }
        let recording = directory.appendingPathComponent("recording.wav")
        try AnalysisTestSupport.writeFloatWAV(samples, sampleRate: 16_000, to: recording)

        let request = try ClassifySoundRequest(model: model)
        #expect(request.windowDuration == 0.96)
        #expect(try request.knownClassifications() == ["background", "tone"])
        let file = try AnalysisTestSupport.fileResults(recording, request: request)
        #expect(file.results.count == 7)
        let toneWindows = file.results.filter { $0.classifications.first?.identifier == "tone" }.map(\.timeRange.start)
        // Windows starting at 0.96 and 1.44 s lie inside the whistle; 0.48 and 1.92 s hold half of it.
        #expect(toneWindows.contains(0.96) && toneWindows.contains(1.44))
        #expect(!toneWindows.contains(0) && !toneWindows.contains(2.88))
        for result in file.results {
            #expect(abs(result.scores.reduce(0, +) - 1) < 1e-5)
            #expect(result.embedding.count == 1024)
        }

        // The stream analyzer gives the file analyzer's numbers.
        let stream = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 1))
        let observer = CollectingObserver()
        try stream.add(try ClassifySoundRequest(model: model), withObserver: observer)
        stream.analyze(samples, atAudioFramePosition: 0)
        stream.completeAnalysis()
        #expect(observer.results.count == file.results.count)
        for (a, b) in zip(observer.results, file.results) {
            #expect(a.timeRange == b.timeRange)
            #expect(AnalysisTestSupport.maxDifference(a.scores, b.scores[...]) < 1e-4)
        }
    }
}
