// The 6 x 64 matrix-product tile for AVX-512 (F, CD, BW, DQ, VL on top of x86-64-v3). Each function carries
// `__attribute__((target(...)))` with those features (`EARSHOT_AVX512` below): clang compiles it, and only it, for
// them, as the whole module once was with `-target-cpu skylake-avx512`, with no build flag (SwiftPM refuses unsafe
// flags in a versioned dependency). Callers
// and layout: see include/EarshotKernelsAVX512.h.
//
// Bit for bit the arithmetic of the Swift tile this replaces (and of the AVX2 tile): accumulators start at +0, one
// fused multiply-add per step of k (`_mm512_fmadd_ps`, k in order), then the bias (`_mm512_add_ps`), then ReLU as
// `0 > v ? 0 : v` (`_mm512_max_ps(0, v)`: keeps NaN and -0, as Swift's `v.replacing(with: 0, where: v .< 0)`
// does). Only intrinsics, no `*` or `+` on vectors, so floating-point contraction has nothing to fuse.
#if defined(__x86_64__)

#include <immintrin.h>

#include "EarshotKernelsAVX512.h"

#pragma STDC FP_CONTRACT OFF

/// Compiles a function for AVX-512 F, CD, BW, DQ and VL on top of x86-64-v3 (exactly the features Earshot checks at
/// run time, `X86Features.hasAVX512`), scheduled for Skylake-SP, as `-target-cpu skylake-avx512` once did for the
/// whole module.
#define EARSHOT_AVX512_TARGET \
    "avx,avx2,fma,bmi,bmi2,f16c,movbe,lzcnt,avx512f,avx512cd,avx512bw,avx512dq,avx512vl,tune=skylake-avx512"
#define EARSHOT_AVX512 __attribute__((target(EARSHOT_AVX512_TARGET)))
#define EARSHOT_AVX512_INLINE static inline __attribute__((always_inline, target(EARSHOT_AVX512_TARGET)))

/// Stores `v0 + z0` ... `v3 + z3` (64 floats) at `out`, after ReLU when `applyReLU`.
EARSHOT_AVX512_INLINE void store4x16(
    float *out, __m512 v0, __m512 v1, __m512 v2, __m512 v3, __m512 z0, __m512 z1, __m512 z2, __m512 z3,
    bool applyReLU)
{
    __m512 s0 = _mm512_add_ps(v0, z0), s1 = _mm512_add_ps(v1, z1);
    __m512 s2 = _mm512_add_ps(v2, z2), s3 = _mm512_add_ps(v3, z3);
    if (applyReLU) {
        __m512 zero = _mm512_setzero_ps();
        s0 = _mm512_max_ps(zero, s0);
        s1 = _mm512_max_ps(zero, s1);
        s2 = _mm512_max_ps(zero, s2);
        s3 = _mm512_max_ps(zero, s3);
    }
    _mm512_storeu_ps(out, s0);
    _mm512_storeu_ps(out + 16, s1);
    _mm512_storeu_ps(out + 32, s2);
    _mm512_storeu_ps(out + 48, s3);
}

EARSHOT_AVX512 void gemmTile6x64(
    const float *r0, const float *r1, const float *r2, const float *r3, const float *r4, const float *r5,
    ptrdiff_t k, const float *panel, const float *bias,
    float *o0, float *o1, float *o2, float *o3, float *o4, float *o5, bool applyReLU)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps(), c02 = _mm512_setzero_ps(), c03 = _mm512_setzero_ps();
    __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps(), c12 = _mm512_setzero_ps(), c13 = _mm512_setzero_ps();
    __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps(), c22 = _mm512_setzero_ps(), c23 = _mm512_setzero_ps();
    __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps(), c32 = _mm512_setzero_ps(), c33 = _mm512_setzero_ps();
    __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps(), c42 = _mm512_setzero_ps(), c43 = _mm512_setzero_ps();
    __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps(), c52 = _mm512_setzero_ps(), c53 = _mm512_setzero_ps();
    const float *b = panel;
    for (ptrdiff_t index = 0; index < k; index++) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        __m512 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
        b += 64;
        __m512 x = _mm512_set1_ps(r0[index]);
        c00 = _mm512_fmadd_ps(x, b0, c00); c01 = _mm512_fmadd_ps(x, b1, c01);
        c02 = _mm512_fmadd_ps(x, b2, c02); c03 = _mm512_fmadd_ps(x, b3, c03);
        x = _mm512_set1_ps(r1[index]);
        c10 = _mm512_fmadd_ps(x, b0, c10); c11 = _mm512_fmadd_ps(x, b1, c11);
        c12 = _mm512_fmadd_ps(x, b2, c12); c13 = _mm512_fmadd_ps(x, b3, c13);
        x = _mm512_set1_ps(r2[index]);
        c20 = _mm512_fmadd_ps(x, b0, c20); c21 = _mm512_fmadd_ps(x, b1, c21);
        c22 = _mm512_fmadd_ps(x, b2, c22); c23 = _mm512_fmadd_ps(x, b3, c23);
        x = _mm512_set1_ps(r3[index]);
        c30 = _mm512_fmadd_ps(x, b0, c30); c31 = _mm512_fmadd_ps(x, b1, c31);
        c32 = _mm512_fmadd_ps(x, b2, c32); c33 = _mm512_fmadd_ps(x, b3, c33);
        x = _mm512_set1_ps(r4[index]);
        c40 = _mm512_fmadd_ps(x, b0, c40); c41 = _mm512_fmadd_ps(x, b1, c41);
        c42 = _mm512_fmadd_ps(x, b2, c42); c43 = _mm512_fmadd_ps(x, b3, c43);
        x = _mm512_set1_ps(r5[index]);
        c50 = _mm512_fmadd_ps(x, b0, c50); c51 = _mm512_fmadd_ps(x, b1, c51);
        c52 = _mm512_fmadd_ps(x, b2, c52); c53 = _mm512_fmadd_ps(x, b3, c53);
    }
    __m512 z0 = _mm512_loadu_ps(bias), z1 = _mm512_loadu_ps(bias + 16);
    __m512 z2 = _mm512_loadu_ps(bias + 32), z3 = _mm512_loadu_ps(bias + 48);
    store4x16(o0, c00, c01, c02, c03, z0, z1, z2, z3, applyReLU);
    store4x16(o1, c10, c11, c12, c13, z0, z1, z2, z3, applyReLU);
    store4x16(o2, c20, c21, c22, c23, z0, z1, z2, z3, applyReLU);
    store4x16(o3, c30, c31, c32, c33, z0, z1, z2, z3, applyReLU);
    store4x16(o4, c40, c41, c42, c43, z0, z1, z2, z3, applyReLU);
    store4x16(o5, c50, c51, c52, c53, z0, z1, z2, z3, applyReLU);
}

EARSHOT_AVX512 void gemmRow64(
    const float *a, ptrdiff_t k, const float *panel, const float *bias, float *out, bool applyReLU)
{
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps(), c3 = _mm512_setzero_ps();
    const float *b = panel;
    for (ptrdiff_t index = 0; index < k; index++) {
        __m512 x = _mm512_set1_ps(a[index]);
        c0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b), c0);
        c1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b + 16), c1);
        c2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b + 32), c2);
        c3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b + 48), c3);
        b += 64;
    }
    store4x16(out, c0, c1, c2, c3, _mm512_loadu_ps(bias), _mm512_loadu_ps(bias + 16), _mm512_loadu_ps(bias + 32),
              _mm512_loadu_ps(bias + 48), applyReLU);
}

#endif // __x86_64__
