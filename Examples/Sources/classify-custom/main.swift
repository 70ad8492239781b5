// classify-custom: a custom sound classifier trained from labelled folders, then a recording's sounds through an RMS
// gate and each label's share of the recording (the Create ML story: folders of samples per genre, a model trained on
// them, quiet audio below -40 dB left out, "the percentage of the genre in the original sound recording").
//
//   classify-custom DATA_DIR RECORDING... [--gate-dbfs D]
//
// DATA_DIR holds one folder per label (the folder's name is the label), each with audio files of that sound. As
// Create ML's sound classifier does, the classifier is a small head on the built-in network's embeddings: every
// result carries its window's YAMNet embedding (`ClassificationResult.embedding`, 1024 values), and a softmax
// regression on those is trained here in a few seconds. (`earshot train DATA_DIR --output M.earshot` trains such a
// head from the command line; `ClassifySoundRequest(model:)` loads it, Apple's `SNClassifySoundRequest(mlModel:)`.)
import Earshot
import Foundation

struct ExampleError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Softmax regression on standardized embeddings: `probabilities = softmax(W (e - mean) * scale + b)`.
struct SoftmaxHead {
    let labels: [String]
    private var mean: [Float], scale: [Float], weights: [Float], bias: [Float]

    /// Full-batch gradient descent from zero weights (deterministic), with a little L2.
    init(labels: [String], embeddings: [[Float]], targets: [Int], epochs: Int = 200, learningRate: Float = 0.5,
         l2: Float = 1e-3) {
        let dimensions = embeddings[0].count, classes = labels.count, count = Float(embeddings.count)
        self.labels = labels
        mean = (0..<dimensions).map { d in embeddings.reduce(0) { $0 + $1[d] } / count }
        scale = (0..<dimensions).map { [mean] d in
            let variance = embeddings.reduce(0) { $0 + ($1[d] - mean[d]) * ($1[d] - mean[d]) } / count
            return 1 / (variance.squareRoot() + 1e-3)
        }
        weights = [Float](repeating: 0, count: dimensions * classes)
        bias = [Float](repeating: 0, count: classes)
        let standardized = embeddings.map(standardize)
        for _ in 0..<epochs {
            var gradient = [Float](repeating: 0, count: weights.count), biasGradient = [Float](repeating: 0, count: classes)
            for (features, target) in zip(standardized, targets) {
                let probabilities = output(features)
                for c in 0..<classes {
                    let error = probabilities[c] - (c == target ? 1 : 0)
                    biasGradient[c] += error
                    for d in 0..<dimensions { gradient[d * classes + c] += error * features[d] }
                }
            }
            for index in weights.indices {
                weights[index] -= learningRate * (gradient[index] / count + l2 * weights[index])
            }
            for c in 0..<classes { bias[c] -= learningRate * biasGradient[c] / count }
        }
    }

    private func standardize(_ embedding: [Float]) -> [Float] {
        zip(zip(embedding, mean), scale).map { ($0.0 - $0.1) * $1 }
    }

    private func output(_ features: [Float]) -> [Float] {
        let classes = labels.count
        var logits = bias
        for (d, value) in features.enumerated() where value != 0 {
            for c in 0..<classes { logits[c] += weights[d * classes + c] * value }
        }
        let largest = logits.max() ?? 0
        let exponentials = logits.map { exp($0 - largest) }
        let sum = exponentials.reduce(0, +)
        return exponentials.map { $0 / sum }
    }

    /// The head's probabilities for one window's embedding, one per label.
    func probabilities(_ embedding: [Float]) -> [Float] { output(standardize(embedding)) }
}

/// Receives the built-in classifier's results (the story's `ResultsObserver`): windows quieter than the gate are
/// counted as quiet; the others are classified by the head, printed, and tallied per top label.
final class CustomResultsObserver: ResultsObserving {
    let head: SoftmaxHead
    let gateDBFS: Float
    var tally = TopClassTally()
    var quiet = 0, windows = 0
    var duration = 0.0

    init(head: SoftmaxHead, gateDBFS: Float) {
        self.head = head
        self.gateDBFS = gateDBFS
    }

