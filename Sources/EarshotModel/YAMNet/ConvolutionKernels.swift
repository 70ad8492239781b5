// The two convolutions that are not matrix products: YAMNet's first 3x3 convolution (one input channel) and the
// 3x3 depthwise convolutions. Their loops live in EarshotKernels (generic over the vector type, compiled into each
// caller); here they run with `KernelVector`, or, where the model's kernel is `.avx2` or `.avx512`, with EarshotKernels' AVX2
// instantiations.
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
    /// and ReLU; see `firstLayerConvolution` in EarshotKernels for the shapes. Only the output `rows` are computed.
    package static func firstLayer(
        kernel: GEMMKernel, input: UnsafePointer<Float>, weights: UnsafePointer<Float>, bias: UnsafePointer<Float>,
        padded: UnsafeMutablePointer<Float>, output: UnsafeMutablePointer<Float>, rows: Range<Int> = 0..<48
    ) {
        #if arch(x86_64)
        if kernel == .avx2 || kernel == .avx512 {
            firstLayerConvolutionAVX2(input: input, weights: weights, bias: bias, padded: padded, output: output, rows: rows)
            return
        }
        #endif
        firstLayerConvolution(
            KernelVector.self, fused: fused, relu: relu, input: input, weights: weights, bias: bias, padded: padded,
            output: output, rows: rows)
    }

    /// A 3x3 depthwise convolution with "same" padding, plus bias and ReLU; see `depthwiseConvolution` in
    /// EarshotKernels for the shapes. `weights` must be laid out with `lanes(kernel)` (`vectorMajor`). Only the
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
                bias: bias, output: output, outHeight: outHeight, outWidth: outWidth, rows: rows)
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
