/* matmul_fp8_avx2.c — the FP8 (E4M3, 128x128-free 32x32 block scales, §3.4) GEMV behind
 * di_matmul for one to sixteen tokens: the block scale moved onto the activations, the codes
 * widened one of three ways (the table's route: the parsed DEEPINFER_FP8_GEMV, else the probe
 * here, which measures once per process which way pays).
 *
 * Why three widenings, all giving the same bits: float32 patterns straight from the byte are the
 * cheapest decode, but E4M3 subnormal codes then become float32 subnormal operands, which Intel
 * cores multiply with a ~100-cycle microcode assist (22-47x slower on random codes) while Zen
 * cores take them at full speed.  FP16 widening never meets a subnormal but costs a shuffle and a
 * two-uop vcvtph2ps.  "mapped" widens only the few blocks that hold a subnormal code through FP16
 * (a per-matrix map): ~1.2x FP16 on the Intel Xeon measured, and what the probe picks there.
 * Figures: bench/kernels_cpu.md. */
#if defined(__x86_64__) /* x86-64 only; an aarch64 build takes kernels/neon/ instead */
#if !defined(__clang__) /* clang (the fuzz build) compiles this file for -march=native as is */
#pragma GCC target("avx2,fma,f16c,no-avx512f")
#endif

#include "kernels/cpu/matmul_avx2.h"

#include <pthread.h>
#include <time.h>


/* The prescaled GEMV tiles (below) widen E4M3 codes one of two ways, the same products either way:
 *   float32 route: the byte sign-extended to 32 bits, shifted left by 20 and masked (sign to bit
 *       31, exponent to bits 26..23, mantissa to 22..20) is the float32 pattern of code * 2^-120,
 *       subnormal codes landing on float32 subnormals: three cheap uops per eight weights;
 *   FP16 route (e4m3_block_widen): code * 2^-8, subnormal codes landing on normal float32.
 * The mapped route mixes them per 8-row x 32-column block: each FP8 matrix carries a map of the
 * blocks that hold a subnormal code (fp8_subnormal_map, made once by di_matrix_prepare; real
 * weights mark ~0.4 % of blocks), one branch per block.  The 2^-code_exp goes onto the
 * activations with the block scale, so the prescale range check depends on the widening, and the
 * mapped route keeps both widenings' scaled activations. */
#define FP8_CODE_EXP_F32 (-120) /* the widened weights are code * 2^code_exp */
#define FP8_CODE_EXP_FP16 (-8)

static inline int fp8_code_exp(bool via_fp16) { return via_fp16 ? FP8_CODE_EXP_FP16 : FP8_CODE_EXP_F32; }

/* The exponent of the factor 2^(b-127) / 2^code_exp that the prescaled activations carry. */
static inline int fp8_gemv_factor_exp(uint8_t b, bool via_fp16) { return (int)b - 127 - fp8_code_exp(via_fp16); }

/* via_fp16 is a constant in every caller (the branches of fp8_tile_step's callers). */
static inline __attribute__((always_inline)) void e4m3_block_gemv_widen(const uint8_t *p,
                                                                        __m256 out[4], bool via_fp16) {
    if (via_fp16) {
        e4m3_block_widen(p, out);
        return;
    }
    const __m256i keep = _mm256_set1_epi32((int)0x87F00000u);
    #pragma GCC unroll 16
    for (int g = 0; g < 4; g++) {
        __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + GROUP * g)));
        out[g] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 20), keep));
    }
}


/* ---- which FP8 GEMV route this process takes -------------------------------------------------
 * The probe times a dependent chain of multiply-adds whose operand is a float32 subnormal
 * (x * 2^120, the float32 route's product) against the same chain on a normal operand, best of
 * five each.  Full-speed hardware gives a ratio near 1, an assist ~25x and more (4-cycle FMA
 * latency against ~100+ cycles), so the threshold of 4 is far from both and the probe's noise. */
enum { PROBE_CHAIN = 256, PROBE_TRIES = 5 };