    func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
        windows += 1
        duration = max(duration, result.timeRange.end)
        guard result.levelDBFS >= gateDBFS else {
            quiet += 1
            return
        }
        let probabilities = head.probabilities(result.embedding)
        let classifications = zip(head.labels, probabilities)
            .map { Classification(identifier: $0.0, confidence: Double($0.1)) }
            .sorted { $0.confidence > $1.confidence }
        let custom = ClassificationResult(
            timeRange: result.timeRange, classifications: classifications, scores: probabilities,
            levelDBFS: result.levelDBFS, isGated: false, embedding: result.embedding)
        tally.add(custom)
        let best = classifications[0]
        print(String(format: "%.2f s  ", result.timeRange.start) + best.identifier
              + String(format: " %.1f%%  (%.1f dBFS)", best.confidence * 100, result.levelDBFS))
    }

    func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) {
        FileHandle.standardError.write(Data("classify-custom: \(error)\n".utf8))
    }
}

/// The built-in classifier's windows of one file, with their embeddings.
func windows(of file: URL) throws -> [ClassificationResult] {
    final class Collector: ResultsObserving {
        var results: [ClassificationResult] = []
        var failure: EarshotError?
        func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) { results.append(result) }
        func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) { failure = error }
    }
    let analyzer = try AudioFileAnalyzer(url: file)
    let collector = Collector()
    try analyzer.add(try ClassifySoundRequest(classifierIdentifier: .version1), withObserver: collector)
    analyzer.analyze()
    if let failure = collector.failure { throw failure }
    return collector.results
}

do {
    var arguments = Array(CommandLine.arguments.dropFirst())
    var gate: Float = -40
    if let index = arguments.firstIndex(of: "--gate-dbfs") {
        guard index + 1 < arguments.count, let value = Float(arguments[index + 1]) else {
            throw ExampleError("--gate-dbfs needs a level in dBFS, e.g. -40")
        }
        gate = value
        arguments.removeSubrange(index...(index + 1))
    }
    guard arguments.count >= 2 else { throw ExampleError("usage: classify-custom DATA_DIR RECORDING... [--gate-dbfs D]") }
    let data = URL(fileURLWithPath: arguments[0])
    let fileManager = FileManager.default

    // Training: every window at or above the gate of every file in each label's folder.
    let labels = try fileManager.contentsOfDirectory(atPath: data.path).filter { name in
        var isDirectory: ObjCBool = false
        return !name.hasPrefix(".") && fileManager.fileExists(atPath: data.appendingPathComponent(name).path, isDirectory: &isDirectory)
            && isDirectory.boolValue
    }.sorted()
    guard labels.count >= 2 else { throw ExampleError("\(data.path): needs at least two label folders, found \(labels.count)") }
    var embeddings: [[Float]] = [], targets: [Int] = []
    for (index, label) in labels.enumerated() {
        let folder = data.appendingPathComponent(label)
        let files = try fileManager.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
        var used = 0
        for file in files {
            for window in try windows(of: folder.appendingPathComponent(file)) where window.levelDBFS >= gate {
                embeddings.append(window.embedding)
                targets.append(index)
                used += 1
            }
        }
        print("training: \(label): \(files.count) files, \(used) windows")
        guard used > 0 else { throw ExampleError("\(folder.path): no window at or above \(gate) dBFS to learn from") }
    }
    let head = SoftmaxHead(labels: labels, embeddings: embeddings, targets: targets)
    let correct = zip(embeddings, targets).filter { embedding, target in
        let probabilities = head.probabilities(embedding)
        return probabilities.firstIndex(of: probabilities.max()!) == target
    }.count
    print(String(format: "trained on %d windows, training accuracy %.1f%%", embeddings.count,
                 Double(correct) / Double(embeddings.count) * 100))

    // Each recording: the observer gates, classifies and tallies; then each label's share of the recording.
    for path in arguments.dropFirst() {
        let analyzer = try AudioFileAnalyzer(url: URL(fileURLWithPath: path))
        let observer = CustomResultsObserver(head: head, gateDBFS: gate)
        try analyzer.add(try ClassifySoundRequest(classifierIdentifier: .version1), withObserver: observer)
        guard analyzer.analyze() else { throw ExampleError("\(path): the analysis did not complete") }
        print("summary of \(path): " + String(format: "%.2f s, %d windows, %d quiet (below %.0f dBFS)",
                                                observer.duration, observer.windows, observer.quiet, gate))
        for share in observer.tally.shares {
            print("  \(share.label) " + String(format: "%.1f%% (%d of %d windows)", share.share * 100, share.windows,
                                              observer.tally.windowCount))
        }
    }
} catch {
    FileHandle.standardError.write(Data("classify-custom: \(error)\n".utf8))
    exit(1)
}
