// The two convolutions of YAMNet that are not matrix products, with 8-float vectors and FMA (AVX2) for x86-64-v3:
// the first 3x3 convolution (one input channel) and the 3x3 depthwise convolutions, both over NHWC activations with
// TensorFlow's "same" padding, with the folded batch-norm bias and ReLU applied in the same pass, vectorised across
// channels. Shapes and layouts: include/EarshotKernels.h.
//
// The same loops as Earshot's generic Swift ones (`firstLayerConvolution` and `depthwiseConvolution` in
// Sources/EarshotModel/YAMNet/ConvolutionKernels.swift, used without AVX2 and on aarch64), and the same arithmetic
// as their AVX2 instances that this file replaces: each output starts from the bias and adds its nine taps in order, one
// fused multiply-add each, then ReLU (`0 > v ? 0 : v`), so results are bit for bit theirs.
#if defined(__x86_64__)

#include <string.h>

#include "EarshotKernels.h"
#include "EarshotKernelsAVX2.h"

/// "Same" padding of a 3x3 kernel: the rows (or columns) of zeros before the first one. TensorFlow pads
/// `max((output - 1) * stride + 3 - input, 0)` in total and puts the odd one after.
static inline ptrdiff_t padBefore(ptrdiff_t input, ptrdiff_t output, ptrdiff_t stride)
{
    ptrdiff_t total = (output - 1) * stride + 3 - input;
    return (total > 0 ? total : 0) / 2;
}

EARSHOT_AVX2 void firstLayerConvolutionAVX2(
    const float *input, const float *weights, const float *bias, float *padded, float *output,
    ptrdiff_t rowStart, ptrdiff_t rowEnd)
{
    enum { inHeight = 96, inWidth = 64, outHeight = 48, outWidth = 32, filters = 32, lanes = 8 };
    // Padding is 0 before and 1 after in both directions ((48 - 1) * 2 + 3 - 96 = 1).
    enum { paddedWidth = inWidth + 1 };
    for (ptrdiff_t y = 0; y < inHeight; y++) {
        memcpy(padded + y * paddedWidth, input + y * inWidth, inWidth * sizeof(float));
        padded[y * paddedWidth + inWidth] = 0;
    }
    memset(padded + inHeight * paddedWidth, 0, paddedWidth * sizeof(float));

    ptrdiff_t first = rowStart > 0 ? rowStart : 0, end = rowEnd < outHeight ? rowEnd : outHeight;
    for (ptrdiff_t block = 0; block < filters / lanes; block++) {
        const float *w = weights + block * lanes;
        __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + filters), w2 = _mm256_loadu_ps(w + 2 * filters);
        __m256 w3 = _mm256_loadu_ps(w + 3 * filters), w4 = _mm256_loadu_ps(w + 4 * filters);
        __m256 w5 = _mm256_loadu_ps(w + 5 * filters), w6 = _mm256_loadu_ps(w + 6 * filters);
        __m256 w7 = _mm256_loadu_ps(w + 7 * filters), w8 = _mm256_loadu_ps(w + 8 * filters);
        __m256 b = _mm256_loadu_ps(bias + block * lanes);
        for (ptrdiff_t oy = first; oy < end; oy++) {
            const float *row0 = padded + 2 * oy * paddedWidth;
            const float *row1 = row0 + paddedWidth;
            const float *row2 = row1 + paddedWidth;
            float *out = output + ((oy + 1) * (outWidth + 2) + 1) * filters + block * lanes;
            for (ptrdiff_t ox = 0; ox < outWidth; ox++) {
                ptrdiff_t x = 2 * ox;
                __m256 acc = b;
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row0 + x), w0, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row0 + x + 1), w1, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row0 + x + 2), w2, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row1 + x), w3, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row1 + x + 1), w4, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row1 + x + 2), w5, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row2 + x), w6, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row2 + x + 1), w7, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(row2 + x + 2), w8, acc);
                _mm256_storeu_ps(out + ox * filters, earshotReLU8(acc));
            }
        }
    }
}

/// Output pixel `r0` of a depthwise layer for one vector of channels: the bias, then the nine taps in order (one
/// multiply-add chain). `r0` is the top-left tap; `pixel` and `row` are the distances to the next column and row.
EARSHOT_AVX2_INLINE __m256 depthwisePixel(
    const float *r0, ptrdiff_t pixel, ptrdiff_t row, const __m256 w[9], __m256 b)
{
    const float *r1 = r0 + row, *r2 = r1 + row;
    __m256 acc = b;
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r0), w[0], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + pixel), w[1], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + 2 * pixel), w[2], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r1), w[3], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + pixel), w[4], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + 2 * pixel), w[5], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r2), w[6], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + pixel), w[7], acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + 2 * pixel), w[8], acc);
    return acc;
}

