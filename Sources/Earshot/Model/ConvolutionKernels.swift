// The two convolutions that are not matrix products: YAMNet's first 3x3 convolution (one input channel) and the
// 3x3 depthwise convolutions, both over NHWC activations with TensorFlow's "same" padding, with the folded batch-norm
// bias and ReLU applied in the same pass. Vectorised across channels with `KernelVector`.

enum ConvolutionKernels {
    /// "Same" padding of a 3x3 kernel: the rows (or columns) of zeros before the first one. TensorFlow pads
    /// `max((output - 1) * stride + 3 - input, 0)` in total and puts the odd one after.
    @inline(__always)
    static func padBefore(input: Int, output: Int, stride: Int) -> Int {
        max((output - 1) * stride + 3 - input, 0) / 2
    }

    /// YAMNet's first layer: a 3x3 stride-2 convolution of one `[96, 64]` log-mel patch to `[48, 32, 32]`, plus bias
    /// and ReLU.
    /// - Parameters:
    ///   - input: the patch, `[96, 64]` row-major.
    ///   - weights: `[3, 3, 32]` (tap-major, filter fastest), batch norm folded; `bias`: `[32]`.
    ///   - padded: scratch of `97 * 65` floats (the patch with the zero row and column "same" padding adds).
    ///   - output: `[50, 34, 32]`: the `[48, 32, 32]` NHWC result inside a one-position border (left untouched).
    static func firstLayer(
        input: UnsafePointer<Float>, weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
        padded: UnsafeMutablePointer<Float>, output: UnsafeMutablePointer<Float>
    ) {
        typealias V = KernelVector
        let inHeight = 96, inWidth = 64, outHeight = 48, outWidth = 32, filters = 32
        // Padding is 0 before and 1 after in both directions ((48 - 1) * 2 + 3 - 96 = 1).
        let paddedWidth = inWidth + 1
        for y in 0..<inHeight {
            (padded + y * paddedWidth).update(from: input + y * inWidth, count: inWidth)
            padded[y * paddedWidth + inWidth] = 0
        }
        (padded + inHeight * paddedWidth).update(repeating: 0, count: paddedWidth)

        let lanes = V.scalarCount
        let raw = UnsafeRawPointer(weights)
        for block in 0..<(filters / lanes) {
            @inline(__always) func w(_ tap: Int) -> V {
                raw.loadUnaligned(fromByteOffset: (tap * filters + block * lanes) * 4, as: V.self)
            }
            let w0 = w(0), w1 = w(1), w2 = w(2), w3 = w(3), w4 = w(4), w5 = w(5), w6 = w(6), w7 = w(7), w8 = w(8)
            let b = UnsafeRawPointer(bias).loadUnaligned(fromByteOffset: block * lanes * 4, as: V.self)
            for oy in 0..<outHeight {
                let row0 = padded + 2 * oy * paddedWidth
                let row1 = row0 + paddedWidth
                let row2 = row1 + paddedWidth
                let out = UnsafeMutableRawPointer(output + ((oy + 1) * (outWidth + 2) + 1) * filters + block * lanes)
                for ox in 0..<outWidth {
                    let x = 2 * ox
                    var acc = b
                    acc = multiplyAdd(acc, V(repeating: row0[x]), w0)
                    acc = multiplyAdd(acc, V(repeating: row0[x + 1]), w1)
                    acc = multiplyAdd(acc, V(repeating: row0[x + 2]), w2)
                    acc = multiplyAdd(acc, V(repeating: row1[x]), w3)
                    acc = multiplyAdd(acc, V(repeating: row1[x + 1]), w4)
                    acc = multiplyAdd(acc, V(repeating: row1[x + 2]), w5)
                    acc = multiplyAdd(acc, V(repeating: row2[x]), w6)
                    acc = multiplyAdd(acc, V(repeating: row2[x + 1]), w7)
                    acc = multiplyAdd(acc, V(repeating: row2[x + 2]), w8)
                    out.storeBytes(of: relu(acc), toByteOffset: ox * filters * 4, as: V.self)
                }
            }
        }
    }

    /// Reorders a depthwise kernel from `[3, 3, channels]` to `[channels / L, 3, 3, L]` (L = `KernelVector.scalarCount`),
    /// so the nine taps of one channel vector are contiguous.
    static func vectorMajor(_ weights: [Float], channels: Int) -> AlignedFloats {
        let lanes = KernelVector.scalarCount
        let result = AlignedFloats(count: weights.count)
        for tap in 0..<9 {
            for channel in 0..<channels {
                result.pointer[((channel / lanes) * 9 + tap) * lanes + channel % lanes] = weights[tap * channels + channel]
            }
        }
        return result
    }

