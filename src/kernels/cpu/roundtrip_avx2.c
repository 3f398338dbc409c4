/* roundtrip_avx2.c — the FP8 block-32 round trip of the quantised GEMM inputs (§4.3) with AVX2.
 *
 * Why: in `ref` numerics every quantised GEMM input row, and every window KV row, goes through
 * x = e4m3(x / s) * s first.  Done a value at a time through the byte code (frexpf, rintf,
 * ldexpf) it took ~45 % of the built-in tiny model's decode time in the server benchmark, more
 * than the matmuls themselves.  Here eight values at a time, without the byte code:
 *   v = x * (1/s)          s = 2^k, so this is the quotient x / s, rounded once like it
 *   a = min(|v|, 448)      saturation to E4M3's largest finite value, as the reference clamps
 *   a < 2^-6: round(a * 2^9) * 2^-9      the subnormal grid, ties to even (vroundps)
 *   else:     a with its float32 mantissa rounded to 3 bits, ties to even: add 0x7FFFF plus the
 *             kept lowest bit, clear the 20 dropped bits (a carry moves into the exponent, as
 *             the reference's mantissa 8 -> exponent + 1 does)
 *   x = (a with v's sign) * s      exact: a has at most 4 significant bits
 * NaN in gives the reference's NaN out (code 0x7F decodes to NAN, NAN * s is NAN); the block
 * maximum ignores NaN, as the reference's does. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if !defined(__clang__) /* clang (the fuzz build) compiles this file for -march=native as is */
#pragma GCC target("avx2,fma,f16c,no-avx512f")
#endif

#include "kernels/cpu/roundtrip_simd.h"

#include "kernels/numformats.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

static inline float block_amax(const float *x) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_setzero_ps();
    for (int g = 0; g < 4; g++) /* max_ps returns its second operand on NaN: NaN lanes are skipped */
        m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * g), abs_mask), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static inline __m256 e4m3_grid(__m256 v) {
    const __m256i sign_bit = _mm256_set1_epi32((int)0x80000000u);
    __m256 sign = _mm256_and_ps(v, _mm256_castsi256_ps(sign_bit));
    __m256 a = _mm256_min_ps(_mm256_andnot_ps(sign, v), _mm256_set1_ps(DI_E4M3_MAX));
    __m256 sub = _mm256_mul_ps(_mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                               _mm256_set1_ps(1.0f / 512.0f));
    __m256i bits = _mm256_castps_si256(a);
    __m256i kept_lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(1));
    bits = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), kept_lsb));
    __m256 normal = _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32((int)0xFFF00000u)));
    __m256 r = _mm256_blendv_ps(normal, sub, _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ));
    return _mm256_or_ps(r, sign);
}

void di_simd_roundtrip_fp8_block32(float *x, size_t n) {
    const __m256 nan = _mm256_set1_ps(NAN);
    for (size_t b = 0; b < n; b += 32) {
        float amax = fmaxf(block_amax(x + b), 1e-4f);
        float s = di_ue8m0_to_f32(di_ue8m0_ceil(amax * (1.0f / 448.0f)));
        __m256 sv = _mm256_set1_ps(s), inv = _mm256_set1_ps(1.0f / s); /* s = 2^k: 1/s exact */
        for (int g = 0; g < 4; g++) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + b + 8 * g), inv);
            __m256 out = _mm256_mul_ps(e4m3_grid(v), sv);
            out = _mm256_blendv_ps(out, nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            _mm256_storeu_ps(x + b + 8 * g, out);
        }
    }
}

#endif /* __x86_64__ */
