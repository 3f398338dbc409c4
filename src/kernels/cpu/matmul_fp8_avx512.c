/* matmul_fp8_avx512.c — the FP8 GEMV tiles of matmul_fp8_avx2.c (one token, and groups of two
 * to four) on AVX-512 (F, BW, VL): decode's attention, compressor, indexer, shared-expert and
 * mHC projections, bit for bit the AVX2 tiles' output.
 *
 * Why it gives the same bits: a zmm register holds two rows, row A in its low 256 bits and row B
 * in its high 256.  Both widenings of E4M3 (float32 patterns, or through FP16) are exact, so
 * each half holds exactly the AVX2 register of its row; a token's scaled activations of the
 * group are broadcast to both halves, so one fused multiply-add is, lane for lane, the AVX2
 * tile's, in the same order over the blocks, and each (row, token) half is summed with lane_sum.  The partial last block
 * takes the AVX2 decoder per row.
 *
 * Why it is faster: half the multiply-adds, shifts and masks for the same rows; the Intel Xeon
 * of bench/issue20-targets.md measured 1.04-1.21x for one token and 1.15-1.36x for groups.  Compiled for AVX-512 by the
 * pragma below whatever -march says, and run only by the avx512 tables, which exist only where
 * cpuid reports AVX-512. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if defined(__clang__) /* the fuzz build: every function here, the header's included, for AVX-512 */
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#endif

#include "kernels/cpu/matmul_avx2.h"

#define PAIRS (GEMV_ROWS / 2) /* row pairs a tile: the AVX2 tile's eight rows */

/* Group g (eight codes) of rows A and B as sixteen bytes, A's first. */
static inline __attribute__((always_inline)) __m128i pair_bytes(const uint8_t *pa, const uint8_t *pb, int g) {
    return _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(pa + GROUP * g)),
                              _mm_loadl_epi64((const __m128i *)(pb + GROUP * g)));
}

/* One 32-column block of rows A and B widened as e4m3_block_gemv_widen does (via_fp16: a
 * constant): out[g] holds A's group g in its low half and B's in its high half. */
static inline __attribute__((always_inline)) void widen_pair(const uint8_t *pa, const uint8_t *pb, __m512 out[4],
                                                             bool via_fp16) {
    #pragma GCC unroll 16
    for (int g = 0; g < 4; g++) {
        __m128i b = pair_bytes(pa, pb, g);
        if (via_fp16) { /* code * 2^-8, as e4m3_to_fp16_bits */
            __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16((short)0xBFFF));
            out[g] = _mm512_cvtph_ps(h);
        } else { /* code * 2^-120, the float32 pattern */
            __m512i v = _mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20);
            out[g] = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0x87F00000u)));
        }
    }
}

/* A block's four groups of eight activations, each in both halves. */
static inline __attribute__((always_inline)) void broadcast_block(const float *x, __m512 xv[4]) {
    #pragma GCC unroll 16
    for (int g = 0; g < 4; g++)
        xv[g] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(x + GROUP * g))));
}

/* One block step of the tile: np pairs against nt tokens' activations xs[t] (scaled for the
 * widening), each group in both halves; acc[p][t]. */
static inline __attribute__((always_inline)) void tile_step(const uint8_t *const *row, int np, int nt, int64_t kb,
                                                            int64_t ahead, const float *const *xs, __m512 (*acc)[4],
                                                            bool via_fp16) {
    __m512 xv[4][4];
    #pragma GCC unroll 16
    for (int t = 0; t < nt; t++) broadcast_block(xs[t] + kb * BLOCK, xv[t]);
    #pragma GCC unroll 16
    for (int p = 0; p < np; p++) {
        const uint8_t *pa = row[2 * p] + kb * BLOCK, *pb = row[2 * p + 1] + kb * BLOCK;
        _mm_prefetch((const char *)pa + ahead, PF_HINT);
        _mm_prefetch((const char *)pb + ahead, PF_HINT);
        __m512 wv[4];
        widen_pair(pa, pb, wv, via_fp16);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++)
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) acc[p][t] = _mm512_fmadd_ps(wv[g], xv[t][g], acc[p][t]);
    }
}

/* Row A's register in the low 256 bits, row B's in the high: the AVX-512F insert (64-bit lanes
 * of the same bits), since the 32-bit-lane form _mm512_insertf32x8 is AVX-512DQ, which neither
 * the pragma above nor the run-time check (di_simd_avx512_available) asks for. */
static inline __attribute__((always_inline)) __m512 join_halves(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

/* The AVX2 tiles' partial last block (plain decode, unscaled x[t]), two rows a zmm. */
static inline __attribute__((always_inline)) void partial_block(const DiMatrix *w, int nt, const float *const *x,
                                                                int64_t r0, int nr, int np, int64_t full,
                                                                __m512 (*acc)[4]) {
    #pragma GCC unroll 16
    for (int p = 0; p < np; p++) {
        __m256 a[4], b[4];
        decode_block(DI_MAT_FP8_BLOCK, w, r0 + 2 * p, full, a);
        decode_block(DI_MAT_FP8_BLOCK, w, r0 + (2 * p + 1 < nr ? 2 * p + 1 : 0), full, b);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            __m512 xv[4];
            broadcast_block(x[t] + full * BLOCK, xv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++)
                acc[p][t] = _mm512_fmadd_ps(join_halves(a[g], b[g]), xv[g], acc[p][t]);
        }
    }
}

