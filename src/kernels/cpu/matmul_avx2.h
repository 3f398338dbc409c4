/* matmul_avx2.h — what the AVX2+FMA matmul kernels share (matmul_avx2.c: F32/BF16 GEMV, the
 * panel GEMM and the dispatch; matmul_fp8_avx2.c: the FP8 GEMV; matmul_fp4_avx2.c: the FP4
 * GEMV): the tile sizes, the exact weight decoders, the fixed lane sum of matmul_simd.h and the
 * GEMV's software prefetch.  Private to those files; include it after their AVX2 target pragma.
 *
 * Decoding is exact and equals the reference's `code value * scale` in float32:
 *   E4M3 (§3.3): the byte, sign-extended to 16 bits, shifted and masked, is the FP16 pattern of
 *       e4m3 * 2^-8 (the 4-bit exponent and 3-bit mantissa fit FP16's, subnormals included);
 *       vcvtph2ps widens it exactly and one multiply by 2^(b-119) = 2^8 * 2^(b-127) gives
 *       code * scale with a single rounding (scale byte b <= 246; above, two multiplies).
 *   E2M1 (§3.3, §3.5): twice the code's value {0,1,2,3,4,6,8,12, -0..-12} times 2^(b-128),
 *       exact; the panel decoder looks the magnitude up with vpermps, the GEMV's decoder
 *       (matmul_fp4_avx2.c) reads the same floats' two high bytes from a per-scale table.
 *   BF16: the upper half of a float32.
 * NaN codes (E4M3 0x7F/0xFF) and the NaN scale byte 0xFF do not occur in checkpoints; the SIMD
 * decoders give finite values for them where the reference gives NaN.
 * Measurements behind the constants and choices: bench/kernels_cpu.md. */
#ifndef DI_KERNELS_CPU_MATMUL_AVX2_H
#define DI_KERNELS_CPU_MATMUL_AVX2_H

#include "kernels/cpu/matmul_simd.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define GROUP 8        /* floats per ymm register: the lane count of the reduction order */
#define BLOCK 32       /* scale block along the input (§3.4, §3.5) */
#define GEMV_ROWS 8    /* rows whose accumulators the one-token GEMV keeps: 8 independent FMA chains */
#define PAIR_ROWS 4    /* rows of the two-token GEMV tiles: 4 x 2 accumulators */
#define QUAD_ROWS 2    /* rows of the four-token GEMV tiles: 2 x 4 accumulators */
#define PF_HINT _MM_HINT_T1 /* GEMV prefetch into L2, not L1: see prefetch_rows_ahead_by */

/* The FP4 GEMV (matmul_fp4_avx2.c; FP8's is di_simd_fp8_gemv_rows_on, matmul_simd.h) for one
 * row range; scratch as di_simd_gemv_rows; avx512: a lone token takes the AVX-512 tile. */
void di_simd_fp4_gemv_rows(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *scratch,
                           bool avx512);

/* The FP4 GEMV's byte tables (matmul_fp4_avx2.c, filled before any GEMV runs): for scale byte b,
 * bytes 2 and 3 of the float32 weight of each of the 16 codes. */
extern uint8_t di_fp4_weight_bytes[256][32];

/* The one-token FP4 GEMV on AVX-512 (matmul_fp4_avx512.c): y[r] for r in [r0, r1) from the
 * token's activations xp in FP4_LANE_ORDER, bit-identical to the AVX2 tile.  Only where
 * di_simd_avx512_available(). */
void di_simd_fp4_gemv_one_avx512(const DiMatrix *w, const float *xp, float *yt, int64_t r0, int64_t r1);

/* The bytes of w's fp8_subnormal_map for the row group holding row r (matmul.h). */
#define FP8_MAP_ROWS 8
_Static_assert(FP8_MAP_ROWS % GEMV_ROWS == 0 && FP8_MAP_ROWS % PAIR_ROWS == 0 && FP8_MAP_ROWS % QUAD_ROWS == 0 &&
                   BLOCK % FP8_MAP_ROWS == 0,
               "an FP8 GEMV tile must lie inside one row group of the subnormal map");