static double probe_seconds(float operand) {
    volatile float sink_in = operand;
    __m256 a = _mm256_set1_ps(sink_in), f = _mm256_set1_ps(0x1p120f), acc = _mm256_setzero_ps();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < PROBE_CHAIN; i++) acc = _mm256_fmadd_ps(a, f, acc);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    volatile float sink_out = _mm256_cvtss_f32(acc);
    (void)sink_out;
    return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

double di_simd_subnormal_slowdown(void) {
    double normal = 1e9, subnormal = 1e9;
    for (int i = 0; i < PROBE_TRIES; i++) {
        double n = probe_seconds(0x1p-100f), s = probe_seconds(0x1p-140f); /* 2^-140: a subnormal */
        normal = n < normal ? n : normal;
        subnormal = s < subnormal ? s : subnormal;
    }
    return subnormal / (normal > 0 ? normal : 1e-9);
}

static DiFp8GemvRoute fp8_auto_route = DI_FP8_GEMV_AUTO;
static double fp8_route_slowdown;
static pthread_once_t fp8_route_once = PTHREAD_ONCE_INIT;

static void probe_fp8_route(void) {
    fp8_route_slowdown = di_simd_subnormal_slowdown();
    fp8_auto_route = fp8_route_slowdown < 4 ? DI_FP8_GEMV_F32 : DI_FP8_GEMV_MAPPED;
}

DiFp8GemvRoute di_simd_fp8_gemv_auto_route(double *subnormal_slowdown) {
    pthread_once(&fp8_route_once, probe_fp8_route);
    if (subnormal_slowdown) *subnormal_slowdown = fp8_route_slowdown;
    return fp8_auto_route;
}

/* ---- FP8 GEMV with the block scale moved onto the activations --------------------------------
 * An FP8 scale is shared by 32 rows (§3.4), so instead of multiplying every decoded weight
 * w' = code * 2^E (E = FP8_GEMV_CODE_EXP: -120 for the float32 patterns, -8 for the FP16
 * route) by f = 2^(b-127-E), the GEMV multiplies the 32-row block's activations once:
 * fma(w', x * f, acc) rounds the same real number w' * x * f + acc as fma(w' * f, x, acc) does,
 * so the result is bit-identical to the panel GEMM -- provided x * f and w' * f are exact.
 * They are when f keeps every non-zero activation of the token a normal, finite float32 and
 * the weights finite (fp8_prescale_exact); otherwise the row block takes the plain path.  The
 * decision looks only at this token and this row block, so it never depends on the batch. */

typedef struct {
    float min_nonzero, max; /* of |x| over the finite, non-zero activations of one token */
} ActRange;

static ActRange act_range(const float *x, int64_t n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 inf = _mm256_set1_ps(INFINITY), zero = _mm256_setzero_ps();
    __m256 lo = inf, hi = zero;
    int64_t i = 0;
    for (; i + GROUP <= n; i += GROUP) {
        __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
        __m256 counted = _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ), _mm256_cmp_ps(v, inf, _CMP_LT_OQ));
        lo = _mm256_min_ps(lo, _mm256_blendv_ps(inf, v, counted));   /* zeros, inf, NaN ignored */
        hi = _mm256_max_ps(hi, _mm256_blendv_ps(zero, v, counted));
    }
    float l[GROUP], h[GROUP];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(h, hi);
    ActRange r = {INFINITY, 0.0f};
    for (int j = 0; j < GROUP; j++) {
        r.min_nonzero = l[j] < r.min_nonzero ? l[j] : r.min_nonzero;
        r.max = h[j] > r.max ? h[j] : r.max;
    }
    for (; i < n; i++) {
        float v = fabsf(x[i]);
        if (v == 0.0f || !isfinite(v)) continue; /* zeros, inf and NaN scale exactly */
        if (v < r.min_nonzero) r.min_nonzero = v;
        if (v > r.max) r.max = v;
    }
    return r;
}

static bool fp8_prescale_exact(const uint8_t *scales, int64_t kblocks, ActRange x, bool via_fp16) {
    uint8_t lo = 255, hi = 0;
    for (int64_t i = 0; i < kblocks; i++) {
        lo = scales[i] < lo ? scales[i] : lo;
        hi = scales[i] > hi ? scales[i] : hi;
    }
    if (lo < 20 || hi > 240) return false;            /* code * scale stays a finite, exact float32 */
    if (fp8_gemv_factor_exp(hi, via_fp16) > 126) return false;  /* the factor itself a normal float32 */
    if (x.max == 0.0f) return true;                             /* all zero (or non-finite): exact */
    return ldexp(x.max, fp8_gemv_factor_exp(hi, via_fp16)) < 0x1p126 &&
           ldexp(x.min_nonzero, fp8_gemv_factor_exp(lo, via_fp16)) >= 0x1p-126;
}

