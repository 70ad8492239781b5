import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// Row-major matrix products for classifier heads: OpenBLAS for batches, a plain loop for one row.
package enum DenseMath {
    /// `C[m, n] = beta * C + op(A) x op(B)`, row-major, where `op(A)` is `[m, k]` (`A` stored `[k, m]` when
    /// `transposeA`) and `op(B)` is `[k, n]` (`B` stored `[n, k]` when `transposeB`).
    ///
    /// One row (`m == 1`: the daemon scoring one window's embedding, 1024 x 2 multiply-adds for a logistic head)
    /// is a loop here, so that a head in the daemon never loads OpenBLAS (about 2.5 MB of resident memory and a
    /// thread per core). Batches go to `cblas_sgemm` (OpenBLAS, loaded on first use) when it can be loaded (training
    /// and enrolment call `OpenBLAS.require(for:)` first), else to the same loop.
    package static func multiply(
        _ a: UnsafePointer<Float>, transposeA: Bool = false, _ b: UnsafePointer<Float>, transposeB: Bool = false,
        into c: UnsafeMutablePointer<Float>, m: Int, n: Int, k: Int, accumulate: Bool = false
    ) {
        guard m > 0, n > 0, k > 0 else { return }
        if m > 1, case .success = OpenBLAS.loaded {
            OpenBLAS.sgemm(
                transposeA: transposeA, transposeB: transposeB, m: m, n: n, k: k, alpha: 1, a: a,
                lda: transposeA ? m : k, b: b, ldb: transposeB ? k : n, beta: accumulate ? 1 : 0, c: c, ldc: n)
            return
        }
        if !accumulate { c.update(repeating: 0, count: m * n) }
        for row in 0..<m {
            let target = c + row * n
            for inner in 0..<k {
                let value = transposeA ? a[inner * m + row] : a[row * k + inner]
                if transposeB {
                    for column in 0..<n { target[column] += value * b[column * k + inner] }
                } else {
                    let source = b + inner * n
                    for column in 0..<n { target[column] += value * source[column] }
                }
            }
        }
    }

    /// Replaces each row of `values` (`[rows, columns]`) by its softmax, computed stably (the row maximum is
    /// subtracted first). Rows sum to 1; every value ends in 0...1.
    package static func softmaxRows(_ values: UnsafeMutablePointer<Float>, rows: Int, columns: Int) {
        for row in 0..<rows {
            let base = values + row * columns
            var largest = -Float.infinity
            for column in 0..<columns { largest = max(largest, base[column]) }
            var sum: Float = 0
            for column in 0..<columns {
                let value = expf(base[column] - largest)
                base[column] = value
                sum += value
            }
            let inverse = 1 / sum
            for column in 0..<columns { base[column] *= inverse }
        }
    }
}

