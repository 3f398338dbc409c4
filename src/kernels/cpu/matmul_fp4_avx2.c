/* matmul_fp4_avx2.c — the FP4 (E2M1, one scale per 32 columns of a row, §3.5) GEMV behind
 * di_matmul for up to 31 tokens: the routed experts' few-token products under the exact
 * numerics (the ref numerics take the block-order kernels of matmul_fp4q_avx2.c instead).
 *
 * One tile for every token count: a block of a row is decoded once in registers, with in-lane
 * shuffles only (decode_fp4_block_lanes), and meets nt tokens (1, 2, 3 or 4, gemv_token_group);
 * four rows a tile for one and two tokens, two for three and four, so the accumulators and the
 * decoder's temporaries fit the 16 ymm registers.  Every (row, token) accumulator sees the
 * panel GEMM's sequence of multiply-adds, so the bits never depend on the token count. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if !defined(__clang__) /* clang (the fuzz build) compiles this file for -march=native as is */
#pragma GCC target("avx2,fma,f16c,no-avx512f")
#endif

#include "kernels/cpu/matmul_avx2.h"
#include "kernels/cpu/fp4_lanes_avx2.h"

#include <pthread.h>

/* The GEMV's FP4 decoder (decode_fp4_block_lanes) looks weights up byte-wise: for scale byte b and
 * code n, bytes 2 and 3 of the float32 that decode_fp4_block produces (the doubled E2M1 value of
 * n times the factor above, negated for n >= 8).  Those floats have at most two significant bits,
 * so their low two bytes are zero for every b (subnormals and inf included), and the two bytes
 * are the whole weight.  Row b: 16 bytes "2", then 16 bytes "3"; filled once from the same
 * multiplies, so the table holds exactly decode_fp4_block's weights. */
uint8_t di_fp4_weight_bytes[256][32] __attribute__((aligned(32)));
static pthread_once_t fp4_weight_bytes_once = PTHREAD_ONCE_INIT;

static void fill_fp4_weight_bytes(void) {
    for (int b = 0; b < 256; b++)
        for (int n = 0; n < 16; n++) {
            float v = fp4_doubled[n & 7] * fp4_half_scales[b].value;
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            u |= (uint32_t)(n >> 3) << 31;
            di_fp4_weight_bytes[b][n] = (uint8_t)(u >> 16);
            di_fp4_weight_bytes[b][16 + n] = (uint8_t)(u >> 24);
        }
}

/* The GEMV's FP4 decoder: the same 32 weights as decode_fp4_block, from in-lane shuffles only.
 * Lane-crossing shuffles (vpermps, vpermq, vextracti128) cost ~1.3 cycles each on Zen 3 against
 * 0.5 for in-lane ones, and decode_fp4_block's four vpermps and eight variable shifts per block
 * bound the GEMV there (~1.7x on Zen 3 with this one).  The 16 bytes go to both lanes; lane 0
 * keeps the low nibbles (even columns), lane 1 the high ones (odd columns); two byte shuffles
 * read bytes 2 and 3 of each weight's float from di_fp4_weight_bytes; unpacking with zero
 * bytes assembles the floats.
 * Register g then holds columns 8g .. 8g+7 in the lane order FP4_LANE_ORDER instead of 0 .. 7,
 * so the activations are permuted the same way (fp4_permute_acts) and lane_sum_fp4 adds the
 * lanes in matmul_simd.h's fixed order: every lane carries exactly the terms, in exactly the
 * order, it carries in the panel GEMM, and the sums are bit-identical. */
#define FP4_LANE_ORDER 0, 2, 4, 6, 1, 3, 5, 7

static inline void decode_fp4_block_lanes(const uint8_t *p, uint8_t b, __m256 out[4]) {
    __m256i byte2 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)di_fp4_weight_bytes[b]));
    __m256i byte3 = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(di_fp4_weight_bytes[b] + 16)));
    fp4_lanes_decode(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)), byte2, byte3, out);
}

/* Rows a tile by token count.  One token: four, not GEMV_ROWS' eight -- with eight the decoder's
 * temporaries, the accumulators and sixteen row and scale pointers spilled (1.02-1.13x for four on
 * Zen 4; FP8 measured the other way and keeps eight).  Two tokens: 4 x 2 accumulators; three and
 * four: 2 x 4. */
#define FP4_ONE_ROWS 4
#define FP4_MAX_ROWS 4
static inline int fp4_tile_rows(int nt) { return nt == 1 ? FP4_ONE_ROWS : nt == 2 ? PAIR_ROWS : QUAD_ROWS; }

