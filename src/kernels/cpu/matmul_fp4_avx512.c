/* matmul_fp4_avx512.c — the one-token FP4 GEMV of matmul_fp4_avx2.c on AVX-512 (F, BW, VL):
 * batch-1 decode's routed experts under the exact numerics, bit for bit the AVX2 tile's output.
 *
 * Why it gives the same bits: a zmm register holds two rows, row A in its low 256 bits and row B
 * in its high 256.  Every step of the AVX2 decoder (fp4_lanes_decode) works within 128-bit lanes,
 * so run on [A's bytes, A's bytes, B's bytes, B's bytes] with [A's table, A's table, B's, B's] it
 * yields in each half exactly the AVX2 register of that row, and one fused multiply-add against
 * the activations broadcast to both halves is, per lane, the AVX2 tile's multiply-add: each lane
 * sees the same terms in the same order, and the halves are summed with lane_sum_fp4.
 *
 * Why it is faster: the decoder's byte shuffles and unpacks (eight port-5 uops per row block on
 * AVX2) and the four multiply-adds serve two rows at once; figures in bench/kernels_cpu.md.
 * Compiled for AVX-512 by the pragma below whatever -march says, and called only where cpuid
 * reports AVX-512 (di_simd_isa), so a binary built here still runs on an AVX2-only CPU. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if defined(__clang__) /* the fuzz build: every function here, the header's included, for AVX-512 */
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#endif

#include "kernels/cpu/matmul_avx2.h"
#include "kernels/cpu/fp4_lanes_avx2.h"

#define PAIRS 2 /* row pairs a tile: four rows, two zmm accumulators */

/* 16 bytes at a in the two low 128-bit lanes, 16 bytes at b in the two high ones. */
static inline __attribute__((always_inline)) __m512i two_rows(const uint8_t *a, const uint8_t *b) {
    __m512i lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)a));
    return _mm512_mask_broadcast_i32x4(lo, 0xFF00, _mm_loadu_si128((const __m128i *)b));
}

/* Block kb of rows A (bytes pa, scale byte sa) and B: four zmm, row A's decode_fp4_block_lanes
 * registers in the low halves, row B's in the high halves. */
static inline __attribute__((always_inline)) void decode_pair(const uint8_t *pa, const uint8_t *pb, uint8_t sa,
                                                              uint8_t sb, __m512 out[4]) {
    __m512i x = two_rows(pa, pb);
    __m512i byte2 = two_rows(di_fp4_weight_bytes[sa], di_fp4_weight_bytes[sb]);
    __m512i byte3 = two_rows(di_fp4_weight_bytes[sa] + 16, di_fp4_weight_bytes[sb] + 16);
    /* lanes 0 and 2 keep the low nibbles, 1 and 3 the high ones (fp4_lanes_decode's halves) */
    __m512i codes = _mm512_and_si512(_mm512_mask_blend_epi32(0xF0F0, x, _mm512_srli_epi16(x, 4)),
                                     _mm512_set1_epi8(0x0F));
    __m512i lo = _mm512_shuffle_epi8(byte2, codes), hi = _mm512_shuffle_epi8(byte3, codes);
    __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi), zero = _mm512_setzero_si512();
    out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w0));
    out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w0));
    out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w1));
    out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w1));
}

/* Rows r0 .. r0+nr-1 (nr <= 2 * PAIRS, a constant) against one token's permuted activations x
 * (FP4_LANE_ORDER); a missing row B of the last pair repeats row r0 and is not stored. */
static inline __attribute__((always_inline)) void gemv_fp4_tile512(const DiMatrix *w, const float *x, int64_t r0,
                                                                   int nr, float *y, bool to_l1) {
    const uint8_t *row[2 * PAIRS], *srow[2 * PAIRS];
    int64_t kblocks = w->cols / BLOCK, ahead = prefetch_rows_ahead_by(w, r0, nr, 2 * PAIRS) * (w->cols / 2);
    int np = (nr + 1) / 2;
    __m512 acc[PAIRS];
    #pragma GCC unroll 16
    for (int i = 0; i < 2 * PAIRS; i++) {
        int64_t r = r0 + (i < nr ? i : 0);
        row[i] = (const uint8_t *)w->data + r * (w->cols / 2);
        srow[i] = w->scale + r * kblocks;
    }
    #pragma GCC unroll 16
    for (int p = 0; p < PAIRS; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < kblocks; kb++) {
        __m512 xv[4];
        #pragma GCC unroll 16
        for (int g = 0; g < 4; g++) /* the group's eight activations in both halves */
            xv[g] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(x + kb * BLOCK + GROUP * g))));
        #pragma GCC unroll 16
        for (int p = 0; p < np; p++) {
            const uint8_t *pa = row[2 * p] + kb * (BLOCK / 2), *pb = row[2 * p + 1] + kb * (BLOCK / 2);
            prefetch_fp4(pa + ahead, to_l1);
            prefetch_fp4(pb + ahead, to_l1);
            __m512 wv[4];
            decode_pair(pa, pb, srow[2 * p][kb], srow[2 * p + 1][kb], wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) acc[p] = _mm512_fmadd_ps(wv[g], xv[g], acc[p]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        __m512d v = _mm512_castps_pd(acc[i / 2]);
        __m256 half = _mm256_castpd_ps(i % 2 ? _mm512_extractf64x4_pd(v, 1) : _mm512_castpd512_pd256(v));
        y[r0 + i] = lane_sum_fp4(half);
    }
}

static inline __attribute__((always_inline)) void gemv_fp4_one512(const DiMatrix *w, const float *xp, float *yt,
                                                                  int64_t r0, int64_t r1, bool to_l1) {
    int64_t r = r0;
    for (; r + 2 * PAIRS <= r1; r += 2 * PAIRS) gemv_fp4_tile512(w, xp, r, 2 * PAIRS, yt, to_l1);
    for (; r + 2 <= r1; r += 2) gemv_fp4_tile512(w, xp, r, 2, yt, to_l1);
    if (r < r1) gemv_fp4_tile512(w, xp, r, 1, yt, to_l1);
}

void di_simd_fp4_gemv_one_avx512(const DiMatrix *w, const float *xp, float *yt, int64_t r0, int64_t r1) {
    if (fp4_prefetch_to_l1(w))
        gemv_fp4_one512(w, xp, yt, r0, r1, true);
    else
        gemv_fp4_one512(w, xp, yt, r0, r1, false);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