    /// Zeroes the one-position border of `images` images of `[height + 2, width + 2, channels]`.
    static func zeroBorder(_ base: UnsafeMutablePointer<Float>, images: Int, height: Int, width: Int, channels: Int) {
        let rowFloats = (width + 2) * channels
        for image in 0..<images {
            let start = base + image * (height + 2) * rowFloats
            start.update(repeating: 0, count: rowFloats)
            (start + (height + 1) * rowFloats).update(repeating: 0, count: rowFloats)
            for y in 1...height {
                (start + y * rowFloats).update(repeating: 0, count: channels)
                (start + y * rowFloats + (width + 1) * channels).update(repeating: 0, count: channels)
            }
        }
    }

    /// A 3x3 depthwise convolution with "same" padding, plus bias and ReLU.
    /// - Parameters:
    ///   - input: `[height + 2, width + 2, channels]`: the NHWC image inside a zero border (the padding);
    ///     `channels` a multiple of `KernelVector.scalarCount`.
    ///   - weights: `[channels / L, 3, 3, L]` (`vectorMajor`), batch norm folded; `bias`: `[channels]`.
    ///   - output: `[outHeight, outWidth, channels]` dense, `outHeight = ceil(height / stride)` (likewise the width).
    static func depthwise(
        input: UnsafePointer<Float>, height: Int, width: Int, channels: Int, stride: Int,
        weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
        output: UnsafeMutablePointer<Float>, outHeight: Int, outWidth: Int
    ) {
        typealias V = KernelVector
        let lanes = V.scalarCount
        // Where the first tap of output (0, 0) sits in the bordered input: row/column 1 - padding before.
        let top = 1 - padBefore(input: height, output: outHeight, stride: stride)
        let left = 1 - padBefore(input: width, output: outWidth, stride: stride)
        let rowBytes = (width + 2) * channels * 4
        let pixelBytes = channels * 4
        let stepBytes = stride * pixelBytes
        let input = UnsafeRawPointer(input)
        for vector in 0..<(channels / lanes) {
            let w = UnsafeRawPointer(weights + vector * 9 * lanes)
            let step = MemoryLayout<V>.stride
            let w0 = w.load(as: V.self), w1 = w.load(fromByteOffset: step, as: V.self)
            let w2 = w.load(fromByteOffset: 2 * step, as: V.self), w3 = w.load(fromByteOffset: 3 * step, as: V.self)
            let w4 = w.load(fromByteOffset: 4 * step, as: V.self), w5 = w.load(fromByteOffset: 5 * step, as: V.self)
            let w6 = w.load(fromByteOffset: 6 * step, as: V.self), w7 = w.load(fromByteOffset: 7 * step, as: V.self)
            let w8 = w.load(fromByteOffset: 8 * step, as: V.self)
            let b = UnsafeRawPointer(bias).load(fromByteOffset: vector * step, as: V.self)
            let lane = vector * step
            for oy in 0..<outHeight {
                let row0 = input + (oy * stride + top) * rowBytes + left * pixelBytes + lane
                let row1 = row0 + rowBytes, row2 = row1 + rowBytes
                let out = UnsafeMutableRawPointer(output + oy * outWidth * channels) + lane
                for ox in 0..<outWidth {
                    let offset = ox * stepBytes
                    var acc = b
                    acc = multiplyAdd(acc, row0.load(fromByteOffset: offset, as: V.self), w0)
                    acc = multiplyAdd(acc, row0.load(fromByteOffset: offset + pixelBytes, as: V.self), w1)
                    acc = multiplyAdd(acc, row0.load(fromByteOffset: offset + 2 * pixelBytes, as: V.self), w2)
                    acc = multiplyAdd(acc, row1.load(fromByteOffset: offset, as: V.self), w3)
                    acc = multiplyAdd(acc, row1.load(fromByteOffset: offset + pixelBytes, as: V.self), w4)
                    acc = multiplyAdd(acc, row1.load(fromByteOffset: offset + 2 * pixelBytes, as: V.self), w5)
                    acc = multiplyAdd(acc, row2.load(fromByteOffset: offset, as: V.self), w6)
                    acc = multiplyAdd(acc, row2.load(fromByteOffset: offset + pixelBytes, as: V.self), w7)
                    acc = multiplyAdd(acc, row2.load(fromByteOffset: offset + 2 * pixelBytes, as: V.self), w8)
                    out.storeBytes(of: relu(acc), toByteOffset: ox * pixelBytes, as: V.self)
                }
            }
        }
    }
}