static inline const uint8_t *fp8_map_row(const DiMatrix *w, int64_t r) {
    return w->fp8_subnormal_map + (r / FP8_MAP_ROWS) * ((w->cols + BLOCK - 1) / BLOCK);
}

/* The first block at or after kb that an FP8 subnormal map row marks (full when none), eight
 * bytes at a time: the mapped route's runs of float32 steps end there. */
static inline int64_t fp8_next_marked(const uint8_t *map, int64_t kb, int64_t full) {
    for (; kb + 8 <= full; kb += 8) {
        uint64_t word;
        memcpy(&word, map + kb, 8);
        if (word) return kb + __builtin_ctzll(word) / 8;
    }
    while (kb < full && !map[kb]) kb++;
    return kb;
}

/* The FP8 GEMV tiles on AVX-512 (matmul_fp8_avx512.c): rows [rb, rb_end) of one 32-row scale
 * block on a block route (F32, FP16 or MAPPED) with the token's scaled activations, as
 * matmul_fp8_avx2.c's tiles, bit-identical to them.  Only where di_simd_avx512_available(). */
void di_simd_fp8_rowblock_one_avx512(DiFp8GemvRoute route, const DiMatrix *w, const float *x, const float *xs32,
                                     const float *xs16, int64_t k32, int64_t rb, int64_t rb_end, float *yt);
/* The (route, token count) pairs the FP8 group tiles are instantiated for, as switch cases on
 * route * 8 + nt: fp8_token_group sends three or four tokens through FP16, pairs any way. */
#define FP8_GROUP_CASES(CASE)                                                                                      \
    CASE(DI_FP8_GEMV_F32, 2);                                                                                  \
    CASE(DI_FP8_GEMV_F32, 3);                                                                                  \
    CASE(DI_FP8_GEMV_F32, 4);                                                                                  \
    CASE(DI_FP8_GEMV_FP16, 2);                                                                                 \
    CASE(DI_FP8_GEMV_FP16, 3);                                                                                 \
    CASE(DI_FP8_GEMV_FP16, 4);                                                                                 \
    CASE(DI_FP8_GEMV_MAPPED, 2)

/* The same for a group of nt = 2..4 tokens (fp8_token_group's: F32 or FP16, MAPPED for pairs). */
void di_simd_fp8_group_avx512(DiFp8GemvRoute route, const DiMatrix *w, int nt, const float *const *x,
                              const float *const *xs32, const float *const *xs16, int64_t k32, int64_t rb,
                              int64_t rb_end, float *const *yt);

/* How many tokens the GEMV takes together from `left` tokens: fours, then one group of three
 * (one decode for three tokens, not a pair and a single), then pairs, then one. */
static inline int gemv_token_group(int64_t left) { return left >= 4 ? 4 : left == 3 ? 3 : left >= 2 ? 2 : 1; }

/* ---- scale factors (as float32 bit patterns, so no libm call in the inner loops) ---------- */

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* E4M3 via FP16: 2^(b-119) = 2^8 * 2^(b-127) for b <= 246 (biased exponent b + 8, a normal
 * float32); above that two multiplies (2^8, then the scale) keep every step finite. */
static inline bool fp8_single_factor(uint8_t b, float *f) {
    if (b > 246) return false;
    *f = f32_from_bits((uint32_t)(b + 8) << 23);
    return true;
}

/* The UE8M0 scale 2^(b-127) itself (§3.3); b = 0 is the subnormal 2^-127. */
static inline float ue8m0_value(uint8_t b) {
    return b ? f32_from_bits((uint32_t)b << 23) : f32_from_bits(0x00400000u);
}

/* E2M1: the doubled code value times 2^(b-128); b = 1 and b = 0 give the subnormals 2^-127 and
 * 2^-128 (biased exponent b - 1 would be 0 or negative). */
#define FP4_HALF_SCALE_BITS(b) ((b) >= 2 ? (uint32_t)((b) - 1) << 23 : (b) ? 0x00400000u : 0x00200000u)

/* The same 256 factors as a table the decoder broadcasts straight from memory: building the
 * factor in a general register and moving it to a vector (vmovd + vbroadcastss) put two more
 * uops per block on the shuffle port, which limited the FP4 decoder before it used vpermps
 * (FP4 GEMV n = 1 and 2 ~5% faster with the table on the Intel machine measured). */
