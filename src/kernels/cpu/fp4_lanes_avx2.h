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

/* FP4 rows of at most 1 KiB prefetch to L1 (T0), longer ones to L2 (T1, as the other formats):
 * up to 1 KiB a tile and the tile it prefetches fill at most a third of an L1 set on Zen 4 (half
 * on Zen 3); from 2 KiB on they fill it and T0 evicts the tile's own lines (0.76x at 4 KiB rows).
 * FP8 keeps T1 at every row size.  Kernel_ab figures: bench/kernels_cpu.md.  The tiles take the
 * choice as a constant (both GEMVs instantiate both), so the unrolled loops carry no branch. */
static inline bool fp4_prefetch_to_l1(const DiMatrix *w) { return w->cols / 2 <= 1024; }

static inline __attribute__((always_inline)) void prefetch_fp4(const uint8_t *p, bool to_l1) {
    if (to_l1)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
    else
        _mm_prefetch((const char *)p, _MM_HINT_T1);
}

#endif