/* Rows r0 .. r0+nr-1 (nr <= 2 * PAIRS, a constant) of one 32-row scale block for nt tokens (a
 * constant) on a fixed route (a constant), as the AVX2 tiles (gemv_fp8_prescaled_tile,
 * gemv_fp8_group_tile); a missing row B repeats row r0 and is not stored. */
static inline __attribute__((always_inline)) void fp8_tile512(const DiMatrix *w, int nt, const float *const *x,
                                                              const float *const *xs32, const float *const *xs16,
                                                              int64_t k32, int64_t r0, int nr, float *const *y,
                                                              DiFp8GemvRoute route) {
    const uint8_t *row[2 * PAIRS];
    int64_t full = w->cols / BLOCK, ahead = prefetch_rows_ahead(w, r0, nr) * w->cols;
    int np = (nr + 1) / 2;
    __m512 acc[PAIRS][4];
    #pragma GCC unroll 16
    for (int i = 0; i < 2 * PAIRS; i++) row[i] = (const uint8_t *)w->data + (r0 + (i < nr ? i : 0)) * w->cols;
    #pragma GCC unroll 16
    for (int p = 0; p < PAIRS; p++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[p][t] = _mm512_setzero_ps();
    if (route == DI_FP8_GEMV_MAPPED) { /* runs of float32 steps, each up to a marked block */
        const uint8_t *map = fp8_map_row(w, r0);
        for (int64_t kb = 0; kb < full;) {
            int64_t end = fp8_next_marked(map, kb, full);
            for (; kb < end; kb++) tile_step(row, np, nt, kb, ahead, xs32, acc, false);
            if (kb < full) {
                tile_step(row, np, nt, kb, ahead, xs16, acc, true);
                kb++;
            }
        }
    } else {
        bool via_fp16 = route == DI_FP8_GEMV_FP16;
        for (int64_t kb = 0; kb < full; kb++) tile_step(row, np, nt, kb, ahead, via_fp16 ? xs16 : xs32, acc, via_fp16);
    }
    if (full < k32 / BLOCK) partial_block(w, nt, x, r0, nr, np, full, acc);
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            __m512d v = _mm512_castps_pd(acc[i / 2][t]);
            y[t][r0 + i] = lane_sum(_mm256_castpd_ps(i % 2 ? _mm512_extractf64x4_pd(v, 1) : _mm512_castpd512_pd256(v)));
        }
}

/* Rows [rb, rb_end) in tiles of eight rows for one token, four for a group (the accumulators
 * and the broadcast activations then fill most of the 32 zmm registers), then single rows. */
static inline __attribute__((always_inline)) void fp8_rows512(const DiMatrix *w, int nt, const float *const *x,
                                                              const float *const *xs32, const float *const *xs16,
                                                              int64_t k32, int64_t rb, int64_t rb_end,
                                                              float *const *yt, DiFp8GemvRoute route) {
    int tile_rows = nt == 1 ? 2 * PAIRS : PAIRS;
    int64_t r = rb;
    for (; r + tile_rows <= rb_end; r += tile_rows) {
        if (nt == 1) fp8_tile512(w, nt, x, xs32, xs16, k32, r, 2 * PAIRS, yt, route);
        else fp8_tile512(w, nt, x, xs32, xs16, k32, r, PAIRS, yt, route);
    }
    for (; r < rb_end; r++) fp8_tile512(w, nt, x, xs32, xs16, k32, r, 1, yt, route);
}

void di_simd_fp8_rowblock_one_avx512(DiFp8GemvRoute route, const DiMatrix *w, const float *x, const float *xs32,
                                     const float *xs16, int64_t k32, int64_t rb, int64_t rb_end, float *yt) {
    const float *const xa[1] = {x}, *const x32[1] = {xs32}, *const x16[1] = {xs16};
    float *const ya[1] = {yt};
    switch (route) {
    case DI_FP8_GEMV_F32: fp8_rows512(w, 1, xa, x32, x16, k32, rb, rb_end, ya, DI_FP8_GEMV_F32); break;
    case DI_FP8_GEMV_FP16: fp8_rows512(w, 1, xa, x32, x16, k32, rb, rb_end, ya, DI_FP8_GEMV_FP16); break;
    default: fp8_rows512(w, 1, xa, x32, x16, k32, rb, rb_end, ya, DI_FP8_GEMV_MAPPED); break;
    }
}

void di_simd_fp8_group_avx512(DiFp8GemvRoute route, const DiMatrix *w, int nt, const float *const *x,
                              const float *const *xs32, const float *const *xs16, int64_t k32, int64_t rb,
                              int64_t rb_end, float *const *yt) {
#define FP8_GROUP512_CASE(r, n) \
    case (r) * 8 + (n): fp8_rows512(w, n, x, xs32, xs16, k32, rb, rb_end, yt, r); break
    switch ((int)route * 8 + nt) {
        FP8_GROUP_CASES(FP8_GROUP512_CASE);
    default: break; /* not reached (FP8_GROUP_CASES) */
    }
#undef FP8_GROUP512_CASE
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
