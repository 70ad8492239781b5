// The two convolutions that are not matrix products: YAMNet's first 3x3 convolution (one input channel) and the
// 3x3 depthwise convolutions. Their generic loops (over the vector type) are at the end of this file and run with
// `KernelVector`; where the model's kernel is `.avx2` or `.avx512`, EarshotKernels' C copies of the same loops run
// instead, with 8-float vectors and FMA (compiled for x86-64-v3 function by function, see
// Sources/EarshotKernels/include/EarshotKernels.h): the same sums in the same order.
internal import EarshotKernels
import EarshotSupport

package enum ConvolutionKernels {
    /// Whether `multiplyAdd` may fuse in this module's build (see `multiplyAdd` in PackedGEMM.swift).
    #if arch(arm64) || EARSHOT_NATIVE_CPU
    package static let fused = true
    #else
    package static let fused = false
    #endif

    /// Lanes of the vectors the convolutions use with `kernel`: 8 with AVX2, else `KernelVector.scalarCount`.
    package static func lanes(_ kernel: GEMMKernel) -> Int {
        #if arch(x86_64)
        if kernel == .avx2 || kernel == .avx512 { return avx2ConvolutionLanes }
        #endif
        return KernelVector.scalarCount
    }

    /// YAMNet's first layer: a 3x3 stride-2 convolution of one `[96, 64]` log-mel patch to `[48, 32, 32]`, plus bias
    /// and ReLU; see `firstLayerConvolution` below for the shapes. Only the output `rows` are computed.
    package static func firstLayer(
        kernel: GEMMKernel, input: UnsafePointer<Float>, weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
        padded: UnsafeMutablePointer<Float>, output: UnsafeMutablePointer<Float>, rows: Range<Int> = 0..<48
    ) {
        #if arch(x86_64)
        if kernel == .avx2 || kernel == .avx512 {
            firstLayerConvolutionAVX2(
                input: input, weights: weights, bias: bias, padded: padded, output: output,
                rowStart: rows.lowerBound, rowEnd: rows.upperBound)
            return
        }
        #endif
        firstLayerConvolution(
            KernelVector.self, fused: fused, relu: relu, input: input, weights: weights, bias: bias, padded: padded,
            output: output, rows: rows)
    }

    /// A 3x3 depthwise convolution with "same" padding, plus bias and ReLU; see `depthwiseConvolution` below
    /// for the shapes. `weights` must be laid out with `lanes(kernel)` (`vectorMajor`). Only the
    /// output `rows` are computed (all of them when nil).
    package static func depthwise(
        kernel: GEMMKernel, input: UnsafePointer<Float>, height: Int, width: Int, channels: Int, stride: Int,
        weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
        output: UnsafeMutablePointer<Float>, outHeight: Int, outWidth: Int, rows: Range<Int>? = nil
    ) {
        let rows = rows ?? 0..<outHeight
        #if arch(x86_64)
        if kernel == .avx2 || kernel == .avx512 {
            depthwiseConvolutionAVX2(
                input: input, height: height, width: width, channels: channels, stride: stride, weights: weights,
                bias: bias, output: output, outHeight: outHeight, outWidth: outWidth, rowStart: rows.lowerBound,
                rowEnd: rows.upperBound)
            return
        }
        #endif
        depthwiseConvolution(
            KernelVector.self, fused: fused, relu: relu, input: input, height: height, width: width, channels: channels,
            stride: stride, weights: weights, bias: bias, output: output, outHeight: outHeight, outWidth: outWidth,
            rows: rows)
    }

    /// Reorders a depthwise kernel from `[3, 3, channels]` to `[channels / L, 3, 3, L]` (L = `lanes`), so the nine
    /// taps of one channel vector are contiguous.
    package static func vectorMajor(_ weights: [Float], channels: Int, lanes: Int) -> AlignedFloats {
        let result = AlignedFloats(count: weights.count)
        for tap in 0..<9 {
            for channel in 0..<channels {
                result.pointer[((channel / lanes) * 9 + tap) * lanes + channel % lanes] = weights[tap * channels + channel]
            }
        }
        return result
    }

    /// Zeroes the one-position border of `images` images of `[height + 2, width + 2, channels]`.
    package static func zeroBorder(_ base: UnsafeMutablePointer<Float>, images: Int, height: Int, width: Int, channels: Int) {
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
}

// MARK: - The generic loops
//
// One source for every vector type: `KernelVector` (SSE on baseline x86-64, NEON on aarch64, AVX-512 in a native
// build). EarshotKernels' C functions are the AVX2 + FMA copies of these loops (Sources/EarshotKernels/Convolutions.c).

/// A vector of floats the convolutions can use, and how to multiply-add with it.
enum ConvolutionArithmetic {
    /// `acc + a * b`: one fused multiply-add when `fused` (the target has FMA), else a multiply and an add (without
    /// FMA in the target, a fused `addingProduct` becomes a libm call per lane).
    @inline(__always)
    static func multiplyAdd<V: SIMD>(_ acc: V, _ a: V, _ b: V, fused: Bool) -> V where V.Scalar == Float {
        fused ? acc.addingProduct(a, b) : acc + a * b
    }

    /// "Same" padding of a 3x3 kernel: the rows (or columns) of zeros before the first one. TensorFlow pads
    /// `max((output - 1) * stride + 3 - input, 0)` in total and puts the odd one after.
    @inline(__always)
    static func padBefore(input: Int, output: Int, stride: Int) -> Int {
        max((output - 1) * stride + 3 - input, 0) / 2
    }
}

/// YAMNet's first layer: a 3x3 stride-2 convolution of one `[96, 64]` log-mel patch to `[48, 32, 32]`, plus bias
/// and ReLU, with vectors of `V`.
/// - Parameters:
///   - input: the patch, `[96, 64]` row-major.
///   - weights: `[3, 3, 32]` (tap-major, filter fastest), batch norm folded; `bias`: `[32]`.
///   - padded: scratch of `97 * 65` floats (the patch with the zero row and column "same" padding adds).
///   - output: `[50, 34, 32]`: the `[48, 32, 32]` NHWC result inside a one-position border (left untouched).
///   - rows: the output rows to compute (a subrange of 0..<48); the others are left untouched. Each row's values do
///     not depend on which other rows are computed.
func firstLayerConvolution<V: SIMD>(
    _ vector: V.Type, fused: Bool, relu: (V) -> V, input: UnsafePointer<Float>, weights: UnsafePointer<Float>,
    bias: UnsafePointer<Float>, padded: UnsafeMutablePointer<Float>, output: UnsafeMutablePointer<Float>,
    rows: Range<Int>
) where V.Scalar == Float {
    typealias Math = ConvolutionArithmetic
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
        for oy in rows.clamped(to: 0..<outHeight) {
            let row0 = padded + 2 * oy * paddedWidth
            let row1 = row0 + paddedWidth
            let row2 = row1 + paddedWidth
            let out = UnsafeMutableRawPointer(output + ((oy + 1) * (outWidth + 2) + 1) * filters + block * lanes)
            for ox in 0..<outWidth {
                let x = 2 * ox
                var acc = b
                acc = Math.multiplyAdd(acc, V(repeating: row0[x]), w0, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row0[x + 1]), w1, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row0[x + 2]), w2, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row1[x]), w3, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row1[x + 1]), w4, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row1[x + 2]), w5, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row2[x]), w6, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row2[x + 1]), w7, fused: fused)
                acc = Math.multiplyAdd(acc, V(repeating: row2[x + 2]), w8, fused: fused)
                out.storeBytes(of: relu(acc), toByteOffset: ox * filters * 4, as: V.self)
            }
        }
    }
}