/* Rows r0 .. r0+nr-1 (nr <= fp4_tile_rows(nt)) against nt tokens (a constant) at x + t * k32, in
 * FP4_LANE_ORDER.  Each row has its own scales (§3.5), so they stay on the weights.  The
 * one-token tile prefetches one tile (four rows) ahead, the others GEMV_ROWS ahead (as measured
 * when they were separate tiles). */
static inline __attribute__((always_inline)) void gemv_fp4_tile(const DiMatrix *w, const float *x, int64_t k32,
                                                                int nt, int64_t r0, int nr, float *y, bool to_l1) {
    const uint8_t *row[FP4_MAX_ROWS], *srow[FP4_MAX_ROWS];
    int64_t kblocks = w->cols / BLOCK;
    int64_t ahead = prefetch_rows_ahead_by(w, r0, nr, nt == 1 ? FP4_ONE_ROWS : GEMV_ROWS) * (w->cols / 2);
    __m256 acc[FP4_MAX_ROWS][4];
    #pragma GCC unroll 16
    for (int i = 0; i < fp4_tile_rows(nt); i++) {
        int64_t r = r0 + (i < nr ? i : 0);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + r * (w->cols / 2);
        srow[i] = w->scale + r * kblocks;
    }
    for (int64_t kb = 0; kb < kblocks; kb++) {
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = row[i] + kb * (BLOCK / 2);
            prefetch_fp4(p + ahead, to_l1);
            __m256 wv[4];
            decode_fp4_block_lanes(p, srow[i][kb], wv);
            ACCUMULATE_TOKENS(acc[i], wv, x + kb * BLOCK, k32, nt);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t * w->rows + r0 + i] = lane_sum_fp4(acc[i][t]);
}

/* Rows [r0, r1) against nt tokens (a constant): whole tiles, then single rows. */
static inline __attribute__((always_inline)) void gemv_fp4_tiles(const DiMatrix *w, const float *xp, int64_t k32,
                                                                 int nt, float *yt, int64_t r0, int64_t r1,
                                                                 bool to_l1) {
    int rows = fp4_tile_rows(nt);
    int64_t r = r0;
    for (; r + rows <= r1; r += rows) gemv_fp4_tile(w, xp, k32, nt, r, rows, yt, to_l1);
    for (; r < r1; r++) gemv_fp4_tile(w, xp, k32, nt, r, 1, yt, to_l1);
}

/* Activations of `n` tokens in FP4_LANE_ORDER within each group of eight (see
 * decode_fp4_block_lanes), n * k32 floats into xp. */
static void fp4_permute_acts(const float *x, int64_t k32, int n, float *xp) {
    const __m256i order = _mm256_setr_epi32(FP4_LANE_ORDER);
    for (int64_t i = 0; i < n * k32; i += GROUP)
        _mm256_store_ps(xp + i, _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i), order));
}

/* xp: 4 * k32 floats of scratch for the permuted activations of up to four tokens; to_l1 a
 * constant at both calls (di_simd_fp4_gemv_rows); avx512: a token alone takes the AVX-512 tile
 * (matmul_fp4_avx512.c, the same bits). */
static inline __attribute__((always_inline)) void gemv_fp4_rows_to(const DiMatrix *w, const DiSimdActs *a, float *y,
                                                                   int64_t r0, int64_t r1, float *xp, bool to_l1,
                                                                   bool avx512) {
    int64_t k32 = a->k32;
    for (int64_t t = 0; t < a->n_tokens;) {
        int nt = gemv_token_group(a->n_tokens - t);
        fp4_permute_acts(a->x + t * k32, k32, nt, xp);
        float *yt = y + t * w->rows;
        switch (nt) {
        case 4: gemv_fp4_tiles(w, xp, k32, 4, yt, r0, r1, to_l1); break;
        case 3: gemv_fp4_tiles(w, xp, k32, 3, yt, r0, r1, to_l1); break;
        case 2: gemv_fp4_tiles(w, xp, k32, 2, yt, r0, r1, to_l1); break;
        default:
            if (avx512)
                di_simd_fp4_gemv_one_avx512(w, xp, yt, r0, r1);
            else
                gemv_fp4_tiles(w, xp, k32, 1, yt, r0, r1, to_l1);
            break;
        }
        t += nt;
    }
}

void di_simd_fp4_gemv_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *xp, bool avx512) {
    pthread_once(&fp4_weight_bytes_once, fill_fp4_weight_bytes);
    if (fp4_prefetch_to_l1(w))
        gemv_fp4_rows_to(w, a, y, r0, r1, xp, true, avx512);
    else
        gemv_fp4_rows_to(w, a, y, r0, r1, xp, false, avx512);
}

#endif /* __x86_64__ */
