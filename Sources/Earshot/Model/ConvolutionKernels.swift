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
        // YAMNet's (channels, stride) pairs get copies with both constant, so every tap is a constant offset from
        // one pointer per input row (with them at run time, the offsets of four pixels' 27 taps need more
        // registers than x86-64 has, and the loop spills).
        let args = DepthwiseArguments(
            input: input, height: height, width: width, channels: channels, stride: stride, weights: weights,
            bias: bias, output: output, outHeight: outHeight, outWidth: outWidth)
        switch (channels, stride) {
        case (32, 1): depthwiseImage(Shape<C32, S1>.self, args)
        case (64, 2): depthwiseImage(Shape<C64, S2>.self, args)
        case (128, 1): depthwiseImage(Shape<C128, S1>.self, args)
        case (128, 2): depthwiseImage(Shape<C128, S2>.self, args)
        case (256, 1): depthwiseImage(Shape<C256, S1>.self, args)
        case (256, 2): depthwiseImage(Shape<C256, S2>.self, args)
        case (512, 1): depthwiseImage(Shape<C512, S1>.self, args)
        case (512, 2): depthwiseImage(Shape<C512, S2>.self, args)
        case (1024, 1): depthwiseImage(Shape<C1024, S1>.self, args)
        default: depthwiseImage(Shape<RuntimeValue, RuntimeValue>.self, args)
        }
    }

    struct DepthwiseArguments {
        let input: UnsafePointer<Float>, height: Int, width: Int, channels: Int, stride: Int
        let weights: UnsafePointer<Float>, bias: UnsafePointer<Float>
        let output: UnsafeMutablePointer<Float>, outHeight: Int, outWidth: Int
    }

    /// A number known at compile time (so a specialised copy folds it into addresses), or nil for "use the run-time
    /// value".
    protocol StaticValue { static var value: Int? { get } }
    enum RuntimeValue: StaticValue { static var value: Int? { nil } }
    enum C32: StaticValue { static var value: Int? { 32 } }
    enum C64: StaticValue { static var value: Int? { 64 } }
    enum C128: StaticValue { static var value: Int? { 128 } }
    enum C256: StaticValue { static var value: Int? { 256 } }
    enum C512: StaticValue { static var value: Int? { 512 } }
    enum C1024: StaticValue { static var value: Int? { 1024 } }
    enum S1: StaticValue { static var value: Int? { 1 } }
    enum S2: StaticValue { static var value: Int? { 2 } }
    /// Channels and stride of one depthwise layer.
    enum Shape<Channels: StaticValue, Stride: StaticValue> {}

    /// The depthwise loops, specialised per `Shape` by the compiler (generic specialisation, unlike
    /// `@inline(__always)` on a function this large, always happens for concrete types in the module).
    private static func depthwiseImage<C: StaticValue, S: StaticValue>(_ shape: Shape<C, S>.Type, _ args: DepthwiseArguments) {
        let channels = C.value ?? args.channels, stride = S.value ?? args.stride
        let source = args.input, height = args.height, width = args.width, weights = args.weights, bias = args.bias
        let output = args.output, outHeight = args.outHeight, outWidth = args.outWidth
        typealias V = KernelVector
        let lanes = V.scalarCount
        let step = MemoryLayout<V>.stride
        // Where the first tap of output (0, 0) sits in the bordered input: row/column 1 - padding before.
        let top = 1 - padBefore(input: height, output: outHeight, stride: stride)
        let left = 1 - padBefore(input: width, output: outWidth, stride: stride)
        let rowBytes = (width + 2) * channels * 4
        let pixel = channels * 4
        let input = UnsafeRawPointer(source)
        let vectors = channels / lanes
        let weightBase = UnsafeRawPointer(weights), biasBase = UnsafeRawPointer(bias)
        // Pixel-outer, channel-inner: input and output are read and written in address order (the prefetchers
        // follow, and no store lands 4 KB from the next loads); the 9 weight vectors come from L1 each time.
        for oy in 0..<outHeight {
            var row0 = input + (oy * stride + top) * rowBytes + left * pixel
            var out = UnsafeMutableRawPointer(output + oy * outWidth * channels)
            var remaining = outWidth
            while remaining > 0 {
                let block = min(remaining, 4)
                for vector in 0..<vectors {
                    let offset = vector * step
                    let w = weightBase + vector * 9 * step
                    let w0 = w.load(as: V.self), w1 = w.load(fromByteOffset: step, as: V.self)
                    let w2 = w.load(fromByteOffset: 2 * step, as: V.self), w3 = w.load(fromByteOffset: 3 * step, as: V.self)
                    let w4 = w.load(fromByteOffset: 4 * step, as: V.self), w5 = w.load(fromByteOffset: 5 * step, as: V.self)
                    let w6 = w.load(fromByteOffset: 6 * step, as: V.self), w7 = w.load(fromByteOffset: 7 * step, as: V.self)
                    let w8 = w.load(fromByteOffset: 8 * step, as: V.self)
                    let b = biasBase.load(fromByteOffset: offset, as: V.self)
                    /// Output `i` of the block: bias, then the nine taps in order (one FMA chain).
                    @inline(__always) func output(_ i: Int) -> V {
                        let r0 = row0 + i * stride * pixel + offset, r1 = r0 + rowBytes, r2 = r1 + rowBytes
                        var acc = b
                        acc = multiplyAdd(acc, r0.load(as: V.self), w0)
                        acc = multiplyAdd(acc, r0.load(fromByteOffset: pixel, as: V.self), w1)
                        acc = multiplyAdd(acc, r0.load(fromByteOffset: 2 * pixel, as: V.self), w2)
                        acc = multiplyAdd(acc, r1.load(as: V.self), w3)
                        acc = multiplyAdd(acc, r1.load(fromByteOffset: pixel, as: V.self), w4)
                        acc = multiplyAdd(acc, r1.load(fromByteOffset: 2 * pixel, as: V.self), w5)
                        acc = multiplyAdd(acc, r2.load(as: V.self), w6)
                        acc = multiplyAdd(acc, r2.load(fromByteOffset: pixel, as: V.self), w7)
                        acc = multiplyAdd(acc, r2.load(fromByteOffset: 2 * pixel, as: V.self), w8)
                        return acc
                    }
                    if block == 4 {
                        // Four independent chains keep the FMA units busy (one alone waits on each FMA's latency).
                        let a0 = output(0), a1 = output(1), a2 = output(2), a3 = output(3)
                        out.storeBytes(of: relu(a0), toByteOffset: offset, as: V.self)
                        out.storeBytes(of: relu(a1), toByteOffset: pixel + offset, as: V.self)
                        out.storeBytes(of: relu(a2), toByteOffset: 2 * pixel + offset, as: V.self)
                        out.storeBytes(of: relu(a3), toByteOffset: 3 * pixel + offset, as: V.self)
                    } else {
                        for i in 0..<block {
                            out.storeBytes(of: relu(output(i)), toByteOffset: i * pixel + offset, as: V.self)
                        }
                    }
                }
                row0 += block * stride * pixel
                out += block * pixel
                remaining -= block
            }
        }
    }
}
