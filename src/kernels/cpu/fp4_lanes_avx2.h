/* fp4_lanes_avx2.h — what both AVX2 FP4 kernels share (matmul_avx2.c's GEMV, matmul_fp4q_avx2.c's
 * block order): the in-lane decoding step and the prefetch hint by row size.  Include after the
 * file's AVX2 target pragma.
 *
 * x holds 16 bytes of packed codes in both 128-bit halves (in whatever byte order the caller
 * chose); half 0 keeps the low nibbles, half 1 the high ones.  byte2 / byte3 hold, for the 16
 * codes, bytes 2 and 3 of the float32 each decodes to (values with at most two significant bits,
 * so bytes 0 and 1 are zero).  Two byte lookups and unpacking with zero bytes assemble the
 * floats: register g lane 4h + k is the weight of byte position 4g + k in half h. */
#ifndef DI_KERNELS_CPU_FP4_LANES_AVX2_H
#define DI_KERNELS_CPU_FP4_LANES_AVX2_H

#include "kernels/matmul.h"

#include <immintrin.h>
#include <stdbool.h>

static inline __attribute__((always_inline)) void fp4_lanes_decode(__m256i x, __m256i byte2, __m256i byte3,
                                                                   __m256 out[4]) {
    __m256i codes = _mm256_and_si256(_mm256_blend_epi32(x, _mm256_srli_epi16(x, 4), 0xF0), _mm256_set1_epi8(0x0F));
    __m256i lo = _mm256_shuffle_epi8(byte2, codes), hi = _mm256_shuffle_epi8(byte3, codes);
    __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi), zero = _mm256_setzero_si256();
    out[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w0));
    out[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w0));
    out[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w1));
    out[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w1));
}

/* FP4 rows of at most 1 KiB are the exception: they prefetch to L1 (T0).  Kernel_ab on Zen 4,
 * T0 against T1, medians of 25 pairs, matrices of 32 MB, n = 1 / 2 / 4 tokens:
 *   rows of 256 B (65536x512)   1.02-1.03 / 1.02-1.03 / 1.05-1.07x
 *        512 B (65536x1024)     1.01-1.08 / 1.16-1.19 / 1.03-1.07x
 *        1 KiB (32768x2048)     0.98-1.01 / 1.03-1.10 / 1.06-1.09x
 *        2 KiB (16384x4096)     0.92-1.00 / 1.01-1.08 / 1.03-1.04x
 *        4 KiB (8192x8192)      0.76 / 0.96 / 1.01x (L1 set aliasing: matmul_avx2.c, rows_prefetched)
 *   in L2 (512x1024, 1024x512)  0.99-1.01x.
 * Up to 1 KiB a tile and the tile it prefetches (16 rows) fill at most a third of an L1 set on
 * Zen 4 (12 ways) or half of one on Zen 3 (8 ways); from 2 KiB on they fill them.  FP8 goes the
 * other way (T0 at 512 B rows 0.58-0.65x) and keeps T1; why the two formats differ was not
 * established (FP4's decoder reads ~10 GB/s of weights a core, FP8's ~20).  Not yet measured on
 * Zen 3.  The tiles take the choice as a constant (gemv_fp4_rows and di_simd_fp4q_rows
 * instantiate both), so the unrolled loops carry no branch; in matmul_avx2.c the second copy
 * moved code so that n = 3 in L2 measures 0.975-0.985x.  PF_FP4_L1=0 makes FP4 prefetch like the
 * other formats. */
#ifndef PF_FP4_L1
#define PF_FP4_L1 1 /* 0: every FP4 row prefetches with PF_FP4_FAR_HINT */
#endif
#ifndef PF_FP4_FAR_HINT
#define PF_FP4_FAR_HINT _MM_HINT_T1 /* rows above 1 KiB: into L2, as matmul_avx2.c's PF_HINT */
#endif
static inline bool fp4_prefetch_to_l1(const DiMatrix *w) {
    return PF_FP4_L1 && w->cols / 2 <= 1024;
}

static inline __attribute__((always_inline)) void prefetch_fp4(const uint8_t *p, bool to_l1) {
    if (to_l1)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
    else
        _mm_prefetch((const char *)p, PF_FP4_FAR_HINT);
}

#endif
