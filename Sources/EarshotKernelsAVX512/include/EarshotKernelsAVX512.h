// EarshotKernelsAVX512: the 6 x 64 matrix-product tile for x86-64 CPUs with AVX-512 F, CD, BW, DQ and VL on top of
// x86-64-v3 (Intel Skylake-SP / Ice Lake and later, AMD Zen 4 and later), in C so that only these functions are
// compiled for that instruction set (`__attribute__((target(...)))` on each, `EARSHOT_AVX512` in AVX512GEMM.c) with
// no build flags. Earshot calls in here only where /proc/cpuinfo lists those features (`GEMMKernel.current` in
// Sources/EarshotModel/YAMNet/PackedGEMM.swift). Nothing here may be called on a CPU without them. On other
// architectures the module is empty.
//
// Why a second tile: with 32 vector registers of 16 floats, a 6 x 64 tile keeps 24 accumulators and loads 4 weight
// vectors and broadcasts 6 inputs per 24 multiply-adds (the AVX2 6 x 16 tile: 2 and 6 per 12), so fewer loads and
// instructions per multiply-add. Measured on an AMD EPYC (Zen 4, whose 512-bit units do the work of two 256-bit
// ones: the same peak) with whole-network batches: see README, Performance.
//
// Layout the callers must provide (see `PackedWeights` in the Earshot module): weights packed into panels of 64
// columns, `[k, 64]` row-major per panel (unaligned loads are used); the panel's bias as 64 floats; six input rows of
// `k` floats anywhere; each output row 64 writable floats. Every sum is taken over k in order with one fused
// multiply-add per step, then the bias, then ReLU: the same arithmetic, in the same order, as the AVX2 tile (and as
// the Swift tile this replaces), so the two give identical results.
#ifndef EARSHOT_KERNELS_AVX512_H
#define EARSHOT_KERNELS_AVX512_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__x86_64__)

#pragma clang assume_nonnull begin

/// Columns of one packed weight panel used by `gemmTile6x64` and `gemmRow64`.
enum { avx512PanelWidth = 64 };

/// `o_r[n] = act(sum_k a_r[k] * panel[k * 64 + n] + bias[n])` for rows r = 0...5 and n = 0..<64: a 6 x 64 register
/// tile (24 accumulators of 16 floats).
/// - Parameters:
///   - r0...r5: the six input rows, `k` floats each.
///   - panel: `[k, 64]` weights; `bias`: 64 floats.
///   - o0...o5: the six output rows, 64 floats each.
void gemmTile6x64(
    const float *r0, const float *r1, const float *r2, const float *r3, const float *r4, const float *r5,
    ptrdiff_t k, const float *panel, const float *bias,
    float *o0, float *o1, float *o2, float *o3, float *o4, float *o5, bool applyReLU);

/// One row of `gemmTile6x64` (a matrix-vector product over one panel), summed in exactly the same order.
/// - Parameters: as `gemmTile6x64`, for the single row `a` (`k` floats) into `out` (64 floats).
void gemmRow64(const float *a, ptrdiff_t k, const float *panel, const float *bias, float *out, bool applyReLU);

#pragma clang assume_nonnull end

#endif // __x86_64__

#endif // EARSHOT_KERNELS_AVX512_H