#define FP4_S4(b) {FP4_HALF_SCALE_BITS(b)}, {FP4_HALF_SCALE_BITS((b) + 1)}, {FP4_HALF_SCALE_BITS((b) + 2)}, \
                  {FP4_HALF_SCALE_BITS((b) + 3)}
#define FP4_S16(b) FP4_S4(b), FP4_S4((b) + 4), FP4_S4((b) + 8), FP4_S4((b) + 12)
#define FP4_S64(b) FP4_S16(b), FP4_S16((b) + 16), FP4_S16((b) + 32), FP4_S16((b) + 48)
static const union {
    uint32_t bits;
    float value;
} fp4_half_scales[256] = {FP4_S64(0), FP4_S64(64), FP4_S64(128), FP4_S64(192)};

/* Twice the E2M1 magnitudes of codes 0..7 (§3.3): the one table both FP4 decoders start from. */
static const float fp4_doubled[8] __attribute__((aligned(32))) = {0, 1, 2, 3, 4, 6, 8, 12};


/* ---- decoders: one 32-column block of one row into four ymm registers --------------------- */

/* 16 E4M3 codes -> the FP16 bit patterns of code * 2^-8: sign-extended to 16 bits, shifted
 * left by 7 (sign to bit 15, exponent to bits 13..10, mantissa to 9..7) and bit 14 (a copy of
 * the sign) cleared.  E4M3 subnormals land on FP16 subnormals, which vcvtph2ps converts exactly
 * and at full speed (float32 subnormal operands would stall the multiplier). */
static inline __m256i e4m3_to_fp16_bits(const uint8_t *p) {
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
}

/* 32 E4M3 codes -> four ymm of code * 2^-8 in column order: vextracti128 for the upper halves,
 * vcvtph2ps from registers (staging through memory measured slower on Zen 3: bench/kernels_cpu.md). */
static inline void e4m3_block_widen(const uint8_t *p, __m256 out[4]) {
    __m256i h0 = e4m3_to_fp16_bits(p), h1 = e4m3_to_fp16_bits(p + 16);
    __m128i u0, u1; /* asm: gcc would otherwise turn the extract back into a store and reload */
    __asm__("vextracti128 $1, %1, %0" : "=x"(u0) : "x"(h0));
    __asm__("vextracti128 $1, %1, %0" : "=x"(u1) : "x"(h1));
    out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h0));
    out[1] = _mm256_cvtph_ps(u0);
    out[2] = _mm256_cvtph_ps(_mm256_castsi256_si128(h1));
    out[3] = _mm256_cvtph_ps(u1);
}

static inline void decode_fp8_block(const uint8_t *p, uint8_t b, __m256 out[4]) {
    e4m3_block_widen(p, out);
    float f;
    if (fp8_single_factor(b, &f)) {
        __m256 fv = _mm256_set1_ps(f);
        #pragma GCC unroll 16
        for (int i = 0; i < 4; i++) out[i] = _mm256_mul_ps(out[i], fv);
    } else {
        __m256 f1 = _mm256_set1_ps(0x1p8f), f2 = _mm256_set1_ps(ue8m0_value(b));
        #pragma GCC unroll 16
        for (int i = 0; i < 4; i++) out[i] = _mm256_mul_ps(_mm256_mul_ps(out[i], f1), f2);
    }
}

/* 16 bytes = 32 nibbles, low nibble first (§3.3 packed FP4).  Eight columns at a time: their
 * four bytes broadcast to every lane (a load, no shuffle), each lane shifts its own nibble down
 * (vpsrlvd), vpermps picks the magnitude from an eight-entry table of the doubled E2M1 values
 * times the block's factor, and the nibble's top bit, shifted to bit 31 (vpsllvd), gives the
 * sign.  One shuffle-port uop per eight columns instead of two and a half (byte shuffles and
 * sign extensions before): FP4 GEMV 4096x4096 n = 1 ~18.1 against ~15.9 GFLOP/s, one thread,
 * medians of 7 interleaved runs.  The weights are the same floats as before (magnitude times
 * factor, then the sign), so every sum is bit-identical; a negative zero weight (code 8) cannot
 * change a sum that starts at +0. */
