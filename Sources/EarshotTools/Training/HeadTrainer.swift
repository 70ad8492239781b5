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

/// Hyper-parameters of head training. The defaults train well on YAMNet embeddings of a few hundred clips
/// (checked on the snoring and multi-class sets in `scripts/eval-heads`).
package struct HeadTrainingOptions: Sendable, Equatable {
    /// Logistic regression (default) or MLP.
    package var classifier: HeadClassifierKind = .logistic
    /// Hidden ReLU units of the MLP, 1...4096 (default 128).
    package var hiddenUnits = 128
    /// L2 penalty `l2 / 2 * sum(w^2)` on the weights (not the biases), >= 0 (default 0.01).
    package var l2: Double = 1e-2
    /// Adam's learning rate, > 0 (default 0.001).
    package var learningRate: Double = 1e-3
    /// Windows per mini-batch, >= 1 (default 64).
    package var batchSize = 64
    /// Most epochs, >= 1 (default 300).
    package var maximumEpochs = 300
    /// Early stopping: stop after this many epochs without a lower validation loss, >= 1 (default 20); the weights
    /// of the best epoch are kept.
    package var patience = 20
    /// Seed of the random number generator (shuffling, initial weights), any value (default 1).
    package var seed: UInt64 = 1

    package init() {}
}

/// One epoch's figures, for progress output.
package struct EpochReport: Sendable, Equatable {
    /// 1-based.
    package var epoch: Int
    /// Class-weighted mean cross-entropy on the training windows (plus nothing for L2), during the epoch.
    package var trainingLoss: Double
    /// Class-weighted mean cross-entropy on the validation windows after the epoch (nil without validation).
    package var validationLoss: Double?
    /// Fraction of validation windows predicted right, 0...1 (nil without validation).
    package var validationAccuracy: Double?
}

/// Windows as rows of features with their labels.
package struct FeatureMatrix {
    /// `[rows, columns]` row-major.
    package var values: [Float]
    /// Label index of each row.
    package var labels: [Int]
    /// Index of the file each row came from (for per-file figures).
    package var files: [Int]
    package let columns: Int
    package var rows: Int { labels.count }

    package init(columns: Int) {
        self.columns = columns
        values = []
        labels = []
        files = []
    }

    /// Appends `embeddings` (`[n, columns]`) with one label and file.
    package mutating func append(_ embeddings: [Float], label: Int, file: Int) {
        let count = embeddings.count / columns
        values += embeddings
        labels += repeatElement(label, count: count)
        files += repeatElement(file, count: count)
    }

    /// The rows whose file is in `fileSet`.
    package func subset(files fileSet: Set<Int>) -> FeatureMatrix {
        var result = FeatureMatrix(columns: columns)
        for row in 0..<rows where fileSet.contains(files[row]) {
            result.values += values[(row * columns)..<((row + 1) * columns)]
            result.labels.append(labels[row])
            result.files.append(files[row])
        }
        return result
    }
}