/// A 3x3 depthwise convolution with "same" padding, plus bias and ReLU, with vectors of `V`.
/// - Parameters:
///   - input: `[height + 2, width + 2, channels]`: the NHWC image inside a zero border (the padding);
///     `channels` a multiple of `V.scalarCount`; 32-byte aligned rows of pixels (every pixel starts a vector).
///   - weights: `[channels / L, 3, 3, L]` with L = `V.scalarCount`, batch norm folded; `bias`: `[channels]`.
///   - output: `[outHeight, outWidth, channels]` dense, `outHeight = ceil(height / stride)` (likewise the width).
///   - rows: the output rows to compute (a subrange of `0..<outHeight`); the others are left untouched. Each row's
///     values do not depend on which other rows are computed.
func depthwiseConvolution<V: SIMD>(
    _ vector: V.Type, fused: Bool, relu: (V) -> V,
    input: UnsafePointer<Float>, height: Int, width: Int, channels: Int, stride: Int,
    weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
    output: UnsafeMutablePointer<Float>, outHeight: Int, outWidth: Int, rows: Range<Int>
) where V.Scalar == Float {
    // YAMNet's (channels, stride) pairs get copies with both constant, so every tap is a constant offset from one
    // pointer per input row (with them at run time, the offsets of four pixels' 27 taps need more registers than
    // x86-64 has, and the loop spills).
    @inline(__always) func run<C: StaticValue, S: StaticValue>(_ shape: DepthwiseShape<C, S>.Type) {
        depthwiseImage(
            V.self, shape, fused, relu, input, height, width, channels, stride, weights, bias, output, outHeight,
            outWidth, rows)
    }
    switch (channels, stride) {
    case (32, 1): run(DepthwiseShape<Constant32, Constant1>.self)
    case (64, 2): run(DepthwiseShape<Constant64, Constant2>.self)
    case (128, 1): run(DepthwiseShape<Constant128, Constant1>.self)
    case (128, 2): run(DepthwiseShape<Constant128, Constant2>.self)
    case (256, 1): run(DepthwiseShape<Constant256, Constant1>.self)
    case (256, 2): run(DepthwiseShape<Constant256, Constant2>.self)
    case (512, 1): run(DepthwiseShape<Constant512, Constant1>.self)
    case (512, 2): run(DepthwiseShape<Constant512, Constant2>.self)
    case (1024, 1): run(DepthwiseShape<Constant1024, Constant1>.self)
    default: run(DepthwiseShape<RuntimeValue, RuntimeValue>.self)
    }
}

