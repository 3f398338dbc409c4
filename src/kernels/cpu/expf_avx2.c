/* expf_avx2.c — the SIMD tables' expf_row (expf_simd.h) eight values at a time through libmvec's AVX2 expf.
 *
 * _ZGVdN8v_expf is the x86-64 vector-ABI name of glibc's 8-lane AVX2 expf (the name GCC emits for
 * a vectorised expf call; libmvec exports it).  Calling it by name keeps -ffast-math, which GCC
 * needs before it vectorises expf itself, out of the build. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if !defined(__clang__) /* clang (the fuzz build) compiles this file for -march=native as is */
#pragma GCC target("avx2,fma,no-avx512f")
#endif

#include "kernels/cpu/expf_simd.h"

#include <immintrin.h>
#include <string.h>

__m256 _ZGVdN8v_expf(__m256 x);

void di_simd_expf_row(const float *x, size_t n, float shift, float scale, float *out) {
    const __m256 s = _mm256_set1_ps(shift), k = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _ZGVdN8v_expf(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s), k)));
    if (i < n) { /* the tail through the same vector function, padded with exp(0) */
        float tail[8] = {shift, shift, shift, shift, shift, shift, shift, shift};
        memcpy(tail, x + i, (n - i) * sizeof *x);
        _mm256_storeu_ps(tail, _ZGVdN8v_expf(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(tail), s), k)));
        memcpy(out + i, tail, (n - i) * sizeof *out);
    }
}

#endif /* __x86_64__ */
