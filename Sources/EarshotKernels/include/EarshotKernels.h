// EarshotKernels: the inner loops of YAMNet's matrix products and convolutions for x86-64 CPUs with AVX2 and FMA
// (x86-64-v3: Haswell and Zen onwards), in C so that only these functions are compiled for that instruction set
// (`__attribute__((target(...)))` on each, `EARSHOT_AVX2` in EarshotKernelsAVX2.h): no build flags, and the rest
// of Earshot keeps the 2003 x86-64 baseline, so one binary runs on every x86-64 CPU. Earshot reads /proc/cpuinfo
// once and calls in here only where the CPU has those features (`GEMMKernel.current` in
// Sources/EarshotModel/YAMNet/PackedGEMM.swift); elsewhere it uses OpenBLAS and its own generic Swift loops.
// Nothing here may be called on a CPU without them. On other architectures the module is empty.
//
// Every function takes the same sums in the same order as Earshot's earlier Swift kernels (one fused multiply-add
// per step, then the bias, then ReLU as `v < 0 ? 0 : v`), so results are bit for bit theirs.
#ifndef EARSHOT_KERNELS_H
#define EARSHOT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__x86_64__)

#pragma clang assume_nonnull begin

/// Columns of one packed weight panel (`gemmTile6x16`, `gemmRow16`) and rows of the register tile.
enum { avx2PanelWidth = 16, avx2TileRows = 6 };

/// Lanes of the vectors the AVX2 convolutions use (the depthwise weights must be laid out for it).
enum { avx2ConvolutionLanes = 8 };

// Layout the callers of the matrix-product kernels provide (see `PackedWeights` in the Earshot module): weights
// packed into panels of 16 columns, `[k, 16]` row-major per panel (unaligned loads are used); the panel's bias as 16
// floats; six input rows of `k` floats anywhere; each output row 16 writable floats.

/// `o_r[n] = act(sum_k a_r[k] * panel[k * 16 + n] + bias[n])` for rows r = 0...5 and n = 0..<16: a 6 x 16 register
/// tile (12 accumulators of 8 floats, one AVX2 register each), every sum taken over k in order with one fused
/// multiply-add per step, then the bias, then ReLU when `applyReLU`.
/// - Parameters:
///   - r0...r5: the six input rows, `k` floats each (anywhere: a tile may span two blocks of rows).
///   - panel: `[k, 16]` weights; `bias`: 16 floats.
///   - o0...o5: the six output rows, 16 floats each.
void gemmTile6x16(
    const float *r0, const float *r1, const float *r2, const float *r3, const float *r4, const float *r5,
    ptrdiff_t k, const float *panel, const float *bias,
    float *o0, float *o1, float *o2, float *o3, float *o4, float *o5, bool applyReLU);

/// One row of `gemmTile6x16` (a matrix-vector product over one panel), summed in exactly the same order, so a row's
/// result does not depend on which of the two computed it (on how patches were batched).
/// - Parameters: as `gemmTile6x16`, for the single row `a` (`k` floats) into `out` (16 floats).
void gemmRow16(const float *a, ptrdiff_t k, const float *panel, const float *bias, float *out, bool applyReLU);

/// YAMNet's first layer with 8-float vectors and FMA: a 3x3 stride-2 convolution of one `[96, 64]` log-mel patch to
/// `[48, 32, 32]`, plus bias and ReLU.
/// - Parameters:
///   - input: the patch, `[96, 64]` row-major.
///   - weights: `[3, 3, 32]` (tap-major, filter fastest), batch norm folded; `bias`: `[32]`.
///   - padded: scratch of `97 * 65` floats (the patch with the zero row and column "same" padding adds).
///   - output: `[50, 34, 32]`: the `[48, 32, 32]` NHWC result inside a one-position border (left untouched).
///   - rowStart, rowEnd: the output rows to compute (clamped to 0..<48); the others are left untouched. Each row's
///     values do not depend on which other rows are computed.
__attribute__((swift_name("firstLayerConvolutionAVX2(input:weights:bias:padded:output:rowStart:rowEnd:)")))
void firstLayerConvolutionAVX2(
    const float *input, const float *weights, const float *bias, float *padded, float *output,
    ptrdiff_t rowStart, ptrdiff_t rowEnd);

/// A 3x3 depthwise convolution with "same" padding, plus bias and ReLU, with 8-float vectors and FMA.
/// - Parameters:
///   - input: `[height + 2, width + 2, channels]`: the NHWC image inside a zero border (the padding); `channels` a
///     multiple of 8.
///   - weights: `[channels / 8, 3, 3, 8]`, batch norm folded; `bias`: `[channels]`.
///   - output: `[outHeight, outWidth, channels]` dense, `outHeight = ceil(height / stride)` (likewise the width).
///   - rowStart, rowEnd: the output rows to compute (clamped to `0..<outHeight`); the others are left untouched.
///     Each row's values do not depend on which other rows are computed.
__attribute__((swift_name("depthwiseConvolutionAVX2(input:height:width:channels:stride:weights:bias:output:"
                          "outHeight:outWidth:rowStart:rowEnd:)")))
void depthwiseConvolutionAVX2(
    const float *input, ptrdiff_t height, ptrdiff_t width, ptrdiff_t channels, ptrdiff_t stride,
    const float *weights, const float *bias, float *output, ptrdiff_t outHeight, ptrdiff_t outWidth,
    ptrdiff_t rowStart, ptrdiff_t rowEnd);

#pragma clang assume_nonnull end

#endif // __x86_64__

#endif // EARSHOT_KERNELS_H
