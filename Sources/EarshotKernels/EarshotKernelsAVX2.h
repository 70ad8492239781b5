// Private to EarshotKernels: the per-function target and the small helpers of AVX2GEMM.c and Convolutions.c.
#ifndef EARSHOT_KERNELS_AVX2_H
#define EARSHOT_KERNELS_AVX2_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

// Floating-point contraction off: every multiply-add below is an explicit `_mm256_fmadd_ps`, and nothing else may be
// fused (it would change results). The intrinsics contain nothing to contract; this makes it a rule.
#pragma STDC FP_CONTRACT OFF

/// Compiles a function for x86-64-v3 (AVX, AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT: exactly the features Earshot
/// checks at run time, `X86Features.hasAVX2AndFMA`), scheduled for Haswell, as `-target-cpu haswell` once did for
/// the whole module.
#define EARSHOT_AVX2_TARGET "avx,avx2,fma,bmi,bmi2,f16c,movbe,lzcnt,tune=haswell"
#define EARSHOT_AVX2 __attribute__((target(EARSHOT_AVX2_TARGET)))
#define EARSHOT_AVX2_INLINE static inline __attribute__((always_inline, target(EARSHOT_AVX2_TARGET)))

/// `v < 0 ? 0 : v` lane by lane, as Swift's `v.replacing(with: 0, where: v .< 0)`: `vmaxps` returns its second
/// operand unless the first is greater, so NaN and -0 pass through unchanged.
EARSHOT_AVX2_INLINE __m256 earshotReLU8(__m256 v) { return _mm256_max_ps(_mm256_setzero_ps(), v); }

/// Stores `v0 + z0` and `v1 + z1` (16 floats) at `out`, after ReLU when `applyReLU`.
EARSHOT_AVX2_INLINE void earshotStore2x8(float *out, __m256 v0, __m256 v1, __m256 z0, __m256 z1, bool applyReLU)
{
    __m256 s0 = _mm256_add_ps(v0, z0), s1 = _mm256_add_ps(v1, z1);
    if (applyReLU) {
        s0 = earshotReLU8(s0);
        s1 = earshotReLU8(s1);
    }
    _mm256_storeu_ps(out, s0);
    _mm256_storeu_ps(out + 8, s1);
}

#endif // EARSHOT_KERNELS_AVX2_H
