/* matmul_fp4q_avx512.c — the one-token integer tile of the block-order FP4 product
 * (matmul_fp4q_avx2.c, the reference numerics' routed experts at batch 1) on AVX-512 (F, BW,
 * VL), bit for bit the AVX2 tile's output.
 *
 * Why the bits are the same: a zmm register holds two rows, row A in its low 256 bits and row B
 * in its high 256.  The AVX2 tile's code lookup (int_codes) works within 128-bit lanes, so on
 * [A's bytes, A's bytes, B's bytes, B's bytes] it yields in each half exactly that row's AVX2
 * register; vpmaddwd against the token's integer image broadcast to both halves gives each half
 * the AVX2 block sum (integers: exact), and the block's fma(P, s*u/256, acc) runs with row A's
 * factor in the low half and row B's in the high one: per lane the same operation on the same
 * operands in the same order.  A block with no integer image goes through the AVX2 float block
 * on the eight accumulators split back into their AVX2 registers.
 *
 * Why it pays: the lookups, shifts and multiply-adds serve two rows per instruction, and the
 * image is loaded once per block for the four row pairs.  Compiled for AVX-512 by the pragma
 * whatever -march says; called only where the AVX-512 tiles were chosen. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#endif

#include "kernels/cpu/fp4_lanes_avx2.h"
#include "kernels/cpu/fp4q_group.h"

#define ROWS 8 /* the AVX2 one-token integer tile's rows: four pairs, four zmm accumulators */

/* d(n), twice the E2M1 value of code n, as matmul_fp4q_avx2.c's lookup table. */
static const int8_t doubled_code[16] __attribute__((aligned(16))) = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 16 bytes at a in the two low 128-bit lanes, 16 bytes at b in the two high ones. */
static inline __attribute__((always_inline)) __m512i two_rows16(const uint8_t *a, const uint8_t *b) {
    __m512i lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)a));
    return _mm512_mask_broadcast_i32x4(lo, 0xFF00, _mm_loadu_si128((const __m128i *)b));
}

/* int_codes of matmul_fp4q_avx2.c for two rows: image "A" words (n2 / n3 in the high byte) and
 * "B" words (n0 / n1), 256 * d, row A in the low half. */
static inline __attribute__((always_inline)) void int_codes2(const uint8_t *pa, const uint8_t *pb, __m512i table,
                                                             __m512i nib_hi, __m512i *ha, __m512i *hb) {
    __m512i x = two_rows16(pa, pb);
    __m512i ia = _mm512_and_si512(_mm512_mask_blend_epi32(0xF0F0, x, _mm512_srli_epi16(x, 4)), nib_hi);
    __m512i ib = _mm512_and_si512(_mm512_mask_blend_epi32(0xF0F0, _mm512_slli_epi16(x, 8), _mm512_slli_epi16(x, 4)), nib_hi);
    *ha = _mm512_shuffle_epi8(table, ia);
    *hb = _mm512_shuffle_epi8(table, ib);
}