/// A number known at compile time (so a specialised copy folds it into addresses), or nil for "use the run-time
/// value".
protocol StaticValue { static var value: Int? { get } }
enum RuntimeValue: StaticValue { static var value: Int? { nil } }
enum Constant1: StaticValue { static var value: Int? { 1 } }
enum Constant2: StaticValue { static var value: Int? { 2 } }
enum Constant32: StaticValue { static var value: Int? { 32 } }
enum Constant64: StaticValue { static var value: Int? { 64 } }
enum Constant128: StaticValue { static var value: Int? { 128 } }
enum Constant256: StaticValue { static var value: Int? { 256 } }
enum Constant512: StaticValue { static var value: Int? { 512 } }
enum Constant1024: StaticValue { static var value: Int? { 1024 } }
/// Channels and stride of one depthwise layer.
enum DepthwiseShape<Channels: StaticValue, Stride: StaticValue> {}

/// The depthwise loops, specialised per shape and vector type by the compiler (generic specialisation, unlike
/// `@inline(__always)` on a function this large, always happens for concrete types). Arguments as
/// `depthwiseConvolution`'s; channels and stride are taken from the shape where it fixes them.
func depthwiseImage<V: SIMD, C: StaticValue, S: StaticValue>(
    _ vector: V.Type, _ shape: DepthwiseShape<C, S>.Type, _ fused: Bool, _ relu: (V) -> V,
    _ source: UnsafePointer<Float>,
    _ height: Int, _ width: Int, _ runtimeChannels: Int, _ runtimeStride: Int, _ weights: UnsafePointer<Float>,
    _ bias: UnsafePointer<Float>, _ output: UnsafeMutablePointer<Float>, _ outHeight: Int, _ outWidth: Int,
    _ rows: Range<Int>
) where V.Scalar == Float {
    typealias Math = ConvolutionArithmetic
    let channels = C.value ?? runtimeChannels, stride = S.value ?? runtimeStride
    let lanes = V.scalarCount
    let step = MemoryLayout<V>.stride
    // Where the first tap of output (0, 0) sits in the bordered input: row/column 1 - padding before.
    let top = 1 - Math.padBefore(input: height, output: outHeight, stride: stride)
    let left = 1 - Math.padBefore(input: width, output: outWidth, stride: stride)
    let rowBytes = (width + 2) * channels * 4
    let pixel = channels * 4
    let input = UnsafeRawPointer(source)
    let vectors = channels / lanes
    let weightBase = UnsafeRawPointer(weights), biasBase = UnsafeRawPointer(bias)
    // Pixel-outer, channel-inner: input and output are read and written in address order (the prefetchers
    // follow, and no store lands 4 KB from the next loads); the 9 weight vectors come from L1 each time.
    for oy in rows.clamped(to: 0..<outHeight) {
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
                /// Output `i` of the block: bias, then the nine taps in order (one multiply-add chain).
                @inline(__always) func output(_ i: Int) -> V {
                    let r0 = row0 + i * stride * pixel + offset, r1 = r0 + rowBytes, r2 = r1 + rowBytes
                    var acc = b
                    acc = Math.multiplyAdd(acc, r0.load(as: V.self), w0, fused: fused)
                    acc = Math.multiplyAdd(acc, r0.load(fromByteOffset: pixel, as: V.self), w1, fused: fused)
                    acc = Math.multiplyAdd(acc, r0.load(fromByteOffset: 2 * pixel, as: V.self), w2, fused: fused)
                    acc = Math.multiplyAdd(acc, r1.load(as: V.self), w3, fused: fused)
                    acc = Math.multiplyAdd(acc, r1.load(fromByteOffset: pixel, as: V.self), w4, fused: fused)
                    acc = Math.multiplyAdd(acc, r1.load(fromByteOffset: 2 * pixel, as: V.self), w5, fused: fused)
                    acc = Math.multiplyAdd(acc, r2.load(as: V.self), w6, fused: fused)
                    acc = Math.multiplyAdd(acc, r2.load(fromByteOffset: pixel, as: V.self), w7, fused: fused)
                    acc = Math.multiplyAdd(acc, r2.load(fromByteOffset: 2 * pixel, as: V.self), w8, fused: fused)
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