/* One 32-column step of an FP8 tile: rows 0..nr-1 widened one way (via_fp16, a constant), each
 * against the nt tokens' prescaled activations xs[t] for that way (acc[i][t]). */
static inline __attribute__((always_inline)) void fp8_tile_step(const uint8_t *const *row, int nr, int nt,
                                                                int64_t kb, int64_t ahead, const float *const *xs,
                                                                __m256 (*acc)[4],
                                                                bool via_fp16) {
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        const uint8_t *p = row[i] + kb * BLOCK;
        _mm_prefetch((const char *)p + ahead, PF_HINT);
        __m256 wv[4];
        e4m3_block_gemv_widen(p, wv, via_fp16);
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++)
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++)
                acc[i][t] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xs[t] + kb * BLOCK + GROUP * g), acc[i][t]);
    }
}

/* Rows r0 .. r0+nr-1 of one 32-row block (inside one FP8_MAP_ROWS group); xs32 / xs16: x * f
 * per column block for the float32 / FP16 widening (full blocks only; the route reads the ones
 * it needs). */
static inline __attribute__((always_inline)) void gemv_fp8_prescaled_tile(const DiMatrix *w, const float *x,
                                                                          const float *xs32, const float *xs16,
                                                                          int64_t k32, int64_t r0, int nr, float *y,
                                                                          DiFp8GemvRoute route) {
    const uint8_t *row[GEMV_ROWS];
    int64_t full = w->cols / BLOCK, ahead = prefetch_rows_ahead(w, r0, nr) * w->cols;
    const uint8_t *map = route == DI_FP8_GEMV_MAPPED ? fp8_map_row(w, r0) : NULL;
    __m256 acc[GEMV_ROWS][4]; /* [i][0]: the one token's (the step's layout); in registers after inlining */
    #pragma GCC unroll 16
    for (int i = 0; i < GEMV_ROWS; i++) {
        acc[i][0] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + (r0 + (i < nr ? i : 0)) * w->cols;
    }
    const float *const x32[1] = {xs32}, *const x16[1] = {xs16};
    if (route == DI_FP8_GEMV_MAPPED) { /* runs of float32 steps, each up to a marked block */
        for (int64_t kb = 0; kb < full;) {
            int64_t end = fp8_next_marked(map, kb, full);
            for (; kb < end; kb++) fp8_tile_step(row, nr, 1, kb, ahead, x32, acc, false);
            if (kb < full) {
                fp8_tile_step(row, nr, 1, kb, ahead, x16, acc, true);
                kb++;
            }
        }
    } else {
        bool via_fp16 = route == DI_FP8_GEMV_FP16;
        for (int64_t kb = 0; kb < full; kb++) fp8_tile_step(row, nr, 1, kb, ahead, via_fp16 ? x16 : x32, acc, via_fp16);
    }
    if (full < k32 / BLOCK) { /* the partial last block: the plain decode, unscaled x */
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            __m256 wv[4];
            decode_block(DI_MAT_FP8_BLOCK, w, r0 + i, full, wv);
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++)
                acc[i][0] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(x + full * BLOCK + GROUP * g), acc[i][0]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++) y[r0 + i] = lane_sum(acc[i][0]);
}

/* xs = x * 2^(b-127) / 2^code_exp for column block kb of one 32-row scale block (see above). */
static inline void fp8_scale_block(const float *x, const uint8_t *scales, int64_t kb, float *xs, bool via_fp16) {
    /* a normal float32: fp8_prescale_exact checked the exponent */
    __m256 fv = _mm256_set1_ps(f32_from_bits((uint32_t)(fp8_gemv_factor_exp(scales[kb], via_fp16) + 127) << 23));
    #pragma GCC unroll 16
    for (int g = 0; g < 4; g++)
        _mm256_store_ps(xs + kb * BLOCK + GROUP * g, _mm256_mul_ps(_mm256_loadu_ps(x + kb * BLOCK + GROUP * g), fv));
}

