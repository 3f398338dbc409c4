/* expf_exact_avx2.c — expf eight at a time with the bits of glibc's scalar expf, for the
 * attention softmax (attn_avx2.c), whose reference calls expf once per (head, key): at the
 * medium model's 8 heads x 80 keys those calls cost as much as the dot products.
 *
 * glibc (2.27 on) computes expf in double precision: k = round(x·32/ln2) through the 1.5·2^52
 * shift, r = x·32/ln2 − k, 2^(k/32) from a 32-entry table of 2^(i/32) with the exponent added
 * in the integer domain, a degree-3 polynomial in r, one rounding to float at the end; on a CPU
 * with FMA (the only one that runs these kernels) it takes its FMA build, in which the steps
 * below are fused exactly as written here.  The same operations on four doubles per register
 * give the same bits.  Inputs outside its main path (NaN, x > 88.72, x < −103.28) go to expf
 * itself.  Whether this libm gives these bits is checked once against expf on sample points;
 * where it does not, the row takes expf throughout (di_attn_expf_row stays exact either way).
 * tests/unit/test_attn_kernels.c compares the two on a dense sweep. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,no-avx512f")
#endif

#include "kernels/cpu/attn_lanes.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

static int64_t exp2_table[32]; /* bits of 2^(i/32) less i << 47 (expf_exact_body.h fills it) */

/* Main-path range of glibc's expf: outside it, expf's own special cases. */
#define EXP_MAIN_HI 0x1.62e42ep6f   /* above: overflow */
#define EXP_MAIN_LO -0x1.9d1d9ep6f  /* below: (may) underflow */

/* Four lanes of the main path. */
static inline __attribute__((always_inline)) __m128 expf4(__m128 x) {
    const __m256d inv_ln2_n = _mm256_set1_pd(0x1.71547652b82fep+5), shift = _mm256_set1_pd(0x1.8p52);
    const __m256d c0 = _mm256_set1_pd(0x1.c6af84b912394p-20), c1 = _mm256_set1_pd(0x1.ebfce50fac4f3p-13);
    const __m256d c2 = _mm256_set1_pd(0x1.62e42ff0c52d6p-6), one = _mm256_set1_pd(1.0);
    __m256d xd = _mm256_cvtps_pd(x);
    __m256d kd = _mm256_fmadd_pd(inv_ln2_n, xd, shift); /* k + shift, rounded once */
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
    __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i t = _mm256_add_epi64(_mm256_i64gather_epi64((const long long *)exp2_table, idx, 8), _mm256_slli_epi64(ki, 47));
    __m256d s = _mm256_castsi256_pd(t);
    __m256d z = _mm256_fmadd_pd(r, c0, c1), r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, c2, one);
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

/* Eight lanes: the main path, then expf for lanes outside it (rare: never below the softmax's
 * largest term, but far-below ones underflow to 0 there too, so they are checked). */
static inline __attribute__((always_inline)) __m256 expf8(__m256 x) {
    __m256 y = _mm256_set_m128(expf4(_mm256_extractf128_ps(x, 1)), expf4(_mm256_castps256_ps128(x)));
    __m256 in = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(EXP_MAIN_LO), _CMP_GE_OQ),
                              _mm256_cmp_ps(x, _mm256_set1_ps(EXP_MAIN_HI), _CMP_LE_OQ));
    unsigned out = (unsigned)_mm256_movemask_ps(in) ^ 0xFFu;
    if (out) {
        float xs[8], ys[8];
        _mm256_storeu_ps(xs, x);
        _mm256_storeu_ps(ys, y);
        for (int l = 0; l < 8; l++)
            if (out >> l & 1) ys[l] = expf(xs[l]);
        y = _mm256_loadu_ps(ys);
    }
    return y;
}

#define EXPF_VW 8
static inline __attribute__((always_inline)) void expf_vec_mem(const float *x, float *y) {
    _mm256_storeu_ps(y, expf8(_mm256_loadu_ps(x)));
}
#include "kernels/cpu/expf_exact_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