/* One block for the four row pairs; wide a constant at both calls. */
static inline __attribute__((always_inline)) void int_block4(const TokenGroup *g, bool wide, const uint8_t *const *row,
                                                             const uint8_t *const *srow, int64_t kb, int64_t ahead,
                                                             bool to_l1, __m512i table, __m512i nib_hi, __m512 acc[4]) {
    const TokenActs *tk = &g->tk[0];
    const int16_t *hi = (wide ? tk->a_hi : tk->a) + kb * FP4Q_BLOCK, *lo = tk->a_lo + kb * FP4Q_BLOCK;
    const float *factor = fp4q_factors(g, tk->f_off[kb] - (wide ? 3 : 0));
    const __m512i hi_a = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)hi));
    const __m512i hi_b = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(hi + 16)));
    __m512i lo_a = hi_a, lo_b = hi_b;
    if (wide) {
        lo_a = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)lo));
        lo_b = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(lo + 16)));
    }
    #pragma GCC unroll 4
    for (int p = 0; p < ROWS / 2; p++) {
        const uint8_t *pa = row[2 * p] + kb * (FP4Q_BLOCK / 2), *pb = row[2 * p + 1] + kb * (FP4Q_BLOCK / 2);
        prefetch_fp4(pa + ahead, to_l1);
        prefetch_fp4(pb + ahead, to_l1);
        __m512i ha, hb;
        int_codes2(pa, pb, table, nib_hi, &ha, &hb);
        __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_madd_epi16(ha, hi_a), _mm512_madd_epi16(hb, hi_b)));
        if (wide)
            sum = _mm512_fmadd_ps(sum, _mm512_set1_ps(512.0f),
                                  _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_madd_epi16(ha, lo_a), _mm512_madd_epi16(hb, lo_b))));
        __m512 f = _mm512_mask_broadcastss_ps(_mm512_set1_ps(factor[srow[2 * p][kb]]), 0xFF00,
                                              _mm_set_ss(factor[srow[2 * p + 1][kb]]));
        acc[p] = _mm512_fmadd_ps(sum, f, acc[p]);
    }
}

/* Row r's AVX2 accumulator: the low or high half of its pair's register. */
static inline __m256 half_of(__m512 v, int r) {
    __m512d d = _mm512_castps_pd(v);
    return _mm256_castpd_ps(r % 2 ? _mm512_extractf64x4_pd(d, 1) : _mm512_castpd512_pd256(d));
}

/* A block without an integer image: the AVX2 float block on the split accumulators. */
static __attribute__((noinline)) void float_block4(const DiMatrix *w, const TokenGroup *g, int64_t r0, int64_t kb,
                                                   __m512 acc[4]) {
    __m256 spill[ROWS];
    for (int r = 0; r < ROWS; r++) spill[r] = half_of(acc[r / 2], r);
    di_simd_fp4q_float_block_1x8(w, g, r0, kb, spill);
    for (int p = 0; p < ROWS / 2; p++)
        acc[p] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(spill[2 * p])),
                                                     _mm256_castps_pd(spill[2 * p + 1]), 1));
}

static inline __attribute__((always_inline)) void int_tile1(const DiMatrix *w, const TokenGroup *g, int64_t r0,
                                                            float *y, bool to_l1) {
    const int64_t kblocks = w->cols / FP4Q_BLOCK, row_bytes = w->cols / 2;
    const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)doubled_code));
    const __m512i nib_hi = _mm512_set1_epi16(0x0F00);
    int64_t ahead = r0 + 2 * ROWS <= w->rows ? ROWS * row_bytes : 0;
    const uint8_t *row[ROWS], *srow[ROWS];
    __m512 acc[ROWS / 2];
    for (int i = 0; i < ROWS; i++) {
        row[i] = (const uint8_t *)w->data + (r0 + i) * row_bytes;
        srow[i] = w->scale + (r0 + i) * kblocks;
    }
    for (int p = 0; p < ROWS / 2; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < kblocks;) {
        /* a run of narrow blocks, then a wide one, or (rarely) a float one out of line */
        for (int64_t end = g->run_end[kb]; kb < end; kb++)
            int_block4(g, false, row, srow, kb, ahead, to_l1, table, nib_hi, acc);
        if (kb < kblocks && g->wide[kb])
            int_block4(g, true, row, srow, kb++, ahead, to_l1, table, nib_hi, acc);
        else if (kb < kblocks)
            float_block4(w, g, r0, kb++, acc);
    }
    for (int r = 0; r < ROWS; r++) y[r0 + r] = fp4q_lane_sum(half_of(acc[r / 2], r));
}

void di_simd_fp4q_int_tile1_avx512(const DiMatrix *w, const TokenGroup *g, int64_t r0, float *y, bool to_l1) {
    if (to_l1)
        int_tile1(w, g, r0, y, true);
    else
        int_tile1(w, g, r0, y, false);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