/// The depthwise loops. Inlined into `depthwiseConvolutionAVX2` once per (channels, stride) pair of YAMNet with both
/// constant, so every tap is a constant offset from one pointer per input row (with them at run time, the offsets
/// of four pixels' 27 taps need more registers than x86-64 has, and the loop spills), and once with both at run time.
EARSHOT_AVX2_INLINE void depthwiseImage(
    const float *input, ptrdiff_t height, ptrdiff_t width, ptrdiff_t channels, ptrdiff_t stride,
    const float *weights, const float *bias, float *output, ptrdiff_t outHeight, ptrdiff_t outWidth,
    ptrdiff_t rowStart, ptrdiff_t rowEnd)
{
    enum { lanes = 8 };
    // Where the first tap of output (0, 0) sits in the bordered input: row/column 1 - padding before.
    ptrdiff_t top = 1 - padBefore(height, outHeight, stride);
    ptrdiff_t left = 1 - padBefore(width, outWidth, stride);
    ptrdiff_t row = (width + 2) * channels, pixel = channels;
    ptrdiff_t vectors = channels / lanes;
    ptrdiff_t first = rowStart > 0 ? rowStart : 0, end = rowEnd < outHeight ? rowEnd : outHeight;
    // Pixel-outer, channel-inner: input and output are read and written in address order (the prefetchers follow,
    // and no store lands 4 KB from the next loads); the 9 weight vectors come from L1 each time.
    for (ptrdiff_t oy = first; oy < end; oy++) {
        const float *row0 = input + (oy * stride + top) * row + left * pixel;
        float *out = output + oy * outWidth * channels;
        ptrdiff_t remaining = outWidth;
        while (remaining > 0) {
            ptrdiff_t block = remaining < 4 ? remaining : 4;
            for (ptrdiff_t vector = 0; vector < vectors; vector++) {
                ptrdiff_t offset = vector * lanes;
                const float *wp = weights + vector * 9 * lanes;
                __m256 w[9];
                for (int tap = 0; tap < 9; tap++) w[tap] = _mm256_loadu_ps(wp + tap * lanes);
                __m256 b = _mm256_loadu_ps(bias + offset);
                const float *r0 = row0 + offset;
                if (block == 4) {
                    // Four independent chains keep the FMA units busy (one alone waits on each FMA's latency).
                    __m256 a0 = depthwisePixel(r0, pixel, row, w, b);
                    __m256 a1 = depthwisePixel(r0 + stride * pixel, pixel, row, w, b);
                    __m256 a2 = depthwisePixel(r0 + 2 * stride * pixel, pixel, row, w, b);
                    __m256 a3 = depthwisePixel(r0 + 3 * stride * pixel, pixel, row, w, b);
                    _mm256_storeu_ps(out + offset, earshotReLU8(a0));
                    _mm256_storeu_ps(out + pixel + offset, earshotReLU8(a1));
                    _mm256_storeu_ps(out + 2 * pixel + offset, earshotReLU8(a2));
                    _mm256_storeu_ps(out + 3 * pixel + offset, earshotReLU8(a3));
                } else {
                    for (ptrdiff_t i = 0; i < block; i++) {
                        __m256 a = depthwisePixel(r0 + i * stride * pixel, pixel, row, w, b);
                        _mm256_storeu_ps(out + i * pixel + offset, earshotReLU8(a));
                    }
                }
            }
            row0 += block * stride * pixel;
            out += block * pixel;
            remaining -= block;
        }
    }
}

EARSHOT_AVX2 void depthwiseConvolutionAVX2(
    const float *input, ptrdiff_t height, ptrdiff_t width, ptrdiff_t channels, ptrdiff_t stride,
    const float *weights, const float *bias, float *output, ptrdiff_t outHeight, ptrdiff_t outWidth,
    ptrdiff_t rowStart, ptrdiff_t rowEnd)
{
#define EARSHOT_DEPTHWISE(C, S) \
    depthwiseImage(input, height, width, C, S, weights, bias, output, outHeight, outWidth, rowStart, rowEnd)
    if (channels == 32 && stride == 1) EARSHOT_DEPTHWISE(32, 1);
    else if (channels == 64 && stride == 2) EARSHOT_DEPTHWISE(64, 2);
    else if (channels == 128 && stride == 1) EARSHOT_DEPTHWISE(128, 1);
    else if (channels == 128 && stride == 2) EARSHOT_DEPTHWISE(128, 2);
    else if (channels == 256 && stride == 1) EARSHOT_DEPTHWISE(256, 1);
    else if (channels == 256 && stride == 2) EARSHOT_DEPTHWISE(256, 2);
    else if (channels == 512 && stride == 1) EARSHOT_DEPTHWISE(512, 1);
    else if (channels == 512 && stride == 2) EARSHOT_DEPTHWISE(512, 2);
    else if (channels == 1024 && stride == 1) EARSHOT_DEPTHWISE(1024, 1);
    else EARSHOT_DEPTHWISE(channels, stride);
#undef EARSHOT_DEPTHWISE
}

#endif // __x86_64__