/// Trains a head on standardised embeddings with class-weighted softmax cross-entropy, L2 and Adam (mini-batches,
/// `cblas_sgemm` for every product), and stops early on the validation loss.
package struct HeadTrainer {
    package let options: HeadTrainingOptions
    package let classCount: Int

    /// What a training run produced.
    package struct Outcome {
        package var parameters: HeadParameters
        /// Epochs run.
        package var epochs: Int
        /// The epoch whose weights were kept, 1-based.
        package var bestEpoch: Int
    }

    /// Trains on `training`, stopping early on `validation` (when it has rows), or for exactly `fixedEpochs`
    /// epochs when given (or when there is no validation: then ``HeadTrainingOptions/maximumEpochs`` is cut short
    /// only when the training loss stops falling).
    package func train(
        _ training: FeatureMatrix, validation: FeatureMatrix?, fixedEpochs: Int? = nil,
        progress: (EpochReport) -> Void = { _ in }
    ) -> Outcome {
        var random = SeededRandom(seed: options.seed)
        let inputs = training.columns
        let hidden = options.classifier == .mlp ? max(1, options.hiddenUnits) : 0
        var parameters = HeadParameters(inputSize: inputs, hiddenUnits: hidden, classCount: classCount)
        Self.fitStandardization(&parameters, to: training)
        if hidden > 0 {
            let deviation = (2 / Double(inputs)).squareRoot()  // He initialisation for ReLU
            for index in parameters.hiddenWeights.indices { parameters.hiddenWeights[index] = Float(random.gaussian() * deviation) }
            let outputDeviation = (1 / Double(hidden)).squareRoot()
            for index in parameters.outputWeights.indices { parameters.outputWeights[index] = Float(random.gaussian() * outputDeviation) }
        }
        let classWeights = Self.classWeights(training.labels, classes: classCount)
        let x = Self.standardized(training, parameters)
        let validationX = validation.flatMap { $0.rows > 0 ? Self.standardized($0, parameters) : nil }

        var state = AdamState(parameters)
        var best = parameters
        var bestLoss = Double.infinity
        var bestEpoch = 0
        var sinceBest = 0
        var epoch = 0
        var order = Array(0..<training.rows)
        let epochLimit = fixedEpochs ?? options.maximumEpochs
        var previousTrainingLoss = Double.infinity
        while epoch < epochLimit {
            epoch += 1
            order.shuffle(using: &random)
            let trainingLoss = runEpoch(&parameters, &state, x: x, labels: training.labels, order: order, classWeights: classWeights)
            var report = EpochReport(epoch: epoch, trainingLoss: trainingLoss)
            if fixedEpochs == nil, let validation, let validationX {
                let (loss, accuracy) = Self.evaluate(parameters, x: validationX, labels: validation.labels, classWeights: classWeights)
                report.validationLoss = loss
                report.validationAccuracy = accuracy
                if loss < bestLoss - 1e-6 {
                    bestLoss = loss
                    best = parameters
                    bestEpoch = epoch
                    sinceBest = 0
                } else {
                    sinceBest += 1
                }
                progress(report)
                if sinceBest >= options.patience { break }
            } else {
                progress(report)
                best = parameters
                bestEpoch = epoch
                if fixedEpochs == nil {
                    // No validation: stop when the training loss has stopped falling.
                    sinceBest = trainingLoss < previousTrainingLoss - 1e-4 ? 0 : sinceBest + 1
                    previousTrainingLoss = min(previousTrainingLoss, trainingLoss)
                    if sinceBest >= options.patience { break }
                }
            }
        }
        return Outcome(parameters: best, epochs: epoch, bestEpoch: max(1, bestEpoch))
    }

    /// Class weights `rows / (classes present * rows of the class)`, so each class weighs the same in the loss.
    package static func classWeights(_ labels: [Int], classes: Int) -> [Float] {
        var counts = [Int](repeating: 0, count: classes)
        for label in labels { counts[label] += 1 }
        let present = max(1, counts.filter { $0 > 0 }.count)
        return counts.map { $0 == 0 ? 0 : Float(labels.count) / Float(present * $0) }
    }

    /// Sets the standardisation to the training rows' mean and `1 / sqrt(variance + epsilon)`, where epsilon is 1% of
    /// the mean variance: dimensions that barely vary in training are not blown up.
    package static func fitStandardization(_ parameters: inout HeadParameters, to data: FeatureMatrix) {
        let columns = data.columns, rows = max(1, data.rows)
        var mean = [Double](repeating: 0, count: columns)
        var square = [Double](repeating: 0, count: columns)
        for row in 0..<data.rows {
            for column in 0..<columns {
                let value = Double(data.values[row * columns + column])
                mean[column] += value
                square[column] += value * value
            }
        }
        var variance = [Double](repeating: 0, count: columns)
        for column in 0..<columns {
            mean[column] /= Double(rows)
            variance[column] = max(0, square[column] / Double(rows) - mean[column] * mean[column])
        }
        let epsilon = 0.01 * variance.reduce(0, +) / Double(max(1, columns)) + 1e-8
        parameters.inputMean = mean.map { Float($0) }
        parameters.inputScale = variance.map { Float(1 / ($0 + epsilon).squareRoot()) }
    }

    package static func standardized(_ data: FeatureMatrix, _ parameters: HeadParameters) -> [Float] {
        guard data.rows > 0 else { return [] }
        var result = [Float](repeating: 0, count: data.values.count)
        data.values.withUnsafeBufferPointer { input in
            result.withUnsafeMutableBufferPointer { output in
                parameters.standardize(input.baseAddress!, rows: data.rows, into: output.baseAddress!)
            }
        }
        return result
    }

    /// Class-weighted mean cross-entropy and accuracy of `parameters` on standardised rows.
    package static func evaluate(_ parameters: HeadParameters, x: [Float], labels: [Int], classWeights: [Float]) -> (loss: Double, accuracy: Double) {
        guard !labels.isEmpty else { return (0, 0) }
        let probabilities = x.withUnsafeBufferPointer { parameters.probabilities(standardized: $0.baseAddress!, rows: labels.count) }
        var loss = 0.0, weightSum = 0.0, correct = 0
        let classes = parameters.classCount
        for (row, label) in labels.enumerated() {
            let weight = Double(classWeights[label] > 0 ? classWeights[label] : 1)
            loss -= weight * log(max(Double(probabilities[row * classes + label]), 1e-12))
            weightSum += weight
            if argmax(probabilities, row: row, columns: classes) == label { correct += 1 }
        }
        return (loss / max(weightSum, 1e-12), labels.isEmpty ? 0 : Double(correct) / Double(labels.count))
    }

    /// Index of the largest value of row `row` (the first on a tie).
    package static func argmax(_ values: [Float], row: Int, columns: Int) -> Int {
        var best = 0
        for column in 1..<columns where values[row * columns + column] > values[row * columns + best] { best = column }
        return best
    }

    /// One pass over the rows in `order`, in mini-batches; returns the mean weighted loss.
    private func runEpoch(
        _ parameters: inout HeadParameters, _ state: inout AdamState, x: [Float], labels: [Int], order: [Int],
        classWeights: [Float]
    ) -> Double {
        let inputs = parameters.inputSize, hidden = parameters.hiddenUnits, classes = classCount
        let batchLimit = max(1, options.batchSize)
        var batchX = [Float](repeating: 0, count: batchLimit * inputs)
        var hiddenOut = [Float](repeating: 0, count: batchLimit * max(1, hidden))
        var logits = [Float](repeating: 0, count: batchLimit * classes)
        var hiddenGradient = [Float](repeating: 0, count: batchLimit * max(1, hidden))
        var gradients = HeadParameters(inputSize: inputs, hiddenUnits: hidden, classCount: classes)
        var totalLoss = 0.0, totalWeight = 0.0
        var start = 0
        while start < order.count {
            let batch = min(batchLimit, order.count - start)
            let rows = order[start..<(start + batch)]
            for (slot, row) in rows.enumerated() {
                for column in 0..<inputs { batchX[slot * inputs + column] = x[row * inputs + column] }
            }
            // Forward.
            batchX.withUnsafeBufferPointer { xb in
                logits.withUnsafeMutableBufferPointer { z in
                    if hidden > 0 {
                        hiddenOut.withUnsafeMutableBufferPointer { h in
                            HeadParameters.affine(xb.baseAddress!, rows: batch, inputs: inputs, weights: parameters.hiddenWeights,
                                                  bias: parameters.hiddenBias, into: h.baseAddress!)
                            for index in 0..<(batch * hidden) where h[index] < 0 { h[index] = 0 }
                            HeadParameters.affine(h.baseAddress!, rows: batch, inputs: hidden, weights: parameters.outputWeights,
                                                  bias: parameters.outputBias, into: z.baseAddress!)
                        }
                    } else {
                        HeadParameters.affine(xb.baseAddress!, rows: batch, inputs: inputs, weights: parameters.outputWeights,
                                              bias: parameters.outputBias, into: z.baseAddress!)
                    }
                    DenseMath.softmaxRows(z.baseAddress!, rows: batch, columns: classes)
                }
            }
            // Loss and dLoss/dLogits = weight * (p - onehot) / batch.
            for (slot, row) in rows.enumerated() {
                let label = labels[row]
                let weight = classWeights[label]
                totalLoss -= Double(weight) * log(max(Double(logits[slot * classes + label]), 1e-12))
                totalWeight += Double(weight)
                for column in 0..<classes {
                    let target: Float = column == label ? 1 : 0
                    logits[slot * classes + column] = weight * (logits[slot * classes + column] - target) / Float(batch)
                }
            }
            // Backward.
            let outputInputs = parameters.outputInputs
            logits.withUnsafeBufferPointer { g in
                gradients.outputWeights.withUnsafeMutableBufferPointer { gw in
                    let source = hidden > 0 ? hiddenOut : batchX
                    source.withUnsafeBufferPointer { a in
                        DenseMath.multiply(a.baseAddress!, transposeA: true, g.baseAddress!, into: gw.baseAddress!,
                                           m: outputInputs, n: classes, k: batch)
                    }
                }
                for column in 0..<classes {
                    var sum: Float = 0
                    for slot in 0..<batch { sum += g[slot * classes + column] }
                    gradients.outputBias[column] = sum
                }
                if hidden > 0 {
                    hiddenGradient.withUnsafeMutableBufferPointer { dh in
                        parameters.outputWeights.withUnsafeBufferPointer { w in
                            DenseMath.multiply(g.baseAddress!, w.baseAddress!, transposeB: true, into: dh.baseAddress!,
                                               m: batch, n: hidden, k: classes)
                        }
                        for index in 0..<(batch * hidden) where hiddenOut[index] <= 0 { dh[index] = 0 }
                        batchX.withUnsafeBufferPointer { xb in
                            gradients.hiddenWeights.withUnsafeMutableBufferPointer { gw in
                                DenseMath.multiply(xb.baseAddress!, transposeA: true, dh.baseAddress!, into: gw.baseAddress!,
                                                   m: inputs, n: hidden, k: batch)
                            }
                        }
                        for column in 0..<hidden {
                            var sum: Float = 0
                            for slot in 0..<batch { sum += dh[slot * hidden + column] }
                            gradients.hiddenBias[column] = sum
                        }
                    }
                }
            }
            let l2 = Float(options.l2)
            for index in gradients.outputWeights.indices { gradients.outputWeights[index] += l2 * parameters.outputWeights[index] }
            for index in gradients.hiddenWeights.indices { gradients.hiddenWeights[index] += l2 * parameters.hiddenWeights[index] }
            state.step(&parameters, gradients: gradients, learningRate: Float(options.learningRate))
            start += batch
        }
        return totalLoss / max(totalWeight, 1e-12)
    }
}

