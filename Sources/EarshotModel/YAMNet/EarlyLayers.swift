import Glibc
import EarshotSupport

/// YAMNet's early layers (the first convolution and the separable blocks before `YAMNetSession.firstBatchedBlock`)
/// run one patch at a time, each layer into its own buffer, so that a patch can take from the previous patch the
/// output rows the two have in common instead of computing them again.
///
/// Why rows repeat: consecutive patches of one spectrogram are the same frames shifted by the hop (48 frames, 0.48 s,
/// in the reference). A convolution output row that reads no padding depends only on frames both patches hold, so
/// patch n's row r equals patch n-1's row r + hop / (the layer's total stride). Rows that read "same" padding (near
/// the patch's top and bottom edges, more of them the deeper the layer) differ and are computed. `reusePlan` works
/// the rows out from the layer shapes; at the reference hop the first layer shares 23 of 48 output rows, the first
/// block 21 of 48, the second 9 of 24, the third 7 of 24, the fourth 3 of 12 and the fifth 1 of 12; from the
/// sixth block on (stride 32 in all, 6 rows or fewer) no row is free of padding effects for both patches, so those
/// layers run batched and whole.
///
/// Of the rows a patch does not compute, only those the next layer reads are copied from the previous patch: at the
/// reference hop 18 rows in all (about 150 KB), the rest stay stale and are never read (see `RowReuse`).
///
/// Every value is bit for bit what the patch computed alone gives: a row's arithmetic does not depend on which other
/// rows are computed (the depthwise and first-layer loops compute rows independently; the packed matrix product sums
/// each row in the same order whatever the tile, see `gemmRow16`).
///
/// Memory: the per-layer buffers of one patch, about 1.9 MB (the layer outputs up to `[48, 32, 64]` and their
/// depthwise inputs), allocated by a session the first time it runs a batch of more than one patch.
///
/// - Important: Not thread-safe: owned by one `YAMNetSession`.
package final class EarlyLayers {
    /// Rows of one layer output that patch n takes from patch n - 1 instead of computing them: patch n's rows
    /// `rows` equal patch n - 1's rows `rows` shifted by `offset`. Only `copies` (ascending, disjoint subranges of
    /// `rows`) are copied: the rows the next layer reads when it computes its own rows (or that a later patch copies
    /// from these); the other rows of `rows` are never read and keep stale values.
    package struct RowReuse: Equatable {
        package var rows: Range<Int>
        package var offset: Int
        package var copies: [Range<Int>]
    }

    /// One layer output of a patch: `[height, width, channels]`, dense or inside a one-position zero border.
    package struct Stage {
        package let height: Int
        package let width: Int
        package let channels: Int
        package let bordered: Bool
        /// Floats from one row to the next (with the border columns when bordered).
        package var rowFloats: Int { (bordered ? width + 2 : width) * channels }
        /// Floats of the whole image (with the border rows when bordered).
        package var floats: Int { (bordered ? height + 2 : height) * rowFloats }
        /// Where row `y` starts.
        package func row(_ y: Int, in base: UnsafeMutablePointer<Float>) -> UnsafeMutablePointer<Float> {
            base + (bordered ? y + 1 : y) * rowFloats
        }
    }

    /// The layer outputs in order: the first convolution's (bordered), then per block its depthwise output (dense)
    /// and pointwise output (bordered). The last one lives in the caller's batch buffer.
    package let stages: [Stage]
    /// One buffer per stage but the last; zero-filled, and the borders are never written.
    private let buffers: [AlignedFloats]
    package let blocks: Int

    /// Buffers for the first convolution and separable blocks `0..<blocks`.
    package init(blocks: Int) {
        self.blocks = blocks
        var stages = [Stage(height: YAMNet.patchFrames / 2, width: YAMNet.melBands / 2, channels: 32, bordered: true)]
        var channels = 32
        for block in YAMNet.separableBlocks.prefix(blocks) {
            let previous = stages[stages.count - 1]
            let height = (previous.height + block.stride - 1) / block.stride
            let width = (previous.width + block.stride - 1) / block.stride
            stages.append(Stage(height: height, width: width, channels: channels, bordered: false))
            stages.append(Stage(height: height, width: width, channels: block.channels, bordered: true))
            channels = block.channels
        }
        self.stages = stages
        buffers = stages.dropLast().map { AlignedFloats(count: $0.floats) }
    }

    /// The rows each stage (as in `stages`) of a patch shares with the patch `hopFrames` frames before it in the same
    /// spectrogram.
    ///
    /// For each layer it follows the interval of output rows that read no padding: with TensorFlow's "same" padding a
    /// 3x3 convolution of stride s over H rows has `ceil(H / s)` output rows and pads `max((out - 1) s + 3 - H, 0) / 2`
    /// rows before the first, so output row r reads input rows `r s - before ... r s - before + 2`; the row is free of
    /// padding when all three are. The shift between the two patches is `hopFrames` divided by the strides so far,
    /// while it divides exactly (otherwise nothing more is shared). Patch n's row r is then patch n - 1's row
    /// r + shift whenever both rows are free of padding.
    /// - Parameters:
    ///   - hopFrames: frames between the two patches' first frames, 1...95 (anything else shares nothing).
    ///   - blocks: the separable blocks covered (as in `init(blocks:)`).
    /// - Returns: one `RowReuse` per stage (empty `rows` where nothing is shared).
    package static func reusePlan(hopFrames: Int, blocks: Int) -> [RowReuse] {
        var height = YAMNet.patchFrames
        var first = 0, last = YAMNet.patchFrames - 1  // rows free of padding (all the input frames are)
        var shift: Int? = (1..<YAMNet.patchFrames).contains(hopFrames) ? hopFrames : nil
        var plan: [RowReuse] = []
        /// (output height, stride, rows of padding before) of each 3x3 convolution, in order.
        var convolutions: [(height: Int, stride: Int, before: Int)] = []
        func convolve(stride: Int) {
            let outHeight = (height + stride - 1) / stride
            let before = max((outHeight - 1) * stride + 3 - height, 0) / 2
            first = (first + before + stride - 1) / stride
            let top = last + before - 2
            last = top >= 0 ? top / stride : -1
            shift = shift.flatMap { $0 % stride == 0 ? $0 / stride : nil }
            height = outHeight
            convolutions.append((outHeight, stride, before))
        }
        func record() {
            if let shift, last - shift >= first {
                plan.append(RowReuse(rows: first..<(last - shift + 1), offset: shift, copies: []))
            } else {
                plan.append(RowReuse(rows: 0..<0, offset: 0, copies: []))
            }
        }
        convolve(stride: 2)
        record()
        for block in YAMNet.separableBlocks.prefix(blocks) {
            convolve(stride: block.stride)
            record()  // depthwise
            record()  // pointwise: same rows
        }
        // What to copy. A depthwise output feeds a pointwise (1x1) layer, which computes exactly the rows the
        // depthwise layer computes: its shared rows are never read. The first layer's and a pointwise output feed
        // the next depthwise layer, whose computed rows read their neighbours; the last output feeds the batched
        // layers, which read every row. A row copied from patch n - 1 must hold patch n - 1's value there: when that
        // row was itself shared (hops shorter than the patch's padding-free part), it is copied too.
        for index in plan.indices where !plan[index].rows.isEmpty {
            let reuse = plan[index]
            var needed: [Int] = []
            if index == plan.count - 1 {
                needed = Array(reuse.rows)
            } else if index % 2 == 0 {
                let next = convolutions[index / 2 + 1]
                let skipped = plan[index + 1].rows
                for row in 0..<next.height where !skipped.contains(row) {
                    for tap in 0..<3 where reuse.rows.contains(row * next.stride - next.before + tap) {
                        needed.append(row * next.stride - next.before + tap)
                    }
                }
            }
            var copied = Set<Int>()
            for row in needed {
                var source = row
                while reuse.rows.contains(source) && copied.insert(source).inserted { source += reuse.offset }
            }
            var ranges: [Range<Int>] = []
            for row in copied.sorted() {
                if let end = ranges.last?.upperBound, end == row {
                    ranges[ranges.count - 1] = ranges[ranges.count - 1].lowerBound..<(row + 1)
                } else {
                    ranges.append(row..<(row + 1))
                }
            }
            plan[index].copies = ranges
        }
        return plan
    }

    /// Runs one patch through the early layers into `output` (the last stage, bordered, border already zero).
    /// - Parameters:
    ///   - patch: `[96, 64]` log-mel values.
    ///   - reuse: `reusePlan` for this patch and the previous one run through this object (whose values the
    ///     buffers, and `previousOutput`, still hold), or nil to compute every row.
    ///   - previousOutput: the previous patch's last-stage output (read only when `reuse` is given).
    ///   - padded: the first layer's scratch (`97 * 65` floats); `scratch`: `PackedWeights.multiply`'s.
    package func run(
        patch: UnsafePointer<Float>, model: YAMNet, reuse: [RowReuse]?, output: UnsafeMutablePointer<Float>,
        previousOutput: UnsafeMutablePointer<Float>, padded: UnsafeMutablePointer<Float>,
        scratch: UnsafeMutablePointer<Float>, profile: StageProfile?
    ) {
        let kernel = model.computeKernel
        /// Copies what stage `index` takes from the previous patch (into `base`, from `source`) and returns the rows
        /// left to compute: the rows before the shared ones and the rows after them (either may be empty).
        func share(_ index: Int, into base: UnsafeMutablePointer<Float>, from source: UnsafeMutablePointer<Float>)
            -> (Range<Int>, Range<Int>)
        {
            let stage = stages[index]
            guard let reuse, !reuse[index].rows.isEmpty else { return (0..<stage.height, 0..<0) }
            let shared = reuse[index]
            // Ascending, and memmove: within one buffer a range may overlap its source (short hops), and a later
            // range's rows are read by an earlier one before they are overwritten.
            for rows in shared.copies {
                memmove(stage.row(rows.lowerBound, in: base), stage.row(rows.lowerBound + shared.offset, in: source),
                        rows.count * stage.rowFloats * MemoryLayout<Float>.stride)
            }
            return (0..<shared.rows.lowerBound, shared.rows.upperBound..<stage.height)
        }
        let firstBuffer = buffers[0].pointer
        func firstLayer(_ rows: Range<Int>) {
            guard !rows.isEmpty else { return }
            ConvolutionKernels.firstLayer(
                kernel: kernel, input: patch, weights: model.firstWeights.pointer, bias: model.firstBias.pointer,
                padded: padded, output: firstBuffer, rows: rows)
        }
        let firstComputed = share(0, into: firstBuffer, from: firstBuffer)
        firstLayer(firstComputed.0)
        firstLayer(firstComputed.1)
        profile?.mark("layer1 conv 3x3")
        for index in 0..<blocks {
            let block = model.blocks[index]
            let input = stages[2 * index], middle = stages[2 * index + 1], result = stages[2 * index + 2]
            let inputBase = buffers[2 * index].pointer, middleBase = buffers[2 * index + 1].pointer
            func depthwise(_ rows: Range<Int>) {
                guard !rows.isEmpty else { return }
                ConvolutionKernels.depthwise(
                    kernel: kernel, input: inputBase, height: input.height, width: input.width,
                    channels: input.channels, stride: block.stride, weights: block.depthwiseWeights.pointer,
                    bias: block.depthwiseBias.pointer, output: middleBase, outHeight: middle.height,
                    outWidth: middle.width, rows: rows)
            }
            let depthwiseComputed = share(2 * index + 1, into: middleBase, from: middleBase)
            depthwise(depthwiseComputed.0)
            depthwise(depthwiseComputed.1)
            profile?.mark("depthwise")
            let isLast = index == blocks - 1
            let resultBase = isLast ? output : buffers[2 * index + 2].pointer
            let computed = share(2 * index + 2, into: resultBase, from: isLast ? previousOutput : resultBase)
            /// Rows `rows` of the product (`GEMMRows()` when empty).
            func product(_ rows: Range<Int>) -> GEMMRows {
                guard !rows.isEmpty else { return GEMMRows() }
                return GEMMRows(
                    input: middle.row(rows.lowerBound, in: middleBase), count: rows.count * middle.width,
                    output: GEMMOutput(
                        base: result.row(rows.lowerBound, in: resultBase) - result.rowFloats,
                        layout: .bordered(height: rows.count, width: result.width, channels: result.channels)))
            }
            // Both blocks of rows in one product, so that a register tile may span the two.
            block.pointwise.multiply(
                product(computed.0), product(computed.1), inputStride: middle.channels, activation: .relu,
                scratch: scratch)
            profile?.mark("pointwise \(input.channels)->\(result.channels)")
        }
    }
}