static inline void decode_fp4_block(const uint8_t *p, uint8_t b, __m256 out[4]) {
    const __m256i down = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i up = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 table = _mm256_mul_ps(_mm256_load_ps(fp4_doubled), _mm256_broadcast_ss(&fp4_half_scales[b].value));
    #pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        int32_t word;
        memcpy(&word, p + 4 * g, sizeof word);
        __m256i d = _mm256_set1_epi32(word);
        __m256 v = _mm256_permutevar8x32_ps(table, _mm256_srlv_epi32(d, down));
        out[g] = _mm256_xor_ps(v, _mm256_and_ps(_mm256_castsi256_ps(_mm256_sllv_epi32(d, up)), sign));
    }
}


static inline void decode_bf16_block(const uint16_t *p, __m256 out[4]) {
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + GROUP * i)));
        out[i] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
}

static inline void decode_f32_block(const float *p, __m256 out[4]) {
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) out[i] = _mm256_loadu_ps(p + GROUP * i);
}

/* Scalar twins of the decoders (same bit tricks, same roundings) for the last, partial block. */
static __attribute__((noinline, unused)) float fp8_scalar(uint8_t code, uint8_t b) {
    uint16_t bits = (uint16_t)((((uint16_t)(int16_t)(int8_t)code) << 7) & 0xBFFF);
    float v = _cvtsh_ss(bits), f;
    if (fp8_single_factor(b, &f)) return v * f;
    return (v * 0x1p8f) * ue8m0_value(b);
}

static __attribute__((noinline, unused)) float weight_scalar(const DiMatrix *w, int64_t r, int64_t c) {
    switch (w->format) {
    case DI_MAT_F32: return ((const float *)w->data)[r * w->cols + c];
    case DI_MAT_BF16: return f32_from_bits((uint32_t)((const uint16_t *)w->data)[r * w->cols + c] << 16);
    case DI_MAT_FP8_BLOCK: {
        int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK;
        return fp8_scalar(((const uint8_t *)w->data)[r * w->cols + c], w->scale[(r / BLOCK) * kblocks + c / BLOCK]);
    }
    case DI_MAT_FP4_ROW32: break; /* FP4 columns are a multiple of 32: never partial */
    }
    return 0.0f;
}

/* Decode block kb (columns 32kb .. 32kb+31) of row r; columns past the end decode to 0. */
static inline __attribute__((always_inline)) void decode_block(DiMatFormat format, const DiMatrix *w, int64_t r,
                                                               int64_t kb, __m256 out[4]) {
    int64_t c0 = kb * BLOCK;
    if (c0 + BLOCK > w->cols) {
        float tmp[BLOCK] __attribute__((aligned(32))) = {0};
        for (int64_t c = c0; c < w->cols; c++) tmp[c - c0] = weight_scalar(w, r, c);
        decode_f32_block(tmp, out);
        return;
    }
    switch (format) {
    case DI_MAT_F32: decode_f32_block((const float *)w->data + r * w->cols + c0, out); break;
    case DI_MAT_BF16: decode_bf16_block((const uint16_t *)w->data + r * w->cols + c0, out); break;
    case DI_MAT_FP8_BLOCK: {
        int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK;
        decode_fp8_block((const uint8_t *)w->data + r * w->cols + c0, w->scale[(r / BLOCK) * kblocks + kb], out);
        break;
    }
    case DI_MAT_FP4_ROW32:
        decode_fp4_block((const uint8_t *)w->data + r * (w->cols / 2) + c0 / 2, w->scale[r * (w->cols / BLOCK) + kb], out);
        break;
    default: /* unreachable: di_matrix_validate rejected other formats */
        for (int i = 0; i < 4; i++) out[i] = _mm256_setzero_ps();
        break;
    }
}

/* The fixed lane sum of matmul_simd.h: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
static inline float lane_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* lane_sum for accumulators in FP4_LANE_ORDER: lane j holds what lane FP4_LANE_ORDER[j] holds in
 * natural order, so the same sum is ((l0+l2)+(l1+l3)) + ((l4+l6)+(l5+l7)). */