/* fp8_scale_block for every full column block. */
static void fp8_scale_acts(const float *x, const uint8_t *scales, int64_t full, float *xs, bool via_fp16) {
    for (int64_t kb = 0; kb < full; kb++) fp8_scale_block(x, scales, kb, xs, via_fp16);
}

/* fp8_scale_acts through FP16, for nt tokens, of the column blocks that some row group of the
 * 32-row block at rb marks in the subnormal map: the only ones the mapped route's FP16 steps read.
 * The map is read eight blocks at a time; most words of it are zero. */
static void fp8_scale_acts_marked(const DiMatrix *w, int64_t rb, const uint8_t *scales, int64_t full, int nt,
                                  const float *const *x, float *const *xs16) {
    int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK, rows_left = w->rows - rb;
    int64_t groups = rows_left < BLOCK ? (rows_left + FP8_MAP_ROWS - 1) / FP8_MAP_ROWS : BLOCK / FP8_MAP_ROWS;
    const uint8_t *map = fp8_map_row(w, rb);
    for (int64_t k8 = 0; k8 < full; k8 += 8) {
        uint64_t marked = 0;
        for (int64_t g = 0; g < groups; g++) {
            uint64_t word = 0;
            memcpy(&word, map + g * kblocks + k8, (size_t)(full - k8 < 8 ? full - k8 : 8));
            marked |= word;
        }
        for (int64_t kb = k8; marked; kb++, marked >>= 8) { /* little-endian: byte j is block k8 + j */
            if (!(marked & 0xFF)) continue;
            for (int t = 0; t < nt; t++) fp8_scale_block(x[t], scales, kb, xs16[t], true);
        }
    }
}

/* The route one row block takes for tokens whose prescaled activations are exact on the float32
 * widening (exact32) and on the FP16 one (exact16): the mapped route needs both (its steps mix
 * the two), and falls back to FP16 alone; FP8_PLAIN_PATH when neither prescale is exact. */
#define FP8_PLAIN_PATH DI_FP8_GEMV_AUTO /* the plain decode_block tiles, unscaled activations */
static DiFp8GemvRoute fp8_block_route(DiFp8GemvRoute route, bool exact32, bool exact16) {
    switch (route) {
    case DI_FP8_GEMV_F32: return exact32 ? DI_FP8_GEMV_F32 : FP8_PLAIN_PATH;
    case DI_FP8_GEMV_MAPPED: return exact32 && exact16 ? DI_FP8_GEMV_MAPPED : exact16 ? DI_FP8_GEMV_FP16 : FP8_PLAIN_PATH;
    default: return exact16 ? DI_FP8_GEMV_FP16 : FP8_PLAIN_PATH;
    }
}

/* The prescaled activations of nt tokens that a block route's tiles read: xs32[t] for the float32
 * widening, xs16[t] for FP16 (the mapped route: only the blocks its map marks). */
static void fp8_prescale_tokens(const DiMatrix *w, int64_t rb, DiFp8GemvRoute block_route, const uint8_t *scales,
                                int nt, const float *const *x, float *const *xs32, float *const *xs16) {
    int64_t full = w->cols / BLOCK;
    for (int t = 0; t < nt; t++) {
        if (block_route != DI_FP8_GEMV_FP16) fp8_scale_acts(x[t], scales, full, xs32[t], false);
        if (block_route == DI_FP8_GEMV_FP16) fp8_scale_acts(x[t], scales, full, xs16[t], true);
    }
    if (block_route == DI_FP8_GEMV_MAPPED) fp8_scale_acts_marked(w, rb, scales, full, nt, x, xs16);
}

/* Rows [rb, rb_end) of one scale row block for one token on a fixed route (a constant). */
static inline __attribute__((always_inline)) void fp8_rowblock_tiles(const DiMatrix *w, const float *x,
                                                                     const float *xs32, const float *xs16, int64_t k32,
                                                                     int64_t rb, int64_t rb_end, float *yt,
                                                                     DiFp8GemvRoute route) {
    int64_t r = rb;
    for (; r + GEMV_ROWS <= rb_end; r += GEMV_ROWS) gemv_fp8_prescaled_tile(w, x, xs32, xs16, k32, r, GEMV_ROWS, yt, route);
    for (; r < rb_end; r++) gemv_fp8_prescaled_tile(w, x, xs32, xs16, k32, r, 1, yt, route);
}