/// The weights of a classifier head on backbone embeddings: standardisation, then either one dense layer and a
/// softmax (multinomial logistic regression) or a hidden ReLU layer, a dense layer and a softmax (MLP).
///
/// Shapes (row-major, `[inputs, outputs]` for weights): `inputMean`, `inputScale` `[inputSize]`;
/// `hiddenWeights` `[inputSize, hiddenUnits]`, `hiddenBias` `[hiddenUnits]` (empty for logistic regression);
/// `outputWeights` `[hiddenUnits or inputSize, classCount]`, `outputBias` `[classCount]`.
///
/// Optionally (heads made by `earshot enroll`) a similarity gate: `prototypes` `[prototypeCount, inputSize]` are
/// unit-length raw embeddings of the enrolled sound; a window whose embedding's highest cosine similarity `s` to them
/// is low cannot be that sound, whatever the dense layers say: every class but the first (the background) is scaled by
/// `1 / (1 + exp(-(s - gateThreshold) / gateWidth))` and the first takes the rest. This keeps sounds unlike any
/// take, which the few recorded negatives cannot cover, from scoring high.
package struct HeadParameters: Sendable, Equatable {
    package var inputSize: Int
    /// 0 for logistic regression.
    package var hiddenUnits: Int
    package var classCount: Int
    package var inputMean: [Float]
    package var inputScale: [Float]
    package var hiddenWeights: [Float]
    package var hiddenBias: [Float]
    package var outputWeights: [Float]
    package var outputBias: [Float]
    /// `[prototypeCount, inputSize]` unit rows; empty when there is no similarity gate.
    package var prototypes: [Float] = []
    /// Cosine similarity at which the gate passes half of the probability.
    package var gateThreshold: Float = 0
    /// Width of the gate's logistic ramp in similarity units (> 0).
    package var gateWidth: Float = Self.defaultGateWidth
    /// 0.03: the gate goes from 5% to 95% over 0.18 of cosine similarity.
    package static let defaultGateWidth: Float = 0.03

    package var prototypeCount: Int { inputSize == 0 ? 0 : prototypes.count / inputSize }

    /// Inputs of the output layer: the hidden units, or the standardised embedding for logistic regression.
    package var outputInputs: Int { hiddenUnits > 0 ? hiddenUnits : inputSize }

    /// Zero weights of the right shapes, identity standardisation.
    package init(inputSize: Int, hiddenUnits: Int, classCount: Int) {
        self.inputSize = inputSize
        self.hiddenUnits = hiddenUnits
        self.classCount = classCount
        inputMean = [Float](repeating: 0, count: inputSize)
        inputScale = [Float](repeating: 1, count: inputSize)
        hiddenWeights = [Float](repeating: 0, count: inputSize * hiddenUnits)
        hiddenBias = [Float](repeating: 0, count: hiddenUnits)
        outputWeights = [Float](repeating: 0, count: (hiddenUnits > 0 ? hiddenUnits : inputSize) * classCount)
        outputBias = [Float](repeating: 0, count: classCount)
    }

    /// The named tensors with their shapes, in file order.
    package var tensors: [(name: String, shape: [Int], values: [Float])] {
        var list: [(String, [Int], [Float])] = [
            ("input.mean", [inputSize], inputMean),
            ("input.scale", [inputSize], inputScale),
        ]
        if hiddenUnits > 0 {
            list.append(("hidden.weight", [inputSize, hiddenUnits], hiddenWeights))
            list.append(("hidden.bias", [hiddenUnits], hiddenBias))
        }
        list.append(("output.weight", [outputInputs, classCount], outputWeights))
        list.append(("output.bias", [classCount], outputBias))
        if prototypeCount > 0 {
            list.append(("prototype.embeddings", [prototypeCount, inputSize], prototypes))
            list.append(("prototype.gate", [2], [gateThreshold, gateWidth]))
        }
        return list
    }

    /// `(embedding - inputMean) * inputScale` for `rows` rows of `inputSize` values, into `output`.
    package func standardize(_ input: UnsafePointer<Float>, rows: Int, into output: UnsafeMutablePointer<Float>) {
        inputMean.withUnsafeBufferPointer { mean in
            inputScale.withUnsafeBufferPointer { scale in
                for row in 0..<rows {
                    let source = input + row * inputSize, target = output + row * inputSize
                    for index in 0..<inputSize { target[index] = (source[index] - mean[index]) * scale[index] }
                }
            }
        }
    }

    /// Class probabilities `[rows, classCount]` (softmax, rows sum to 1) of `rows` embeddings `[rows, inputSize]`.
    package func probabilities(embeddings: UnsafePointer<Float>, rows: Int) -> [Float] {
        guard rows > 0 else { return [] }
        var standardized = [Float](repeating: 0, count: rows * inputSize)
        var result = standardized.withUnsafeMutableBufferPointer { x in
            standardize(embeddings, rows: rows, into: x.baseAddress!)
            return probabilities(standardized: x.baseAddress!, rows: rows)
        }
        if prototypeCount > 0 {
            let similarity = similarities(embeddings: embeddings, rows: rows)
            for row in 0..<rows {
                let gate = 1 / (1 + expf(-(similarity[row] - gateThreshold) / gateWidth))
                var moved: Float = 0
                for column in 1..<classCount {
                    let kept = result[row * classCount + column] * gate
                    moved += result[row * classCount + column] - kept
                    result[row * classCount + column] = kept
                }
                result[row * classCount] += moved
            }
        }
        return result
    }

    /// Per row of `embeddings` (`[rows, inputSize]`, raw), the highest cosine similarity to the prototypes
    /// (0 for an all-zero embedding).
    package func similarities(embeddings: UnsafePointer<Float>, rows: Int) -> [Float] {
        let count = prototypeCount
        guard rows > 0, count > 0 else { return [Float](repeating: 0, count: rows) }
        var dots = [Float](repeating: 0, count: rows * count)
        prototypes.withUnsafeBufferPointer { prototypes in
            dots.withUnsafeMutableBufferPointer { dots in
                DenseMath.multiply(embeddings, prototypes.baseAddress!, transposeB: true, into: dots.baseAddress!,
                                   m: rows, n: count, k: inputSize)
            }
        }
        return (0..<rows).map { row in
            var norm: Float = 0
            for index in 0..<inputSize { norm += embeddings[row * inputSize + index] * embeddings[row * inputSize + index] }
            guard norm > 0 else { return 0 }
            var best = -Float.infinity
            for column in 0..<count { best = max(best, dots[row * count + column]) }
            return best / norm.squareRoot()
        }
    }

    /// Unit-length copies of `rows` embeddings `[rows, inputSize]` (all-zero rows are dropped).
    package static func unitRows(_ embeddings: [Float], columns: Int) -> [Float] {
        var result: [Float] = []
        for start in stride(from: 0, to: embeddings.count, by: columns) {
            let row = embeddings[start..<(start + columns)]
            let norm = row.reduce(Float(0)) { $0 + $1 * $1 }.squareRoot()
            if norm > 0 { result += row.map { $0 / norm } }
        }
        return result
    }

    /// Class probabilities `[rows, classCount]` of rows already standardised (see ``standardize(_:rows:into:)``).
    package func probabilities(standardized x: UnsafePointer<Float>, rows: Int) -> [Float] {
        guard rows > 0 else { return [] }
        var output = [Float](repeating: 0, count: rows * classCount)
        output.withUnsafeMutableBufferPointer { z in
            if hiddenUnits > 0 {
                var hidden = [Float](repeating: 0, count: rows * hiddenUnits)
                hidden.withUnsafeMutableBufferPointer { h in
                    Self.affine(x, rows: rows, inputs: inputSize, weights: hiddenWeights, bias: hiddenBias, into: h.baseAddress!)
                    for index in 0..<(rows * hiddenUnits) where h[index] < 0 { h[index] = 0 }
                    Self.affine(h.baseAddress!, rows: rows, inputs: hiddenUnits, weights: outputWeights, bias: outputBias,
                                into: z.baseAddress!)
                }
            } else {
                Self.affine(x, rows: rows, inputs: inputSize, weights: outputWeights, bias: outputBias, into: z.baseAddress!)
            }
            DenseMath.softmaxRows(z.baseAddress!, rows: rows, columns: classCount)
        }
        return output
    }

    /// `output[rows, outputs] = input[rows, inputs] x weights[inputs, outputs] + bias`.
    package static func affine(
        _ input: UnsafePointer<Float>, rows: Int, inputs: Int, weights: [Float], bias: [Float],
        into output: UnsafeMutablePointer<Float>
    ) {
        let outputs = bias.count
        bias.withUnsafeBufferPointer { bias in
            for row in 0..<rows { (output + row * outputs).update(from: bias.baseAddress!, count: outputs) }
        }
        weights.withUnsafeBufferPointer { weights in
            DenseMath.multiply(input, weights.baseAddress!, into: output, m: rows, n: outputs, k: inputs, accumulate: true)
        }
    }
}
