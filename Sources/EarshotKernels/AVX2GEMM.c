// The inner loops of YAMNet's matrix products for x86-64-v3 (AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT; Haswell and Zen
// onwards). Each function carries `__attribute__((target(...)))` with those features (`EARSHOT_AVX2`, in
// EarshotKernelsAVX2.h): clang compiles it, and only it, for them, as the whole module once was with `-target-cpu
// haswell`, with no build flag (SwiftPM refuses unsafe flags in a versioned dependency). Callers and layout: see
// include/EarshotKernels.h.
//
// Bit for bit the arithmetic of the Swift tile this replaces: accumulators start at +0, one fused multiply-add per
// step of k (`_mm256_fmadd_ps`, k in order), then the bias (`_mm256_add_ps`), then ReLU as `0 > v ? 0 : v`
// (`_mm256_max_ps(0, v)`: keeps NaN and -0, as Swift's `v.replacing(with: 0, where: v .< 0)` does). Only
// intrinsics, no `*` or `+` on vectors, so floating-point contraction has nothing to fuse.
#if defined(__x86_64__)

#include "EarshotKernels.h"
#include "EarshotKernelsAVX2.h"

EARSHOT_AVX2 void gemmTile6x16(
    const float *r0, const float *r1, const float *r2, const float *r3, const float *r4, const float *r5,
    ptrdiff_t k, const float *panel, const float *bias,
    float *o0, float *o1, float *o2, float *o3, float *o4, float *o5, bool applyReLU)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
    __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps();
    __m256 c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    const float *b = panel;
    for (ptrdiff_t index = 0; index < k; index++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        b += 16;
        __m256 x = _mm256_broadcast_ss(r0 + index);
        c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(r1 + index);
        c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(r2 + index);
        c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(r3 + index);
        c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(r4 + index);
        c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(r5 + index);
        c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    __m256 z0 = _mm256_loadu_ps(bias), z1 = _mm256_loadu_ps(bias + 8);
    earshotStore2x8(o0, c00, c01, z0, z1, applyReLU);
    earshotStore2x8(o1, c10, c11, z0, z1, applyReLU);
    earshotStore2x8(o2, c20, c21, z0, z1, applyReLU);
    earshotStore2x8(o3, c30, c31, z0, z1, applyReLU);
    earshotStore2x8(o4, c40, c41, z0, z1, applyReLU);
    earshotStore2x8(o5, c50, c51, z0, z1, applyReLU);
}

EARSHOT_AVX2 void gemmRow16(
    const float *a, ptrdiff_t k, const float *panel, const float *bias, float *out, bool applyReLU)
{
    __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
    const float *b = panel;
    for (ptrdiff_t index = 0; index < k; index++) {
        __m256 x = _mm256_broadcast_ss(a + index);
        c0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b), c0);
        c1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 8), c1);
        b += 16;
    }
    earshotStore2x8(out, c0, c1, _mm256_loadu_ps(bias), _mm256_loadu_ps(bias + 8), applyReLU);
}

#endif // __x86_64__