/* The tiles are instantiated once per route, here and in fp8_group_tiles_on, and nowhere else:
 * inlined into every caller and every case, the clang sanitizer build of this file took minutes. */
static __attribute__((noinline)) void fp8_rowblock_tiles_on(DiFp8GemvRoute route, const DiMatrix *w, const float *x,
                                                            const float *xs32, const float *xs16, int64_t k32,
                                                            int64_t rb, int64_t rb_end, float *yt) {
    switch (route) {
    case DI_FP8_GEMV_F32: fp8_rowblock_tiles(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_F32); break;
    case DI_FP8_GEMV_FP16: fp8_rowblock_tiles(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_FP16); break;
    default: fp8_rowblock_tiles(w, x, xs32, xs16, k32, rb, rb_end, yt, DI_FP8_GEMV_MAPPED); break;
    }
}

/* One token against rows [rb, rb_end) of one scale row block: scaled activations when exact.
 * xs: 2 * k32 floats of scratch (the float32 widening's scaled activations, then the FP16 one's). */
static void fp8_rowblock_one(const DiMatrix *w, const float *x, int64_t k32, ActRange range, int64_t rb,
                             int64_t rb_end, float *xs, float *yt, DiFp8GemvRoute route, bool avx512) {
    int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK;
    const uint8_t *scales = w->scale + (rb / BLOCK) * kblocks;
    bool exact32 = route != DI_FP8_GEMV_FP16 && fp8_prescale_exact(scales, kblocks, range, false);
    bool exact16 = route != DI_FP8_GEMV_F32 && fp8_prescale_exact(scales, kblocks, range, true);
    DiFp8GemvRoute block_route = fp8_block_route(route, exact32, exact16);
    if (block_route == FP8_PLAIN_PATH) {
        int64_t r = rb;
        for (; r + GEMV_ROWS <= rb_end; r += GEMV_ROWS) gemv_tile(DI_MAT_FP8_BLOCK, w, x, k32, r, GEMV_ROWS, yt);
        for (; r < rb_end; r++) gemv_tile(DI_MAT_FP8_BLOCK, w, x, k32, r, 1, yt);
        return;
    }
    float *xs32 = xs, *xs16 = xs + k32;
    fp8_prescale_tokens(w, rb, block_route, scales, 1, &x, &xs32, &xs16);
    if (avx512)
        di_simd_fp8_rowblock_one_avx512(block_route, w, x, xs32, xs16, k32, rb, rb_end, yt);
    else
        fp8_rowblock_tiles_on(block_route, w, x, xs32, xs16, k32, rb, rb_end, yt);
}

/* NT tokens (2, 3 or 4), all with exact scaled activations: each block decoded once for all of
 * them.  Rows per tile: PAIR_ROWS for two tokens, QUAD_ROWS for four (8 accumulators either way).
 * x[t]: the token's activations (the partial last block), xs32[t] / xs16[t]: its scaled ones for
 * the two widenings (the route reads the ones it needs). */