static inline float lane_sum_fp4(__m256 v) {
    __m256 u = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4E)); /* per lane: l0+l2, l1+l3 */
    u = _mm256_add_ps(u, _mm256_permute_ps(u, 0xB1));
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
}

/* Software prefetch of the same block one row tile ahead, into L2 (PF_HINT).  A weight row of
 * the release shapes is 1-4 KiB, so every row starts a new 4 KiB page, where the hardware stream
 * prefetchers of Intel cores stop: without it a GEMV from DRAM was latency-bound at a third of
 * the bandwidth.  T1 beat T0 on Zen 3 and Zen 4 for every row size but FP4's short rows
 * (fp4_lanes_avx2.h); figures in bench/kernels_cpu.md. */
/* How many rows below a block the GEMV tiles of rows r0 .. r0+nr-1 prefetch: GEMV_ROWS (one
 * one-token tile ahead), or 0 where that row does not exist, so the tiles
 * prefetch the block they are about to read (no effect).  The tiles issue the prefetch without a
 * branch: a branch on it inside the unrolled loops cost the multi-token tiles on matrices in L2
 * 0.70-0.92x (kernel_ab, Zen 4), the branch-free form 0.99-1.01x. */
static inline int64_t prefetch_rows_ahead_by(const DiMatrix *w, int64_t r0, int nr, int ahead) {
    return r0 + nr - 1 + ahead < w->rows ? ahead : 0;
}

static inline int64_t prefetch_rows_ahead(const DiMatrix *w, int64_t r0, int nr) {
    return prefetch_rows_ahead_by(w, r0, nr, GEMV_ROWS);
}

static inline __attribute__((always_inline)) void prefetch_block(DiMatFormat format, const DiMatrix *w, int64_t r,
                                                                 int64_t kb) {
    const char *p = w->data;
    switch (format) {
    case DI_MAT_F32: p += (r * w->cols + kb * BLOCK) * 4; _mm_prefetch(p + 64, PF_HINT); break;
    case DI_MAT_BF16: p += (r * w->cols + kb * BLOCK) * 2; break;
    case DI_MAT_FP8_BLOCK: p += r * w->cols + kb * BLOCK; break;
    case DI_MAT_FP4_ROW32: p += r * (w->cols / 2) + kb * (BLOCK / 2); break;
    }
    _mm_prefetch(p, PF_HINT);
}
/* ---- GEMV: weights decoded in registers, GEMV_ROWS rows per pass over the activations ------ */

static inline __attribute__((always_inline)) void gemv_tile(DiMatFormat format, const DiMatrix *w, const float *x,
                                                            int64_t k32, int64_t r0, int nr, float *y) {
    __m256 acc[GEMV_ROWS];
    int64_t ahead_rows = prefetch_rows_ahead(w, r0, nr);
    #pragma GCC unroll 16
    for (int i = 0; i < GEMV_ROWS; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < k32 / BLOCK; kb++) {
        const float *xb = x + kb * BLOCK;
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            prefetch_block(format, w, r0 + i + ahead_rows, kb);
            __m256 wv[4];
            decode_block(format, w, r0 + i, kb, wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) acc[i] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xb + GROUP * g), acc[i]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) y[r0 + i] = lane_sum(acc[i]);
}

/* acc[t] += the four decoded registers times token t's activations at x + t * k32, for t < nt:
 * one block of one row in the multi-token GEMV tiles.  A macro, not an inline function: passed
 * as an array argument the accumulators went through memory (kernel_ab: 0.85-0.89x). */
#define ACCUMULATE_TOKENS(acc, wv, x, k32, nt)                                                             \
    _Pragma("GCC unroll 16") for (int t_ = 0; t_ < (nt); t_++)                                           \
        _Pragma("GCC unroll 16") for (int g_ = 0; g_ < 4; g_++)                                          \
            (acc)[t_] = _mm256_fmadd_ps((wv)[g_], _mm256_loadu_ps((x) + t_ * (k32) + GROUP * g_), (acc)[t_])

#endif