/// Adam's moment estimates for each trainable tensor (beta1 0.9, beta2 0.999, epsilon 1e-8: Kingma & Ba's
/// defaults).
package struct AdamState {
    private var first: HeadParameters
    private var second: HeadParameters
    private var steps = 0
    private let beta1: Float = 0.9, beta2: Float = 0.999, epsilon: Float = 1e-8

    package init(_ parameters: HeadParameters) {
        first = HeadParameters(inputSize: parameters.inputSize, hiddenUnits: parameters.hiddenUnits, classCount: parameters.classCount)
        second = first
    }

    package mutating func step(_ parameters: inout HeadParameters, gradients: HeadParameters, learningRate: Float) {
        steps += 1
        let correction1 = 1 - powf(beta1, Float(steps)), correction2 = 1 - powf(beta2, Float(steps))
        let rate = learningRate * correction2.squareRoot() / correction1
        func update(_ values: inout [Float], _ gradient: [Float], _ m: inout [Float], _ v: inout [Float]) {
            for index in values.indices {
                let g = gradient[index]
                m[index] = beta1 * m[index] + (1 - beta1) * g
                v[index] = beta2 * v[index] + (1 - beta2) * g * g
                values[index] -= rate * m[index] / (v[index].squareRoot() + epsilon)
            }
        }
        update(&parameters.outputWeights, gradients.outputWeights, &first.outputWeights, &second.outputWeights)
        update(&parameters.outputBias, gradients.outputBias, &first.outputBias, &second.outputBias)
        update(&parameters.hiddenWeights, gradients.hiddenWeights, &first.hiddenWeights, &second.hiddenWeights)
        update(&parameters.hiddenBias, gradients.hiddenBias, &first.hiddenBias, &second.hiddenBias)
    }
}