static inline __attribute__((always_inline)) void gemv_fp8_group_tile(const DiMatrix *w, int nt,
                                                                      const float *const *x, const float *const *xs32,
                                                                      const float *const *xs16, int64_t k32,
                                                                      int64_t r0, int nr, float *const *y,
                                                                      DiFp8GemvRoute route) {
    enum { MAX_TILE_ROWS = PAIR_ROWS > QUAD_ROWS ? PAIR_ROWS : QUAD_ROWS };
    const uint8_t *row[MAX_TILE_ROWS];
    int64_t full = w->cols / BLOCK;
    int tile_rows = nt >= 3 ? QUAD_ROWS : PAIR_ROWS;
    const uint8_t *map = route == DI_FP8_GEMV_MAPPED ? fp8_map_row(w, r0) : NULL;
    __m256 acc[MAX_TILE_ROWS][4];
    #pragma GCC unroll 16
    for (int i = 0; i < tile_rows; i++) {
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
        row[i] = (const uint8_t *)w->data + (r0 + (i < nr ? i : 0)) * w->cols;
    }
    int64_t ahead = prefetch_rows_ahead(w, r0, nr) * w->cols;
    if (route == DI_FP8_GEMV_MAPPED) { /* runs of float32 steps, each up to a marked block */
        for (int64_t kb = 0; kb < full;) {
            int64_t end = fp8_next_marked(map, kb, full);
            for (; kb < end; kb++) fp8_tile_step(row, nr, nt, kb, ahead, xs32, acc, false);
            if (kb < full) {
                fp8_tile_step(row, nr, nt, kb, ahead, xs16, acc, true);
                kb++;
            }
        }
    } else {
        bool via_fp16 = route == DI_FP8_GEMV_FP16;
        for (int64_t kb = 0; kb < full; kb++) fp8_tile_step(row, nr, nt, kb, ahead, via_fp16 ? xs16 : xs32, acc, via_fp16);
    }
    if (full < k32 / BLOCK) { /* the partial last block: the plain decode, unscaled x */
        #pragma GCC unroll 16
        for (int i = 0; i < nr; i++) {
            __m256 wv[4];
            decode_block(DI_MAT_FP8_BLOCK, w, r0 + i, full, wv);
            #pragma GCC unroll 16
            for (int t = 0; t < nt; t++)
                #pragma GCC unroll 16
                for (int g = 0; g < 4; g++)
                    acc[i][t] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(x[t] + full * BLOCK + GROUP * g), acc[i][t]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < nr; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < nt; t++) y[t][r0 + i] = lane_sum(acc[i][t]);
}

/* Rows [rb, rb_end) of one scale row block for nt tokens on a fixed route (a constant). */
static inline __attribute__((always_inline)) void fp8_group_tiles(const DiMatrix *w, int nt, const float *const *x,
                                                                  const float *const *xs32, const float *const *xs16,
                                                                  int64_t k32, int64_t rb, int64_t rb_end,
                                                                  float *const *yt, DiFp8GemvRoute route) {
    int tile_rows = nt >= 3 ? QUAD_ROWS : PAIR_ROWS;
    int64_t r = rb;
    for (; r + tile_rows <= rb_end; r += tile_rows) gemv_fp8_group_tile(w, nt, x, xs32, xs16, k32, r, tile_rows, yt, route);
    for (; r < rb_end; r++) gemv_fp8_group_tile(w, nt, x, xs32, xs16, k32, r, 1, yt, route);
}

/* One instantiation per route and token count (the mapped route only takes pairs, fp8_token_group). */
static __attribute__((noinline)) void fp8_group_tiles_on(DiFp8GemvRoute route, const DiMatrix *w, int nt,
                                                         const float *const *x, const float *const *xs32,
                                                         const float *const *xs16, int64_t k32, int64_t rb,
                                                         int64_t rb_end, float *const *yt) {
#define FP8_GROUP_CASE(r, n) \
    case (r) * 8 + (n): fp8_group_tiles(w, n, x, xs32, xs16, k32, rb, rb_end, yt, r); break
    switch ((int)route * 8 + nt) {
        FP8_GROUP_CASES(FP8_GROUP_CASE);
    default: break; /* not reached: fp8_token_group sends three or four tokens through FP16 */
    }
#undef FP8_GROUP_CASE
}

/* Tokens t0 .. t0+nt-1 (nt = 2, 3 or 4) against rows [r0, r1): per 32-row scale block, the group
 * tile when every token's scaled activations are exact there, else each token alone.
 * xs_scratch: 8 * k32 floats (per token its float32-widening then its FP16-widening scaled
 * activations; a token alone uses the first two). */
static void fp8_token_group(const DiMatrix *w, const DiSimdActs *a, int64_t t0, int nt, float *y, int64_t r0,
                            int64_t r1, float *xs_scratch, DiFp8GemvRoute route, bool avx512) {
    /* three or four tokens share each widening, so FP16 costs them little: mapped tiles measured
     * 0.95x of FP16 ones at four tokens, 1.05x at two (kernel_ab 4096x4096, 1e-4 subnormal codes) */
    if (route == DI_FP8_GEMV_MAPPED && nt >= 3) route = DI_FP8_GEMV_FP16;
    int64_t kblocks = (w->cols + BLOCK - 1) / BLOCK, k32 = a->k32;
    const float *x[4], *xs32[4], *xs16[4]; /* xs32/xs16 point into xs_scratch (written by fp8_prescale_tokens) */
    float *yt[4];
    ActRange range[4];
    for (int t = 0; t < nt; t++) {
        x[t] = a->x + (t0 + t) * k32;
        xs32[t] = xs_scratch + 2 * t * k32;
        xs16[t] = xs_scratch + (2 * t + 1) * k32;
        yt[t] = y + (t0 + t) * w->rows;
        range[t] = act_range(x[t], w->cols);
    }
    for (int64_t rb = r0; rb < r1; rb += BLOCK) { /* r0 is a multiple of 32 */
        int64_t rb_end = rb + BLOCK < r1 ? rb + BLOCK : r1;
        const uint8_t *scales = w->scale + (rb / BLOCK) * kblocks;
        bool exact32 = route != DI_FP8_GEMV_FP16, exact16 = route != DI_FP8_GEMV_F32;
        for (int t = 0; t < nt; t++) {
            exact32 = exact32 && fp8_prescale_exact(scales, kblocks, range[t], false);
            exact16 = exact16 && fp8_prescale_exact(scales, kblocks, range[t], true);
        }
        DiFp8GemvRoute block_route = fp8_block_route(route, exact32, exact16);
        if (block_route == FP8_PLAIN_PATH) {
            for (int t = 0; t < nt; t++)
                fp8_rowblock_one(w, x[t], k32, range[t], rb, rb_end, xs_scratch, yt[t], route, false);
            continue;
        }
        fp8_prescale_tokens(w, rb, block_route, scales, nt, x, (float *const *)xs32, (float *const *)xs16);
        if (avx512)
            di_simd_fp8_group_avx512(block_route, w, nt, x, xs32, xs16, k32, rb, rb_end, yt);
        else
            fp8_group_tiles_on(block_route, w, nt, x, xs32, xs16, k32, rb, rb_end, yt);
    }
}

/* xs: 8 * k32 floats of scratch. */
static void gemv_fp8_rows_by(const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0, int64_t r1, float *xs,
                             DiFp8GemvRoute route, bool avx512) {
    int64_t k32 = a->k32;
    for (int64_t t = 0, nt; t < a->n_tokens; t += nt) {
        nt = gemv_token_group(a->n_tokens - t);
        if (nt > 1) {
            fp8_token_group(w, a, t, (int)nt, y, r0, r1, xs, route, avx512);
            continue;
        }
        const float *x = a->x + t * k32;
        ActRange range = act_range(x, w->cols);
        for (int64_t rb = r0; rb < r1; rb += BLOCK)
            fp8_rowblock_one(w, x, k32, range, rb, rb + BLOCK < r1 ? rb + BLOCK : r1, xs, y + t * w->rows, route, avx512);
    }
}

void di_simd_fp8_gemv_rows_tiles(DiFp8GemvRoute route, bool avx512, const DiMatrix *w, const DiSimdActs *a, float *y,
                                 int64_t r0, int64_t r1, float *xs) {
    if (route == DI_FP8_GEMV_AUTO) route = di_simd_fp8_gemv_auto_route(NULL);
    if (route == DI_FP8_GEMV_MAPPED && !w->fp8_subnormal_map) route = DI_FP8_GEMV_FP16;
    if (route != DI_FP8_GEMV_FP16 && route != DI_FP8_GEMV_MAPPED) route = DI_FP8_GEMV_F32;
    gemv_fp8_rows_by(w, a, y, r0, r1, xs, route, avx512);
}

void di_simd_fp8_gemv_rows_on(DiFp8GemvRoute route, const DiMatrix *w, const DiSimdActs *a, float *y, int64_t r0,
                              int64_t r1, float *xs) {
    di_simd_fp8_gemv_rows_tiles(route, false, w, a, y, r0, r1, xs);
}

#endif /* __x86_64__ */
