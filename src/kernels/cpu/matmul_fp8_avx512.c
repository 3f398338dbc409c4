/* matmul_fp8_avx512.c — the one-token FP8 GEMV tile of matmul_fp8_avx2.c on AVX-512 (F, BW, VL):
 * batch-1 decode's attention, compressor, indexer, shared-expert and mHC projections, bit for
 * bit the AVX2 tile's output.
 *
 * Why it gives the same bits: a zmm register holds two rows, row A in its low 256 bits and row B
 * in its high 256.  Both widenings of E4M3 (float32 patterns, or through FP16) are exact, so
 * each half holds exactly the AVX2 register of its row; the scaled activations of the group are
 * broadcast to both halves, so one fused multiply-add is, lane for lane, the AVX2 tile's, in
 * the same order over the blocks, and each half is summed with lane_sum.  The partial last block
 * takes the AVX2 decoder per row.
 *
 * Why it could be faster: half the multiply-adds, shifts and masks for the same rows, where the
 * GEMV runs from cache (measured in bench/issue20-targets.md).  Compiled for AVX-512 by the
 * pragma below whatever -march says, and run only by the avx512 tables, which exist only where
 * cpuid reports AVX-512. */
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

/* One block step of the tile: np pairs against the group's activations xs (scaled for the
 * widening), both halves. */
static inline __attribute__((always_inline)) void tile_step(const uint8_t *const *row, int np, int64_t kb,
                                                            int64_t ahead, const float *xs, __m512 *acc,
                                                            bool via_fp16) {
    __m512 xv[4];
    broadcast_block(xs + kb * BLOCK, xv);
    #pragma GCC unroll 16
    for (int p = 0; p < np; p++) {
        const uint8_t *pa = row[2 * p] + kb * BLOCK, *pb = row[2 * p + 1] + kb * BLOCK;
        _mm_prefetch((const char *)pa + ahead, PF_HINT);
        _mm_prefetch((const char *)pb + ahead, PF_HINT);
        __m512 wv[4];
        widen_pair(pa, pb, wv, via_fp16);
        #pragma GCC unroll 16
        for (int g = 0; g < 4; g++) acc[p] = _mm512_fmadd_ps(wv[g], xv[g], acc[p]);
    }
}

/* The AVX2 tile's partial last block (plain decode, unscaled x), two rows a zmm. */
static inline __attribute__((always_inline)) void partial_block(const DiMatrix *w, const float *x, int64_t r0,
                                                                int nr, int np, int64_t full, __m512 *acc) {
    __m512 xv[4];
    broadcast_block(x + full * BLOCK, xv);
    #pragma GCC unroll 16
    for (int p = 0; p < np; p++) {
        __m256 a[4], b[4];
        decode_block(DI_MAT_FP8_BLOCK, w, r0 + 2 * p, full, a);
        decode_block(DI_MAT_FP8_BLOCK, w, r0 + (2 * p + 1 < nr ? 2 * p + 1 : 0), full, b);
        #pragma GCC unroll 16
        for (int g = 0; g < 4; g++)
            acc[p] = _mm512_fmadd_ps(_mm512_insertf32x8(_mm512_castps256_ps512(a[g]), b[g], 1), xv[g], acc[p]);
    }
}

/* Rows r0 .. r0+nr-1 (nr <= GEMV_ROWS, a constant) of one 32-row scale block for one token on a
 * fixed route (a constant), as gemv_fp8_prescaled_tile; a missing row B repeats row r0 and is
 * not stored. */
static inline __attribute__((always_inline)) void fp8_tile512(const DiMatrix *w, const float *x, const float *xs32,
                                                              const float *xs16, int64_t k32, int64_t r0, int nr,
                                                              float *y, DiFp8GemvRoute route) {
    const uint8_t *row[GEMV_ROWS];
    int64_t full = w->cols / BLOCK, ahead = prefetch_rows_ahead(w, r0, nr) * w->cols;
    int np = (nr + 1) / 2;
    __m512 acc[PAIRS];
    #pragma GCC unroll 16
    for (int i = 0; i < GEMV_ROWS; i++) row[i] = (const uint8_t *)w->data + (r0 + (i < nr ? i : 0)) * w->cols;
    #pragma GCC unroll 16
    for (int p = 0; p < PAIRS; p++) acc[p] = _mm512_setzero_ps();
    if (route == DI_FP8_GEMV_MAPPED) { /* runs of float32 steps, each up to a marked block */
        const uint8_t *map = fp8_map_row(w, r0);
        for (int64_t kb = 0; kb < full;) {
            int64_t end = fp8_next_marked(map, kb, full);
            for (; kb < end; kb++) tile_step(row, np, kb, ahead, xs32, acc, false);
            if (kb < full) {
                tile_step(row, np, kb, ahead, xs16, acc, true);
                kb++;
            }
        }
    } else {
        bool via_fp16 = route == DI_FP8_GEMV_FP16;
        for (int64_t kb = 0; kb < full; kb++) tile_step(row, np, kb, ahead, via_fp16 ? xs16 : xs32, acc, via_fp16);
    }
    if (full < k32 / BLOCK) partial_block(w, x, r0, nr, np, full, acc);
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        __m512d v = _mm512_castps_pd(acc[i / 2]);
        y[r0 + i] = lane_sum(_mm256_castpd_ps(i % 2 ? _mm512_extractf64x4_pd(v, 1) : _mm512_castpd512_pd256(v)));
    }
}

static inline __attribute__((always_inline)) void fp8_rows512(const DiMatrix *w, const float *x, const float *xs32,
                                                              const float *xs16, int64_t k32, int64_t rb,
                                                              int64_t rb_end, float *yt, DiFp8GemvRoute route) {
    int64_t r = rb;
    for (; r + GEMV_ROWS <= rb_end; r += GEMV_ROWS) fp8_tile512(w, x, xs32, xs16, k32, r, GEMV_ROWS, yt, route);
    for (; r < rb_end; r++) fp8_tile512(w, x, xs32, xs16, k32, r, 1, yt, route);
}

void di_simd_fp8_rowblock_one_avx512(DiFp8GemvRoute route, const DiMatrix *w, const float *x, const float *xs32,
                                     const float *xs16, int64_t k32, int64_t rb, int64_t rb_end, float *yt) {
    switch (route) {
    case DI_FP8_GEMV_F32: fp8_rows512(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_F32); break;
    case DI_FP8_GEMV_FP16: fp8_rows512(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_FP16); break;
    default: fp8_rows512(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_MAPPED); break;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
